"""Before/after figures of a plan: estimated disk utilisation per pool, bytes and replicas moved."""

from __future__ import annotations

from collections.abc import Iterable

from domain.model import ClusterSnapshot, DiskId
from domain.plan import Plan, PlanSummary, UtilStats


def util_stats(snapshot: ClusterSnapshot, disk_ids: Iterable[DiskId]) -> UtilStats:
    """Max and throughput-weighted mean estimated utilisation over ``disk_ids``. O(disks)."""
    index = snapshot.index
    total_load = total_max = 0.0
    max_util = 0.0
    count = 0
    for disk_id in disk_ids:
        disk = index.disk_by_id[disk_id]
        load = index.disk_load.get(disk_id, 0.0)
        total_load += load
        total_max += disk.max_bytes_per_s
        max_util = max(max_util, load / disk.max_bytes_per_s)
        count += 1
    return UtilStats(disks=count, max_util=max_util, mean_util=total_load / total_max if total_max else 0.0)


def balance_disks(snapshot: ClusterSnapshot, pool: str | None = None) -> tuple[DiskId, ...]:
    """Disks that take part in balancing: those of alive brokers (of ``pool`` when given)."""
    return tuple(
        (b.id, d.path)
        for b in snapshot.brokers
        if b.is_alive and (pool is None or b.pool == pool)
        for d in b.disks
    )


def pool_stats(snapshot: ClusterSnapshot) -> dict[str, UtilStats]:
    """:func:`util_stats` over the balanced disks of each pool, sorted by pool name."""
    pools = sorted({b.pool for b in snapshot.brokers})
    return {pool: util_stats(snapshot, balance_disks(snapshot, pool)) for pool in pools}


def summarize_plan(before: ClusterSnapshot, after: ClusterSnapshot, plan: Plan) -> PlanSummary:
    """Figures of ``plan`` taking ``before`` to ``after`` (``after = apply_plan(before, plan)``).

    Bytes to move count each replica that lands on a broker or log dir it was not on. O(disks + moves).
    """
    b_index, a_index = before.index, after.index
    bytes_to_move = replicas_moved = intra = partitions_moved = 0
    for move in plan.moves:
        old = b_index.partition_by_id.get(move.id)
        new = a_index.partition_by_id.get(move.id)
        if old is None or new is None:
            continue
        old_dirs = dict(zip(old.replicas, old.log_dirs, strict=True))
        moved_here = 0
        for broker_id, path in zip(new.replicas, new.log_dirs, strict=True):
            if broker_id not in old_dirs:
                moved_here += 1
            elif old_dirs[broker_id] != path:
                moved_here += 1
                intra += 1
        replicas_moved += moved_here
        bytes_to_move += moved_here * old.size_bytes
        partitions_moved += moved_here > 0
    pools_before, pools_after = pool_stats(before), pool_stats(after)
    return PlanSummary(
        before=util_stats(before, balance_disks(before)),
        after=util_stats(after, balance_disks(after)),
        pools={p: (pools_before[p], pools_after[p]) for p in pools_before if p in pools_after},
        bytes_to_move=bytes_to_move,
        partitions_moved=partitions_moved,
        replicas_moved=replicas_moved,
        intra_broker_moves=intra,
        leader_changes=len(plan.leaders),
    )
