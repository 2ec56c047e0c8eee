"""Goal: move topics to a new IDC placement policy (e.g. idc-a:3 -> idc-b:3) in safe steps.

The final assignment keeps every replica the new policy can keep and replaces the others with
replicas in the IDCs that lack them, each on the valid disk with the lowest median historical load
(every hard goal held: pool, alive, rack spread, capacity). The way there is cut into steps: in one
step a partition replaces at most ``RF - min_insync`` replicas, so at least ``min_insync`` replicas
that were in sync before the step stay in its replica set throughout — never below the minimum, even
counting every replica being removed as lost. The leader's replica is replaced last. Steps are
further split to respect the byte / partition bounds per plan.

Every step is a plan checked by :func:`check_plan` against the snapshot the previous steps leave,
with the new policy in force (set the policy before executing step 1). Deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from domain import ClusterSnapshot, Partition, PartitionMove, Plan, apply_plan
from planners.workspace import Bounds, PlannerError, Workspace, finish_plan

KIND = "migrate-idc"


@dataclass(frozen=True, slots=True)
class MigrationOptions:
    """``min_insync``: in-sync replicas every partition keeps during every step."""

    bounds: Bounds = field(default_factory=Bounds)
    min_insync: int = 2


def with_placement(snapshot: ClusterSnapshot, topics: Sequence[str], placement: Mapping[str, int]) -> ClusterSnapshot:
    """``snapshot`` with ``placement`` set as the policy of ``topics`` (the operator's policy change)."""
    names = set(topics)
    return replace(snapshot, topics=tuple(replace(t, placement=dict(placement)) if t.name in names else t
                                          for t in snapshot.topics))


def select_topics(snapshot: ClusterSnapshot, topics: Sequence[str] = (), pool: str | None = None) -> list[str]:
    """The topics named, or every topic of ``pool``; raises :class:`PlannerError` for unknown names."""
    known = {t.name for t in snapshot.topics}
    unknown = sorted(set(topics) - known)
    if unknown:
        raise PlannerError(f"unknown topic(s): {unknown}")
    chosen = set(topics) | ({t.name for t in snapshot.topics if t.pool == pool} if pool is not None else set())
    if not chosen:
        raise PlannerError("no topic selected (give topic names or a pool that has topics)")
    return [t.name for t in snapshot.topics if t.name in chosen]


def plan_idc_migration(snapshot: ClusterSnapshot, placement: Mapping[str, int], topics: Sequence[str] = (),
                       pool: str | None = None, options: MigrationOptions | None = None) -> list[Plan]:
    """The steps (plans, in order) that take the selected topics to ``placement``."""
    options = options or MigrationOptions()
    names = select_topics(snapshot, topics, pool)
    idcs = {b.idc for b in snapshot.brokers}
    bad = sorted(set(placement) - idcs)
    if bad or any(n < 1 for n in placement.values()):
        raise PlannerError(f"placement {dict(placement)}: unknown IDC(s) {bad} or counts below 1")
    staged = with_placement(snapshot, names, placement)
    ws = Workspace(staged, Bounds(capacity_headroom=options.bounds.capacity_headroom))
    changes: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    unplaced: list[str] = []
    for name in names:
        topic = ws.index.topic_by_name[name]
        for p in topic.partitions:
            rf = len(p.replicas)
            if sum(placement.values()) > rf:
                raise PlannerError(f"placement needs {sum(placement.values())} replicas, {name} has RF {rf}")
            if rf - options.min_insync < 1:
                raise PlannerError(f"min_insync {options.min_insync} leaves no replica free to move at RF {rf}")
            steps = _plan_partition(ws, p, placement)
            if steps is None:
                unplaced.append(f"{p.topic}-{p.partition}")
            elif steps:
                changes[p.id] = steps
    return _steps(staged, ws, changes, options, unplaced, placement)


def _plan_partition(ws: Workspace, p: Partition, placement: Mapping[str, int]) -> list[tuple[int, int, str]] | None:
    """Plan ``p``'s final assignment in ``ws``; returns its changes (position, broker, dir), leader last."""
    need = dict(placement)
    free = len(p.replicas) - sum(placement.values())
    keep = []
    for k, b in enumerate(p.replicas):
        idc = ws.topo.idc[b]
        if need.get(idc, 0) > 0 and ws.topo.alive[b]:
            need[idc] -= 1
            keep.append(k)
        elif free > 0 and ws.topo.alive[b]:
            free -= 1
            keep.append(k)
    out = [k for k in range(len(p.replicas)) if k not in keep]
    pool = ws.index.topic_by_name[p.topic].pool
    out.sort(key=lambda k: (p.replicas[k] == p.leader, k))
    changes = []
    for k in out:
        lacking = next((i for i in sorted(need) if need[i] > 0), None)
        group = ws.group(pool, lacking) if lacking is not None else ws.group(pool)
        target = ws.best_target(p, k, group)
        if target is None:
            return None
        ws.move_replica(p, k, target)
        if lacking is not None:
            need[lacking] -= 1
        b, d = ws.disk_ids[target]
        changes.append((k, b, d))
    return changes


def _steps(staged: ClusterSnapshot, ws: Workspace, changes: Mapping[tuple[str, int], list[tuple[int, int, str]]],
           options: MigrationOptions, unplaced: list[str], placement: Mapping[str, int]) -> list[Plan]:
    per_step = {pid: len(ws.partition(pid).replicas) - options.min_insync for pid in changes}
    phases = max((-(-len(c) // per_step[pid]) for pid, c in changes.items()), default=0)
    drafts: list[list[PartitionMove]] = []
    state = {pid: (ws.partition(pid).replicas, ws.partition(pid).log_dirs) for pid in changes}
    for phase in range(phases):
        batch: list[PartitionMove] = []
        bytes_, parts = 0, 0
        for pid in sorted(changes):
            todo = changes[pid][phase * per_step[pid]:(phase + 1) * per_step[pid]]
            if not todo:
                continue
            replicas, dirs = list(state[pid][0]), list(state[pid][1])
            for k, b, d in todo:
                replicas[k], dirs[k] = b, d
            size = ws.partition(pid).size_bytes * len(todo)
            bounds = options.bounds
            if batch and ((bounds.max_bytes is not None and bytes_ + size > bounds.max_bytes)
                          or (bounds.max_partitions is not None and parts + 1 > bounds.max_partitions)):
                drafts.append(batch)
                batch, bytes_, parts = [], 0, 0
            if bounds.max_bytes is not None and size > bounds.max_bytes:
                raise PlannerError(f"{pid[0]}-{pid[1]} alone copies {size} bytes, above the bound {bounds.max_bytes}")
            batch.append(PartitionMove(pid[0], pid[1], tuple(replicas), tuple(dirs)))
            state[pid] = (tuple(replicas), tuple(dirs))
            bytes_ += size
            parts += 1
        if batch:
            drafts.append(batch)
    plans = []
    current = staged
    for n, moves in enumerate(drafts, start=1):
        notes = [f"step {n} of {len(drafts)}: every partition keeps at least {options.min_insync} in-sync replicas "
                 f"at every instant; new policy {dict(placement)} must be set before step 1"]
        if unplaced and n == 1:
            notes.append(f"{len(unplaced)} partition(s) found no valid target and are left: "
                         + ", ".join(unplaced[:12]))
        plan = finish_plan(current, Plan(cluster=staged.cluster, kind=KIND, moves=tuple(moves)), notes, options.bounds)
        plans.append(plan)
        current = apply_plan(current, plan)
    if not plans and unplaced:
        raise PlannerError(f"no partition could be placed under {dict(placement)}: " + ", ".join(unplaced[:12]))
    return plans


def migration_done(snapshot: ClusterSnapshot, topics: Sequence[str], placement: Mapping[str, int]) -> bool:
    """True when every partition of ``topics`` meets ``placement`` exactly as a minimum per IDC."""
    idc = {b.id: b.idc for b in snapshot.brokers}
    for t in snapshot.topics:
        if t.name not in topics:
            continue
        for p in t.partitions:
            counts: dict[str, int] = {}
            for b in p.replicas:
                counts[idc[b]] = counts.get(idc[b], 0) + 1
            if any(counts.get(i, 0) < n for i, n in placement.items()):
                return False
    return True


__all__ = ["KIND", "MigrationOptions", "migration_done", "plan_idc_migration", "select_topics",
           "with_placement"]
