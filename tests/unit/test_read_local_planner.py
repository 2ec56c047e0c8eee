"""Read-local placement (KIP-392): a follower moves into each IDC that reads a topic above the threshold."""

from __future__ import annotations

from collections import Counter

import pytest

from domain import apply_plan, check_plan, dump_plan
from planners import Bounds, PlannerError, ReadLocalOptions, plan_read_local
from planners.registry import PLANNERS
from tests.support.planner_cases import MB, broker, disk, partition, snapshot_of, topic


def _all_in_idc_a(placement: dict[str, int] | None = None, rf: int = 3):
    brokers = [broker(b, "idc-a", f"a-r{b}", disks=[disk("/data1"), disk("/data2")]) for b in (1, 2, 3)]
    brokers += [broker(b, "idc-b", f"b-r{b}", disks=[disk("/data1"), disk("/data2")]) for b in (4, 5)]
    parts = [partition(k, [1 + (k + j) % 3 for j in range(rf)], ["/data1"] * rf, bytes_in=MB) for k in range(4)]
    return snapshot_of(brokers, [topic("orders", parts, placement=placement),
                                 topic("quiet", [partition(0, [1, 2, 3][:rf], ["/data2"] * rf)])])


def _idcs(snap, replicas):
    idc = {b.id: b.idc for b in snap.brokers}
    return Counter(idc[b] for b in replicas)


def test_each_partition_gets_one_follower_in_the_reading_idc_and_keeps_its_leader() -> None:
    snap = _all_in_idc_a()
    plan = plan_read_local(snap, {"orders": {"idc-b": 5 * MB}, "quiet": {"idc-b": 10.0}},
                           ReadLocalOptions(threshold=MB))
    assert check_plan(snap, plan) == []
    assert {m.topic for m in plan.moves} == {"orders"}  # quiet is below the threshold
    after = apply_plan(snap, plan)
    for p in after.index.topic_by_name["orders"].partitions:
        before = snap.index.partition_by_id[p.id]
        assert _idcs(snap, p.replicas) == {"idc-a": 2, "idc-b": 1}
        assert p.leader == before.leader and p.leader in p.replicas
        assert len(set(p.replicas) - set(before.replicas)) == 1  # exactly one replica copied
    # the two idc-b brokers share the new replicas (lowest projected load first)
    assert Counter(b for m in plan.moves for b in m.replicas if b in (4, 5)) == {4: 2, 5: 2}
    assert any("idc-b: 4" in n for n in plan.notes)


def test_a_placement_policy_that_pins_every_replica_is_named_not_broken() -> None:
    snap = _all_in_idc_a(placement={"idc-a": 3})
    plan = plan_read_local(snap, {"orders": {"idc-b": 5 * MB}}, ReadLocalOptions(threshold=MB))
    assert plan.moves == ()
    assert any("cannot get a local replica" in n and "orders-0->idc-b" in n for n in plan.notes)


def test_a_policy_with_room_lets_the_follower_move() -> None:
    snap = _all_in_idc_a(placement={"idc-a": 2})
    plan = plan_read_local(snap, {"orders": {"idc-b": 5 * MB}}, ReadLocalOptions(threshold=MB))
    assert len(plan.moves) == 4 and check_plan(snap, plan) == []


def test_rf1_and_already_local_partitions_are_left_alone() -> None:
    snap = _all_in_idc_a(rf=1)
    plan = plan_read_local(snap, {"orders": {"idc-b": 5 * MB}}, ReadLocalOptions(threshold=MB))
    assert plan.moves == () and any("RF 1" in n for n in plan.notes)
    snap3 = _all_in_idc_a()
    once = apply_plan(snap3, plan_read_local(snap3, {"orders": {"idc-b": 5 * MB}}, ReadLocalOptions(threshold=MB)))
    again = plan_read_local(once, {"orders": {"idc-b": 5 * MB, "idc-a": 5 * MB}}, ReadLocalOptions(threshold=MB))
    assert again.moves == ()  # idempotent: every reading IDC already holds a replica, none is taken away


def test_bounds_are_held_and_deterministic() -> None:
    snap = _all_in_idc_a()
    opts = ReadLocalOptions(bounds=Bounds(max_partitions=2), threshold=MB)
    plan = plan_read_local(snap, {"orders": {"idc-b": 5 * MB}}, opts)
    assert len(plan.moves) == 2 and check_plan(snap, plan, opts.bounds.check_limits()) == []
    assert dump_plan(plan) == dump_plan(plan_read_local(snap, {"orders": {"idc-b": 5 * MB}}, opts))


def test_registry_kind_validates_params() -> None:
    snap = _all_in_idc_a()
    plan = PLANNERS["read-local"](snap, {"demand": {"orders": {"idc-b": 2e6}}, "threshold": 1e6})
    assert plan.kind == "read-local" and len(plan.moves) == 4
    with pytest.raises(TypeError):
        PLANNERS["read-local"](snap, {"demand": {"orders": ["idc-b"]}})
    with pytest.raises(TypeError):
        PLANNERS["read-local"](snap, {"threshold": 1})
    with pytest.raises(PlannerError):
        plan_read_local(snap, {}, ReadLocalOptions(threshold=float("nan")))
