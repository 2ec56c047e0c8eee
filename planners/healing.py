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

Guarantee: deterministic (snapshot order); never targets a dead or maintenance broker, nor an avoided disk;
a replica with no valid target stays and the notes say so. Cost: O(replicas on the disk or broker x disks of
the pool), as the drain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

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
