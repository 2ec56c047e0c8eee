"""Leader balancing: preferred order + elections only, never worse on leader bytes-in or count."""

from __future__ import annotations

from domain import dump_plan
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import plan_leaders
from planners.leaders import leader_stats
from tests.support.planner_cases import MB, assert_valid, broker, partition, snapshot_of, topic


def _three_brokers_one_leader():
    brokers = [broker(b, "a", f"r{b}") for b in (1, 2, 3)]
    parts = [partition(k, [1, 2, 3], ["/data1", "/data1", "/data1"], bytes_in=(k + 1) * MB) for k in range(6)]
    return snapshot_of(brokers, [topic("t", parts)])


def test_leadership_spreads_without_moving_data() -> None:
    snap = _three_brokers_one_leader()
    plan = plan_leaders(snap)
    after = assert_valid(snap, plan)
    assert plan.summary is not None and plan.summary.bytes_to_move == 0 and plan.summary.replicas_moved == 0
    for move in plan.moves:  # same replicas and log dirs, new leader first
        old = snap.index.partition_by_id[move.id]
        assert sorted(zip(move.replicas, move.log_dirs, strict=True)) == sorted(
            zip(old.replicas, old.log_dirs, strict=True))
        assert after.index.partition_by_id[move.id].leader == move.replicas[0]
    assert {c.id for c in plan.leaders} == {m.id for m in plan.moves}
    loads = after.index.broker_load
    assert sorted(loads[b].leaders for b in (1, 2, 3)) == [2, 2, 2]
    bytes_in = [loads[b].leader_bytes_in_per_s for b in (1, 2, 3)]
    assert max(bytes_in) <= 8 * MB  # 21 MB/s in total; perfect is 7
    assert leader_stats(after, "shared") < leader_stats(snap, "shared")


def test_leaders_never_worse_deterministic_and_disk_peak_kept() -> None:
    snap = generate_snapshot(GeneratorSpec(brokers=15, disks_per_broker=3, partitions=500, seed=9, dead_brokers=1,
                                           pools={"shared": 0.7, "pay": 0.3}))
    plan = plan_leaders(snap)
    after = assert_valid(snap, plan)
    for pool in ("shared", "pay"):
        b_bytes, b_count = leader_stats(snap, pool)
        a_bytes, a_count = leader_stats(after, pool)
        assert a_bytes <= b_bytes + 1e-6 and a_count <= b_count
    assert leader_stats(after, "shared")[0] < leader_stats(snap, "shared")[0]
    assert plan.summary is not None and plan.summary.bytes_to_move == 0
    for pool, (before, later) in plan.summary.pools.items():
        assert later.max_util <= before.max_util + 1e-9, pool
    assert dump_plan(plan_leaders(snap)) == dump_plan(plan)


def test_out_of_sync_replicas_never_become_leaders() -> None:
    brokers = [broker(b, "a", f"r{b}") for b in (1, 2, 3)]
    parts = [partition(k, [1, 2, 3], ["/data1"] * 3, bytes_in=MB) for k in range(4)]
    for p in parts:
        p["isr"] = [1]
    snap = snapshot_of(brokers, [topic("t", parts)])
    plan = plan_leaders(snap)
    assert plan.leaders == () and plan.moves == ()
