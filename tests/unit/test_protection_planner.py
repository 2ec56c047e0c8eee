"""planners.protection: health hysteresis, flows, abnormal queue, levers per capability, relaxation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import pytest

from domain import DiskKind
from domain.throttles import CONSUMER_QUOTA, FOLLOWER, INTRA_BROKER, MIGRATION, PARTITION_FETCH, PARTITION_PRODUCE
from planners.protection import (
    WHO,
    ActiveThrottle,
    ClientShare,
    DiskHealth,
    HealthThresholds,
    Lineage,
    ProtectionConfig,
    ProtectionInput,
    Transfer,
    abnormal_queue,
    disk_flows,
    parse_active,
    plan_throttles,
    step_health,
)
from tests.support.throttle_support import MB, disk, hot_snapshot, part, snapshot

TH = HealthThresholds(util_high=0.85, util_low=0.70, await_high_ms=50, await_low_ms=20, enter_samples=3,
                      leave_samples=2)


def run(samples: Sequence[tuple[float | None, float | None]], th: HealthThresholds = TH) -> list[bool]:
    state = DiskHealth()
    out = []
    for u, a in samples:
        state = step_health(state, u, a, th)
        out.append(state.unhealthy)
    return out


def test_enters_only_after_k_consecutive_samples_above_high() -> None:
    assert run([(0.9, 5), (0.9, 5), (0.5, 5), (0.9, 5), (0.9, 5), (0.9, 5)]) == [False] * 5 + [True]


def test_await_alone_can_make_a_disk_unhealthy() -> None:
    assert run([(0.3, 80)] * 3) == [False, False, True]


def test_leaves_only_below_the_low_mark_not_inside_the_band() -> None:
    states = run([(0.95, 5)] * 3 + [(0.8, 5)] * 5 + [(0.6, 5)] * 2)
    assert states[2:8] == [True] * 6  # 0.8 is below high but above low: still unhealthy
    assert states[8:] == [True, False]  # two samples below the low mark


def test_missing_and_nan_samples_change_nothing() -> None:
    state = DiskHealth()
    for _ in range(2):
        state = step_health(state, 0.95, 60, TH)
    for bad in [(None, None), (math.nan, math.nan), (math.inf, None), (-1.0, None)]:
        state = step_health(state, *bad, TH)
        assert state.above == 2 and not state.unhealthy
    state = step_health(state, 0.95, 60, TH)
    assert state.unhealthy and state.missing == 4


def test_one_finite_metric_is_enough() -> None:
    state = DiskHealth()
    for _ in range(3):
        state = step_health(state, math.nan, 90.0, TH)
    assert state.unhealthy


def test_an_alert_enters_at_once_and_holds() -> None:
    state = step_health(DiskHealth(), 0.5, 5, TH, alert=True)
    assert state.unhealthy and "alert" in state.reason
    state = step_health(state, 0.1, 1, TH, alert=True)
    assert state.unhealthy  # cannot leave while the alert fires


def test_thresholds_are_validated() -> None:
    with pytest.raises(ValueError):
        HealthThresholds(util_high=0.5, util_low=0.7)
    with pytest.raises(ValueError):
        HealthThresholds(enter_samples=0)


def test_flows_split_the_six_behaviours() -> None:
    snap = hot_snapshot()
    transfers = (Transfer("reassign", "events", 1, (3, "/d1"), (1, "/d1"), 30 * MB),
                 Transfer("catch_up", "orders", 1, (2, "/d2"), (1, "/d2"), 7 * MB))
    flows = disk_flows(snap, transfers)
    d1 = {(f.behaviour, f.topic, f.partition): f.bytes_per_s for f in flows[(1, "/d1")]}
    assert d1[("user_write", "orders", 0)] == 20 * MB
    assert d1[("user_read", "orders", 0)] == 120 * MB
    assert d1[("user_write", "events", 0)] == 8 * MB
    assert d1[("migration_write", "events", 1)] == 30 * MB
    assert ("replication_write", "orders", 0) not in d1  # broker 1 leads orders-0
    assert {(f.behaviour, f.topic) for f in flows[(2, "/d1")]} == {("replication_write", "orders")}
    assert ("migration_read", "events") in {(f.behaviour, f.topic) for f in flows[(3, "/d1")]}
    d2 = {f.behaviour for f in flows[(2, "/d2")]}
    assert "replication_read" in d2 and "user_write" in d2


def test_out_of_sync_replicas_get_no_steady_writes_and_bad_rates_are_dropped() -> None:
    snap = snapshot({1: [disk("/d1")], 2: [disk("/d1")]},
                    [part("t", 0, [1, 2], ["/d1", "/d1"], bytes_in=math.nan, isr=[1]),
                     part("t", 1, [2, 1], ["/d1", "/d1"], bytes_in=-5, disk_read=math.inf, isr=[2])])
    assert disk_flows(snap) == {}


def test_queue_holds_reads_and_excess_writes_largest_first() -> None:
    snap = hot_snapshot()
    flows = disk_flows(snap, (Transfer("reassign", "events", 1, (3, "/d1"), (1, "/d1"), 30 * MB),))[(1, "/d1")]
    expected = {("orders", 0): 19 * MB, ("events", 0): 2 * MB}  # events-0 writes 4x its expectation
    queue = abnormal_queue(flows, expected, ProtectionConfig())
    assert [(e.flow.behaviour, e.flow.topic) for e in queue] == [
        ("user_read", "orders"), ("migration_write", "events"), ("user_write", "events"), ("user_read", "events")]
    assert all(a.flow.bytes_per_s >= b.flow.bytes_per_s for a, b in itertools.pairwise(queue))
    # orders-0 writes 20 MB/s against 19 expected: within tolerance, not queued
    assert not any(e.flow.behaviour == "user_write" and e.flow.topic == "orders" for e in queue)


def hot_plan(partition_throttle: bool = True, lineage: Lineage | None = None, transfers: tuple[Transfer, ...] = (),
             active: tuple[ActiveThrottle, ...] = (), health: DiskHealth | None = None, **snap_kw: float):
    snap = hot_snapshot(**snap_kw)
    inp = ProtectionInput(transfers=transfers, lineage=lineage or Lineage(), partition_throttle=partition_throttle,
                        active=active)
    start = {(1, "/d1"): health if health is not None else DiskHealth(unhealthy=True, above=3, reason="test")}
    return plan_throttles(snap, inp, start, ProtectionConfig())


def test_partition_capable_cluster_throttles_the_lagging_partition_fetch() -> None:
    plan = hot_plan()
    assert [d.action for d in plan.decisions] == ["set"]
    d = plan.decisions[0]
    assert d.kind == PARTITION_FETCH and dict(d.target) == {"topic": "orders", "partition": 0}
    assert d.protects == (1, "/d1")
    # needs util 0.95 -> 0.65 on a 200 MB/s disk: 60 MB/s less disk read out of 120; the fetch carries
    # 160 MB/s of which 3/4 hits the disk -> limit 160 - 60/0.75 = 80 MB/s
    assert d.rate_bytes_per_s == pytest.approx(80 * MB, rel=1e-6)
    assert d.evidence["predicted_util"] < 0.66
    assert d.evidence["causes"][0]["behaviour"] == "user_read"
    assert d.evidence["util"] == 0.95 and d.evidence["thresholds"]["util_high"] == 0.85


def test_without_partition_capability_client_quotas_from_audit_lineage() -> None:
    lineage = Lineage(fetch={("orders", 0): (ClientShare("billing", 150 * MB), ClientShare("audit", 10 * MB))})
    plan = hot_plan(partition_throttle=False, lineage=lineage)
    kinds = {d.key: d for d in plan.decisions}
    assert set(kinds) == {"consumer-quota:billing", "consumer-quota:audit"}
    billing = kinds["consumer-quota:billing"]
    assert billing.kind == CONSUMER_QUOTA and billing.target["quota"] == "consumer_byte_rate"
    assert billing.target["lineage"] == "audit lineage of the partition"
    assert billing.rate_bytes_per_s < 150 * MB


def test_without_audit_the_topic_top_consumers_are_quoted() -> None:
    lineage = Lineage(topic_consumers={"orders": (ClientShare("billing", 1.0),)})
    plan = hot_plan(partition_throttle=False, lineage=lineage)
    assert [d.key for d in plan.decisions] == ["consumer-quota:billing"]
    assert "top clients of the topic" in plan.decisions[0].target["lineage"]


def test_no_known_client_means_no_user_throttle() -> None:
    plan = hot_plan(partition_throttle=False)
    assert plan.decisions == ()


def test_reassignment_overload_slows_migration_not_users() -> None:
    transfers = (Transfer("reassign", "events", 1, (3, "/d1"), (1, "/d1"), 150 * MB),)
    plan = hot_plan(transfers=transfers, read=0.0)
    assert [(d.kind, d.target["broker"]) for d in plan.decisions] == [(MIGRATION, 1)]
    assert plan.decisions[0].rate_bytes_per_s == pytest.approx(90 * MB)


def test_intra_broker_and_catch_up_levers_respect_floors() -> None:
    cfg = ProtectionConfig()
    transfers = (Transfer("intra_broker", "orders", 1, (1, "/d2"), (1, "/d1"), 100 * MB),
                 Transfer("catch_up", "orders", 0, (1, "/d1"), (2, "/d1"), 100 * MB))
    snap = hot_snapshot(util=1.0, read=0.0)
    plan = plan_throttles(snap, ProtectionInput(transfers=transfers, partition_throttle=True),
                          {(1, "/d1"): DiskHealth(unhealthy=True)}, cfg)
    by_kind = {d.kind: d for d in plan.decisions}
    assert set(by_kind) >= {INTRA_BROKER}
    # catch-up read from the leader's disk: a follower throttle never below bytes_in x 1.2 (ISR floor)
    plan2 = plan_throttles(snap, ProtectionInput(transfers=transfers[1:], partition_throttle=True),
                           {(1, "/d1"): DiskHealth(unhealthy=True)}, cfg)
    fol = [d for d in plan2.decisions if d.kind == FOLLOWER]
    assert fol and fol[0].rate_bytes_per_s >= 20 * MB * 1.2
    assert fol[0].target == {"topic": "orders", "partition": 0, "broker": 2}


def test_excess_writes_get_a_partition_produce_throttle() -> None:
    snap = snapshot({1: [disk("/d1", 0.95, 10)], 2: [disk("/d1")]},
                    [part("t", 0, [1, 2], ["/d1", "/d1"], bytes_in=150 * MB, bytes_out=150 * MB)])
    plan = plan_throttles(snap, ProtectionInput(expected_bytes_in={("t", 0): 30 * MB}, partition_throttle=True),
                          {(1, "/d1"): DiskHealth(unhealthy=True)})
    assert [d.kind for d in plan.decisions] == [PARTITION_PRODUCE]


def test_healthy_disk_gets_no_throttle_and_enters_only_after_k() -> None:
    snap = hot_snapshot()
    inp = ProtectionInput(partition_throttle=True)
    cfg = ProtectionConfig(thresholds={DiskKind.HDD: TH})
    health: dict = {}
    for i in range(3):
        plan = plan_throttles(snap, inp, health, cfg)
        health = dict(plan.health)
        assert bool(plan.decisions) == (i == 2)


def active_fetch(rate: float, original: float = 160 * MB) -> ActiveThrottle:
    return ActiveThrottle("fetch:orders:0", PARTITION_FETCH, {"topic": "orders", "partition": 0}, rate,
                          {"disk": [1, "/d1"], "original_rate_bytes_per_s": original, "relax_step": 0}, WHO)


def test_an_equal_or_looser_decision_on_an_active_throttle_is_not_repeated() -> None:
    plan = hot_plan(active=(active_fetch(50 * MB),))
    assert plan.decisions == ()


def test_relax_step_by_step_then_release() -> None:
    # disk recovered, lagging reader still there (binding throttle): relax x2 while util stays < low mark
    healthy = DiskHealth(unhealthy=False, below=2)
    plan = hot_plan(active=(active_fetch(40 * MB),), health=healthy, util=0.4, read=30 * MB)
    assert [(d.action, d.rate_bytes_per_s) for d in plan.decisions] == [("relax", 80 * MB)]
    assert plan.decisions[0].evidence["relax_step"] == 1
    # relaxing would push the disk over the low mark: hold
    plan = hot_plan(active=(active_fetch(40 * MB),), health=healthy, util=0.62, read=30 * MB)
    assert plan.decisions == ()
    # reached the original rate: release
    plan = hot_plan(active=(active_fetch(100 * MB, original=150 * MB),), health=healthy, util=0.3, read=100 * MB)
    assert [d.action for d in plan.decisions] == ["release"]


def test_release_when_the_cause_is_gone() -> None:
    healthy = DiskHealth(unhealthy=False, below=2)
    plan = hot_plan(active=(active_fetch(40 * MB),), health=healthy, util=0.4, read=0.0)
    assert [d.action for d in plan.decisions] == ["release"]
    assert "no longer loads it" in plan.decisions[0].why


def test_foreign_throttles_are_never_relaxed_and_bad_state_rows_are_skipped() -> None:
    manual = ActiveThrottle("manual", PARTITION_FETCH, {"topic": "orders", "partition": 0}, 1 * MB,
                            {"disk": [1, "/d1"]}, set_by="alice")
    plan = hot_plan(active=(manual,), health=DiskHealth(below=2), util=0.2, read=0.0)
    assert plan.decisions == ()
    rows = parse_active({"ok": {"kind": PARTITION_FETCH, "target": {}, "rate_bytes_per_s": 5, "set_by": WHO},
                         "bad": {"kind": PARTITION_FETCH, "rate_bytes_per_s": "fast"}})
    assert [r.key for r in rows] == ["ok"]


def test_throttle_on_a_vanished_disk_is_released() -> None:
    gone = ActiveThrottle("fetch:x:0", PARTITION_FETCH, {"topic": "x", "partition": 0}, 1 * MB,
                          {"disk": [9, "/d9"]}, WHO)
    plan = hot_plan(active=(gone,), health=DiskHealth(), util=0.2, read=0.0)
    assert [(d.action, d.key) for d in plan.decisions] == [("release", "fetch:x:0")]


def test_only_restricts_the_evaluation_to_alerted_disks() -> None:
    snap = hot_snapshot()
    plan = plan_throttles(snap, ProtectionInput(alerts=frozenset({(1, "/d1")}), partition_throttle=True), {},
                          only={(1, "/d1")})
    assert set(plan.health) == {(1, "/d1")} and plan.decisions[0].kind == PARTITION_FETCH
