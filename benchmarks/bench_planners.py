"""Planner benchmark: Guardian's disk-aware rebalance beside Kafka's default count-based assignment.

``python -m benchmarks.bench_planners [--sizes 100,1000,3000] [--no-large] [--seed 1]``  (the default sizes are
100, 1,000 and 3,000 brokers; ``--no-large`` leaves out 3,000 brokers x 300k partitions, a few minutes)

For each size (brokers x 12 disks, 100 partitions per broker, RF 3, heavy-tailed traffic, 25% NVMe
brokers, two IDCs with placement policies on half the topics) it generates a snapshot and measures,
in the same run:

* Guardian (:func:`planners.plan_rebalance`, the shared invariant check included): plan time, peak /
  mean estimated disk utilisation per pool after, the single-replica floor, bytes moved against the
  forced minimum (fractional-knapsack lower bound) both at the 1.10 target and at the balance the
  plan reaches (its own worst peak/mean), replicas moved, bytes over the network apart from intra-broker
  (log-dir) bytes;
* Kafka's default (what ``kafka-reassign-partitions --generate`` proposes): a rack-alternated
  round-robin over the alive brokers of each topic's pool, ignoring load; each new replica on the log
  dir with the fewest partitions (the broker's own choice). Same figures, plus how many hard
  constraints the proposal breaks;
* Yelp kafka-utils 4.1.0 (``kafka-cluster-manager rebalance --replication-groups --brokers --leaders``,
  replication group = rack, one cluster per pool; :mod:`benchmarks.kafka_utils_peer`, its own venv under
  ``out/peers``, made on first use): the count balancer (``PartitionCountBalancer``) and the genetic
  balancer (``GeneticBalancer``, weight = disk bytes/s per replica, size = bytes) — its full proposal,
  log dirs by the broker's rule, then a preferred-replica election; same figures. Each runs under a time
  limit (``--peer-timeout``, ``--genetic-timeout``) and is reported as "did not finish in N s" past it;
  neither is tried again at larger sizes once it did not finish.

Also, in the same run: ``plan leaders`` time on each size; the budget curve (peak/mean reached against
byte budgets, :mod:`planners.budget_curve`) at 1,000 brokers (else the largest size); the large-replica
case (two 150 MB/s replicas on one NVMe disk, only an exchange places them; target <= 1.10); and
pool-grow moving nothing outside the growing pool nor onto any broker but the new ones. Peak RSS is the
process's after each size (one snapshot is alive at a time, sizes ascending, so it is that size's).

Prints a table and writes ``out/bench/planners.json``. Plan time is given as wall and CPU seconds
(the planner is single-threaded; CPU time is the honest figure when other work shares the cores).
Targets (DESIGN.md): plan <= 60 s at 1,000 brokers; peak/mean <= 1.10 per pool (or within 5% of the
single-replica floor); bytes moved <= 1.15x the forced minimum (issue 34's bound:
fractional knapsack down to L / (C - n c_max / 11) per pool, :func:`benchmarks.planner_metrics.forced_min_bytes`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import peak_rss_mib, write_result
from benchmarks.external_assignment import plan_from_assignment
from benchmarks.kafka_utils_peer import PeerRun, run_kafka_utils
from benchmarks.planner_metrics import forced_min_bytes, pool_figures
from domain import (
    Broker,
    ClusterSnapshot,
    Disk,
    DiskKind,
    Partition,
    PartitionId,
    Plan,
    Topic,
    apply_plan,
    balance_disks,
    check_plan,
    summarize_plan,
)
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import plan_leaders, plan_pool_grow, plan_rebalance
from planners.budget_curve import budget_curve

TARGET_SECONDS = 60.0
DEFAULT_SIZES = (100, 1000, 3000)
LARGE = 3000
TARGET_PEAK = 1.10
TARGET_BYTES_RATIO = 1.15
PEERS = (("kafka-utils count", "kafka_utils_count"), ("kafka-utils genetic", "kafka_utils_genetic"))


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
    targets: dict[PartitionId, tuple[int, ...]] = {}
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
            targets[p.id] = tuple(replicas)
    return plan_from_assignment(snapshot, targets, "kafka-default")


def _figures(snapshot: ClusterSnapshot, plan: Plan, seconds: float, cpu: float, forced: float,
             at_reached: bool = False) -> dict[str, Any]:
    after = apply_plan(snapshot, plan)
    summary = plan.summary or summarize_plan(snapshot, after, plan)
    pools = pool_figures(after)
    violations = Counter(v.code for v in check_plan(snapshot, plan))
    worst = max(pools.values(), key=lambda f: f["peak_to_mean"])
    allowed = max(TARGET_PEAK, 1.05 * worst["floor_to_mean"])
    extra: dict[str, Any] = {}
    if at_reached:  # the least any plan must move to bring every disk to the balance this one reaches
        reached = max(forced_min_bytes(snapshot, max(worst["peak_to_mean"], 1.0)), 1.0)
        extra = {"forced_min_at_reached": reached, "bytes_vs_forced_at_reached": summary.bytes_to_move / reached}
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
        "network_bytes": summary.network_bytes,
        "intra_broker_bytes": summary.intra_broker_bytes,
        "violations": dict(sorted(violations.items())),
        "notes": list(plan.notes)[:5],
        **extra,
    }


def peer_figures(snapshot: ClusterSnapshot, peer: PeerRun, forced: float) -> dict[str, Any]:
    """A peer's figures (as :func:`_figures`) when it produced a plan, else only its status."""
    if peer.plan is None:
        return {"status": peer.status, "plan_seconds": round(peer.seconds, 3)}
    return {"status": "ok", **_figures(snapshot, peer.plan, peer.seconds, peer.cpu_seconds, forced),
            "leader_changes": len(peer.plan.leaders), **peer.details}


def run(brokers: int, seed: int, peers: dict[str, float | str] | None = None) -> dict[str, Any]:
    """Generate one cluster and measure Guardian, Kafka's default and the peers on it.

    ``peers``: kafka-utils balancer (``count``, ``genetic``) -> time limit in seconds, or a status string
    to report instead of running it.
    """
    t0 = time.perf_counter()
    snapshot = generate_snapshot(spec_for(brokers, seed))
    _ = snapshot.index
    gen = time.perf_counter() - t0
    before = pool_figures(snapshot)
    forced = forced_min_bytes(snapshot, TARGET_PEAK)

    t0, c0 = time.perf_counter(), time.process_time()
    plan = plan_rebalance(snapshot)  # includes building the summary and the shared invariant check
    guardian = _figures(snapshot, plan, time.perf_counter() - t0, time.process_time() - c0, forced, at_reached=True)

    c0 = time.process_time()
    leaders = plan_leaders(snapshot)
    guardian["leaders_cpu_seconds"] = round(time.process_time() - c0, 3)
    guardian["leader_changes"] = len(leaders.leaders)
    guardian["peak_rss_mib"] = round(peak_rss_mib(), 1)

    t0, c0 = time.perf_counter(), time.process_time()
    baseline_plan = kafka_default_plan(snapshot, seed)
    baseline = _figures(snapshot, baseline_plan, time.perf_counter() - t0, time.process_time() - c0, forced)
    external: dict[str, Any] = {}
    for balancer, limit in (peers or {}).items():
        if isinstance(limit, str):
            external[f"kafka_utils_{balancer}"] = {"status": limit}
            continue
        print(f"    kafka-utils {balancer} (limit {limit:.0f} s)", flush=True)
        peer = run_kafka_utils(snapshot, balancer, timeout=limit,
                               max_partition_movements=100 if balancer == "genetic" else None)
        external[f"kafka_utils_{balancer}"] = peer_figures(snapshot, peer, forced)
    return {
        "brokers": brokers, "disks": brokers * 12, "partitions": 100 * brokers, "replicas": 300 * brokers,
        "generate_seconds": round(gen, 3), "pools_before": before,
        "peak_to_mean_before": max(f["peak_to_mean"] for f in before.values()),
        "forced_min_bytes": forced, "guardian": guardian, "kafka_default": baseline, **external,
        "_snapshot": snapshot,
    }


def large_replica_case() -> ClusterSnapshot:
    """20 one-NVMe brokers (1,000 MB/s) and 20 one-HDD brokers (100 MB/s): two 150 MB/s replicas share the
    first NVMe disk, the 19 others hold 24 x 10 MB/s replicas each, the HDDs 4 x 6 MB/s each (0.24)."""
    brokers: list[Broker] = []
    big = [Partition("big", k, (1,), 1, (1,), ("/nvme",), size_bytes=100 * 2**30, bytes_in_per_s=150e6)
           for k in range(2)]
    small: list[Partition] = []
    for b in range(1, 41):
        nvme = b <= 20
        path = "/nvme" if nvme else "/data1"
        disk = Disk(path=path, kind=DiskKind.NVME if nvme else DiskKind.HDD, capacity_bytes=4000 * 2**30,
                    max_bytes_per_s=1000e6 if nvme else 100e6, used_bytes=0, util=0.24, load_history=(0.24,))
        brokers.append(Broker(id=b, host="h", port=9092, idc="a", rack=f"r{b % 5}", pool="shared", disks=(disk,)))
        if b > 1:
            rate, n = (10e6, 24) if nvme else (6e6, 4)
            small += [Partition("small", len(small) + k, (b,), b, (b,), (path,), size_bytes=10 * 2**30,
                                bytes_in_per_s=rate) for k in range(n)]
    topics = [Topic("big", tuple(big)), Topic("small", tuple(small))]
    return ClusterSnapshot(cluster="large-replica", taken_at=datetime(2026, 11, 21, 10, tzinfo=UTC),
                           brokers=tuple(brokers), topics=tuple(topics))


def run_large_replica() -> dict[str, Any]:
    """Guardian on the large-replica case: peak/mean before and after (target <= 1.10)."""
    snap = large_replica_case()
    plan = plan_rebalance(snap)
    before, after = pool_figures(snap)["shared"], pool_figures(apply_plan(snap, plan))["shared"]
    return {"peak_to_mean_before": round(before["peak_to_mean"], 3),
            "peak_to_mean_after": round(after["peak_to_mean"], 3),
            "floor_to_mean": round(before["floor_to_mean"], 3), "replicas_moved": len(plan.moves),
            "violations": len(check_plan(snap, plan)), "ok": after["peak_to_mean"] <= TARGET_PEAK + 1e-9}


def run_pool_grow(seed: int) -> dict[str, Any]:
    """Grow one pool by 3 brokers on a 3-pool cluster: what moves, whose, where."""
    snap = generate_snapshot(GeneratorSpec(brokers=100, disks_per_broker=12, partitions=10_000, replication_factor=3,
                                           skew="zipf", seed=seed, idcs=("idc-a", "idc-b"), racks_per_idc=5,
                                           nvme_fraction=0.25, pools={"shared": 0.5, "pay": 0.4, "free": 0.1},
                                           cluster="bench-grow"))
    c0 = time.process_time()
    growth = plan_pool_grow(snap, "shared", 3)
    cpu = time.process_time() - c0
    new = set(growth.brokers)
    index = snap.index
    outside = sum(1 for m in growth.plan.moves if index.topic_by_name[m.topic].pool != "shared")
    elsewhere = sum(1 for m in growth.plan.moves
                    if set(m.replicas) - set(index.partition_by_id[m.id].replicas) - new)
    after_snap = apply_plan(growth.snapshot, growth.plan)
    after = pool_figures(after_snap)["shared"]
    minimum = grow_min_bytes(growth.snapshot, new, after["mean_util"])
    moved = growth.plan.summary.bytes_to_move if growth.plan.summary else 0
    return {"partitions_moved": len(growth.plan.moves), "moved_outside_pool": outside,
            "bytes_moved": moved, "min_bytes": minimum, "bytes_vs_min": moved / minimum if minimum else 0.0,
            "moved_to_other_brokers": elsewhere, "peak_to_mean_after": round(after["peak_to_mean"], 3),
            "plan_cpu_seconds": round(cpu, 3), "violations": len(check_plan(growth.snapshot, growth.plan))}


def grow_min_bytes(snapshot: ClusterSnapshot, new: set[int], mean: float) -> float:
    """Fractional-knapsack lower bound of the bytes that bring the ``new`` brokers' disks to ``mean`` utilisation:
    their missing load (mean x ceiling, summed) taken from the pool's replicas on the other disks above the mean,
    highest load per byte first (the last one fractionally)."""
    index = snapshot.index
    need = sum(mean * d.max_bytes_per_s - index.disk_load.get((b, d.path), 0.0)
               for b in sorted(new) for d in index.broker_by_id[b].disks)
    items = []
    for disk_id in balance_disks(snapshot, "shared"):
        if disk_id[0] in new or index.disk_util_estimate(disk_id) <= mean:
            continue
        for pid in index.replicas_on_disk[disk_id]:
            p = index.partition_by_id[pid]
            load = p.replica_load(disk_id[0])
            if load > 0 and p.size_bytes:
                items.append((load / p.size_bytes, load, p.size_bytes))
    items.sort(key=lambda x: -x[0])
    total = 0.0
    for _, load, size in items:
        if need <= 0:
            break
        take = min(1.0, need / load)
        total += take * size
        need -= take * load
    return total


def vars_of(point: Any) -> dict[str, Any]:
    """A budget-curve point as a JSON object."""
    return {"max_bytes": point.max_bytes, "bytes_moved": point.bytes_moved,
            "share_of_replica_bytes": round(point.share_of_replica_bytes, 4),
            "peak_to_mean": round(point.peak_to_mean, 4)}


def _tib(n: float) -> str:
    return f"{n / 2**40:,.1f} TiB"


def print_table(rows: list[dict[str, Any]]) -> None:
    """The comparison and scaling table."""
    head = (f"{'brokers':>7} {'disks':>6} {'parts':>7} {'planner':<19} {'wall s':>7} {'cpu s':>6} {'peak/mean':>16} "
            f"{'floor':>6} {'bytes moved':>13} {'forced min':>12} {'x min':>6} {'replicas':>9} {'violations':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        for name, key in (("guardian", "guardian"), ("kafka default", "kafka_default"), *PEERS):
            if key not in r:
                continue
            f = r[key]
            if f.get("status", "ok") != "ok":
                print(f"{r['brokers']:>7} {r['disks']:>6} {r['partitions']:>7} {name:<19} {f['status']}")
                continue
            floor = max(p["floor_to_mean"] for p in r["pools_before"].values())
            print(f"{r['brokers']:>7} {r['disks']:>6} {r['partitions']:>7} {name:<19.19} "
                  f"{f['plan_seconds']:>7.2f} {f['plan_cpu_seconds']:>6.2f} "
                  f"{r['peak_to_mean_before']:>7.2f} -> {f['peak_to_mean_after']:>5.2f} {floor:>6.2f} "
                  f"{_tib(f['bytes_moved']):>13} {_tib(r['forced_min_bytes']):>12} {f['bytes_vs_forced_min']:>6.2f} "
                  f"{f['replicas_moved']:>9} {sum(f['violations'].values()):>10}")
    for r in rows:
        g = r["guardian"]
        print(f"{r['brokers']:>7} brokers: bytes moved {g['bytes_vs_forced_at_reached']:.2f} x the fractional-knapsack "
              f"bound at the balance reached ({g['peak_to_mean_after']:.3f}: {_tib(g['forced_min_at_reached'])})")
    for r in rows:
        g, k = r["guardian"], r["kafka_default"]
        print(f"{r['brokers']:>7} brokers: over the network {_tib(g['network_bytes'])} + between log dirs of a broker "
              f"{_tib(g['intra_broker_bytes'])} ({g['intra_broker_moves']} intra-broker moves); kafka default "
              f"{_tib(k['network_bytes'])} over the network")
    for r in rows:
        g = r["guardian"]
        print(f"{r['brokers']:>7} brokers: plan leaders {g['leaders_cpu_seconds']:.2f} cpu s ({g['leader_changes']} "
              f"changes); peak RSS {g['peak_rss_mib']:.0f} MiB")
    for r in rows:
        for name, key in PEERS:
            f = r.get(key, {})
            if f.get("status") == "ok":
                print(f"{r['brokers']:>7} brokers: {name} {f['partitions_moved']} partitions reassigned, "
                      f"{f['leader_changes']} preferred-leader elections after; {f['process_seconds']:.1f} s in its "
                      f"process (interpreter and JSON included)")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"targets: plan <= {TARGET_SECONDS:.0f} s at 1,000 brokers; peak/mean <= {TARGET_PEAK} per pool (or 1.05 x "
          f"floor); bytes <= {TARGET_BYTES_RATIO} x forced minimum; 0 violations")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="comma-separated broker counts")
    parser.add_argument("--no-large", action="store_true",
                        help=f"leave out sizes of {LARGE:,} brokers and more (the {LARGE:,} x 300k-partition run)")
    parser.add_argument("--large", action="store_true", help=f"add {LARGE:,} brokers to --sizes if missing")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None, help="JSON result file (default out/bench/planners.json)")
    parser.add_argument("--peer-timeout", type=float, default=300.0,
                        help="seconds kafka-utils' count balancer may take per size")
    parser.add_argument("--genetic-timeout", type=float, default=120.0,
                        help="seconds kafka-utils' genetic balancer may take (0: do not run it)")
    parser.add_argument("--no-peers", action="store_true", help="do not run kafka-utils")
    args = parser.parse_args(argv)
    peers: dict[str, float | str] = {}
    if not args.no_peers:
        peers["count"] = args.peer_timeout
        peers["genetic"] = args.genetic_timeout if args.genetic_timeout > 0 else "not run (--genetic-timeout 0)"
    rows = []
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.large and LARGE not in sizes:
        sizes.append(LARGE)
    if args.no_large:
        sizes = [n for n in sizes if n < LARGE]
    at: dict[str, Any] | None = None  # the row the budget curve is drawn at: 1,000 brokers, else the largest
    curve: list[dict[str, Any]] = []
    curve_cpu = 0.0
    for k, n in enumerate(sizes):
        print(f"... {n} brokers", flush=True)
        row = run(n, args.seed, peers)
        for balancer in ("count", "genetic"):  # a peer that did not finish is not tried at larger sizes
            status = row.get(f"kafka_utils_{balancer}", {}).get("status", "ok")
            if status.startswith("did not finish") and not status.endswith("brokers)"):
                peers[balancer] = f"not run ({status} at {n} brokers)"
        snap = row.pop("_snapshot")
        if at is None and (n == 1000 or k == len(sizes) - 1):
            c0 = time.process_time()
            curve = [vars_of(p) for p in budget_curve(snap)]
            curve_cpu, at = time.process_time() - c0, row
        del snap  # only one snapshot alive at a time: each size's RSS is its own
        rows.append(row)
    print_table(rows)
    assert at is not None
    print(f"budget curve at {at['brokers']} brokers ({curve_cpu:.1f} cpu s): "
          "max bytes -> bytes moved (share of replica bytes), worst pool peak/mean")
    for p in curve:
        print(f"  {_tib(p['max_bytes']):>13} -> {_tib(p['bytes_moved']):>13} ({p['share_of_replica_bytes']:6.1%})  "
              f"{p['peak_to_mean']:.3f}")
    large = run_large_replica()
    print(f"large-replica case: peak/mean {large['peak_to_mean_before']} -> {large['peak_to_mean_after']} "
          f"(floor {large['floor_to_mean']}, target {TARGET_PEAK}), {large['replicas_moved']} partitions moved, "
          f"{large['violations']} violations")
    grow = run_pool_grow(args.seed)
    print(f"pool-grow (100 brokers, pool 'shared' +3): {grow['partitions_moved']} partitions moved, "
          f"{grow['moved_outside_pool']} outside the pool, {grow['moved_to_other_brokers']} onto other than the new "
          f"brokers; peak/mean after {grow['peak_to_mean_after']}; {grow['plan_cpu_seconds']} cpu s; "
          f"{grow['violations']} violations; bytes {_tib(grow['bytes_moved'])} = {grow['bytes_vs_min']:.2f} x the "
          f"minimum that fills the new brokers to the pool mean ({_tib(grow['min_bytes'])}; target <= 2)")
    g = at["guardian"]
    verdict = {
        "plan_time_ok": min(g["plan_seconds"], g["plan_cpu_seconds"]) <= TARGET_SECONDS,
        "peak_ok": g["peak_ok"],
        "bytes_ok": g["bytes_vs_forced_min"] <= TARGET_BYTES_RATIO,
        "valid": not g["violations"],
        "large_replica_ok": large["ok"],
        "pool_grow_contained": grow["moved_outside_pool"] == 0 and grow["moved_to_other_brokers"] == 0,
        "pool_grow_bytes_ok": grow["bytes_vs_min"] <= 2.0,
    }
    print(f"{at['brokers']}-broker run:", ", ".join(f"{k}={v}" for k, v in verdict.items()))
    result = {"rows": rows, "budget_curve": curve, "large_replica": large, "pool_grow": grow, "verdict": verdict,
              "peak_rss_mib": round(peak_rss_mib(), 1)}
    if args.out:
        path = Path(args.out)
        path.write_text(json.dumps(result, indent=2) + "\n")
    else:
        path = write_result("planners", result)
    print(f"written {path}")
    return 0 if all(verdict.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
