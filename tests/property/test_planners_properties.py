"""Hypothesis properties of every planner over small generated snapshots of many shapes.

Every plan passes the shared invariant checker; the goal a planner optimises never gets worse; the
same input (also after a dump/parse round trip) gives a byte-identical plan.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import (
    apply_plan,
    check_new_topic,
    check_plan,
    dump_plan,
    dump_snapshot,
    parse_snapshot,
    pool_stats,
)
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import (
    BalanceOptions,
    Bounds,
    MigrationOptions,
    NewTopic,
    PlannerError,
    plan_drain,
    plan_idc_migration,
    plan_leaders,
    plan_preallocation,
    plan_rebalance,
    plan_restore,
)
from planners.disk_balance import _plan_rebalance
from planners.idc_migration import migration_done, with_placement
from planners.leaders import leader_stats

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def specs(draw: st.DrawFn) -> GeneratorSpec:
    n_idc = draw(st.integers(1, 3))
    return GeneratorSpec(
        brokers=draw(st.integers(3, 14)),
        disks_per_broker=draw(st.integers(1, 4)),
        partitions=draw(st.integers(0, 160)),
        replication_factor=draw(st.integers(1, 3)),
        skew=draw(st.sampled_from(["zipf", "uniform"])),
        seed=draw(st.integers(0, 2**31)),
        idcs=tuple(f"idc-{i}" for i in range(n_idc)),
        racks_per_idc=draw(st.integers(1, 3)),
        pools=draw(st.sampled_from([{"shared": 1.0}, {"shared": 0.6, "pay": 0.4},
                                    {"shared": 0.7, "free": 0.3}])),
        dead_brokers=draw(st.integers(0, 1)),
        nvme_fraction=draw(st.sampled_from([0.0, 0.3, 1.0])),
    )


@st.composite
def multi_idc_specs(draw: st.DrawFn) -> GeneratorSpec:
    """Shapes where an IDC migration is possible: two or three IDCs, RF 2-3, enough brokers."""
    n_idc = draw(st.integers(2, 3))
    return GeneratorSpec(
        brokers=draw(st.integers(3 * n_idc, 15)), disks_per_broker=draw(st.integers(1, 3)),
        partitions=draw(st.integers(1, 120)), replication_factor=draw(st.integers(2, 3)),
        seed=draw(st.integers(0, 2**31)), idcs=tuple(f"idc-{i}" for i in range(n_idc)),
        racks_per_idc=draw(st.integers(1, 3)), pools=draw(st.sampled_from([{"shared": 1.0},
                                                                           {"shared": 0.8, "free": 0.2}])),
        nvme_fraction=draw(st.sampled_from([0.0, 0.3])),
    )


bounds_st = st.builds(Bounds, max_bytes=st.none() | st.integers(0, 10**13),
                      max_partitions=st.none() | st.integers(0, 60),
                      capacity_headroom=st.sampled_from([0.0, 0.1, 0.45]))


@SETTINGS
@given(specs(), bounds_st)
def test_rebalance_is_valid_never_worse_and_deterministic(spec: GeneratorSpec, bounds: Bounds) -> None:
    snap = generate_snapshot(spec)
    plan = plan_rebalance(snap, BalanceOptions(bounds=bounds))
    assert check_plan(snap, plan, bounds.check_limits()) == []
    before, after = pool_stats(snap), pool_stats(apply_plan(snap, plan))
    for pool in before:
        assert after[pool].max_util <= before[pool].max_util + 1e-9
    text = dump_plan(plan)
    assert dump_plan(plan_rebalance(snap, BalanceOptions(bounds=bounds))) == text
    again = parse_snapshot(dump_snapshot(snap))  # equal input from the file gives the same bytes
    assert dump_plan(plan_rebalance(again, BalanceOptions(bounds=bounds))) == text
    on_dead = [p for p in snap.index.partitions if any(not snap.index.broker_by_id[b].is_alive for b in p.replicas)]
    assert not on_dead or any("self-healing" in n for n in plan.notes)


@SETTINGS
@given(specs(), st.booleans(), st.sampled_from([0.0, 0.45]))
def test_the_compiled_shedding_loop_plans_what_the_python_loop_plans(spec: GeneratorSpec, evacuate: bool,
                                                                      headroom: float) -> None:
    """planners/shed_kernel.py is an exact port: byte-identical plans, and no case of these snapshots falls back."""
    snap = generate_snapshot(spec)
    options = BalanceOptions(evacuate_dead=evacuate, bounds=Bounds(capacity_headroom=headroom))
    compiled = _plan_rebalance(snap, options, compiled=True)
    assert dump_plan(compiled) == dump_plan(_plan_rebalance(snap, options, compiled=False))


@SETTINGS
@given(specs(), bounds_st)
def test_rebalance_evacuating_dead_brokers_is_valid_and_leaves_none_silently(spec: GeneratorSpec,
                                                                             bounds: Bounds) -> None:
    snap = generate_snapshot(spec)
    plan = plan_rebalance(snap, BalanceOptions(bounds=bounds, evacuate_dead=True))
    assert check_plan(snap, plan, bounds.check_limits()) == []
    after = apply_plan(snap, plan)
    left = [p for p in after.index.partitions if any(not after.index.broker_by_id[b].is_alive for b in p.replicas)]
    assert not left or any("no valid alive target" in n for n in plan.notes)
    assert dump_plan(plan_rebalance(snap, BalanceOptions(bounds=bounds, evacuate_dead=True))) == dump_plan(plan)


@SETTINGS
@given(specs())
def test_leader_balancing_is_valid_moves_no_data_and_never_worse(spec: GeneratorSpec) -> None:
    snap = generate_snapshot(spec)
    plan = plan_leaders(snap)
    assert check_plan(snap, plan) == []
    assert plan.summary is not None and plan.summary.bytes_to_move == 0 and plan.summary.replicas_moved == 0
    after = apply_plan(snap, plan)
    for pool in sorted({b.pool for b in snap.brokers}):
        b_bytes, b_count = leader_stats(snap, pool)
        a_bytes, a_count = leader_stats(after, pool)
        assert a_bytes <= b_bytes + 1e-6 and a_count <= b_count
    before_disks, after_disks = pool_stats(snap), pool_stats(after)
    for pool in before_disks:
        assert after_disks[pool].max_util <= before_disks[pool].max_util + 1e-9
    assert dump_plan(plan_leaders(snap)) == dump_plan(plan)


@SETTINGS
@given(specs(), st.data())
def test_drain_then_restore_is_valid_and_round_trips(spec: GeneratorSpec, data: st.DataObject) -> None:
    snap = generate_snapshot(spec)
    ids = [b.id for b in snap.brokers]
    drained = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=2, unique=True))
    plan = plan_drain(snap, drained)
    assert check_plan(snap, plan) == []
    during = apply_plan(snap, plan)
    left = [p for p in during.index.partitions if set(p.replicas) & set(drained)]
    assert not left or any("stay on drained brokers" in n for n in plan.notes)
    assert dump_plan(plan_drain(snap, drained)) == dump_plan(plan)
    if left:
        return
    restore = plan_restore(during, snap, drained)
    assert check_plan(during, restore) == []
    back = apply_plan(during, restore)
    skipped = any("not restored" in n for n in restore.notes)
    for p in snap.index.partitions:
        if set(p.replicas) & set(drained) and not skipped:
            now = back.index.partition_by_id[p.id]
            assert (now.replicas, now.log_dirs) == (p.replicas, p.log_dirs)


@SETTINGS
@given(specs(), st.integers(1, 12), st.integers(1, 3), st.floats(0, 5e8))
def test_preallocation_is_valid_or_a_clear_refusal(spec: GeneratorSpec, parts: int, rf: int, rate: float) -> None:
    snap = generate_snapshot(spec)
    request = NewTopic("brand-new", partitions=parts, replication_factor=rf, bytes_in_per_s=rate)
    try:
        result = plan_preallocation(snap, request)
    except PlannerError as exc:
        assert str(exc)
        return
    assert check_new_topic(snap, result.topic) == []
    assert len(result.plan.moves) == parts
    assert all(len(set(p.replicas)) == rf for p in result.topic.partitions)


@SETTINGS
@given(multi_idc_specs(), st.data())
def test_idc_migration_steps_are_valid_keep_the_minimum_and_end_at_the_policy(spec: GeneratorSpec,
                                                                             data: st.DataObject) -> None:
    snap = generate_snapshot(spec)
    rf = {len(p.replicas) for p in snap.index.partitions}
    idcs = sorted({b.idc for b in snap.brokers})
    if not snap.topics or len(rf) != 1 or rf.pop() < 2 or len(idcs) < 2:
        return
    n = len(snap.topics[0].partitions[0].replicas)
    target = data.draw(st.sampled_from(idcs))
    other = data.draw(st.sampled_from([i for i in idcs if i != target]))
    split = data.draw(st.integers(1, n))
    policy = {target: split, **({other: n - split} if n - split else {})}
    min_insync = data.draw(st.integers(1, n - 1))
    pool = snap.topics[0].pool
    try:
        steps = plan_idc_migration(snap, policy, pool=pool, options=MigrationOptions(min_insync=min_insync))
    except PlannerError as exc:
        assert str(exc)
        return
    names = [t.name for t in snap.topics if t.pool == pool]
    current = with_placement(snap, names, policy)
    for step in steps:
        assert check_plan(current, step) == []
        for move in step.moves:
            kept = set(current.index.partition_by_id[move.id].replicas) & set(move.replicas)
            assert len(kept) >= min_insync
        current = apply_plan(current, step)
    if not any("no valid target" in note for step in steps for note in step.notes):
        assert migration_done(current, names, policy)
