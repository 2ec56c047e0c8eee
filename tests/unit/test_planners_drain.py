"""Drain and restore: nothing left on drained brokers, leadership first, the exact assignment back."""

from __future__ import annotations

from dataclasses import replace

import pytest

from domain import Topic, apply_plan, check_plan
from domain.spread import rack_duplicates
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import Bounds, DrainOptions, PlannerError, plan_drain, plan_restore
from tests.support.planner_cases import assert_valid

SPEC = GeneratorSpec(brokers=16, disks_per_broker=3, partitions=500, seed=13, idcs=("idc-a", "idc-b"),
                     pools={"shared": 0.75, "pay": 0.25})


def test_drain_leaves_no_replica_or_leadership_on_drained_brokers() -> None:
    snap = generate_snapshot(SPEC)
    drained = [1, 6]
    plan = plan_drain(snap, drained)
    after = assert_valid(snap, plan)
    assert all(b not in drained for p in after.index.partitions for b in p.replicas)
    assert all(p.leader not in drained for p in after.index.partitions)
    led = {p.id for p in snap.index.partitions if p.leader in drained}
    assert {c.id for c in plan.leaders} == led  # leadership moves explicitly, ahead of the data
    for change in plan.leaders:
        assert change.leader in snap.index.partition_by_id[change.id].replicas  # an existing replica
    for p in after.index.partitions:  # the planned leader is the preferred (first) replica
        if p.id in led:
            assert p.replicas[0] == p.leader
    pool = {b.id: b.pool for b in snap.brokers}
    for move in plan.moves:  # replacements stay in the topic's pool
        assert {pool[b] for b in move.replicas} == {snap.index.topic_by_name[move.topic].pool}


def test_restore_returns_the_exact_previous_assignment() -> None:
    snap = generate_snapshot(SPEC)
    drained = [3, 4]
    during = assert_valid(snap, plan_drain(snap, drained))
    restore = plan_restore(during, snap, drained)
    back = assert_valid(during, restore)
    touched = [p for p in snap.index.partitions if any(b in drained for b in p.replicas)]
    assert touched
    for p in touched:
        now = back.index.partition_by_id[p.id]
        assert (now.replicas, now.log_dirs, now.leader) == (p.replicas, p.log_dirs, p.leader)
    assert not [n for n in restore.notes if "not restored" in n]


def test_bounded_drain_says_what_stays_and_converges_when_repeated() -> None:
    snap = generate_snapshot(SPEC)
    options = DrainOptions(bounds=Bounds(max_partitions=20))
    current = snap
    for _ in range(30):
        plan = plan_drain(current, [2], options)
        assert plan.summary is not None and plan.summary.partitions_moved <= 20
        current = assert_valid(current, plan)
        if not any("stay on drained brokers" in n for n in plan.notes):
            break
    assert all(2 not in p.replicas for p in current.index.partitions)


def test_unknown_or_missing_brokers_are_clear_errors() -> None:
    snap = generate_snapshot(SPEC)
    with pytest.raises(PlannerError, match="unknown broker"):
        plan_drain(snap, [99])
    with pytest.raises(PlannerError, match="no broker"):
        plan_drain(snap, [])
    with pytest.raises(PlannerError, match="unknown broker"):
        plan_restore(snap, snap, [0])


def test_restore_skips_partitions_that_changed_shape() -> None:
    snap = generate_snapshot(GeneratorSpec(brokers=8, disks_per_broker=2, partitions=60, seed=3))
    during = apply_plan(snap, plan_drain(snap, [5]))
    gone = snap.topics[0].name
    shrunk = type(during)(cluster=during.cluster, taken_at=during.taken_at, brokers=during.brokers,
                          topics=tuple(t for t in during.topics if t.name != gone))
    plan = plan_restore(shrunk, snap, [5])
    assert_valid(shrunk, plan)
    had = any(5 in p.replicas for p in snap.topics[0].partitions)
    assert (had and any("no longer exists" in n for n in plan.notes)) or not had


def test_restore_is_exact_where_the_recorded_placement_broke_rack_spread() -> None:
    """Partitions recorded with two replicas in one rack (placement broke a rule that came later) come back
    exactly as they were, with a note — not refused (the issue: 657 of 6,489 were)."""
    snap = generate_snapshot(GeneratorSpec(brokers=12, disks_per_broker=2, partitions=300, seed=7,
                                           idcs=("idc-a",), racks_per_idc=3))
    place = {b.id: (b.idc, b.rack) for b in snap.brokers}
    by_rack: dict[tuple[str, str], list[int]] = {}
    for b in snap.brokers:
        by_rack.setdefault(place[b.id], []).append(b.id)
    twins = next(ids for ids in by_rack.values() if len(ids) >= 2)
    # the recorded state: partitions moved so two replicas share a rack (as an older placement left them)
    recorded = snap
    doubled = [p for p in snap.index.partitions if twins[0] in p.replicas and twins[1] not in p.replicas][:10]
    changed = {p.id: replace(p, replicas=tuple(twins[1] if b != twins[0] and k == (1 if p.replicas[0] == twins[0]
                                                                                     else 0) else b
                                              for k, b in enumerate(p.replicas)))
               for p in doubled}
    changed = {pid: replace(p, leader=p.replicas[0]) for pid, p in changed.items()}
    recorded = replace(snap, topics=tuple(Topic(t.name, tuple(changed.get(p.id, p) for p in t.partitions), t.pool)
                                          for t in snap.topics))
    assert all(rack_duplicates(changed[p.id].replicas, place) == 1 for p in doubled)
    drained = [twins[0]]
    # during the drain those partitions' replicas on twins[0] went to a broker of another rack (the drain fixed
    # the spread); restoring puts the second replica back into twins[1]'s rack
    other = next(b.id for b in snap.brokers if place[b.id] != place[twins[0]])
    moved = {p.id: replace(changed[p.id], replicas=tuple(other if b == twins[0] else b
                                                         for b in changed[p.id].replicas))
             for p in doubled if other not in changed[p.id].replicas}
    moved = {pid: replace(p, leader=p.replicas[0]) for pid, p in moved.items()}
    assert len(moved) >= 5
    during = replace(recorded, topics=tuple(Topic(t.name, tuple(moved.get(p.id, p) for p in t.partitions), t.pool)
                                            for t in recorded.topics))
    restore = plan_restore(during, recorded, drained)
    back = apply_plan(during, restore)
    touched = [p for p in recorded.index.partitions if p.id in moved]
    for p in touched:
        now = back.index.partition_by_id[p.id]
        assert (now.replicas, now.log_dirs) == (p.replicas, p.log_dirs)  # 100% exact
    assert not [n for n in restore.notes if "not restored" in n]
    assert any("restored exactly" in n and "rack" in n for n in restore.notes), restore.notes
    rec = {p.id: p.replicas for p in touched}
    assert check_plan(during, restore, recorded=rec) == []
    assert any(v.code == "rack-spread" for v in check_plan(during, restore))  # and only as a restore
