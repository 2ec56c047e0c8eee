"""Hypothesis properties of the domain over generated snapshots of many shapes."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import (
    ContractError,
    PartitionMove,
    Plan,
    apply_plan,
    check_plan,
    dump_plan,
    dump_snapshot,
    parse_plan,
    parse_snapshot,
    pool_stats,
)
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners.disk_balance import BalanceOptions, plan_rebalance
from planners.workspace import Bounds

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def specs(draw: st.DrawFn) -> GeneratorSpec:
    brokers = draw(st.integers(3, 16))
    n_idc = draw(st.integers(1, 3))
    return GeneratorSpec(
        brokers=brokers,
        disks_per_broker=draw(st.integers(1, 4)),
        partitions=draw(st.integers(0, 150)),
        replication_factor=draw(st.integers(1, 3)),
        skew=draw(st.sampled_from(["zipf", "uniform"])),
        seed=draw(st.integers(0, 2**31)),
        idcs=tuple(f"idc-{i}" for i in range(n_idc)),
        racks_per_idc=draw(st.integers(1, 3)),
        pools=draw(st.sampled_from([{"shared": 1.0}, {"shared": 0.6, "pay": 0.4}])),
        dead_brokers=draw(st.integers(0, 1)),
        nvme_fraction=draw(st.sampled_from([0.0, 0.3, 1.0])),
    )


@SETTINGS
@given(specs())
def test_dump_parse_round_trip_is_identity(spec: GeneratorSpec) -> None:
    text = dump_snapshot(generate_snapshot(spec))
    assert dump_snapshot(parse_snapshot(text)) == text


@SETTINGS
@given(specs())
def test_total_disk_load_matches_the_definition(spec: GeneratorSpec) -> None:
    snap = generate_snapshot(spec)
    index = snap.index
    expected = sum(len(p.replicas) * p.bytes_in_per_s + (p.disk_read_bytes_per_s if p.leader is not None else 0)
                   for p in index.partitions)
    assert sum(index.disk_load.values()) == pytest.approx(expected, rel=1e-9, abs=1e-6)


@SETTINGS
@given(specs(), st.integers(0, 300))
def test_rebalance_plans_are_valid_deterministic_and_never_worse(spec: GeneratorSpec, max_moves: int) -> None:
    options = BalanceOptions(bounds=Bounds(max_partitions=max_moves))
    snap = generate_snapshot(spec)
    plan = plan_rebalance(snap, options)
    assert check_plan(snap, plan) == []
    assert dump_plan(plan_rebalance(snap, options)) == dump_plan(plan)
    before, after = pool_stats(snap), pool_stats(apply_plan(snap, plan))
    for pool in before:
        assert after[pool].max_util <= before[pool].max_util + 1e-9
    assert parse_plan(dump_plan(plan)) == plan


@SETTINGS
@given(specs())
def test_apply_plan_conserves_partitions_and_bytes(spec: GeneratorSpec) -> None:
    snap = generate_snapshot(spec)
    after = apply_plan(snap, plan_rebalance(snap))
    assert len(after.index.partitions) == len(snap.index.partitions)
    assert all(len(a.replicas) == len(b.replicas) for a, b in zip(after.index.partitions, snap.index.partitions,
                                                                     strict=True))
    used = [sum(d.used_bytes for b in s.brokers for d in b.disks) for s in (snap, after)]
    assert used[0] == used[1]


@SETTINGS
@given(specs(), st.data())
def test_moving_a_replica_onto_a_dead_or_unknown_broker_is_always_caught(spec: GeneratorSpec,
                                                                       data: st.DataObject) -> None:
    snap = generate_snapshot(spec)
    parts = [p for p in snap.index.partitions]
    if not parts:
        return
    p = data.draw(st.sampled_from(parts))
    dead = [b.id for b in snap.brokers if not b.is_alive and b.id not in p.replicas]
    target = data.draw(st.sampled_from([*dead, 10_000]))
    replicas = (target, *p.replicas[1:])
    plan = Plan(cluster=snap.cluster, kind="x", moves=(PartitionMove(p.topic, p.partition, replicas,
                                                                     (None,) * len(replicas)),))
    codes = {v.code for v in check_plan(snap, plan)}
    assert codes & {"target-not-alive", "unknown-broker"}


FIELDS = ["format", "cluster", "taken_at", "brokers"]
BROKER_FIELDS = ["id", "host", "port", "idc", "rack"]
DISK_FIELDS = ["path", "kind", "capacity_bytes", "max_bytes_per_s"]


@SETTINGS
@given(st.data())
def test_any_missing_required_field_is_named(data: st.DataObject) -> None:
    doc = json.loads(dump_snapshot(generate_snapshot(GeneratorSpec(brokers=4, disks_per_broker=2, partitions=10))))
    level = data.draw(st.sampled_from(["top", "broker", "disk"]))
    if level == "top":
        field = data.draw(st.sampled_from(FIELDS))
        del doc[field]
        path = f"$.{field}"
    elif level == "broker":
        i, field = data.draw(st.integers(0, 3)), data.draw(st.sampled_from(BROKER_FIELDS))
        del doc["brokers"][i][field]
        path = f"$.brokers[{i}].{field}"
    else:
        i, j = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 1))
        field = data.draw(st.sampled_from(DISK_FIELDS))
        del doc["brokers"][i]["disks"][j][field]
        path = f"$.brokers[{i}].disks[{j}].{field}"
    with pytest.raises(ContractError) as info:
        parse_snapshot(json.dumps(doc))
    assert [str(p) for p in info.value.problems] == [f"{path}: required field is missing"]
