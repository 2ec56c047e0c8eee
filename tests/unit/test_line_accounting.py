"""planners.line_accounting: which bytes cross which leased line, by kind."""

from __future__ import annotations

import pytest

from planners.line_accounting import Accounting, AuditFlow, account_lines, account_round, client_fetch_rates, line_flows
from planners.protection import Transfer
from tests.support.line_support import MB, part, two_idc


def test_followers_in_another_idc_replicate_across_the_line() -> None:
    snap = two_idc([part("t", 0, (1, 3), 10 * MB), part("t", 1, (3, 4), 20 * MB), part("t", 2, (1, 2, 4), 5 * MB),
                    part("t", 3, (4, 1), 2 * MB, isr=(4,))])
    acc = account_lines(line_flows(snap))
    ab, ba = acc.usage(("idc-a", "idc-b")), acc.usage(("idc-b", "idc-a"))
    assert ab is not None and ba is not None
    assert ab.bytes_per_s["replication"] == pytest.approx(15 * MB)  # t-0 to 3, t-2 to 4; t-1 stays in idc-b
    assert ba.bytes_per_s["replication"] == pytest.approx(2 * MB)  # an out-of-sync follower still fetches
    assert [f.in_sync for f in acc.flows if f.pair == ("idc-b", "idc-a")] == [False]
    assert ab.total == pytest.approx(sum(ab.bytes_per_s.values())) and ab.util is None


def test_a_cross_idc_copy_is_migration_not_replication() -> None:
    snap = two_idc([part("t", 0, (1, 2, 3), 4 * MB)])
    copies = (Transfer("reassign", "t", 0, (1, "/d"), (3, "/d"), 30 * MB),
              Transfer("intra_broker", "t", 0, (1, "/d"), (1, "/e"), 50 * MB))
    ab = account_lines(line_flows(snap, copies)).usage(("idc-a", "idc-b"))
    assert ab is not None
    assert ab.bytes_per_s["migration"] == pytest.approx(30 * MB)
    assert ab.bytes_per_s["replication"] == 0.0  # broker 3 is the copy's target: counted once, as migration


def test_audit_places_clients_and_live_rates_scale_their_shares() -> None:
    snap = two_idc([part("t", 0, (1, 3), 10 * MB, bytes_out=40 * MB), part("u", 0, (3, 1), 6 * MB, 6 * MB)])
    audit = [AuditFlow("fetch", "t", 0, "far", "idc-b", 3 * MB), AuditFlow("fetch", "t", 0, "near", "idc-a", 1 * MB),
             AuditFlow("produce", "t", 0, "writer", "idc-b", 9 * MB),
             AuditFlow("fetch", "u", 0, "reader", "idc-b", 6 * MB, broker=3)]
    acc = account_round(snap, Accounting(audit=tuple(audit), capacities={("idc-a", "idc-b"): 100 * MB,
                                                                         ("idc-a", "idc-c"): 10 * MB}))
    ab, ba = acc.usage(("idc-a", "idc-b")), acc.usage(("idc-b", "idc-a"))
    assert ab is not None and ba is not None and acc.clients_known
    assert ab.bytes_per_s["client_fetch"] == pytest.approx(30 * MB)  # 3/4 of the live 40 MB/s
    assert ba.bytes_per_s["client_produce"] == pytest.approx(10 * MB)
    assert ba.bytes_per_s["client_fetch"] == 0.0  # u-0 is read where it is served
    assert ab.util == pytest.approx(0.4)  # 30 fetch + 10 replication of t-0 over 100 MB/s
    idle = acc.usage(("idc-a", "idc-c"))
    assert idle is not None and idle.total == 0.0  # a configured line is listed while idle
    rates = client_fetch_rates(snap, audit)
    assert rates["near"] == {1: pytest.approx(10 * MB)} and rates["reader"] == {3: pytest.approx(6 * MB)}


def test_unknown_brokers_non_finite_rates_and_missing_idcs_are_skipped() -> None:
    snap = two_idc([part("t", 0, (1, 3), float("nan")), part("t", 1, (1, 9), 5 * MB), part("t", 2, (2, 4), -1.0)],
                   idc={1: "idc-a", 2: "idc-a", 3: "idc-b", 4: ""})
    assert line_flows(snap, (Transfer("reassign", "t", 1, None, (9, "/d"), 5 * MB),)) == []
    assert account_lines([]).as_json() == {"clients_known": False, "lines": []}
