"""The anomaly detectors and the healing planners on hand-written snapshots (every number checkable by hand)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.service.auto_rebalance import unexecutable
from domain import BrokerState, ClusterSnapshot, PartitionMove, Plan, check_plan
from domain.snapshot_file import parse_snapshot
from planners.anomalies import (
    BROKER_DEAD,
    DISK_FAIL_SLOW,
    MASS_FAILURE,
    OFFLINE_PARTITIONS,
    UNDER_MIN_ISR,
    UNDER_REPLICATED,
    DetectorConfig,
    HealthRound,
    detect_all,
    detect_dead_brokers,
    detect_fail_slow,
    detect_offline_dirs,
    detect_partitions,
    detect_stuck,
    detect_unresponsive,
    disk_judged_healthy,
    mass_failure,
)
from planners.healing import (
    heal_budget,
    keep_dead_in_place,
    plan_evacuate_disk,
    plan_leaders_off,
    plan_replace_broker,
    without_dead_dirs,
)
from tests.support.snapshots import broker, disk, partition


def _disk(path: str, *, await_ms: float = 5.0, util: float = 0.2, bps: float = 20e6) -> dict[str, Any]:
    d = disk(path, util=util)
    d.update(await_ms=await_ms, write_bytes_per_s=bps)
    return d


def doc(dead: tuple[int, ...] = (), slow: dict[tuple[int, str], tuple[float, float, float]] | None = None,
        isr_drop: int | None = None) -> dict[str, Any]:
    """Six brokers, two IDCs x three racks, two disks each; 12 partitions RF 3 across IDCs."""
    slow = slow or {}
    brokers = []
    for b in range(1, 7):
        idc = "idc-a" if b <= 3 else "idc-b"
        disks = []
        for path in ("/d1", "/d2"):
            aw, util, bps = slow.get((b, path), (5.0, 0.2, 20e6))
            disks.append(_disk(path, await_ms=aw, util=util, bps=bps))
        brokers.append(broker(b, idc, f"{idc}-r{b}", state="dead" if b in dead else "alive", disks=disks))
    parts = []
    for n in range(12):
        reps = [1 + n % 3, 4 + n % 3, 1 + (n + 1) % 3]
        dirs = ["/d1" if n % 2 == 0 else "/d2"] * 3
        p = partition(n, reps, dirs, bytes_in=1e6)
        alive = [r for r in reps if r not in dead and r != isr_drop]
        p["isr"] = alive
        p["leader"] = alive[0] if alive else None
        parts.append(p)
    return {"format": "guardian.snapshot/v1", "cluster": "c1", "taken_at": "2026-11-21T10:00:00Z",
            "brokers": brokers, "topics": [{"name": "t", "partitions": parts}]}


def snap(**kw: Any) -> ClusterSnapshot:
    return parse_snapshot(json.dumps(doc(**kw)))


def rounds(snaps: list[ClusterSnapshot], step: float = 10.0, **kw: Any) -> list[HealthRound]:
    return [HealthRound(s, at=i * step, **kw) for i, s in enumerate(snaps)]


CFG = DetectorConfig(grace_s=60.0, slow_rounds=3)


def test_dead_broker_is_confirmed_only_after_the_grace_period() -> None:
    hist = rounds([snap()] + [snap(dead=(2,))] * 4)  # dead at t=10..40
    (f,) = detect_dead_brokers(hist, CFG)
    assert f.kind == BROKER_DEAD and f.subject["broker"] == 2
    assert f.evidence["dead_for_s"] == 30.0 and not f.confirmed
    hist = rounds([snap()] + [snap(dead=(2,))] * 8)
    (f,) = detect_dead_brokers(hist, CFG)
    assert f.evidence["dead_for_s"] == 70.0 and f.confirmed
    assert f.evidence["replicas"] == 8


def test_dead_broker_in_maintenance_raises_nothing() -> None:
    hist = rounds([snap(dead=(2,))] * 9, maintenance=frozenset({2}))
    assert detect_dead_brokers(hist, CFG) == []


def test_a_broker_that_returned_restarts_its_streak() -> None:
    hist = rounds([snap(dead=(2,))] * 5 + [snap()] + [snap(dead=(2,))] * 2)
    (f,) = detect_dead_brokers(hist, CFG)
    assert f.evidence["dead_for_s"] == 10.0 and not f.confirmed
    assert detect_dead_brokers(rounds([snap(dead=(2,))] * 5 + [snap()]), CFG) == []


def test_fail_slow_disk_needs_k_rounds_and_names_its_peers() -> None:
    slow = {(3, "/d1"): (400.0, 0.95, 20e6)}  # same bytes/s as its peers, 80x their await
    hist = rounds([snap(slow=slow)] * 2)
    (f,) = detect_fail_slow(hist, CFG)
    assert f.kind == DISK_FAIL_SLOW and f.subject == {"broker": 3, "log_dir": "/d1"} and not f.confirmed
    assert f.evidence["peer_await_ms"] == 5.0 and f.evidence["peers"] == 11
    (f,) = detect_fail_slow(rounds([snap(slow=slow)] * 3), CFG)
    assert f.confirmed and f.evidence["rounds"] == 3


def test_a_busy_disk_slow_because_of_its_load_is_not_fail_slow() -> None:
    # the busiest disk: 10x the bytes/s of any peer, util and await high but its cost per byte is normal
    busy = {(3, "/d1"): (60.0, 0.9, 200e6)}
    assert detect_fail_slow(rounds([snap(slow=busy)] * 4), CFG) == []
    # peers as busy as it and as slow: nothing either
    many = {(b, "/d1"): (120.0, 0.9, 150e6) for b in range(1, 7)}
    assert detect_fail_slow(rounds([snap(slow=many)] * 4), CFG) == []


def test_busiest_disk_that_is_also_slow_per_byte_is_flagged() -> None:
    slowest = {(b, d): (5.0, 0.02, 20e6) for b in range(1, 7) for d in ("/d1", "/d2")}
    slowest[(3, "/d1")] = (900.0, 1.0, 45e6)  # busier than any peer (no comparable one), 22x their util per byte
    (f,) = detect_fail_slow(rounds([snap(slow=slowest)] * 3), CFG)
    assert f.confirmed and "service time" in f.evidence["basis"]


def test_partition_findings_count_under_replicated_min_isr_and_offline() -> None:
    r = rounds([snap(isr_drop=2)])
    found = {f.kind: f for f in detect_partitions(r, CFG)}
    assert found[UNDER_REPLICATED].evidence["count"] == 8  # broker 2 is in 8 of the 12 replica sets
    assert UNDER_MIN_ISR not in found and OFFLINE_PARTITIONS not in found
    found = {f.kind: f for f in detect_partitions(rounds([snap(dead=(1, 4, 2))]), CFG)}
    assert found[OFFLINE_PARTITIONS].evidence["count"] == 4 and found[UNDER_MIN_ISR].evidence["count"] == 4


def test_stuck_reassignment_only_without_progress_in_every_round() -> None:
    s = snap()
    moving = [HealthRound(s, at=i * 10.0, reassigning={("t", 0): 0.0, ("t", 1): 5e6 if i == 3 else 0.0})
              for i in range(6)]
    (f,) = detect_stuck(moving, CFG)
    assert f.evidence["count"] == 1 and f.evidence["examples"] == ["t-0"]
    assert detect_stuck(moving[:5], CFG) == []


def test_unresponsive_and_offline_dirs() -> None:
    s = snap()
    hist = [HealthRound(s, at=0.0, unresponsive={4: "KafkaTimeoutError"}),
            HealthRound(s, at=10.0, unresponsive={4: "KafkaTimeoutError"}, offline_dirs={5: frozenset({"/d2"})})]
    (u,) = detect_unresponsive(hist, CFG)
    assert u.confirmed and u.evidence["rounds"] == 2
    (d,) = detect_offline_dirs(hist, CFG)
    assert d.subject == {"broker": 5, "log_dir": "/d2"} and d.evidence["replicas"] == 2


def test_an_offline_dir_counts_metadatas_offline_replicas_and_one_holding_nothing_is_a_warning() -> None:
    s = snap()
    on_d2 = {p.id for p in s.iter_partitions() for i, b in enumerate(p.replicas) if b == 5 and p.log_dirs[i] == "/d2"}
    extra = frozenset(on_d2 | {("t", 99)})  # Metadata names one more offline replica the last listing did not
    (d,) = detect_offline_dirs([HealthRound(s, 0.0, offline_dirs={5: frozenset({"/d2"})},
                                            offline_replicas={5: extra})], CFG)
    assert d.confirmed and d.evidence["replicas"] == len(on_d2) + 1 and "t-99" in d.evidence["examples"]
    # a second failed dir on the broker: an unlisted offline replica cannot be placed, only listed ones count
    (_, d2) = detect_offline_dirs([HealthRound(s, 0.0, offline_dirs={5: frozenset({"/d1", "/d2"})},
                                                offline_replicas={5: extra})], CFG)
    assert d2.evidence["replicas"] == len(on_d2)
    empty = replace(s, topics=())
    (w,) = detect_offline_dirs([HealthRound(empty, 0.0, offline_dirs={5: frozenset({"/d2"})})], CFG)
    assert not w.confirmed and "replace the disk" in w.summary


def test_fail_slow_evidence_says_since_when_and_an_empty_slow_disk_is_a_warning() -> None:
    slow = {(3, "/d1"): (400.0, 0.95, 20e6)}
    (f,) = detect_fail_slow(rounds([snap()] + [snap(slow=slow)] * 4, step=10.0), CFG)
    assert f.confirmed and f.evidence["slow_since"] == 10.0 and f.evidence["slow_for_s"] == 30.0
    assert f.evidence["replicas"] == 4
    bare = replace(snap(slow=slow), topics=())
    (w,) = detect_fail_slow(rounds([bare] * 4), CFG)
    assert not w.confirmed and "holds no replica" in w.summary


def test_mass_failure_by_share_and_by_whole_idc() -> None:
    assert mass_failure(HealthRound(snap(dead=(2,)), 0.0), CFG) is None
    f = mass_failure(HealthRound(snap(dead=(1, 2, 4)), 0.0), CFG)
    assert f is not None and f.kind == MASS_FAILURE and f.evidence["share"] == 0.5
    f = mass_failure(HealthRound(snap(dead=(1, 2, 3)), 0.0), replace(CFG, mass_failure_share=0.9))
    assert f is not None and f.evidence["whole"] == ["idc idc-a"]
    assert detect_all([HealthRound(snap(dead=(1, 2, 4)), 0.0)], CFG)[0].kind == MASS_FAILURE


@settings(max_examples=60, deadline=None)
@given(dead=st.sets(st.integers(1, 6), max_size=6), share=st.floats(0.1, 0.9))
def test_mass_failure_iff_share_exceeded_or_whole_idc(dead: set[int], share: float) -> None:
    cfg = replace(CFG, mass_failure_share=share)
    f = mass_failure(HealthRound(snap(dead=tuple(sorted(dead))), 0.0), cfg)
    whole = {1, 2, 3} <= dead or {4, 5, 6} <= dead
    assert (f is not None) == (bool(dead) and (len(dead) / 6 > share or whole))


@settings(max_examples=40, deadline=None)
@given(awaits=st.lists(st.floats(1.0, 30.0), min_size=12, max_size=12), k=st.integers(1, 4))
def test_no_fail_slow_among_similar_disks(awaits: list[float], k: int) -> None:
    # every disk at the same load with await within 30x of each other but under the 50 ms floor: nothing
    slow = {(1 + i // 2, "/d1" if i % 2 == 0 else "/d2"): (a, 0.2, 20e6) for i, a in enumerate(awaits)}
    assert detect_fail_slow(rounds([snap(slow=slow)] * k), replace(CFG, slow_rounds=k)) == []


# --------------------------------------------------------------------------------- healing planners
def test_replace_dead_broker_plan_holds_every_invariant_and_avoids_the_dead() -> None:
    s = snap(dead=(2,))
    plan = plan_replace_broker(s, [2])
    assert plan.moves and check_plan(s, plan) == []
    assert all(2 not in m.replicas for m in plan.moves)
    assert len(plan.moves) == 8


def test_leaders_off_a_slow_disk_moves_no_data() -> None:
    s = snap()
    plan = plan_leaders_off(s, [(1, "/d1")])
    led = [p for p in s.iter_partitions() if p.leader == 1 and p.log_dirs[0] == "/d1"]
    assert led and {lc.id for lc in plan.leaders} == {p.id for p in led}
    assert all(lc.leader != 1 for lc in plan.leaders)
    assert all(sorted(m.replicas) == sorted(s.index.partition_by_id[m.id].replicas) for m in plan.moves)
    assert check_plan(s, plan) == []


def test_evacuate_disk_prefers_the_same_broker() -> None:
    s = snap()
    plan = plan_evacuate_disk(s, (4, "/d1"))
    on = [p for p in s.iter_partitions() for i, b in enumerate(p.replicas) if b == 4 and p.log_dirs[i] == "/d1"]
    assert on and len(plan.moves) == len(on)
    for m in plan.moves:
        assert 4 in m.replicas and m.log_dirs[m.replicas.index(4)] == "/d2"
    assert check_plan(s, plan) == []


def test_evacuate_a_failed_dir_goes_to_other_brokers_only() -> None:
    s = snap()
    plan = plan_evacuate_disk(s, (4, "/d1"), same_broker=False)
    on = [p for p in s.iter_partitions() for i, b in enumerate(p.replicas) if b == 4 and p.log_dirs[i] == "/d1"]
    assert on and len(plan.moves) == len(on) and all(4 not in m.replicas for m in plan.moves)
    assert "offline" in plan.notes[0]
    assert check_plan(s, plan) == []


def test_evacuate_a_disk_of_a_dead_broker_goes_elsewhere() -> None:
    s = snap(dead=(4,))
    assert s.index.broker_by_id[4].state is BrokerState.DEAD
    plan = plan_evacuate_disk(s, (4, "/d1"))
    assert plan.moves and all(4 not in m.replicas for m in plan.moves)


def test_auto_rebalance_never_proposes_targets_the_executor_refuses() -> None:
    s = snap(dead=(5,))
    p = s.index.partition_by_id[("t", 0)]  # replicas (1, 4, 2)
    to_dead = Plan("c1", "rebalance", (PartitionMove("t", 0, (1, 5, 2), (None, None, None)),))
    to_unknown = Plan("c1", "rebalance", (PartitionMove("t", 0, (1, 6, 2), (None, "unknown", None)),))
    fine = Plan("c1", "rebalance", (PartitionMove("t", 0, (1, 6, 2), (None, "/d1", None)),))
    assert p.replicas == (1, 4, 2)
    assert "target broker 5 is dead" in unexecutable(s, to_dead)[0]
    assert "unknown log dir" in unexecutable(s, to_unknown)[0]
    assert unexecutable(s, fine) == []


# --------------------------------------------------------------------------------- issue 33: own load, history
def test_a_disk_queueing_at_high_util_is_judged_at_the_await_expected_at_its_load() -> None:
    # util 0.9 with await 50 ms = 5 ms / (1 - 0.9): what any of its peers (5 ms at util 0.2 -> 4 ms idle) would
    # show at that load. The previous rule (raw await >= 5x peers at >= half the load) flagged it.
    queueing = {(3, "/d1"): (50.0, 0.9, 20e6)}
    assert detect_fail_slow(rounds([snap(slow=queueing)] * 4), CFG) == []
    # 40x slower at the same util is slow against that expectation
    (f,) = detect_fail_slow(rounds([snap(slow={(3, "/d1"): (2000.0, 0.9, 20e6)})] * 3), CFG)
    assert f.confirmed and f.evidence["expected_await_ms"] == 40.0


def test_a_disk_busy_with_guardians_copies_is_not_a_suspect() -> None:
    busy = {(3, "/d1"): (400.0, 0.95, 120e6)}  # 100 MB/s of its 120 are our copies
    hist = rounds([snap(slow=busy)] * 4, copy_bytes={(3, "/d1"): 100e6})
    assert detect_fail_slow(hist, CFG) == []


def test_an_open_slow_streak_survives_rounds_that_cannot_judge_the_disk() -> None:
    slow = {(3, "/d1"): (400.0, 0.6, 20e6)}
    judged = rounds([snap(slow=slow)] * 3)
    evacuating = [HealthRound(snap(slow={(3, "/d1"): (400.0, 0.8, 80e6)}), at=40.0 + 10 * i,
                              copy_bytes={(3, "/d1"): 70e6}) for i in range(3)]
    (f,) = detect_fail_slow(judged + evacuating, CFG)
    assert f.confirmed and f.evidence["rounds"] == 3 and f.evidence["slow_since"] == 0.0
    assert "Guardian's copies" in f.evidence["now"]
    assert not disk_judged_healthy(judged + evacuating, (3, "/d1"), CFG)
    healed = [HealthRound(snap(), at=100.0 + 10 * i) for i in range(3)]
    assert detect_fail_slow(judged + evacuating + healed, CFG) == []
    assert disk_judged_healthy(judged + evacuating + healed, (3, "/d1"), CFG)
    assert not disk_judged_healthy(judged + evacuating + healed[:2], (3, "/d1"), CFG)


def test_a_slow_disk_carries_its_own_healthy_baseline() -> None:
    (f,) = detect_fail_slow(rounds([snap()] * 4 + [snap(slow={(3, "/d1"): (400.0, 0.6, 20e6)})] * 3), CFG)
    assert f.confirmed and f.evidence["own_baseline_ms"] == 4.0


def test_a_partition_short_only_of_the_replica_a_move_adds_is_not_under_replicated() -> None:
    s = snap()
    p = s.index.partition_by_id[("t", 0)]  # replicas (1, 4, 2), all in sync
    moving = replace(p, replicas=(1, 4, 2, 5), log_dirs=(*p.log_dirs, "/d1"))  # 5 being added
    s2 = replace(s, topics=tuple(replace(t, partitions=tuple(moving if q.id == p.id else q for q in t.partitions))
                                 for t in s.topics))
    assert detect_partitions([HealthRound(s2, 0.0, adding={("t", 0): frozenset({5})})], CFG) == []
    # without knowing the move it is under-replicated; a move that also lost an original replica still is
    (f,) = detect_partitions([HealthRound(s2, 0.0)], CFG)
    assert f.kind == UNDER_REPLICATED
    lost = replace(moving, isr=(1, 4))
    s3 = replace(s2, topics=tuple(replace(t, partitions=tuple(lost if q.id == p.id else q for q in t.partitions))
                                  for t in s2.topics))
    (f,) = detect_partitions([HealthRound(s3, 0.0, adding={("t", 0): frozenset({5})})], CFG)
    assert f.kind == UNDER_REPLICATED and f.evidence["examples"] == ["t-0"]


def test_heal_plans_keep_dead_dirs_out() -> None:
    s = snap()
    dead = {4: frozenset({"/d1"}), 2: frozenset({"/d1"})}
    planning = without_dead_dirs(s, dead)
    plan = keep_dead_in_place(plan_evacuate_disk(planning, (4, "/d1"), avoid=[(2, "/d1")], same_broker=False), dead)
    assert plan.moves
    for m in plan.moves:
        placed = set(zip(m.replicas, m.log_dirs, strict=True))
        assert not placed & {(4, "/d1"), (2, "/d1")}, m
        assert 4 not in m.replicas
    kept = [m for m in plan.moves if 2 in m.replicas and m.log_dirs[m.replicas.index(2)] is None]
    assert kept, "a replica kept on the other dead dir is left where it is (Kafka's 'any')"
    assert check_plan(s, plan) == []


def test_heal_budget_names_the_line_when_it_cannot_carry_the_wanted_rate() -> None:
    s = snap(dead=(5,))
    plan = plan_replace_broker(s, [5])
    roomy = heal_budget(s, plan, bound_s=3600.0, min_rate=10e6)
    assert roomy.bytes > 0 and roomy.bottleneck == "" and roomy.rate_bytes_per_s == 10e6
    tight = heal_budget(s, plan, bound_s=3600.0, min_rate=10e6,
                        line_headroom={("idc-a", "idc-b"): 1e6, ("idc-b", "idc-a"): 1e6})
    # the new replicas go to idc-b (same IDC first) from leaders in idc-a: every byte crosses idc-a -> idc-b
    assert tight.bottleneck == "leased line idc-a->idc-b" and tight.rate_bytes_per_s == 1e6
    assert tight.eta_s == tight.bytes / 1e6 > roomy.eta_s


def test_a_disk_serving_its_declared_ceiling_is_busy_not_slow() -> None:
    # The lab's protection scene: a disk capped at 2 MiB/s (its declared ceiling) kept at util ~1 by a replaying
    # consumer queues for 760 ms while its idle peers answer in 5 ms. It serves what it was declared to serve.
    cap = float(2 << 20)

    def capped(util: float, bps: float) -> ClusterSnapshot:
        d = doc(slow={(2, "/d1"): (760.0, util, bps)})
        for b in d["brokers"]:
            for x in b["disks"]:
                x["util"] = 0.02 if (b["id"], x["path"]) != (2, "/d1") else util
                if b["id"] == 2:
                    x["max_bytes_per_s"] = cap
        return parse_snapshot(json.dumps(d))

    for util in (0.95, 1.0):  # both the await path and the saturated path
        assert detect_fail_slow(rounds([capped(util, cap)] * 4), CFG) == []
    # the same disk serving a tenth of its ceiling at util 1 is fail-slow
    (f,) = detect_fail_slow(rounds([capped(1.0, cap / 10)] * 3), CFG)
    assert f.confirmed
