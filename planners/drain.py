"""Goals: drain (decommission) a set of brokers, and restore (recommission) them from a recorded assignment.

Drain: first every leadership on a drained broker goes to another alive in-sync replica (the one
leading least), then every replica on a drained broker is replaced by one on the valid disk with the
lowest median historical load — same IDC first, every hard goal held, drained brokers never targets.
The new leader is put first in the replica list so a preferred election keeps it. Bounded by bytes /
partitions per run: what does not fit stays, and the notes say how much (run the drain again).

Restore: every partition that had a replica on the restored brokers in the recorded snapshot gets
its recorded replicas, log dirs and leader back — exactly — unless that would break a hard goal now
(broker not alive, log dir gone, replication factor changed, capacity), which the notes name.

Deterministic (snapshot order). O(replicas on drained brokers x disks of the pool).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

from domain import ClusterSnapshot, Partition, Plan
from planners.workspace import Bounds, PlannerError, Workspace

KIND_DRAIN = "drain"
KIND_RESTORE = "restore"
MAX_NOTES = 12


@dataclass(frozen=True, slots=True)
class DrainOptions:
    """Bounds of one drain / restore plan."""

    bounds: Bounds = field(default_factory=Bounds)


def _check_brokers(snapshot: ClusterSnapshot, brokers: Collection[int]) -> set[int]:
    known = {b.id for b in snapshot.brokers}
    unknown = sorted(set(brokers) - known)
    if unknown:
        raise PlannerError(f"unknown broker(s): {unknown}")
    if not brokers:
        raise PlannerError("no broker given")
    return set(brokers)


def plan_drain(snapshot: ClusterSnapshot, brokers: Collection[int], options: DrainOptions | None = None,
               *, kind: str = KIND_DRAIN) -> Plan:
    """A plan that moves every leadership and replica off ``brokers`` (as far as bounds and constraints allow)."""
    options = options or DrainOptions()
    drained = _check_brokers(snapshot, brokers)
    ws = Workspace(snapshot, options.bounds)
    notes: list[str] = []
    leader_count = Counter(p.leader for p in ws.index.partitions if p.leader is not None)
    touched = [p for p in ws.index.partitions if any(b in drained for b in p.replicas)]

    no_leader = []
    for p in touched:  # 1. leadership away first
        if p.leader not in drained:
            continue
        options_ = [b for b in p.replicas if b not in drained and ws.topo.alive.get(b, False) and b in p.isr]
        if not options_:
            no_leader.append(p)
            continue
        new = min(options_, key=lambda b: (leader_count[b], b))
        ws.set_leader(p, new, explicit=True)
        leader_count[new] += 1
        leader_count[p.leader] -= 1

    stranded: list[tuple[Partition, int]] = []
    for p in touched:  # 2. then replicas off
        replicas, _ = ws.replicas(p)
        for position, b in enumerate(replicas):
            if b not in drained:
                continue
            target = _drain_target(ws, p, position, drained)
            if target is None:
                stranded.append((p, b))
            else:
                ws.move_replica(p, position, target)
        _leader_first(ws, p)

    if no_leader:
        notes.append(f"{len(no_leader)} partition(s) have no other alive in-sync replica to lead, e.g. "
                     + ", ".join(f"{p.topic}-{p.partition}" for p in no_leader[:MAX_NOTES]))
    if stranded:
        notes.append(f"{len(stranded)} replica(s) stay on drained brokers (bounds or no valid target), e.g. "
                     + ", ".join(f"{p.topic}-{p.partition}@{b}" for p, b in stranded[:MAX_NOTES])
                     + "; run the drain again")
    notes.append("execute leader changes before the reassignment")
    return ws.to_plan(kind, notes)


def _drain_target(ws: Workspace, p: Partition, position: int, drained: set[int]) -> int | None:
    topic = ws.index.topic_by_name[p.topic]
    replicas, _ = ws.replicas(p)
    idc = ws.topo.idc[replicas[position]]
    target = ws.best_target(p, position, ws.group(topic.pool, idc), exclude=drained)
    if target is None:
        target = ws.best_target(p, position, ws.group(topic.pool), exclude=drained)
    return target


def _leader_first(ws: Workspace, p: Partition) -> None:
    """Reorder the planned replicas so the planned leader is the preferred one (first)."""
    replicas, dirs = ws.replicas(p)
    leader = ws.leader(p)
    if leader is None or leader not in replicas or replicas[0] == leader:
        return
    k = replicas.index(leader)
    order = [k] + [j for j in range(len(replicas)) if j != k]
    new_r, new_d = tuple(replicas[j] for j in order), tuple(dirs[j] for j in order)
    if ws.topo.replica_set_ok(p.replicas, new_r, ws.index.topic_by_name[p.topic].pool,
                              ws.snapshot.placement_of(ws.index.topic_by_name[p.topic])):
        ws.assign(p, new_r, new_d)
        if ws.leader(p) != leader:
            ws.set_leader(p, leader)


def plan_restore(snapshot: ClusterSnapshot, recorded: ClusterSnapshot, brokers: Collection[int],
                 options: DrainOptions | None = None) -> Plan:
    """A plan that gives every partition the restored brokers held in ``recorded`` its recorded assignment."""
    options = options or DrainOptions()
    restored = _check_brokers(snapshot, brokers)
    ws = Workspace(snapshot, options.bounds)
    skipped: list[str] = []
    breaking: list[str] = []  # restored exactly though the recorded placement breaks a rule that came later
    sets: dict[tuple[str, int], tuple[int, ...]] = {}
    for rec in recorded.index.partitions:
        if not any(b in restored for b in rec.replicas):
            continue
        name = f"{rec.topic}-{rec.partition}"
        p = ws.index.partition_by_id.get(rec.id)
        if p is None:
            skipped.append(f"{name} (no longer exists)")
            continue
        reason = _restore_problem(ws, p, rec)
        if reason == BREAKS_RULE:
            breaking.append(name)
        elif reason:
            skipped.append(f"{name} ({reason})")
            continue
        sets[rec.id] = rec.replicas
        if (rec.replicas, rec.log_dirs) != (p.replicas, p.log_dirs):
            ws.assign(p, rec.replicas, rec.log_dirs)
        if rec.leader is not None and rec.leader != ws.leader(p) and ws.topo.alive.get(rec.leader, False):
            ws.set_leader(p, rec.leader)
    notes = []
    if skipped:
        notes.append(f"{len(skipped)} partition(s) not restored: " + ", ".join(skipped[:MAX_NOTES]))
    if breaking:
        notes.append(f"{len(breaking)} partition(s) restored exactly to a recorded placement that breaks a placement, "
                     f"rack or pool rule in force now (a rebalance can fix that after): "
                     + ", ".join(breaking[:MAX_NOTES]))
    notes.append("execute the reassignment, then the leader changes (preferred election)")
    return ws.to_plan(KIND_RESTORE, notes, recorded=sets)


def _restore_problem(ws: Workspace, p: Partition, rec: Partition) -> str:
    if len(rec.replicas) != len(p.replicas):
        return "replication factor changed"
    topic = ws.index.topic_by_name[p.topic]
    current = set(zip(p.replicas, p.log_dirs, strict=True))
    gaining = []
    for b, d in zip(rec.replicas, rec.log_dirs, strict=True):
        if (b, d) in current:
            continue
        if (b, d) not in ws.pos:
            return f"broker {b} has no log dir {d}"
        if not ws.topo.alive.get(b, False):
            return f"broker {b} is not alive"
        gaining.append(ws.pos[(b, d)])
    if not all(ws.fits(i, p.size_bytes) for i in gaining):
        return "not enough free space"
    if not ws.within_bounds(p, rec.replicas, rec.log_dirs):
        return "plan bound reached"
    if not ws.topo.replica_set_ok(p.replicas, rec.replicas, topic.pool, ws.snapshot.placement_of(topic)):
        return BREAKS_RULE  # restored all the same: the operator asked for what was there (a note says so)
    return ""


BREAKS_RULE = "the recorded assignment breaks a placement, rack or pool constraint now"
