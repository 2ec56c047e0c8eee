"""IDC migration: ends at the new policy; no step drops a partition below the in-sync minimum."""

from __future__ import annotations

from collections import Counter

import pytest

from domain import apply_plan, check_plan
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import Bounds, MigrationOptions, PlannerError, plan_idc_migration
from planners.idc_migration import migration_done, with_placement
from tests.support.planner_cases import MB, broker, disk, partition, snapshot_of, topic


def _all_in_idc_a():
    brokers = [broker(b, "idc-a", f"a-r{b}", disks=[disk("/data1"), disk("/data2")]) for b in (1, 2, 3)]
    brokers += [broker(b, "idc-b", f"b-r{b}", disks=[disk("/data1"), disk("/data2")]) for b in (4, 5, 6, 7)]
    parts = [partition(k, [1 + k % 3, 1 + (k + 1) % 3, 1 + (k + 2) % 3], ["/data1"] * 3, bytes_in=MB)
             for k in range(6)]
    return snapshot_of(brokers, [topic("orders", parts, placement={"idc-a": 3}), topic("other", [
        partition(0, [1, 2, 4], ["/data2"] * 3)])])


@pytest.mark.parametrize("min_insync", [1, 2])
def test_idc_a_to_idc_b_in_steps_that_keep_the_minimum(min_insync: int) -> None:
    snap = _all_in_idc_a()
    policy = {"idc-b": 3}
    steps = plan_idc_migration(snap, policy, ["orders"], options=MigrationOptions(min_insync=min_insync))
    assert len(steps) == -(-3 // (3 - min_insync))  # 3 replicas to replace, RF - min_insync per step
    current = with_placement(snap, ["orders"], policy)
    idc = {b.id: b.idc for b in snap.brokers}
    for step in steps:
        assert check_plan(current, step) == []
        for move in step.moves:
            before = current.index.partition_by_id[move.id]
            kept = set(before.replicas) & set(move.replicas)
            assert len(kept) >= min_insync  # in-sync copies that stay through the step
            assert len(set(move.replicas) - set(before.replicas)) <= 3 - min_insync
        current = apply_plan(current, step)
    assert migration_done(current, ["orders"], policy)
    for p in current.index.topic_by_name["orders"].partitions:
        assert Counter(idc[b] for b in p.replicas) == {"idc-b": 3}
        assert len({current.index.broker_by_id[b].rack for b in p.replicas}) == 3
    assert current.index.topic_by_name["other"].partitions == snap.index.topic_by_name["other"].partitions


def test_pool_wide_migration_of_generated_cluster_with_bounds() -> None:
    snap = generate_snapshot(GeneratorSpec(brokers=18, disks_per_broker=2, partitions=200, seed=4,
                                           idcs=("idc-a", "idc-b", "idc-c")))
    policy = {"idc-b": 2, "idc-c": 1}
    options = MigrationOptions(bounds=Bounds(max_partitions=50), min_insync=2)
    steps = plan_idc_migration(snap, policy, pool="shared", options=options)
    names = [t.name for t in snap.topics]
    current = with_placement(snap, names, policy)
    for step in steps:
        assert check_plan(current, step, options.bounds.check_limits()) == []
        assert step.summary is not None and step.summary.partitions_moved <= 50
        for move in step.moves:
            assert len(set(current.index.partition_by_id[move.id].replicas) & set(move.replicas)) >= 2
        current = apply_plan(current, step)
    assert migration_done(current, names, policy)


def test_impossible_requests_are_clear_errors() -> None:
    snap = _all_in_idc_a()
    with pytest.raises(PlannerError, match="unknown IDC"):
        plan_idc_migration(snap, {"idc-z": 3}, ["orders"])
    with pytest.raises(PlannerError, match="unknown topic"):
        plan_idc_migration(snap, {"idc-b": 3}, ["nope"])
    with pytest.raises(PlannerError, match="min_insync"):
        plan_idc_migration(snap, {"idc-b": 3}, ["orders"], options=MigrationOptions(min_insync=3))
    with pytest.raises(PlannerError, match="needs 4 replicas"):
        plan_idc_migration(snap, {"idc-b": 4}, ["orders"])
    assert plan_idc_migration(snap, {"idc-a": 3}, ["orders"]) == []  # already there
