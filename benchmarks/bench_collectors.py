"""Collection benchmark: one round over a 1,000-broker kafkasim federation, parse cost per broker
(fast parser vs prometheus_client's), and memory of a 1-hour window at 100,000 partitions.

The simulator runs in its own process (its renderer and the collector would otherwise share one
GIL); the collector runs here exactly as the service runs it (``ClusterCollector.collect_once``).

    python -m benchmarks.bench_collectors [--brokers 1000] [--partitions 100000] [--rounds 3]

Writes ``out/bench/collectors.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import peak_rss_mib, write_result
from collectors.builder import WANTED_METRICS, ModelConfig
from collectors.collector import ClusterCollector
from collectors.endpoints import parse_endpoints
from collectors.history import RingWindow
from collectors.promtext import parse_fast, parse_reference
from collectors.scrape import scrape_all


def serve(brokers: int, partitions: int, out: Path) -> None:
    """Child process: build and run the federation, write the endpoints file, serve until stdin closes."""
    from kafkasim.scenario import build_federation, scale_scenario
    from kafkasim.server import SimRunner

    t0 = time.perf_counter()
    spec = scale_scenario(clusters=1, brokers=brokers, disks=12, partitions=partitions)
    spec["speed"] = 1.0
    fed = build_federation(spec)
    runner = SimRunner(fed, tick_real_s=2.0)  # one physics step every 2 s keeps the sim's CPU low
    eps = runner.start()
    eps["build_seconds"] = time.perf_counter() - t0
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(eps))
    os.replace(tmp, out)
    sys.stdin.read()
    runner.stop()


def parse_costs(url: str) -> dict[str, Any]:
    """Per-payload parse time of the fast parser and prometheus_client's on one real payload."""
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    out: dict[str, Any] = {"payload_bytes": len(text), "payload_lines": text.count("\n")}
    for name, fn in (("fast", lambda: parse_fast(text, WANTED_METRICS)), ("fast_all_families", lambda: parse_fast(text)),
                     ("prometheus_client", lambda: parse_reference(text))):
        fn()
        reps = 20
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        out[f"{name}_ms"] = (time.perf_counter() - t0) / reps * 1000
    return out


def window_memory(partitions: int, capacity: int, every: int, series: int) -> dict[str, Any]:
    """Fill partition windows for ``partitions`` keys to capacity; report bytes (matrix + index)."""
    tracemalloc.start()
    wins = [RingWindow(capacity, 1024, every=every) for _ in range(series)]
    keys = [("t-%d" % (i // 20), i % 20) for i in range(partitions)]
    rng = np.random.default_rng(1)
    vals = rng.lognormal(10, 1, partitions).tolist()
    t0 = time.perf_counter()
    rounds = capacity * every
    for _ in range(min(rounds, 2 * every)):  # the matrix is preallocated: 2 columns fill every row
        row = dict(zip(keys, vals, strict=True))
        for w in wins:
            w.append(row)
    per_round = (time.perf_counter() - t0) / min(rounds, 2 * every)
    t1 = time.perf_counter()
    stats = wins[0].stats(keys[:10_000])
    stats_s = (time.perf_counter() - t1) * partitions / 10_000
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(stats) == 10_000
    return {"partitions": partitions, "samples_per_key": capacity, "rounds_per_sample": every, "series": series,
            "matrix_bytes": sum(w.nbytes for w in wins), "traced_bytes": cur, "traced_peak_bytes": peak,
            "append_seconds_per_round": per_round, "median_p95_seconds_all_keys": stats_s}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--brokers", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=5.0)
    args = ap.parse_args()
    if args.serve is not None:
        serve(args.brokers, args.partitions, args.serve)
        return 0

    tmpdir = Path(tempfile.mkdtemp(prefix="bench-collectors-"))
    epf = tmpdir / "endpoints.json"
    print(f"starting kafkasim: {args.brokers} brokers x 12 disks, {args.partitions} partitions (RF 3)...", flush=True)
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_collectors", "--serve", str(epf),
                              "--brokers", str(args.brokers), "--partitions", str(args.partitions)],
                             stdin=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.time() + 600
        while not epf.exists():
            if child.poll() is not None or time.time() > deadline:
                print("kafkasim failed to start", file=sys.stderr)
                return 1
            time.sleep(0.5)
        doc = json.loads(epf.read_text())
        eps = parse_endpoints(doc, "c1")
        print(f"kafkasim up in {doc.get('build_seconds', 0):.1f} s", flush=True)
        rounds: list[dict[str, Any]] = []
        col = ClusterCollector(eps, ModelConfig(), scrape_timeout_s=30.0, concurrency=256)
        try:
            for k in range(args.rounds):
                t0 = time.monotonic()
                c = col.collect_once()
                rs = dict(c.round_seconds)
                cov = c.coverage
                rs.update({"round": k + 1, "brokers_scraped": len(cov.brokers_with_metrics),
                           "partitions": cov.partitions_total, "partitions_with_rates": cov.partitions_with_rates,
                           "parse_ms_per_broker": cov.parse_seconds / max(len(cov.brokers_with_metrics), 1) * 1000,
                           "failed": len(cov.metrics_failed), "kafka_errors": len(cov.kafka_errors)})
                rounds.append(rs)
                print(f"round {k + 1}: total {rs['total']:.2f} s (admin {rs['admin']:.2f}, scrape+parse "
                      f"{rs['scrape']:.2f}, parse {rs['parse']:.2f}, build {rs['build']:.2f}); "
                      f"{rs['brokers_scraped']} brokers, {rs['partitions_with_rates']}/{rs['partitions']} "
                      f"partitions with rates", flush=True)
                if k + 1 < args.rounds:
                    time.sleep(max(args.interval - (time.monotonic() - t0), 0.0))
            model_mem = col.model.memory_bytes()
        finally:
            col.close()
        # scrape-only rounds: fast parser vs prometheus_client over all endpoints
        urls = eps.metrics_urls
        t0 = time.perf_counter()
        fast_round = scrape_all(urls, 30.0, 256, lambda t: parse_fast(t, WANTED_METRICS))
        fast_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref_round = scrape_all(urls, 30.0, 256, parse_reference)
        ref_s = time.perf_counter() - t0
        costs = parse_costs(urls[0])
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait(30)
    fast_parse = sum(r.parse_s for r in fast_round.results.values())
    ref_parse = sum(r.parse_s for r in ref_round.results.values())
    windows = {
        "1h_at_10s_2_series": window_memory(args.partitions, 360, 1, 2),
        "1h_at_1min_2_series (default)": window_memory(args.partitions, 60, 6, 2),
    }
    steady = rounds[1:] or rounds
    result = {
        "brokers": args.brokers, "partitions": args.partitions, "disks": args.brokers * 12,
        "rounds": rounds,
        "round_seconds_steady_median": float(np.median([r["total"] for r in steady])),
        "target_round_seconds": 5.0,
        "parse_per_payload": costs,
        "scrape_round": {"fast": {"wall_s": fast_s, "parse_s_total": fast_parse,
                                  "parse_ms_per_broker": fast_parse / len(urls) * 1000,
                                  "failed": len(fast_round.failed)},
                         "prometheus_client": {"wall_s": ref_s, "parse_s_total": ref_parse,
                                               "parse_ms_per_broker": ref_parse / len(urls) * 1000,
                                               "failed": len(ref_round.failed)}},
        "model_memory_bytes_after_rounds": model_mem,
        "window_memory": windows,
        "peak_rss_mib": peak_rss_mib(),
    }
    path = write_result("collectors", result)
    print()
    print(f"{'figure':58} {'value':>14}")
    print("-" * 73)
    rows = [
        ("steady collection round, s (target <= 5)", f"{result['round_seconds_steady_median']:.2f}"),
        ("  of which admin (metadata, log dirs, configs, quotas), s", f"{steady[-1]['admin']:.2f}"),
        ("  of which scrape + parse (concurrent with admin), s", f"{steady[-1]['scrape']:.2f}"),
        ("  of which snapshot build, s", f"{steady[-1]['build']:.2f}"),
        ("payload per broker, KiB / lines", f"{costs['payload_bytes'] / 1024:.0f} / {costs['payload_lines']}"),
        ("parse per broker, fast parser, ms", f"{costs['fast_ms']:.2f}"),
        ("parse per broker, prometheus_client, ms", f"{costs['prometheus_client_ms']:.2f}"),
        ("scrape round (1,000 endpoints), fast parser, s", f"{fast_s:.2f}"),
        ("scrape round (1,000 endpoints), prometheus_client, s", f"{ref_s:.2f}"),
    ]
    for name, w in windows.items():
        rows.append((f"window {name}, MiB", f"{w['traced_bytes'] / 2**20:.0f}"))
    rows.append(("collector process peak RSS, MiB", f"{result['peak_rss_mib']:.0f}"))
    for name, v in rows:
        print(f"{name:58} {v:>14}")
    print(f"\nwritten {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
