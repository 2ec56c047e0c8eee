"""Collection benchmark: one round over a 1,000-broker kafkasim federation, parse cost per broker
(fast parser vs prometheus_client's), and memory of a 1-hour window at 100,000 partitions.

The simulator runs in its own process (its renderer and the collector would otherwise share one
GIL); the collector runs here exactly as the service runs it (``ClusterCollector.collect_once``).

    python -m benchmarks.bench_collectors [--configs 1000x100000,1000x20000] [--rounds 7]
                                          [--previous benchmarks/data/collectors_previous.json] [--rounds-only]

``--groups-every N`` reads the consumer groups' committed offsets every N rounds (after the first two), as
``KafkaSourceOptions(groups_every=N)`` does: each round says whether it read them or carried them over, so a run
with a large N measures what the per-round read costs.

Every figure of a round is the median over the rounds after the first (the first round is cold:
it reads every broker's log dirs and configs, and has no rates yet; it is reported on its own).
Collector CPU (this process) and kafkasim CPU (the child) are reported apart: the two share the
machine's cores, and a real federation's brokers render their metrics on their own machines.
``--previous`` is a JSON this benchmark wrote for an earlier implementation (measured the same way);
its figures are printed beside the current ones with the ratio.  ``--rounds-only`` measures the rounds and
the parse cost per broker only (no scrape-only rounds with prometheus_client, ~2 minutes at 1,000 brokers; no
window micro-benchmarks), for runs alternated with another implementation.  Writes ``out/bench/collectors.json``.
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
from collectors.history import RingWindow
from collectors.promtext import parse_fast, parse_reference
from collectors.scrape import scrape_all
from kafkaio.endpoints import parse_endpoints
from kafkaio.source import KafkaSourceOptions


def serve(brokers: int, partitions: int, out: Path) -> None:
    """Child process: build and run the federation, write the endpoints file, serve until stdin closes."""
    from kafkasim.broker.server import SimRunner
    from kafkasim.scenarios.scenario import build_federation, scale_scenario

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


def parse_costs(urls: list[str]) -> dict[str, Any]:
    """Parse time of one broker's payloads (every endpoint of the broker: a JMX exporter and a node_exporter)
    with the fast parser and with prometheus_client's."""
    texts = [urllib.request.urlopen(u, timeout=30).read().decode() for u in urls]
    out: dict[str, Any] = {"payload_bytes": sum(map(len, texts)), "payload_lines": sum(t.count("\n") for t in texts),
                           "endpoints": len(texts)}
    for name, fn in (("fast", lambda t: parse_fast(t, WANTED_METRICS)),
                     ("fast_all_families", lambda t: parse_fast(t)),
                     ("prometheus_client", lambda t: parse_reference(t))):
        for t in texts:
            fn(t)
        reps = 20
        t0 = time.perf_counter()
        for _ in range(reps):
            for t in texts:
                fn(t)
        out[f"{name}_ms"] = (time.perf_counter() - t0) / reps * 1000
    return out


def window_memory(partitions: int, capacity: int, every: int, series: int) -> dict[str, Any]:
    """Fill partition windows for ``partitions`` keys to capacity; report bytes (matrix + index)."""
    tracemalloc.start()
    wins = [RingWindow(capacity, 1024, every=every) for _ in range(series)]
    keys: list[Any] = [(f"t-{i // 20}", i % 20) for i in range(partitions)]
    rng = np.random.default_rng(1)
    vals = rng.lognormal(10, 1, partitions)
    first_s = time.perf_counter()
    for _ in range(every):  # the first column creates every row (once per key, not per round)
        for w in wins:
            w.append_array(keys, vals)
    first_s = time.perf_counter() - first_s
    t0 = time.perf_counter()
    for _ in range(every):  # steady rounds: the matrix is preallocated, a column fills every row
        for w in wins:
            w.append_array(keys, vals)
    per_round = (time.perf_counter() - t0) / every
    t1 = time.perf_counter()
    stats = wins[0].stats(keys[:10_000])
    stats_s = (time.perf_counter() - t1) * partitions / 10_000
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(stats) == 10_000
    return {"partitions": partitions, "samples_per_key": capacity, "rounds_per_sample": every, "series": series,
            "matrix_bytes": sum(w.nbytes for w in wins), "traced_bytes": cur, "traced_peak_bytes": peak,
            "append_seconds_per_round": per_round, "first_rounds_seconds": first_s,
            "median_p95_seconds_all_keys": stats_s}


def full_disk_window(disks: int = 12_000, capacity: int = 360, points: int = 60) -> dict[str, Any]:
    """``load_history`` of every disk once the 1-hour window is full (what every round pays after an
    hour): the vectorised path the builder uses vs one disk at a time (``downsampled`` per key)."""
    rng = np.random.default_rng(2)
    keys: list[Any] = [(b, f"/data{d}") for b in range(disks // 12) for d in range(12)]
    w = RingWindow(capacity)
    vals = rng.random((capacity, len(keys)))
    vals[rng.random((capacity, len(keys))) < 0.001] = np.nan  # a few gaps
    for c in range(capacity):
        w.append_array(keys, vals[c])
    t0 = time.perf_counter()
    many = w.downsampled_many(keys, points, 0.0, 1.0)
    vec_s = time.perf_counter() - t0
    sample = keys[:: max(len(keys) // 1000, 1)]
    t0 = time.perf_counter()
    one = [[min(max(x, 0.0), 1.0) for x in w.downsampled(k, points)] for k in sample]
    per_key_s = (time.perf_counter() - t0) * len(keys) / len(sample)
    assert all(np.allclose(a, many[keys.index(k)]) for a, k in zip(one[:20], sample[:20], strict=True))
    return {"disks": len(keys), "samples": capacity, "points": points, "vectorised_s": vec_s,
            "one_disk_at_a_time_s": per_key_s}


def _proc_cpu(pid: int) -> float:
    """utime + stime of a process (seconds), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def run_config(brokers: int, partitions: int, rounds_n: int, interval: float, compare: bool,
               groups_every: int = 1) -> dict[str, Any]:
    """Start a federation, run ``rounds_n`` collection rounds, measure wall and CPU per round."""
    tmpdir = Path(tempfile.mkdtemp(prefix="bench-collectors-"))
    epf = tmpdir / "endpoints.json"
    print(f"\nstarting kafkasim: {brokers} brokers x 12 disks, {partitions} partitions (RF 3)...", flush=True)
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_collectors", "--serve", str(epf),
                              "--brokers", str(brokers), "--partitions", str(partitions)],
                             stdin=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1])
    out: dict[str, Any] = {"brokers": brokers, "partitions": partitions, "disks": brokers * 12}
    try:
        deadline = time.time() + 600
        while not epf.exists():
            if child.poll() is not None or time.time() > deadline:
                raise RuntimeError("kafkasim failed to start")
            time.sleep(0.5)
        doc = json.loads(epf.read_text())
        eps = parse_endpoints(doc, "c1")
        print(f"kafkasim up in {doc.get('build_seconds', 0):.1f} s", flush=True)
        rounds: list[dict[str, Any]] = []
        col = ClusterCollector(eps, ModelConfig(), scrape_timeout_s=60.0, concurrency=256,
                               source_options=KafkaSourceOptions(groups_every=groups_every))
        try:
            for k in range(rounds_n):
                t0 = time.monotonic()
                cpu0, sim0 = time.process_time(), _proc_cpu(child.pid)
                c = col.collect_once()
                rs = dict(c.round_seconds)
                rs["collector_cpu_s"] = time.process_time() - cpu0
                rs["kafkasim_cpu_s"] = _proc_cpu(child.pid) - sim0
                cov = c.coverage
                rs.update({"round": k + 1, "admin_full": not cov.admin_details_age_s,
                           "offsets_read": bool(cov.consumer_offsets.get("fresh")),
                           "brokers_scraped": len(cov.brokers_with_metrics),
                           "partitions": cov.partitions_total, "partitions_with_rates": cov.partitions_with_rates,
                           "parse_ms_per_broker": cov.parse_seconds / max(len(cov.brokers_with_metrics), 1) * 1000,
                           "failed": len(cov.metrics_failed), "kafka_errors": len(cov.kafka_errors)})
                rounds.append(rs)
                full = " full" if rs["admin_full"] else ""
                print(f"round {k + 1}: wall {rs['total']:.2f} s (admin {rs['admin']:.2f}{full}, "
                      f"scrape+parse {rs['scrape']:.2f}, parse {rs['parse']:.2f}, build {rs['build']:.2f}); "
                      f"CPU collector {rs['collector_cpu_s']:.2f} s, kafkasim {rs['kafkasim_cpu_s']:.2f} s; "
                      f"{rs['partitions_with_rates']}/{rs['partitions']} partitions with rates"
                      f"{'' if rs['offsets_read'] else '; offsets carried'}", flush=True)
                if k + 1 < rounds_n:
                    time.sleep(max(interval - (time.monotonic() - t0), 0.0))
            out["model_memory_bytes"] = col.model.memory_bytes()
        finally:
            col.close()
        out["rounds"] = rounds
        steady = [r for r in rounds[1:] if not r["admin_full"]] or rounds[1:] or rounds
        out["steady_rounds_n"] = len(steady)
        out["first_round"] = {k: rounds[0][k] for k in ("total", "admin", "scrape", "parse", "build", "collector_cpu_s",
                                                        "kafkasim_cpu_s")}
        out["steady_round"] = {k: float(np.median([r[k] for r in steady]))
                               for k in ("total", "admin", "scrape", "parse", "build", "collector_cpu_s",
                                         "kafkasim_cpu_s", "parse_ms_per_broker")}
        full_rounds = [r for r in rounds[1:] if r["admin_full"]]
        if full_rounds:
            out["full_admin_round"] = {k: float(np.median([r[k] for r in full_rounds]))
                                       for k in ("total", "admin", "collector_cpu_s", "kafkasim_cpu_s")}
        urls = eps.metrics_urls
        out["parse_per_payload"] = parse_costs([m.url for m in eps.brokers[0].metrics_endpoints])
        if compare:
            t0 = time.perf_counter()
            fast_round = scrape_all(urls, 60.0, 256, lambda t: parse_fast(t, WANTED_METRICS))
            fast_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            ref_round = scrape_all(urls, 60.0, 256, parse_reference)
            ref_s = time.perf_counter() - t0
            out["scrape_round"] = {
                "fast": {"wall_s": fast_s, "parse_s_total": sum(r.parse_s for r in fast_round.results.values()),
                         "failed": len(fast_round.failed)},
                "prometheus_client": {"wall_s": ref_s,
                                      "parse_s_total": sum(r.parse_s for r in ref_round.results.values()),
                                      "failed": len(ref_round.failed)}}
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait(60)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--brokers", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--configs", default="1000x100000,1000x20000",
                    help="comma-separated BROKERSxPARTITIONS federations to measure")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--groups-every", type=int, default=1,
                    help="rounds between reads of the committed offsets (KafkaSourceOptions.groups_every)")
    ap.add_argument("--rounds-only", action="store_true",
                    help="only the collection rounds and the parse cost per broker (alternated runs)")
    ap.add_argument("--previous", type=Path,
                    default=Path(__file__).resolve().parent / "data" / "collectors_previous.json",
                    help="JSON of an earlier implementation's run, printed beside this one")
    args = ap.parse_args()
    if args.serve is not None:
        serve(args.brokers, args.partitions, args.serve)
        return 0
    load0 = os.getloadavg()
    configs = []
    for item in args.configs.split(","):
        b, _, p = item.partition("x")
        configs.append((int(b), int(p)))
    results = [run_config(b, p, args.rounds, args.interval, compare=(i == 0 and not args.rounds_only),
                          groups_every=args.groups_every)
               for i, (b, p) in enumerate(configs)]
    windows = {} if args.rounds_only else {
        "1h_at_10s_2_series": window_memory(100_000, 360, 1, 2),
        "1h_at_1min_2_series_default": window_memory(100_000, 60, 6, 2),
    }
    disk_hist = None if args.rounds_only else full_disk_window()
    result = {"configs": results, "target_round_seconds": 5.0, "window_memory_100k_partitions": windows,
              "load_history_full_window": disk_hist,
              "peak_rss_mib": peak_rss_mib(), "cpus": os.cpu_count(), "loadavg_at_start": load0,
              "loadavg_at_end": os.getloadavg(), "command": " ".join(["python -m benchmarks.bench_collectors",
                                                                       *sys.argv[1:]])}
    prev: dict[str, Any] | None = None
    if args.previous is not None and args.previous.exists():
        prev = json.loads(args.previous.read_text())
        result["previous"] = {"file": str(args.previous), "label": prev.get("label", "previous")}
    path = write_result("collectors", result)
    print_table(result, prev)
    print(f"\nwritten {path}")
    return 0


def _get(doc: dict[str, Any] | None, *keys: Any) -> float | None:
    cur: Any = doc
    for k in keys:
        if cur is None:
            return None
        try:
            cur = cur[k]
        except (KeyError, IndexError, TypeError):
            return None
    return float(cur) if isinstance(cur, (int, float)) else None


def print_table(result: dict[str, Any], prev: dict[str, Any] | None) -> None:
    """One block per federation: figure, now, previous implementation, ratio now/previous."""
    rows: list[tuple[str, tuple[Any, ...], str]] = [
        ("steady round wall, median, s (target <= 5)", ("steady_round", "total"), "{:.2f}"),
        ("  admin: metadata, reassignments, 1/6 of log dirs + configs, s", ("steady_round", "admin"), "{:.2f}"),
        ("  scrape + parse (concurrent with admin), s", ("steady_round", "scrape"), "{:.2f}"),
        ("  snapshot build, s", ("steady_round", "build"), "{:.2f}"),
        ("  collector CPU per round (this process), s", ("steady_round", "collector_cpu_s"), "{:.2f}"),
        ("  kafkasim CPU per round (render /metrics, admin answers), s", ("steady_round", "kafkasim_cpu_s"), "{:.2f}"),
        ("round with a full admin refresh (previous: every 6th), s", ("full_admin_round", "total"), "{:.2f}"),
        ("first round (cold: every log dir and config, no rates yet), s", ("first_round", "total"), "{:.2f}"),
        ("parse per broker in the round (under contention), ms", ("steady_round", "parse_ms_per_broker"), "{:.2f}"),
        ("parse one broker's payloads, fast parser, ms", ("parse_per_payload", "fast_ms"), "{:.2f}"),
        ("parse one broker's payloads, prometheus_client (baseline), ms", ("parse_per_payload", "prometheus_client_ms"),
         "{:.2f}"),
        ("payloads of one broker, KiB", ("parse_per_payload", "payload_bytes"), "{:.0f}"),
        ("scrape-only round, fast parser, s", ("scrape_round", "fast", "wall_s"), "{:.2f}"),
        ("scrape-only round, prometheus_client (baseline), s", ("scrape_round", "prometheus_client", "wall_s"),
         "{:.2f}"),
        ("model memory after the rounds (windows + rate state), MiB", ("model_memory_bytes", "total"), "{:.0f}"),
    ]
    scale = {"payload_bytes": 1 / 1024, "total": 1.0}
    label = (prev or {}).get("label", "previous")
    for r in result["configs"]:
        pcfg = None
        if prev is not None:
            pcfg = next((c for c in prev.get("configs", []) if c.get("brokers") == r["brokers"]
                         and c.get("partitions") == r["partitions"]), None)
        n_steady = r.get("steady_rounds_n", len(r["rounds"]) - 1)
        print(f"\n{r['brokers']} brokers x 12 disks, {r['partitions']:,} partitions (RF 3); "
              f"median of {n_steady} rounds after the first")
        print(f"{'figure':66} {'now':>9} {label[:12]:>12} {'now/prev':>9}")
        print("-" * 99)
        for name, keys, fmt in rows:
            mul = 1 / 2**20 if keys[0] == "model_memory_bytes" else scale.get(keys[-1], 1.0)
            now, was = _get(r, *keys), _get(pcfg, *keys)
            if now is None and was is None:
                continue
            ratio = f"{now / was:.2f}" if now is not None and was else "-"
            print(f"{name:66} {fmt.format(now * mul) if now is not None else '-':>9} "
                  f"{fmt.format(was * mul) if was is not None else '-':>12} {ratio:>9}")
    print()
    for name, w in result["window_memory_100k_partitions"].items():
        print(f"{'window ' + name + ' (100k partitions), MiB':66} {w['traced_bytes'] / 2**20:>9.0f}")
    for name, w in result["window_memory_100k_partitions"].items():
        print(f"{'  append one round to ' + name + ', ms':66} {w['append_seconds_per_round'] * 1000:>9.1f}")
    h = result["load_history_full_window"]
    if h is not None:
        print(f"{'load_history of ' + str(h['disks']) + ' disks from a full 1 h window, vectorised, ms':66} "
              f"{h['vectorised_s'] * 1000:>9.1f}")
        print(f"{'  the same one disk at a time (baseline), ms':66} {h['one_disk_at_a_time_s'] * 1000:>9.1f}")
    print(f"{'collector process peak RSS, MiB':66} {result['peak_rss_mib']:>9.0f}")
    la0, la1 = result["loadavg_at_start"], result["loadavg_at_end"]
    print(f"load average at start {la0[0]:.2f} {la0[1]:.2f} {la0[2]:.2f}, at end {la1[0]:.2f} {la1[1]:.2f} "
          f"{la1[2]:.2f} ({result['cpus']} CPUs)")


if __name__ == "__main__":
    raise SystemExit(main())
