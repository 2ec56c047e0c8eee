"""Human-readable tables (rich) for plans and snapshots, shared by the CLI and the demo."""

from __future__ import annotations

from rich.table import Table

from domain import ClusterSnapshot, Plan, Violation, apply_plan, pool_stats


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"  # unreachable, keeps type checkers calm


def plan_table(plan: Plan) -> Table:
    """Before/after estimated disk utilisation per pool, and what the plan moves."""
    table = Table(title=f"plan {plan.kind} for cluster {plan.cluster}")
    for col in ("pool", "disks", "max util before", "max util after", "mean util", "peak/mean before",
                "peak/mean after"):
        table.add_column(col, justify="left" if col == "pool" else "right")
    summary = plan.summary
    if summary is not None:
        for pool, (before, after) in summary.pools.items():
            table.add_row(pool, str(after.disks), f"{before.max_util:.2f}", f"{after.max_util:.2f}",
                          f"{after.mean_util:.2f}", f"{before.peak_to_mean:.2f}",
                          f"{after.peak_to_mean:.2f}")
        table.caption = (f"{summary.partitions_moved} partitions, {summary.replicas_moved} replicas "
                         f"({summary.intra_broker_moves} intra-broker), {human_bytes(summary.bytes_to_move)} to move, "
                         f"{summary.leader_changes} leader changes")
    return table


def snapshot_table(snapshot: ClusterSnapshot) -> Table:
    """One row per pool: brokers, disks, partitions and estimated utilisation figures."""
    index = snapshot.index
    stats = pool_stats(snapshot)
    loads = index.pool_load()
    table = Table(title=f"cluster {snapshot.cluster} at {snapshot.taken_at.isoformat()}")
    for col in ("pool", "brokers", "disks", "replicas", "bytes in/s", "mean util", "max util", "peak/mean"):
        table.add_column(col, justify="left" if col == "pool" else "right")
    for pool, s in stats.items():
        agg = loads[pool]
        table.add_row(pool, str(agg.brokers), str(agg.disks), str(agg.replicas),
                      human_bytes(agg.bytes_in_per_s) + "/s", f"{s.mean_util:.2f}", f"{s.max_util:.2f}",
                      f"{s.peak_to_mean:.2f}")
    return table


def violations_table(violations: list[Violation]) -> Table:
    """One row per broken constraint."""
    table = Table(title=f"{len(violations)} violation(s)")
    for col in ("code", "partition", "detail"):
        table.add_column(col)
    for v in violations:
        where = f"{v.topic}-{v.partition}" if v.topic is not None else "-"
        table.add_row(v.code, where, v.message)
    return table


def leaders_table(snapshot: ClusterSnapshot, plan: Plan) -> Table:
    """Per pool, over alive brokers: the most leader bytes-in and leaderships on one broker, before and after."""
    after = apply_plan(snapshot, plan)
    table = Table(title="leader balance (per broker maximum / mean)")
    for col in ("pool", "brokers", "leader bytes in before", "after", "mean", "leaders before", "after ",
                "mean "):
        table.add_column(col, justify="left" if col == "pool" else "right")
    for pool in sorted({b.pool for b in snapshot.brokers}):
        ids = [b.id for b in snapshot.brokers if b.pool == pool and b.is_alive]
        if not ids:
            continue
        b_load, a_load = snapshot.index.broker_load, after.index.broker_load
        mean_bytes = sum(b_load[i].leader_bytes_in_per_s for i in ids) / len(ids)
        mean_count = sum(b_load[i].leaders for i in ids) / len(ids)
        table.add_row(pool, str(len(ids)),
                      human_bytes(max(b_load[i].leader_bytes_in_per_s for i in ids)) + "/s",
                      human_bytes(max(a_load[i].leader_bytes_in_per_s for i in ids)) + "/s",
                      human_bytes(mean_bytes) + "/s",
                      str(max(b_load[i].leaders for i in ids)), str(max(a_load[i].leaders for i in ids)),
                      f"{mean_count:.1f}")
    return table
