"""Hypothesis properties of leased-line accounting and protection (and kafkasim's line sharing)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from domain.throttles import CONSUMER_QUOTA, FOLLOWER, MIGRATION
from kafkasim.physics.network import LineSpec, Network
from planners.line_accounting import LINE_KINDS, AuditFlow, LineFlow, account_lines, line_flows
from planners.line_protection import LineHealth, LineLimit, LineProtectionConfig, plan_line_throttles
from planners.protection import Transfer
from tests.support.line_support import MB, part, two_idc

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IDCS = {1: "idc-a", 2: "idc-a", 3: "idc-b", 4: "idc-b", 5: "idc-c"}

replica_sets = st.lists(st.sampled_from(sorted(IDCS)), min_size=1, max_size=3, unique=True).map(tuple)
partitions = st.lists(st.tuples(replica_sets, st.floats(0, 50), st.floats(0, 100)), min_size=1, max_size=12)


@SETTINGS
@given(partitions, st.lists(st.tuples(st.integers(0, 11), st.sampled_from(["idc-a", "idc-b", "idc-c", ""]),
                                      st.floats(0, 10), st.sampled_from(["fetch", "produce"])), max_size=10),
       st.lists(st.tuples(st.integers(0, 11), st.sampled_from(sorted(IDCS)), st.floats(0, 30)), max_size=4))
def test_accounting_counts_only_crossings_and_sums_by_kind(parts: list, audit_rows: list, copies: list) -> None:
    ps = [part("t", i, reps, bin_ * MB, bout * MB) for i, (reps, bin_, bout) in enumerate(parts)]
    snap = two_idc(ps, idc=IDCS)
    audit = [AuditFlow(kind, "t", i % len(ps), f"c{i}", cidc, r * MB)
             for i, (_, cidc, r, kind) in enumerate((i, *row[1:]) for i, row in enumerate(audit_rows))]
    transfers = [Transfer("reassign", "t", i % len(ps), (ps[i % len(ps)].replicas[0], "/d"), (dest, "/d"), r * MB)
                 for i, dest, r in copies]
    flows = line_flows(snap, transfers, audit)
    acc = account_lines(flows)
    for f in flows:
        assert f.src_idc != f.dst_idc and f.bytes_per_s > 0 and math.isfinite(f.bytes_per_s)
    for u in acc.lines:
        assert math.isclose(u.total, sum(f.bytes_per_s for f in flows if f.pair == (u.src_idc, u.dst_idc)),
                            rel_tol=1e-9, abs_tol=1e-6)
        assert set(u.bytes_per_s) == set(LINE_KINDS)
    for p in ps:  # client fetch never exceeds what the partition serves, produce what it takes in
        fetched = sum(f.bytes_per_s for f in flows if f.kind == "client_fetch" and (f.topic, f.partition) == p.id)
        produced = sum(f.bytes_per_s for f in flows if f.kind == "client_produce" and (f.topic, f.partition) == p.id)
        assert fetched <= p.bytes_out_per_s * (1 + 1e-9) + 1e-6
        assert produced <= p.bytes_in_per_s * (1 + 1e-9) + 1e-6
    assert line_flows(snap, list(reversed(transfers)), list(reversed(audit))) == flows


kinds = st.sampled_from(["migration", "replication", "replication_catch_up", "client_fetch", "client_produce"])
flow_rows = st.lists(st.tuples(kinds, st.floats(0.1, 60), st.integers(0, 3), st.integers(1, 4),
                               st.sampled_from(["ui", "batch-1", "etl", "pay-x"])), min_size=1, max_size=14)
AB = ("idc-a", "idc-b")


def to_flows(rows: list) -> list[LineFlow]:
    out = []
    for k, mb, p, broker, client in rows:
        kind = "replication" if k == "replication_catch_up" else k
        out.append(LineFlow(kind, "idc-a", "idc-b", "pay" if client == "pay-x" else "t", p, broker, mb * MB,  # type: ignore[arg-type]
                            client_id=client if kind.startswith("client") else "",
                            transfer="catch_up" if k == "replication_catch_up" else "",
                            in_sync=k != "replication_catch_up"))
    return out


@SETTINGS
@given(flow_rows, st.floats(20, 200))
@example([("migration", 0.25, 0, 1, "ui"), ("migration", 0.25, 0, 1, "ui"), ("replication_catch_up", 15.0, 0, 1, "ui")],
         20.0)  # migration into broker 1 already under the minimum rate: replication is the next tier
def test_protection_respects_its_floors_order_and_determinism(rows: list, cap_mb: float) -> None:
    config = LineProtectionConfig(limits={AB: LineLimit(cap_mb * MB)}, critical_topics=("pay",),
                                  fetch_priority={"batch-*": 1, "ui": 9})
    flows = to_flows(rows)
    ingress = {("t", p): 5 * MB for p in range(4)}
    acc = account_lines(flows)
    plan = plan_line_throttles(acc, (), {AB: LineHealth(hot=True, above=2)}, config, bytes_in=ingress)
    assert plan == plan_line_throttles(account_lines(list(reversed(flows))), (), {AB: LineHealth(hot=True, above=2)},
                                       config, bytes_in=ingress)
    total = acc.lines[0].total
    kinds_set = {d.kind for d in plan.decisions}
    for d in plan.decisions:
        assert d.action == "set" and d.rate_bytes_per_s >= config.min_rate_bytes_per_s * (1 - 1e-9)
        if d.kind == FOLLOWER:
            assert d.target["topic"] != "pay"  # critical topics keep their replication
            assert d.rate_bytes_per_s >= 5 * MB * (1 + config.catch_up_margin) * (1 - 1e-9)
    if total <= config.limits[AB].target * cap_mb * MB:
        assert plan.decisions == ()
    # a later tier acts only when the earlier ones are spent (migration into a broker at or below the minimum
    # rate cannot be cut further)
    to_broker: dict[int, float] = {}
    for f in flows:
        if f.kind == "migration":
            to_broker[f.broker] = to_broker.get(f.broker, 0.0) + f.bytes_per_s
    cuttable = any(v > config.min_rate_bytes_per_s for v in to_broker.values())
    if FOLLOWER in kinds_set or CONSUMER_QUOTA in kinds_set:
        assert not cuttable or MIGRATION in kinds_set
    (report,) = plan.reports
    if plan.decisions:
        assert report.predicted_util is not None and report.util is not None
        assert report.predicted_util <= report.util + 1e-12


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0, 1e8)), min_size=1, max_size=30), st.floats(1e5, 1e8))
def test_kafkasim_lines_never_carry_more_than_their_capacity_nor_grant_more_than_asked(rows: list,
                                                                                       cap: float) -> None:
    net = Network([LineSpec("a", "b", cap), LineSpec("b", "a", cap)])
    net.idc("c")
    names = ["a", "b", "c"]
    lines = np.array([net.line(names[i], names[(i + 1) % 3]) for i, _ in rows], dtype=np.int64)
    demand = np.array([d for _, d in rows])
    factor = net.share(lines, demand, np.zeros(len(rows), dtype=np.int64), 1.0)
    granted = demand * factor
    assert (factor <= 1.0 + 1e-12).all() and (factor >= 0).all()
    for k, (src, dst) in enumerate(net.pairs):
        carried = granted[lines == k].sum()
        if math.isfinite(net.capacity[k]):
            assert carried <= net.capacity[k] * (1 + 1e-9)
        assert net.granted[k].sum() == carried or math.isclose(net.granted[k].sum(), carried, rel_tol=1e-9)
        del src, dst
