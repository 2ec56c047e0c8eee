"""Pre-allocation of new topics (and its checker) and pool grow / shrink."""

from __future__ import annotations

from collections import Counter

import pytest

from domain import Partition, Topic, check_new_topic, pool_stats
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import (
    NewTopic,
    PlannerError,
    PreallocateOptions,
    plan_pool_grow,
    plan_pool_shrink,
    plan_preallocation,
)
from planners.preallocate import with_topic
from tests.support.planner_cases import assert_valid

SPEC = GeneratorSpec(brokers=16, disks_per_broker=3, partitions=300, seed=17, idcs=("idc-a", "idc-b"),
                     pools={"shared": 0.75, "free": 0.25})


def test_preallocation_spreads_over_least_loaded_valid_disks() -> None:
    snap = generate_snapshot(SPEC)
    request = NewTopic("new", partitions=12, replication_factor=3, bytes_in_per_s=120e6,
                       placement={"idc-a": 2, "idc-b": 1})
    result = plan_preallocation(snap, request)
    assert check_new_topic(snap, result.topic) == []
    pool = {b.id: b.pool for b in snap.brokers}
    idc = {b.id: b.idc for b in snap.brokers}
    for p in result.topic.partitions:
        assert {pool[b] for b in p.replicas} == {"shared"}
        assert Counter(idc[b] for b in p.replicas) == {"idc-a": 2, "idc-b": 1}
        assert idc[p.replicas[0]] == "idc-a" and p.leader == p.replicas[0]
    per_broker = Counter(b for p in result.topic.partitions for b in p.replicas)
    for name, share in (("idc-a", 24), ("idc-b", 12)):  # by load first, but never piled on a few brokers
        counts = [per_broker[b.id] for b in snap.brokers if b.pool == "shared" and b.idc == name]
        assert sum(1 for c in counts if c) >= len(counts) // 2
        assert max(counts) <= -(-2 * share // len(counts))  # at most twice the IDC's even share
    leaders = Counter(p.replicas[0] for p in result.topic.partitions)  # leaders spread too: <= 2 x the even share
    assert max(leaders.values()) <= 4 and len(leaders) >= 3
    assert [m.replicas for m in result.plan.moves] == [p.replicas for p in result.topic.partitions]
    assert any("--replica-assignment" in n for n in result.plan.notes)
    after = with_topic(snap, result.topic)
    assert pool_stats(after)["shared"].mean_util > pool_stats(snap)["shared"].mean_util
    assert plan_preallocation(snap, request).plan == result.plan  # deterministic


def test_preallocation_uses_the_traffic_model_and_rejects_the_impossible() -> None:
    snap = generate_snapshot(SPEC)
    model = PreallocateOptions(traffic_model={"modelled": 10e6})
    assert plan_preallocation(snap, NewTopic("modelled", 4), model).topic.partitions[0].bytes_in_per_s == 2.5e6
    with pytest.raises(PlannerError, match="expected bytes-in"):
        plan_preallocation(snap, NewTopic("unmodelled", 4))
    with pytest.raises(PlannerError, match="already exists"):
        plan_preallocation(snap, NewTopic(snap.topics[0].name, 4, bytes_in_per_s=1.0))
    with pytest.raises(PlannerError, match="needs more replicas"):
        plan_preallocation(snap, NewTopic("x", 4, 2, 1.0, placement={"idc-a": 2, "idc-b": 1}))
    with pytest.raises(PlannerError, match="no valid disk"):
        plan_preallocation(snap, NewTopic("x", 4, 3, 1.0, pool="nope"))


def test_check_new_topic_names_every_broken_rule() -> None:
    snap = generate_snapshot(SPEC)
    free = next(b.id for b in snap.brokers if b.pool == "free")
    a, b = (x.id for x in snap.brokers[:2])
    bad = Topic("bad", pool="shared", placement={"idc-b": 3}, partitions=(
        Partition("bad", 0, (a, a, free), a, (a,), ("/data1", "/data2", "/data1")),
        Partition("bad", 1, (a, 999, b), a, (a,), ("/data1", "/data1", "/nope")),
        Partition("bad", 2, (a,), a, (a,), ("/data1",)),
    ))
    codes = {v.code for v in check_new_topic(snap, bad)}
    assert {"duplicate-broker", "pool-isolation", "idc-placement", "unknown-broker", "unknown-log-dir",
            "replication-factor"} <= codes
    exists = Topic(snap.topics[0].name, partitions=())
    assert [v.code for v in check_new_topic(snap, exists)] == ["topic-exists"]


def test_pool_grow_takes_free_brokers_and_fills_them() -> None:
    snap = generate_snapshot(SPEC)
    growth = plan_pool_grow(snap, "shared", 2)
    assert len(growth.brokers) == 2
    assert {snap.index.broker_by_id[b].pool for b in growth.brokers} == {"free"}
    assert {growth.snapshot.index.broker_by_id[b].pool for b in growth.brokers} == {"shared"}
    assert len({snap.index.broker_by_id[b].idc for b in growth.brokers}) == 2  # spread over IDCs
    after = assert_valid(growth.snapshot, growth.plan)
    assert growth.plan.kind == "pool-grow"
    assert all(after.index.broker_load[b].replicas > 0 for b in growth.brokers)
    with pytest.raises(PlannerError, match="free pool"):
        plan_pool_grow(snap, "shared", 99)


def test_pool_shrink_drains_the_cheapest_brokers() -> None:
    snap = generate_snapshot(SPEC)
    plan = plan_pool_shrink(snap, "shared", count=2)
    after = assert_valid(snap, plan)
    drained = [int(x) for x in plan.notes[-1].split("[")[1].split("]")[0].split(",")]
    assert len(drained) == 2
    assert all(not set(drained) & set(p.replicas) for p in after.index.partitions)
    with pytest.raises(PlannerError, match="not in pool"):
        plan_pool_shrink(snap, "shared", brokers=[b.id for b in snap.brokers if b.pool == "free"][:1])
    with pytest.raises(PlannerError, match="cannot lose"):
        plan_pool_shrink(snap, "shared", count=11)
