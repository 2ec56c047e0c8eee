"""Figures the planner benchmark reports: peak/mean per pool, single-replica floor, forced minimum bytes."""

from __future__ import annotations

from domain import ClusterSnapshot, balance_disks


def pool_figures(snapshot: ClusterSnapshot) -> dict[str, dict[str, float]]:
    """Per pool: mean and max estimated utilisation, peak/mean, and the single-replica floor ratio.

    The floor is the lowest peak utilisation the heaviest replica allows (its load on the pool's fastest
    disk), expressed over the pool mean, so a pool passes when peak/mean <= max(1.10, floor x 1.05).
    """
    index = snapshot.index
    out: dict[str, dict[str, float]] = {}
    for pool in sorted({b.pool for b in snapshot.brokers}):
        disks = balance_disks(snapshot, pool)
        if not disks:
            continue
        total_max = sum(index.disk_by_id[d].max_bytes_per_s for d in disks)
        load = sum(index.disk_load[d] for d in disks)
        mean = load / total_max
        peak = max(index.disk_util_estimate(d) for d in disks)
        fastest = max(index.disk_by_id[d].max_bytes_per_s for d in disks)
        heaviest = max((index.partition_by_id[pid].replica_load(d[0]) for d in disks
                        for pid in index.replicas_on_disk[d]), default=0.0)
        floor = heaviest / fastest
        out[pool] = {"mean_util": mean, "max_util": peak, "peak_to_mean": peak / mean if mean else 0.0,
                     "floor_to_mean": floor / mean if mean else 0.0}
    return out


def forced_min_bytes(snapshot: ClusterSnapshot, threshold: float = 1.10) -> float:
    """Fractional-knapsack lower bound of the bytes any plan must move to bring every disk ≤ threshold x mean.

    For each disk above ``threshold`` x its pool's mean: take its replicas in order of load per byte,
    highest first, until their load covers the disk's excess (the last one fractionally); sum the bytes
    over those disks.
    """
    index = snapshot.index
    total = 0.0
    for pool in sorted({b.pool for b in snapshot.brokers}):
        disks = balance_disks(snapshot, pool)
        if not disks:
            continue
        mean = sum(index.disk_load[d] for d in disks) / sum(index.disk_by_id[d].max_bytes_per_s for d in disks)
        for d in disks:
            excess = index.disk_load[d] - threshold * mean * index.disk_by_id[d].max_bytes_per_s
            if excess <= 0:
                continue
            items = []
            for pid in index.replicas_on_disk[d]:
                p = index.partition_by_id[pid]
                load = p.replica_load(d[0])
                if load > 0:
                    items.append((load / p.size_bytes if p.size_bytes else float("inf"), load, p.size_bytes))
            items.sort(key=lambda x: -x[0])
            for _, load, size in items:
                if excess <= 0:
                    break
                take = min(1.0, excess / load)
                total += take * size
                excess -= take * load
    return total
