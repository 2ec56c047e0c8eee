"""Throttle protection off vs on, same seeded kafkasim scenario (over TCP): a consumer 20 GB behind on
orders-0 starts reading the leader's HDD at 160 MB/s at t = 0.

Runs: protection off; on with the partition-level throttle; on with client quotas (a cluster without
the capability). Prints a table, writes ``out/bench/throttle.json`` and plots disk util and
produce/fetch latency over time to ``out/bench/throttle.png``.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import OUT, write_result

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.throttle_scenario import HOT_PARTITION, ThrottleScenario  # noqa: E402

SEED = 11
STEPS = 60
STEP_S = 5.0
HIGH = 0.85
LAG_BYTES = 20e9
LAG_RATE = 160e6


def run(label: str, protection: bool, partition_throttle: bool) -> dict[str, Any]:
    """One run; returns per-step series and summary figures."""
    s = ThrottleScenario(partition_throttle=partition_throttle, protection=protection, seed=SEED, step_s=STEP_S)
    wall = time.perf_counter()
    try:
        for _ in range(4):
            s.step()
        base = s.truth()
        hot = base.leader_disk[HOT_PARTITION]
        on_hot = [k for k, d in base.leader_disk.items() if d == hot and not k[0].startswith("__")]
        others = [k for k in base.fetch if k != HOT_PARTITION and not k[0].startswith("__") and base.fetch[k] > 0]
        s.lagging_consumer(LAG_BYTES, LAG_RATE)
        t0 = base.t
        series: dict[str, list[float]] = {k: [] for k in ("t", "util", "await_ms", "produce_ms", "fetch_ms",
                                                          "others_fetch_ratio", "lag_gb", "throttles")}
        first_throttle = caught_up = None
        for _ in range(STEPS):
            s.step()
            tr = s.truth()
            n_thr = len(s.throttles()) if protection else 0
            if n_thr and first_throttle is None:
                first_throttle = tr.t - t0
            if caught_up is None and tr.lag[HOT_PARTITION] < 1e9:
                caught_up = tr.t - t0
            series["t"].append(tr.t - t0)
            series["util"].append(tr.util[hot])
            series["await_ms"].append(tr.await_ms[hot])
            series["produce_ms"].append(statistics.fmean(tr.produce_latency_ms[k] for k in on_hot))
            series["fetch_ms"].append(statistics.fmean(tr.fetch_latency_ms[k] for k in on_hot))
            series["others_fetch_ratio"].append(statistics.fmean(tr.fetch[k] / base.fetch[k] for k in others))
            series["lag_gb"].append(tr.lag[HOT_PARTITION] / 1e9)
            series["throttles"].append(float(n_thr))
        above = sum(STEP_S for u in series["util"] if u > HIGH)
        return {
            "label": label, "protection": protection, "partition_throttle": partition_throttle,
            "hot_disk": f"{hot[0]}:{hot[1]}", "series": series,
            "summary": {
                "seconds_above_threshold": above,
                "peak_util": max(series["util"]),
                "mean_util": statistics.fmean(series["util"]),
                "mean_await_ms": statistics.fmean(series["await_ms"]),
                "p99_await_ms": sorted(series["await_ms"])[int(0.99 * (len(series["await_ms"]) - 1))],
                "mean_produce_latency_ms_hot_disk": statistics.fmean(series["produce_ms"]),
                "mean_fetch_latency_ms_hot_disk": statistics.fmean(series["fetch_ms"]),
                "unaffected_fetch_ratio_min": min(series["others_fetch_ratio"]),
                "first_throttle_s": first_throttle,
                "lagging_consumer_caught_up_s": caught_up,
                "wall_seconds": round(time.perf_counter() - wall, 2),
            },
        }
    finally:
        s.close()


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Disk util, produce latency and fetch latency over time, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    styles = ["-", "-", "--"]
    for r, style in zip(runs, styles, strict=False):
        s = r["series"]
        for ax, key in zip(axes, ("util", "produce_ms", "fetch_ms", "lag_gb"), strict=True):
            ax.plot(s["t"], s[key], style, label=r["label"])
    axes[0].axhline(HIGH, color="grey", linestyle="--", linewidth=1, label="threshold")
    axes[0].set_ylabel("hot disk util")
    axes[1].set_ylabel("produce latency (ms)\npartitions on hot disk")
    axes[2].set_ylabel("fetch latency (ms)\npartitions on hot disk")
    axes[3].set_ylabel("lagging consumer lag (GB)")
    axes[3].set_xlabel("simulated seconds since the lagging consumer started")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Throttle protection off vs on (kafkasim seed {SEED}, {LAG_BYTES / 1e9:.0f} GB lag)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafkasim").setLevel(logging.CRITICAL)
    runs = [run("protection off", False, True), run("on: partition throttle", True, True),
            run("on: client quotas", True, False)]
    OUT.mkdir(parents=True, exist_ok=True)
    png = OUT / "throttle.png"
    plot(runs, png)
    rows = [("seconds above util 0.85", "seconds_above_threshold", "{:.0f}"), ("peak util", "peak_util", "{:.2f}"),
            ("mean util", "mean_util", "{:.2f}"), ("mean await (ms)", "mean_await_ms", "{:.1f}"),
            ("p99 await (ms)", "p99_await_ms", "{:.1f}"),
            ("produce latency, hot disk (ms)", "mean_produce_latency_ms_hot_disk", "{:.1f}"),
            ("fetch latency, hot disk (ms)", "mean_fetch_latency_ms_hot_disk", "{:.1f}"),
            ("unaffected clients' fetch, min ratio", "unaffected_fetch_ratio_min", "{:.3f}"),
            ("first throttle after (s)", "first_throttle_s", "{:.0f}"),
            ("lagging consumer caught up after (s)", "lagging_consumer_caught_up_s", "{:.0f}"),
            ("wall seconds", "wall_seconds", "{:.1f}")]
    width = max(len(r[0]) for r in rows)
    header = f"{'metric':<{width}}  " + "  ".join(f"{r['label']:>24}" for r in runs)
    print(header)
    print("-" * len(header))
    for name, key, fmt in rows:
        cells = []
        for r in runs:
            v = r["summary"][key]
            cells.append(f"{(fmt.format(v) if v is not None else 'never'):>24}")
        print(f"{name:<{width}}  " + "  ".join(cells))
    path = write_result("throttle", {"seed": SEED, "steps": STEPS, "step_s": STEP_S, "lag_bytes": LAG_BYTES,
                                     "lag_rate_bytes_per_s": LAG_RATE, "threshold": HIGH, "plot": str(png),
                                     "runs": runs})
    print(f"\nwrote {path} and {png}")


if __name__ == "__main__":
    main()
