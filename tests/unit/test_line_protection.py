"""planners.line_protection: hysteresis, the priority order, floors, relaxation and release."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from domain.throttles import CONSUMER_QUOTA, FOLLOWER, MIGRATION
from planners.line_accounting import LineFlow, account_lines
from planners.line_protection import (
    WHO,
    LineHealth,
    LineLimit,
    LineProtectionConfig,
    plan_line_throttles,
    step_line,
)
from planners.protection import ActiveThrottle

MB = 1e6
AB = ("idc-a", "idc-b")
LIMIT = LineLimit(100 * MB, high=0.85, low=0.70, target=0.75)
CONFIG = LineProtectionConfig(limits={AB: LIMIT}, critical_topics=("pay*",), fetch_priority={"batch-*": 1, "ui": 9})


def flow(kind: str, mb: float, topic: str = "t", partition: int = 0, broker: int = 3, client: str = "",
         transfer: str = "", in_sync: bool = True) -> LineFlow:
    return LineFlow(kind, "idc-a", "idc-b", topic, partition, broker, mb * MB, client_id=client,  # type: ignore[arg-type]
                    transfer=transfer, in_sync=in_sync)


def hot(flows: Sequence[LineFlow], active: Sequence[ActiveThrottle] = (), config: LineProtectionConfig = CONFIG,
        **kw: object) -> list:
    acc = account_lines(flows)
    health = {AB: LineHealth(hot=True, above=2, reason="test")}
    return list(plan_line_throttles(acc, active, health, config, **kw).decisions)  # type: ignore[arg-type]


def test_hysteresis_needs_k_rounds_above_high_and_k_below_low() -> None:
    s = LineHealth()
    seen = []
    for u in (0.9, 0.8, 0.9, 0.9, 0.8, 0.6, 0.75, 0.6, 0.6):
        s = step_line(s, u, LIMIT, 2, 2)
        seen.append(s.hot)
    assert seen == [False, False, False, True, True, True, True, True, False]
    assert step_line(s, None, LIMIT, 2, 2) == s


def test_a_line_under_its_high_mark_is_left_alone() -> None:
    acc = account_lines([flow("migration", 80), flow("client_fetch", 4, client="x")])
    plan = plan_line_throttles(acc, (), {}, CONFIG)
    assert plan.decisions == () and not plan.health[AB].hot


def test_migration_is_slowed_first_and_only_as_much_as_needed() -> None:
    ds = hot([flow("migration", 40, broker=3), flow("migration", 10, broker=4), flow("replication", 20),
              flow("client_fetch", 30, client="batch-1")])
    assert [(d.action, d.kind, d.key) for d in ds] == [("set", MIGRATION, "migration:broker:3"),
                                                       ("set", MIGRATION, "migration:broker:4")]
    # 100 -> 75 MB/s: 25 off the 50 MB/s of migration, in proportion (nothing else is touched)
    assert [d.rate_bytes_per_s for d in ds] == pytest.approx([20 * MB, 5 * MB])
    assert ds[0].evidence["line"] == list(AB) and "leased line idc-a->idc-b hot" in ds[0].why


def test_then_catch_up_of_non_critical_topics_never_below_ingress_then_fetches_by_priority() -> None:
    flows = [flow("migration", 5), flow("replication", 30, topic="bulk", transfer="catch_up", in_sync=False),
             flow("replication", 10, topic="pay", transfer="catch_up", in_sync=False),
             flow("replication", 15, topic="steady"),  # in sync: never throttled
             flow("client_fetch", 25, client="ui", broker=1), flow("client_fetch", 40, client="batch-7", broker=2)]
    ds = {d.key: d for d in hot(flows, bytes_in={("bulk", 0): 10 * MB, ("pay", 0): 10 * MB})}
    assert set(ds) == {"migration:broker:3", "follower:bulk:0:3", "consumer-quota:batch-7"}
    assert ds["migration:broker:3"].rate_bytes_per_s == pytest.approx(CONFIG.min_rate_bytes_per_s)
    follower = ds["follower:bulk:0:3"]
    assert follower.kind == FOLLOWER and follower.rate_bytes_per_s == pytest.approx(12 * MB)
    q = ds["consumer-quota:batch-7"]
    assert q.kind == CONSUMER_QUOTA  # the low-priority tenant goes first; "ui" (priority 9) is untouched
    relieved = 5 * MB - CONFIG.min_rate_bytes_per_s + 18 * MB + (40 * MB - q.rate_bytes_per_s)
    assert relieved == pytest.approx(125 * MB - 75 * MB, rel=1e-6)


def test_a_quota_never_slows_what_the_client_reads_inside_an_idc() -> None:
    flows = [flow("client_fetch", 60, client="batch-1", broker=1), flow("client_fetch", 40, client="ui", broker=2)]
    rates = {"batch-1": {1: 60 * MB, 3: 50 * MB}}  # it also reads 50 MB/s from broker 3, inside idc-b
    (d, *rest) = hot(flows, client_rates=rates)
    assert d.key == "consumer-quota:batch-1" and d.rate_bytes_per_s == pytest.approx(50 * MB)
    assert [x.key for x in rest] == ["consumer-quota:ui"]  # the rest comes from the next tenant


def test_an_active_tighter_throttle_is_not_loosened_by_a_set() -> None:
    active = [ActiveThrottle("migration:broker:3", MIGRATION, {"broker": 3}, CONFIG.min_rate_bytes_per_s,
                             {"line": list(AB)}, WHO)]
    assert hot([flow("migration", 1), flow("replication", 99)], active=active) == []


def mine(key: str, kind: str, rate: float, original: float, target: dict) -> ActiveThrottle:
    return ActiveThrottle(key, kind, target, rate, {"line": list(AB), "original_rate_bytes_per_s": original}, WHO)


def test_a_calm_line_relaxes_step_by_step_and_releases_at_the_original_rate() -> None:
    a = mine("consumer-quota:x", CONSUMER_QUOTA, 10 * MB, 35 * MB, {"client_id": "x"})
    acc = account_lines([flow("client_fetch", 10, client="x"), flow("replication", 40)])
    calm = {AB: LineHealth(hot=False)}
    (d,) = plan_line_throttles(acc, [a], calm, CONFIG).decisions
    assert d.action == "relax" and d.rate_bytes_per_s == pytest.approx(20 * MB)
    a2 = mine("consumer-quota:x", CONSUMER_QUOTA, 20 * MB, 35 * MB, {"client_id": "x"})
    (d2,) = plan_line_throttles(account_lines([flow("client_fetch", 20, client="x"), flow("replication", 20)]),
                                [a2], calm, CONFIG).decisions
    assert d2.action == "release"
    # the relaxation that would push the line back over its low mark waits
    busy = account_lines([flow("client_fetch", 10, client="x"), flow("replication", 55)])
    assert plan_line_throttles(busy, [a], calm, CONFIG).decisions == ()


def test_a_throttle_whose_traffic_left_the_line_is_released_and_others_are_not_touched() -> None:
    gone = mine("migration:broker:4", MIGRATION, 1 * MB, 50 * MB, {"broker": 4})
    disk = ActiveThrottle("migration:broker:3", MIGRATION, {"broker": 3}, 1 * MB, {"disk": [3, "/d"]},
                          "throttle-protection")
    plan = plan_line_throttles(account_lines([flow("replication", 10)]), [gone, disk], {}, CONFIG)
    assert [(d.action, d.key) for d in plan.decisions] == [("release", "migration:broker:4")]


def test_deterministic() -> None:
    flows = [flow("client_fetch", 20 + i, client=f"c{i}", broker=1 + i % 2) for i in range(8)]
    assert hot(flows) == hot(list(reversed(flows)))


def test_a_finished_migration_is_released_even_while_the_line_stays_hot() -> None:
    done = mine("migration:broker:3", MIGRATION, 2 * MB, 40 * MB, {"broker": 3})
    ds = hot([flow("replication", 80)], active=[done])
    assert [(d.action, d.key) for d in ds] == [("release", "migration:broker:3")]


def test_a_quota_that_no_longer_binds_is_released_on_a_calm_line() -> None:
    a = mine("consumer-quota:x", CONSUMER_QUOTA, 10 * MB, 35 * MB, {"client_id": "x"})
    acc = account_lines([flow("client_fetch", 12, client="x", broker=1), flow("replication", 55)])
    rates = {"x": {1: 6 * MB, 2: 6 * MB}}  # the client reads 6 MB/s per broker: a 10 MB/s quota does nothing
    (d,) = plan_line_throttles(acc, [a], {AB: LineHealth(hot=False)}, CONFIG, client_rates=rates).decisions
    assert d.action == "release" and "no longer binds" in d.why


def test_a_rounding_remainder_does_not_reach_the_next_tier() -> None:
    ds = hot([flow("migration", 50, broker=3), flow("client_fetch", 50, client="batch-1")])
    assert {d.kind for d in ds} == {MIGRATION}


def test_heal_copies_keep_their_floor_and_the_excess_falls_to_fetches() -> None:
    # 40 MB/s of heal copies into broker 3 with a 30 MB/s heal floor, 10 of migration into 4, 50 of fetches:
    # 100 -> 75 MB/s. Without the floor the migration tier alone would relieve all 25.
    flows = [flow("migration", 40, broker=3), flow("migration", 10, broker=4),
             flow("client_fetch", 50, client="batch-1", broker=1)]
    plain = {d.key: d for d in hot(flows)}
    assert set(plain) == {"migration:broker:3", "migration:broker:4"}
    ds = {d.key: d for d in hot(flows, migration_floors={3: 30 * MB})}
    assert ds["migration:broker:3"].rate_bytes_per_s == pytest.approx(30 * MB)  # never below the heal floor
    assert "consumer-quota:batch-1" in ds, "what the heal floor keeps on the line comes off the fetches"
    relieved = 10 * MB + (10 * MB - ds["migration:broker:4"].rate_bytes_per_s) \
        + (50 * MB - ds["consumer-quota:batch-1"].rate_bytes_per_s)
    assert relieved == pytest.approx(25 * MB, rel=1e-6)
