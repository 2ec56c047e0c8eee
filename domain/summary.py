"""Before/after figures of a plan: estimated disk utilisation per pool, bytes and replicas moved.

Bytes to move are split into network bytes (a replica copied to a broker that did not hold the
partition) and intra-broker bytes (a replica moved to another log dir of its own broker, KIP-113's
AlterReplicaLogDirs: a local copy, no network traffic).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from domain.apply import PlanEffect
from domain.model import ClusterSnapshot, DiskId, Partition, PartitionId
from domain.plan import Plan, PlanSummary, UtilStats


def util_stats(snapshot: ClusterSnapshot, disk_ids: Iterable[DiskId],
               loads: Mapping[DiskId, float] | None = None) -> UtilStats:
    """Max and mean estimated utilisation over ``disk_ids``. O(disks).

    The mean is the plain average of the disks' utilisations (each disk counts once, whatever its speed): the one
    mean Guardian reports as a pool's mean and peak/mean, and the one its rebalance plans meet the target against.
    ``loads``: disk loads to use instead of the snapshot's own (same disks, another assignment).
    """
    index = snapshot.index
    loads = index.disk_load if loads is None else loads
    total_util = 0.0
    max_util = 0.0
    count = 0
    for disk_id in disk_ids:
        disk = index.disk_by_id[disk_id]
        util = loads.get(disk_id, 0.0) / disk.max_bytes_per_s
        total_util += util
        max_util = max(max_util, util)
        count += 1
    return UtilStats(disks=count, max_util=max_util, mean_util=total_util / count if count else 0.0)


def balance_disks(snapshot: ClusterSnapshot, pool: str | None = None) -> tuple[DiskId, ...]:
    """Disks that take part in balancing: those of alive brokers (of ``pool`` when given)."""
    return tuple(
        (b.id, d.path)
        for b in snapshot.brokers
        if b.is_alive and (pool is None or b.pool == pool)
        for d in b.disks
    )


def pool_stats(snapshot: ClusterSnapshot, loads: Mapping[DiskId, float] | None = None) -> dict[str, UtilStats]:
    """:func:`util_stats` over the balanced disks of each pool, sorted by pool name."""
    pools = sorted({b.pool for b in snapshot.brokers})
    return {pool: util_stats(snapshot, balance_disks(snapshot, pool), loads) for pool in pools}


def summarize_plan(before: ClusterSnapshot, after: ClusterSnapshot, plan: Plan) -> PlanSummary:
    """Figures of ``plan`` taking ``before`` to ``after`` (``after = apply_plan(before, plan)``).

    Bytes to move count each replica that lands on a broker or log dir it was not on. O(disks + moves),
    plus building ``after``'s index if it is not built yet (:func:`summarize_effect` avoids that).
    """
    a_index = after.index
    return _summary(before, plan, a_index.partition_by_id, util_stats(after, balance_disks(after)),
                    pool_stats(after))


def summarize_effect(before: ClusterSnapshot, plan: Plan, effect: PlanEffect) -> PlanSummary:
    """:func:`summarize_plan` of ``plan`` from its :func:`domain.apply.plan_effect` on ``before``: the same
    figures, without building the after-snapshot or its index.

    Only disks the plan touches get their load recomputed, over their final replicas in snapshot
    partition order (the order :func:`domain.views.disk_loads` sums in, so the figures are identical).
    O(disks + moves x RF + replicas of the touched disks).
    """
    loads = after_disk_loads(before, effect.partitions)
    return _summary(before, plan, effect.partitions, util_stats(before, balance_disks(before), loads),
                    pool_stats(before, loads))


def after_disk_loads(before: ClusterSnapshot, changed: Mapping[PartitionId, Partition]) -> dict[DiskId, float]:
    """Disk loads once every partition of ``changed`` has its new state (others as in ``before``).

    Every disk's load is the sum of its replicas' loads in snapshot partition order (as
    :func:`domain.views.disk_loads` sums), over columns of all replicas (``np.bincount`` adds each
    bin's weights in input order, so the figures are identical). O(replicas) in numpy + O(changed x RF).
    """
    index = before.index
    loads = dict(index.disk_load)
    if not changed:
        return loads
    cols = index.replica_columns
    slot = {d: k for k, d in enumerate(index.disk_ids)}.get
    position, start = cols.position, cols.start.tolist()
    at: list[int] = []
    disk: list[int | None] = []
    load: list[float] = []
    for pid, new in changed.items():
        k = position[pid]
        first = start[k]
        replicas = new.replicas
        n = len(replicas)
        if start[k + 1] - first != n:
            return _after_disk_loads_by_disk(before, changed)  # the replica count changed: no fixed slots
        at.extend(range(first, first + n))
        disk.extend(map(slot, zip(replicas, new.log_dirs, strict=True)))
        leader, write = new.leader, new.bytes_in_per_s
        if leader in replicas:
            both = write + new.disk_read_bytes_per_s
            load.extend([both if b == leader else write for b in replicas])
        else:
            load.extend([write] * n)
    if None in disk:
        return _after_disk_loads_by_disk(before, changed)  # a log dir the snapshot lacks
    disks, weights = cols.disk.copy(), cols.load.copy()
    disks[at] = disk
    weights[at] = load
    sums = np.bincount(disks, weights=weights, minlength=len(index.disk_ids) + 1)
    loads.update(zip(index.disk_ids, sums.tolist()[:-1], strict=True))
    return loads


def _after_disk_loads_by_disk(before: ClusterSnapshot,
                              changed: Mapping[PartitionId, Partition]) -> dict[DiskId, float]:
    """:func:`after_disk_loads` disk by disk (any plan, also one naming log dirs the snapshot lacks)."""
    index = before.index
    loads = dict(index.disk_load)
    touched: dict[DiskId, list[Partition]] = {}
    for pid, new in changed.items():
        old = index.partition_by_id[pid]
        for pair in zip(old.replicas, old.log_dirs, strict=True):
            touched.setdefault(pair, [])
        for pair in zip(new.replicas, new.log_dirs, strict=True):
            touched.setdefault(pair, []).append(new)
    order = index.replica_columns.position
    for disk_id, arrived in touched.items():
        members = [(order[pid], index.partition_by_id[pid]) for pid in index.replicas_on_disk.get(disk_id, ())
                   if pid not in changed]
        members += [(order[p.id], p) for p in arrived]
        members.sort(key=lambda m: m[0])
        load = 0.0
        for _, p in members:
            load = load + p.replica_load(disk_id[0])
        loads[disk_id] = load
    return loads


def _summary(before: ClusterSnapshot, plan: Plan, final: Mapping[PartitionId, Partition], after_all: UtilStats,
             pools_after: dict[str, UtilStats]) -> PlanSummary:
    b_index = before.index
    bytes_to_move = replicas_moved = intra = intra_bytes = partitions_moved = 0
    for move in plan.moves:
        pid = move.id
        old = b_index.partition_by_id.get(pid)
        new = final.get(pid)
        if old is None or new is None:
            continue
        old_dirs = dict(zip(old.replicas, old.log_dirs, strict=True))
        moved_here = intra_here = 0
        for broker_id, path in zip(new.replicas, new.log_dirs, strict=True):
            if broker_id not in old_dirs:
                moved_here += 1
            elif old_dirs[broker_id] != path:
                moved_here += 1
                intra_here += 1
        replicas_moved += moved_here
        intra += intra_here
        bytes_to_move += moved_here * old.size_bytes
        intra_bytes += intra_here * old.size_bytes
        partitions_moved += moved_here > 0
    pools_before = pool_stats(before)
    return PlanSummary(
        before=util_stats(before, balance_disks(before)),
        after=after_all,
        pools={p: (pools_before[p], pools_after[p]) for p in pools_before if p in pools_after},
        bytes_to_move=bytes_to_move,
        partitions_moved=partitions_moved,
        replicas_moved=replicas_moved,
        intra_broker_moves=intra,
        leader_changes=len(plan.leaders),
        intra_broker_bytes=intra_bytes,
    )
