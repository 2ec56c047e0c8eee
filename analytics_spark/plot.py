"""PNG plot of a series' modelled weekly profile against its observed traffic.

x axis: hour of week (Mon 00h … Sun 24h, UTC). The model (latest ``traffic`` run): the p50–p95
band, p95 and max lines. Observed: every minute's rate in the window as a faint dot at its
position in the week, and each week's hourly mean as a thin line.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from analytics_spark.clickhouse import ClickHouse

DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True)
class PlotSummary:
    """What was drawn."""

    path: Path
    run_id: str
    model_points: int
    observed_minutes: int
    window_start: datetime
    window_end: datetime


def plot_profile(
    ch: ClickHouse,
    *,
    cluster: str,
    topic: str,
    out: Path,
    partition: int = -1,
    direction: str = "in",
    run_id: str | None = None,
) -> PlotSummary:
    """Draw the PNG; raise ValueError if there is no model for the series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from analytics_spark.jobs import latest_run_id

    if direction not in ("in", "out"):
        raise ValueError("direction must be 'in' or 'out'")
    rid = run_id or latest_run_id(ch, "traffic")
    if rid is None:
        raise ValueError("no traffic model yet: run `guardian analytics run traffic` first")
    params = {"r": rid, "c": cluster, "t": topic, "p": partition, "d": direction}
    model = ch.rows(
        f"SELECT hour_of_week, p50_bps, p95_bps, max_bps FROM {ch.table('traffic_profile')} "
        "WHERE run_id = {r:String} AND cluster = {c:String} AND topic = {t:String} "
        "AND partition = {p:Int32} AND direction = {d:String} ORDER BY hour_of_week",
        params,
    )
    if not model:
        raise ValueError(f"no traffic model for {cluster}/{topic} partition {partition} {direction}")
    win = ch.rows(
        f"SELECT toInt64(toUnixTimestamp(window_start)), toInt64(toUnixTimestamp(window_end)) "
        f"FROM {ch.table('analytics_runs')} WHERE run_id = {{r:String}}",
        {"r": rid},
    )
    ws_s, we_s = int(win[0][0]), int(win[0][1])
    ws, we = datetime.fromtimestamp(ws_s, UTC), datetime.fromtimestamp(we_s, UTC)
    api = "produce" if direction == "in" else "fetch"
    part_filter = "" if partition < 0 else "AND partition = {p:Int32}"
    obs = ch.rows(
        f"""SELECT toInt64(toUnixTimestamp(minute)) AS m, sum(bytes) / 60.0
        FROM {ch.table('audit_partition_minute')}
        WHERE cluster = {{c:String}} AND topic = {{t:String}} AND api = {{a:String}} {part_filter}
          AND minute >= toDateTime({{ws:Int64}}, 'UTC') AND minute < toDateTime({{we:Int64}}, 'UTC')
        GROUP BY m ORDER BY m""",
        {**params, "a": api, "ws": ws_s, "we": we_s},
    )
    how = np.array([r[0] for r in model])
    p50, p95, mx = (np.array([r[i] for r in model]) for i in (1, 2, 3))
    fig, ax = plt.subplots(figsize=(14, 5), dpi=110)
    if obs:
        m = np.array([r[0] for r in obs], dtype=np.int64)
        v = np.array([r[1] for r in obs])
        x = ((m // 3600 + 72) % 168) + (m % 3600) / 3600.0
        ax.scatter(x, v, s=2, alpha=0.15, color="tab:gray", label="observed minute rate")
        week = (m - ws_s) // (7 * 86400)
        for w in np.unique(week):
            sel = week == w
            hours = (m[sel] // 3600 + 72) % 168
            sums = np.bincount(hours, weights=v[sel], minlength=168) / 60.0
            seen = np.bincount(hours, minlength=168) > 0
            ax.plot(np.arange(168)[seen] + 0.5, sums[seen], lw=0.8, alpha=0.8,
                    label=f"observed hourly mean, week {int(w) + 1}")
    ax.fill_between(how + 0.5, p50, p95, step="mid", alpha=0.3, color="tab:blue", label="model p50–p95")
    ax.step(how + 0.5, p95, where="mid", color="tab:blue", lw=1.5, label="model p95")
    ax.step(how + 0.5, mx, where="mid", color="tab:red", lw=0.8, ls="--", label="model max")
    ax.set_xticks(range(0, 169, 24), [*DAY_NAMES, ""])
    ax.set_xlim(0, 168)
    ax.set_xlabel("hour of week (UTC)")
    ax.set_ylabel("bytes/s")
    scope = "topic" if partition < 0 else f"partition {partition}"
    ax.set_title(f"{cluster}/{topic} ({scope}) bytes {direction}: modelled weekly profile vs observed "
                 f"({ws:%Y-%m-%d} – {we:%Y-%m-%d})")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return PlotSummary(out, rid, len(model), len(obs), ws, we)
