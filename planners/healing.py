"""Goals: the plans the self-healing loop runs — replace a dead broker's replicas, move leadership off a
disk, evacuate a disk (failed or fail-slow).

Method: each goal is a thin function over the existing planning machinery. A dead broker is *drained*
(:func:`planners.drain.plan_drain`: leadership first, then every replica re-created on the valid disk with
the lowest median historical load, same IDC first, pools, racks, placement and capacity held). Moving
leadership off a disk hands each partition led from it to the alive, in-sync replica (not on an avoided
disk, not in maintenance) that leads least, reordering the replica list so a preferred election keeps it;
no data moves. Evacuating a disk moves each replica on it to the broker's other healthy dirs first
(an intra-broker move, KIP-113) and to other brokers of the pool (same IDC first) only when those lack
room or would break a goal — the Workspace's ``best_target`` applies every hard goal. A *failed* dir's
replicas go to other brokers only: they are offline, and Kafka answers AlterReplicaLogDirs for an offline
replica with ``KAFKA_STORAGE_ERROR`` (``ReplicaManager.alterReplicaLogDirs``) until the broker restarts
without the dir, so the healthy dirs of the same broker cannot take them while it runs.

Dead log dirs: every heal is planned on :func:`without_dead_dirs` (each dead dir shown full, so no goal
targets it) and its plan passed through :func:`keep_dead_in_place` (a replica kept on a dead dir — e.g. the
other fault of a partition, on a broker in maintenance — gets Kafka's ``"any"`` dir: it stays, and no move
names a dir its broker no longer lists). :func:`heal_budget` says how fast a heal may run and what limits it
(the self-healing loop records it on the execution: the executor's heal-rate floor).

Guarantee: deterministic (snapshot order); never targets a dead or maintenance broker, nor an avoided or dead
disk; a replica with no valid target stays and the notes say so. Cost: O(replicas on the disk or broker x disks
of the pool), as the drain.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from domain import BrokerState, ClusterSnapshot, DiskId, Plan
from planners.drain import DrainOptions, plan_drain
from planners.workspace import Bounds, Workspace

KIND_HEAL_BROKER = "heal-broker"
KIND_HEAL_LEADERS = "heal-leaders"
KIND_HEAL_DISK = "heal-disk"
MAX_NOTES = 12


def plan_replace_broker(snapshot: ClusterSnapshot, brokers: Collection[int], bounds: Bounds | None = None) -> Plan:
    """Re-create every replica of the dead ``brokers`` elsewhere (see the module docstring)."""
    return plan_drain(snapshot, brokers, DrainOptions(bounds or Bounds()), kind=KIND_HEAL_BROKER)


def _usable(snapshot: ClusterSnapshot) -> set[int]:
    return {b.id for b in snapshot.brokers if b.state is BrokerState.ALIVE}


def plan_leaders_off(snapshot: ClusterSnapshot, disks: Collection[DiskId], avoid: Collection[DiskId] = ()) -> Plan:
    """Hand the leadership of every partition led from ``disks`` to another in-sync replica (no data moves)."""
    ws = Workspace(snapshot)
    off = set(disks) | set(avoid)
    usable = _usable(snapshot)
    count = Counter(p.leader for p in ws.index.partitions if p.leader is not None)
    stuck: list[str] = []
    for p in ws.index.partitions:
        if p.leader is None or p.leader not in p.replicas:
            continue
        k = p.replicas.index(p.leader)
        if (p.leader, p.log_dirs[k] if k < len(p.log_dirs) else "") not in set(disks):
            continue
        options = [b for i, b in enumerate(p.replicas) if b != p.leader and b in p.isr and b in usable
                   and (b, p.log_dirs[i] if i < len(p.log_dirs) else "") not in off]
        if not options:
            stuck.append(f"{p.topic}-{p.partition}")
            continue
        dst = min(options, key=lambda b: (count[b], b))
        replicas, dirs = ws.replicas(p)
        j = replicas.index(dst)
        order = [j] + [i for i in range(len(replicas)) if i != j]
        ws.assign(p, tuple(replicas[i] for i in order), tuple(dirs[i] for i in order))
        ws.set_leader(p, dst, explicit=True)
        count[dst] += 1
        count[p.leader] -= 1
    notes = [f"leadership off {', '.join(f'{b}:{d}' for b, d in sorted(disks))}"]
    if stuck:
        notes.append(f"{len(stuck)} partition(s) have no other usable in-sync replica to lead, e.g. "
                     + ", ".join(stuck[:MAX_NOTES]))
    return ws.to_plan(KIND_HEAL_LEADERS, notes)


def plan_evacuate_disk(snapshot: ClusterSnapshot, disk: DiskId, bounds: Bounds | None = None,
                       avoid: Collection[DiskId] = (), same_broker: bool = True) -> Plan:
    """Move every replica off ``disk``: the broker's other dirs first (unless ``same_broker`` is False), then
    other brokers (module docstring)."""
    ws = Workspace(snapshot, bounds or Bounds())
    broker, path = disk
    bad = {disk, *avoid}
    usable = _usable(snapshot)
    own = np.array(sorted(i for i in ws.broker_disks.get(broker, []) if ws.disk_ids[i] not in bad and same_broker),
                   dtype=np.int64)
    stranded: list[str] = []
    others = {b for b in {x.id for x in snapshot.brokers} if b not in usable or b == broker}
    if not same_broker:
        notes_head = f"evacuate {broker}:{path} to other brokers (its replicas are offline: Kafka refuses to move " \
                     "an offline replica between the dirs of a running broker)"
    else:
        notes_head = f"evacuate {broker}:{path}"
    for p in ws.index.partitions:
        replicas, dirs = ws.replicas(p)
        if broker not in replicas or dirs[replicas.index(broker)] != path:
            continue
        position = replicas.index(broker)
        pool = ws.index.topic_by_name[p.topic].pool
        target = ws.best_target(p, position, own) if broker in usable and len(own) else None
        if target is None:
            idc = ws.topo.idc[broker]
            target = ws.best_target(p, position, ws.group(pool, idc), exclude=others)
            if target is None:
                target = ws.best_target(p, position, ws.group(pool), exclude=others)
        if target is None or ws.disk_ids[target] in bad:
            stranded.append(f"{p.topic}-{p.partition}")
            continue
        ws.move_replica(p, position, target)
    notes = [notes_head]
    if stranded:
        notes.append(f"{len(stranded)} replica(s) stay on {broker}:{path} (bounds or no valid target), e.g. "
                     + ", ".join(stranded[:MAX_NOTES]))
    return ws.to_plan(KIND_HEAL_DISK, notes)


# ---------------------------------------------------------------------------------------------- dead dirs
def without_dead_dirs(snapshot: ClusterSnapshot, dead: Mapping[int, Collection[str]]) -> ClusterSnapshot:
    """The snapshot a heal is planned on: every dead log dir shown full, so no hard goal lets a replica land on
    it (capacity headroom), whatever planner runs."""
    if not any(dead.values()):
        return snapshot
    brokers = tuple(replace(b, disks=tuple(replace(d, used_bytes=max(d.capacity_bytes, d.used_bytes))
                                           if d.path in dead.get(b.id, ()) else d for d in b.disks))
                    for b in snapshot.brokers)
    return replace(snapshot, brokers=brokers)


def keep_dead_in_place(plan: Plan, dead: Mapping[int, Collection[str]]) -> Plan:
    """``plan`` with every replica it keeps on a dead log dir given Kafka's ``"any"`` dir (``None``): the replica
    stays where it is (offline until its own fault is healed), and no move names a dir its broker no longer
    lists — the executor refuses those ("broker B has no log dir D")."""
    moves = []
    for m in plan.moves:
        dirs = tuple(None if d is not None and d in dead.get(b, ()) else d
                     for b, d in zip(m.replicas, m.log_dirs, strict=True))
        moves.append(m if dirs == tuple(m.log_dirs) else replace(m, log_dirs=dirs))
    return replace(plan, moves=tuple(moves))


# ---------------------------------------------------------------------------------------------- heal rate
@dataclass(frozen=True)
class HealBudget:
    """How fast a heal may run and what limits it.

    ``rate_bytes_per_s`` is the allowed heal rate: ``max(min_rate, bytes / bound_s)``, lowered to what the
    slowest resource on the copies' path can carry (a leased line's headroom under its target mark, a disk's
    headroom under ``disk_share`` of its throughput); ``eta_s`` = bytes / rate. ``bottleneck`` names that
    resource when it, not the wanted rate, sets the pace ("" otherwise)."""

    bytes: int
    rate_bytes_per_s: float
    wanted_bytes_per_s: float
    eta_s: float
    bound_s: float
    bottleneck: str = ""
    resources: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able (execution options, anomaly evidence)."""
        return {"bytes": self.bytes, "rate_bytes_per_s": round(self.rate_bytes_per_s, 1),
                "wanted_bytes_per_s": round(self.wanted_bytes_per_s, 1), "eta_s": round(self.eta_s, 1),
                "bound_s": self.bound_s, "bottleneck": self.bottleneck,
                "resources": {k: dict(v) for k, v in sorted(self.resources.items())[:MAX_NOTES]}}


def heal_budget(snapshot: ClusterSnapshot, plan: Plan, *, bound_s: float, min_rate: float,
                line_headroom: Mapping[tuple[str, str], float] | None = None, disk_share: float = 0.8) -> HealBudget:
    """The :class:`HealBudget` of ``plan`` on ``snapshot``. Each new replica is copied from its partition's leader
    (an alive in-sync replica when the leader is gone); its bytes pass the leader's disk, the line between the
    two IDCs when they differ (``line_headroom``: bytes/s a line can still take, e.g. its target mark minus what
    else crosses it) and the new replica's disk. A resource's copies share it, so its time is its bytes over its
    headroom; the heal takes at least the slowest resource's time. O(moves x RF)."""
    by_id = {p.id: p for p in snapshot.iter_partitions()}
    broker = {b.id: b for b in snapshot.brokers}
    disk = {(b.id, d.path): d for b in snapshot.brokers for d in b.disks}
    through: dict[str, float] = {}
    carry: dict[str, float] = {}

    def add(name: str, n: float, cap: float) -> None:
        through[name] = through.get(name, 0.0) + n
        carry[name] = max(cap, 1.0)

    total = 0
    for m in plan.moves:
        p = by_id.get(m.id)
        if p is None:
            continue
        src = p.leader if p.leader is not None and broker.get(p.leader) is not None \
            and broker[p.leader].state is not BrokerState.DEAD else next(
                (b for b in p.isr if b in broker and broker[b].state is not BrokerState.DEAD), None)
        for b, d in zip(m.replicas, m.log_dirs, strict=True):
            if b in p.replicas or src is None:
                continue
            total += p.size_bytes
            k = p.replicas.index(src)
            sd = disk.get((src, p.log_dirs[k])) if k < len(p.log_dirs) else None
            if sd is not None:
                add(f"disk {src}:{sd.path} (read)", p.size_bytes, disk_share * sd.max_bytes_per_s
                    - sd.read_bytes_per_s - sd.write_bytes_per_s)
            dd = disk.get((b, d)) if d is not None else None
            if dd is not None:
                add(f"disk {b}:{dd.path} (write)", p.size_bytes, disk_share * dd.max_bytes_per_s
                    - dd.read_bytes_per_s - dd.write_bytes_per_s)
            pair = (broker[src].idc, broker[b].idc) if b in broker else None
            if pair is not None and pair[0] != pair[1] and line_headroom is not None and pair in line_headroom:
                add(f"leased line {pair[0]}->{pair[1]}", p.size_bytes, line_headroom[pair])
    wanted = max(min_rate, total / bound_s if bound_s > 0 else min_rate)
    rate, bottleneck = wanted, ""
    resources = {}
    for name, n in through.items():
        need_s = n / carry[name]
        resources[name] = {"bytes": round(n), "headroom_bytes_per_s": round(carry[name], 1), "time_s": round(need_s, 1)}
        if total and need_s > total / rate:
            rate, bottleneck = total / need_s, name
    eta = total / rate if rate > 0 else math.inf
    return HealBudget(total, rate, wanted, eta, bound_s, bottleneck, resources)
