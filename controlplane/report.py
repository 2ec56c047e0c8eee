"""Human-readable tables (rich) for plans and snapshots, shared by the CLI and the demo."""

from __future__ import annotations

from typing import Any

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


def snapshot_summary(snapshot: ClusterSnapshot, top: int = 10) -> dict[str, Any]:
    """What ``snapshot show`` prints, as data: per pool figures, the ``top`` hottest disks (by estimated
    util) and brokers (by their hottest disk's estimated util; alive brokers only)."""
    index = snapshot.index
    loads = index.pool_load()
    pools = {pool: {"brokers": loads[pool].brokers, "disks": loads[pool].disks, "replicas": loads[pool].replicas,
                    "bytes_in_per_s": loads[pool].bytes_in_per_s, "mean_util": s.mean_util,
                    "max_util": s.max_util, "peak_to_mean": s.peak_to_mean}
             for pool, s in pool_stats(snapshot).items()}
    ranked = sorted(((index.disk_util_estimate((b.id, d.path)), b, d) for b in snapshot.brokers for d in b.disks),
                    key=lambda x: (-x[0], x[1].id, x[2].path))
    disks = [{"broker": b.id, "path": d.path, "kind": str(d.kind.value), "pool": b.pool,
              "broker_state": str(b.state.value), "estimated_util": util, "measured_util": d.util,
              "await_ms": d.await_ms, "used_bytes": d.used_bytes, "capacity_bytes": d.capacity_bytes}
             for util, b, d in ranked]
    hottest_disk: dict[int, float] = {}
    for util, b, _ in ranked:
        hottest_disk.setdefault(b.id, util)
    brokers: list[dict[str, Any]] = []
    for b in snapshot.brokers:
        if not b.is_alive:
            continue
        agg = index.broker_load[b.id]
        brokers.append({"broker": b.id, "pool": b.pool, "idc": b.idc, "rack": b.rack,
                        "max_disk_util": hottest_disk.get(b.id, 0.0), "mean_util": agg.mean_util,
                        "replicas": agg.replicas, "leaders": agg.leaders, "bytes_in_per_s": agg.bytes_in_per_s})
    brokers.sort(key=lambda r: (-hottest_disk.get(int(r["broker"]), 0.0), int(r["broker"])))
    return {"cluster": snapshot.cluster, "taken_at": snapshot.taken_at.isoformat(), "pools": pools,
            "dead_brokers": sorted(b.id for b in snapshot.brokers if not b.is_alive),
            "hottest_disks": disks[:top], "hottest_brokers": brokers[:top]}


def hottest_tables(summary: dict[str, Any]) -> tuple[Table, Table]:
    """The hottest disks and brokers of :func:`snapshot_summary` as two tables."""
    disks = Table(title=f"hottest {len(summary['hottest_disks'])} disks (estimated util)")
    for col in ("broker", "log dir", "kind", "pool", "estimated util", "measured util", "await ms", "used"):
        disks.add_column(col, justify="right" if col in ("estimated util", "measured util", "await ms") else "left")
    for d in summary["hottest_disks"]:
        disks.add_row(str(d["broker"]), d["path"], d["kind"], d["pool"], f"{d['estimated_util']:.2f}",
                      f"{d['measured_util']:.2f}", f"{d['await_ms']:.1f}",
                      f"{human_bytes(d['used_bytes'])} / {human_bytes(d['capacity_bytes'])}")
    brokers = Table(title=f"hottest {len(summary['hottest_brokers'])} brokers (their hottest disk)")
    for col in ("broker", "pool", "idc", "hottest disk util", "mean util", "replicas", "leaders", "bytes in/s"):
        brokers.add_column(col, justify="left" if col in ("pool", "idc") else "right")
    for b in summary["hottest_brokers"]:
        brokers.add_row(str(b["broker"]), b["pool"], b["idc"], f"{b['max_disk_util']:.2f}", f"{b['mean_util']:.2f}",
                        str(b["replicas"]), str(b["leaders"]), human_bytes(b["bytes_in_per_s"]) + "/s")
    return disks, brokers


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
