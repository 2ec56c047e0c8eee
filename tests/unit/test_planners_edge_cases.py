"""Degenerate inputs give empty or explained plans, never a crash."""

from __future__ import annotations

import pytest

from planners import NewTopic, PlannerError, plan_drain, plan_leaders, plan_preallocation, plan_rebalance
from tests.support.planner_cases import MB, assert_valid, broker, disk, partition, snapshot_of, topic


def test_no_topics_and_zero_traffic_give_empty_plans() -> None:
    empty = snapshot_of([broker(1, "a", "r1"), broker(2, "a", "r2")], [])
    idle = snapshot_of([broker(1, "a", "r1"), broker(2, "a", "r2")],
                       [topic("t", [partition(0, [1], ["/data1"], bytes_in=0.0)])])
    for snap in (empty, idle):
        for plan in (plan_rebalance(snap), plan_leaders(snap)):
            assert_valid(snap, plan)
            assert plan.moves == () and plan.leaders == ()


def test_leaderless_partitions_and_dead_brokers_are_left_alone() -> None:
    brokers = [broker(1, "a", "r1"), broker(2, "a", "r2", state="dead"), broker(3, "a", "r3")]
    parts = [partition(k, [2], ["/data1"], bytes_in=50 * MB, leader=-1) for k in range(3)]
    parts += [partition(3 + k, [1], ["/data1"], bytes_in=10 * MB) for k in range(4)]
    snap = snapshot_of(brokers, [topic("t", parts)])
    plan = plan_rebalance(snap)
    assert_valid(snap, plan)
    moved = {m.partition for m in plan.moves}
    assert moved and moved <= {3, 4, 5, 6}  # only the live, led partitions on alive brokers move


def test_broker_without_disks_and_single_broker_cluster() -> None:
    snap = snapshot_of([broker(1, "a", "r1"), broker(2, "a", "r2", disks=[])],
                       [topic("t", [partition(k, [1], ["/data1"], bytes_in=MB) for k in range(3)])])
    assert_valid(snap, plan_rebalance(snap))
    plan = plan_drain(snap, [1])
    assert_valid(snap, plan)
    assert any("stay on drained brokers" in n for n in plan.notes)  # nowhere to go: said, not crashed
    with pytest.raises(PlannerError, match="no valid disk"):
        plan_preallocation(snap, NewTopic("n", 1, 2, 1.0))


def test_full_disks_are_never_targets() -> None:
    full = disk("/data1", cap=100 * 2**30, used=95 * 2**30)
    brokers = [broker(1, "a", "r1", disks=[disk("/data1")]), broker(2, "a", "r2", disks=[full])]
    parts = [partition(k, [1], ["/data1"], bytes_in=10 * MB, size=2**30) for k in range(4)]
    snap = snapshot_of(brokers, [topic("t", parts)])
    plan = plan_rebalance(snap)
    assert_valid(snap, plan)
    assert plan.moves == ()
    assert any("no valid target" in n for n in plan.notes)
