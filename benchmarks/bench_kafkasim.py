"""kafkasim at scale: 3 clusters, 300 brokers × 12 disks, 60,000 partitions (RF 3).

Measures, in one run:
  * build time of the federation and the engine's raw tick rate (ticks/s, simulated s per real s);
  * the served federation (``python -m kafkasim up`` as its own process, ``--speed 10``): achieved
    simulation speed while a collector-like client scrapes every broker's ``/metrics`` each round and
    asks each cluster for Metadata over the Kafka protocol; scrape round time; server RSS.
Target (DESIGN/issue 3): ≥ 10× real time with all metrics endpoints served.

Run: ``python -m benchmarks.bench_kafkasim [--seconds 30] [--speed 10]``; writes out/bench/kafkasim.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.common import OUT, peak_rss_mib, write_result


def _rss_mib(pid: int) -> tuple[float, float]:
    cur = peak = 0.0
    for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
        if ln.startswith("VmRSS:"):
            cur = int(ln.split()[1]) / 1024
        elif ln.startswith("VmHWM:"):
            peak = int(ln.split()[1]) / 1024
    return cur, peak


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=30) as r:
        return len(r.read())


def engine_only(spec: dict[str, Any], ticks: int, dt: float) -> dict[str, Any]:
    """Build the federation in-process and tick it as fast as possible."""
    from kafkasim.observe.metrics import render_broker
    from kafkasim.scenarios.scenario import build_federation

    t0 = time.perf_counter()
    fed = build_federation(spec)
    build_s = time.perf_counter() - t0
    eng = fed.engine
    eng.step(dt)
    t0 = time.perf_counter()
    for _ in range(ticks):
        eng.step(dt)
    tick_s = (time.perf_counter() - t0) / ticks
    cl = fed.clusters["c1"]
    t0 = time.perf_counter()
    n = 0
    for b in list(cl.brokers.values())[:20]:
        n += len(render_broker(cl, b))
    render_ms = (time.perf_counter() - t0) / 20 * 1000
    return {"build_s": build_s, "tick_ms": tick_s * 1000, "ticks_per_s": 1 / tick_s,
            "sim_speed_at_dt": dt / tick_s, "dt_s": dt, "render_ms_per_broker": render_ms,
            "metrics_bytes_per_broker": n / 20, "partitions": eng.n_slots, "disks": len(eng.disks),
            "brokers": len(eng.brokers), "peak_rss_mib": peak_rss_mib()}


def served(spec: dict[str, Any], seconds: float, speed: float, scrape_every: float) -> dict[str, Any]:
    """Run ``kafkasim up`` as a process and scrape it like a collector."""
    from kafka import KafkaAdminClient

    OUT.mkdir(parents=True, exist_ok=True)
    scen = OUT / "kafkasim_scenario.json"
    scen.write_text(json.dumps(spec))
    t_start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "kafkasim", "up", "--scenario", str(scen), "--speed", str(speed)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ep = json.loads(proc.stdout.readline())
        startup_s = time.perf_counter() - t_start
        ctl = ep["control_url"]
        urls = [m["url"] for c in ep["clusters"].values() for b in c["brokers"] for m in b["metrics"]]

        def state() -> dict[str, Any]:
            with urllib.request.urlopen(ctl + "/state", timeout=60) as r:
                return dict(json.loads(r.read()))

        s0 = state()
        t0 = time.perf_counter()
        rounds: list[float] = []
        md_ms: list[float] = []
        total_bytes = 0
        admins = {name: KafkaAdminClient(bootstrap_servers=c["bootstrap_servers"], request_timeout_ms=60000)
                  for name, c in ep["clusters"].items()}
        try:
            with cf.ThreadPoolExecutor(8) as pool:
                while time.perf_counter() - t0 < seconds:
                    r0 = time.perf_counter()
                    total_bytes += sum(pool.map(_get, urls))
                    rounds.append(time.perf_counter() - r0)
                    for a in admins.values():
                        m0 = time.perf_counter()
                        a.list_topics()
                        md_ms.append((time.perf_counter() - m0) * 1000)
                    left = scrape_every - (time.perf_counter() - r0)
                    if left > 0:
                        time.sleep(left)
        finally:
            for a in admins.values():
                a.close()
        s1 = state()
        real = time.perf_counter() - t0
        rss, hwm = _rss_mib(proc.pid)
        return {"speed_requested": speed, "real_seconds": real,
                "achieved_speed": (s1["sim_time"] - s0["sim_time"]) / real,
                "ticks": s1["ticks"] - s0["ticks"], "startup_s": startup_s, "scrape_rounds": len(rounds),
                "scrape_round_s_max": max(rounds), "scrape_round_s_mean": sum(rounds) / len(rounds),
                "metrics_endpoints": len(urls), "metrics_mib_per_round": total_bytes / len(rounds) / 2**20,
                "metadata_ms_max": max(md_ms), "server_rss_mib": rss, "server_peak_rss_mib": hwm}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    from kafkasim.scenarios.scenario import scale_scenario

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clusters", type=int, default=3)
    ap.add_argument("--brokers", type=int, default=300)
    ap.add_argument("--disks", type=int, default=12)
    ap.add_argument("--partitions", type=int, default=60_000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--speed", type=float, default=10.0)
    ap.add_argument("--scrape-every", type=float, default=10.0)
    args = ap.parse_args()
    spec = scale_scenario(args.clusters, args.brokers, args.disks, args.partitions)
    spec["tick_seconds"] = 1.0
    eng = engine_only(spec, ticks=20, dt=1.0)
    srv = served(spec, args.seconds, args.speed, args.scrape_every)
    rows = [
        ("federation", f"{args.clusters} clusters, {eng['brokers']} brokers, {eng['disks']} disks, "
                       f"{eng['partitions']} partitions"),
        ("build", f"{eng['build_s']:.2f} s"),
        ("engine tick (dt=1 s)", f"{eng['tick_ms']:.1f} ms -> {eng['ticks_per_s']:.1f} ticks/s "
                                 f"= {eng['sim_speed_at_dt']:.0f}x real time"),
        ("render /metrics per broker", f"{eng['render_ms_per_broker']:.1f} ms, "
                                       f"{eng['metrics_bytes_per_broker'] / 1024:.0f} KiB"),
        ("served: requested speed", f"{srv['speed_requested']:.0f}x (target >= 10x)"),
        ("served: achieved speed", f"{srv['achieved_speed']:.1f}x over {srv['real_seconds']:.0f} s "
                                   f"({srv['ticks']} ticks)"),
        ("served: scrape all endpoints", f"{srv['metrics_endpoints']} URLs, mean {srv['scrape_round_s_mean']:.2f} s, "
                                         f"max {srv['scrape_round_s_max']:.2f} s, "
                                         f"{srv['metrics_mib_per_round']:.1f} MiB/round"),
        ("served: Metadata (all topics)", f"max {srv['metadata_ms_max']:.0f} ms"),
        ("served: server RSS", f"{srv['server_rss_mib']:.0f} MiB (peak {srv['server_peak_rss_mib']:.0f} MiB)"),
        ("served: startup", f"{srv['startup_s']:.1f} s"),
    ]
    w = max(len(k) for k, _ in rows)
    print(f"{'kafkasim benchmark'.ljust(w)}  value")
    for k, v in rows:
        print(f"{k.ljust(w)}  {v}")
    ok = srv["achieved_speed"] >= 0.95 * min(args.speed, 10.0)
    path = write_result("kafkasim", {"args": vars(args), "engine": eng, "served": srv, "meets_10x": ok,
                                     "cpu_count": os.cpu_count()})
    print(f"wrote {path}; >=10x real time with metrics served: {'yes' if ok else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
