"""Planning input mid-move: in-flight reassignments settle to their target replica sets."""

from __future__ import annotations

from domain import check_plan, parse_snapshot, settle_moves
from planners import plan_rebalance
from tests.support.snapshots import dumps, mutated, small_doc


def mid_move() -> object:
    """orders-0 moving 1 -> 3: Kafka lists target + removing, [3, 2, 4, 1], with 1 (the leader) still in sync."""
    doc = mutated(small_doc(), "topics.0.partitions.0.replicas", [3, 2, 4, 1])
    doc = mutated(doc, "topics.0.partitions.0.log_dirs", ["/data2", "/data1", "/data1", "/data1"])
    doc = mutated(doc, "topics.0.partitions.0.isr", [2, 4, 1])
    return parse_snapshot(dumps(mutated(doc, "topics.0.partitions.0.leader", 1)))


def test_moving_partitions_take_their_target_replica_set() -> None:
    snap = mid_move()
    settled = settle_moves(snap, {("orders", 0): (1,)})  # type: ignore[arg-type]
    p = settled.index.partition_by_id[("orders", 0)]
    assert (p.replicas, p.log_dirs, p.isr, p.leader) == ((3, 2, 4), ("/data2", "/data1", "/data1"), (2, 4), 2)
    other = settled.index.partition_by_id[("orders", 1)]
    assert other is snap.index.partition_by_id[("orders", 1)]  # type: ignore[attr-defined]
    assert settle_moves(snap, {}) is snap  # type: ignore[arg-type]
    assert parse_snapshot(dumps(__import__("domain").snapshot_to_dict(settled))) == settled


def test_a_rebalance_planned_mid_move_keeps_the_replication_factor() -> None:
    settled = settle_moves(mid_move(), {("orders", 0): (1,)})  # type: ignore[arg-type]
    plan = plan_rebalance(settled)
    rf = {p.id: len(p.replicas) for p in settled.iter_partitions()}
    assert all(len(m.replicas) == rf[m.id] for m in plan.moves)
    assert check_plan(settled, plan) == []
