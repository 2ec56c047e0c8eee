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
        utils = [index.disk_util_estimate(d) for d in disks]
        mean = sum(utils) / len(utils)  # the one mean (domain.util_stats): plain average of utilisations
        peak = max(utils)
        fastest = max(index.disk_by_id[d].max_bytes_per_s for d in disks)
        heaviest = max((index.partition_by_id[pid].replica_load(d[0]) for d in disks
                        for pid in index.replicas_on_disk[d]), default=0.0)
        floor = heaviest / fastest
        out[pool] = {"mean_util": mean, "max_util": peak, "peak_to_mean": peak / mean if mean else 0.0,
                     "floor_to_mean": floor / mean if mean else 0.0}
    return out


def forced_min_bytes(snapshot: ClusterSnapshot, threshold: float = 1.10) -> float:
    """Fractional-knapsack lower bound of the bytes any plan must move to reach peak/mean ≤ ``threshold`` per pool.

    With L a pool's total load, C the sum of its disks' ceilings (max bytes/s), n disks and c_max the fastest
    ceiling, any plan whose peak ≤ ``threshold`` x the (plain) mean utilisation after it leaves every disk at
    ≤ L / (C - n c_max (threshold - 1) / threshold) (L ≥ P C - c_max Σ (P - u_i) and Σ (P - u_i) ≤ n P
    (threshold - 1) / threshold). For each disk above that: take its replicas in order of load per byte, highest
    first, until their load covers the disk's excess (the last one fractionally); sum the bytes over those disks.
    """
    index = snapshot.index
    total = 0.0
    for pool in sorted({b.pool for b in snapshot.brokers}):
        disks = balance_disks(snapshot, pool)
        if not disks:
            continue
        caps = [index.disk_by_id[d].max_bytes_per_s for d in disks]
        load = sum(index.disk_load.get(d, 0.0) for d in disks)
        ceiling = load / (sum(caps) - len(disks) * max(caps) * (threshold - 1) / threshold)
        for d, cap in zip(disks, caps, strict=True):
            excess = index.disk_load.get(d, 0.0) - ceiling * cap
            if excess <= 0:
                continue
            items = []
            for pid in index.replicas_on_disk[d]:
                p = index.partition_by_id[pid]
                load_p = p.replica_load(d[0])
                if load_p > 0:
                    items.append((load_p / p.size_bytes if p.size_bytes else float("inf"), load_p, p.size_bytes))
            items.sort(key=lambda x: -x[0])
            for _, load_p, size in items:
                if excess <= 0:
                    break
                take = min(1.0, excess / load_p)
                total += take * size
                excess -= take * load_p
    return total
