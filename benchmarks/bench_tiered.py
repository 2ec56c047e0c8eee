"""Tiered-storage metadata: Guardian's Raft-held event groups vs. the topic-based design (KIP-405 TBRLMM).

Measures, in one run, on 3 real ``guardian serve`` processes (tiered group enabled) and a kafkasim broker:
  * the store at size: ``--partitions`` partitions with ``--segments`` segments in all, two groups per
    partition (its copy-started events, then the matching copy-finished events).  It is seeded offline
    through the same store code the Raft state machine applies (``TieredStore.append``, one write
    transaction per group), once, and the file copied to every node before they start: loading 200k
    groups through Raft at ~250 groups/s would take ~15 minutes on this 2-core machine;
  * batched appends/s on top of it (AppendGroup over gRPC from ``--writers`` writers for
    ``--append-seconds``, idempotent clients, the same two groups per new partition);
  * fetch p99 of CurrentState and FetchGroups of a random partition;
  * **bootstrap of one partition's metadata**: Guardian (CurrentState + FetchGroups of that partition)
    vs. the topic-based design — the same events written, one record each, to a 50-partition metadata
    topic in kafkasim (partition = hash(topic-partition) % 50), replayed by a kafka-python consumer from
    the beginning of the metadata partition that holds it, keeping the one partition's records (what
    ``TopicBasedRemoteLogMetadataManager`` does when a replica is assigned a partition).  A replay reads
    only its metadata partition, so only ``--meta-written`` of the 50 are written (those the sampled
    partitions hash to, each with all of its records; 50 = all): the replay figures are those of the
    full topic, at a fraction of the producing time;
  * node RSS and restart-to-ready time of a follower (kill -9, restart, until its store has caught up).

Run: ``python -m benchmarks.bench_tiered [--partitions 100000 --segments 1000000 --meta-written 3
--bootstraps 6]`` (the full size of issue 21, ~6 minutes here; the default, for ``make bench``, is 10,000
partitions / 100,000 segments); writes out/bench/tiered.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import shutil
import statistics
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from controlplane.launcher import ServiceCluster
from tiered.client import COPY_FINISHED, COPY_STARTED, TieredClient
from tiered.model import EventKind, PartitionKey, SegmentEvent
from tiered.store import TieredStore

META_PARTITIONS = 50
CLUSTER = "c1"


def _sim_process(q: Any, stop: Any) -> None:
    from kafkasim.broker.server import SimRunner
    from kafkasim.scenarios.scenario import build_federation

    spec = {"seed": 1, "speed": 1.0, "tick_seconds": 1.0, "clusters": [
        {"name": "meta", "brokers": [{"count": 1, "idcs": ["a"], "racks_per_idc": 1, "memory_gb": 16,
                                      "disks": [{"count": 1, "kind": "nvme"}]}],
         "topics": [{"name": "__remote_log_metadata", "partitions": META_PARTITIONS, "rf": 1,
                     "bytes_in_per_s": 0, "size_gb": 0}]}]}
    runner = SimRunner(build_federation(spec), speed=0.0)
    runner.start()

    def unbound() -> None:
        fed = runner.server.fed
        fed.engine.batch_budget = 1 << 34
        for cl in fed.clusters.values():
            cl.max_batch_bytes_per_partition = 1 << 33

    runner.call(unbound)
    q.put(runner.endpoints["clusters"]["meta"]["bootstrap_servers"])
    stop.wait()
    runner.stop()


def _rss_mib(pid: int) -> dict[str, float]:
    """VmRSS, and its anonymous (heap) and file-backed (LMDB's mapped pages: reclaimable cache) parts."""
    out = {}
    for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
        name = ln.split(":")[0]
        if name in ("VmRSS", "RssAnon", "RssFile"):
            out[name] = int(ln.split()[1]) / 1024
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _status(cluster: ServiceCluster, node: int) -> dict[str, Any] | None:
    code, body = cluster.request(node, "GET", "/api/v1/tiered/status", timeout=5.0)
    return body if code == 200 else None


def _leader(cluster: ServiceCluster, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in cluster.procs:
            st = _status(cluster, n)
            if st and st["is_leader"] and st["ready"]:
                return n
        time.sleep(0.1)
    raise TimeoutError("no tiered leader")


def _events(p: int, segs: int, kind: int, ids: list[int] | None = None) -> list[dict[str, Any]]:
    if kind == COPY_STARTED:
        return [dict(kind=kind, start_offset=1000 * i, end_offset=1000 * i + 999, leader_epoch=1,
                     size_bytes=1 << 30, remote_path=f"/remote/{CLUSTER}/t{p % 100}/{p}/{1000 * i:020d}.log")
                for i in range(segs)]
    assert ids is not None
    return [dict(kind=kind, segment_id=s) for s in ids]


def seed(path: Path, partitions: int, segs: int, keep: set[int]) -> tuple[dict[str, Any], dict[int, list[int]]]:
    """Write the store at size (two groups per partition) with the state machine's store code; return figures
    and the segment ids of the partitions in ``keep``."""
    store = TieredStore(path)
    kept: dict[int, list[int]] = {}
    t0 = time.perf_counter()
    for p in range(partitions):
        key = PartitionKey(CLUSTER, f"t{p % 100}", p)
        started = [SegmentEvent.from_json(e) for e in _events(p, segs, COPY_STARTED)]
        ids = store.append(key, 1, started, 0)["segment_ids"]
        store.append(key, 1, [SegmentEvent(EventKind.COPY_FINISHED, s, 0, 0, 0, 0, "") for s in ids], 0)
        if p in keep:
            kept[p] = ids
    seconds = time.perf_counter() - t0
    store.copy_to(path / "compact.mdb")  # the data file is sparse (map size): copy the compact form only
    store.close()
    size = (path / "compact.mdb").stat().st_size
    return {"groups": 2 * partitions, "seconds": seconds, "groups_per_s": 2 * partitions / seconds,
            "store_mib": size / 2**20}, kept


def append_window(client: TieredClient, first: int, segs: int, writers: int, seconds: float) -> dict[str, Any]:
    """Writers append two groups per new partition (from ``first`` on) for ``seconds``; figures."""
    lat: list[float] = []
    lock = threading.Lock()
    counter = [first]
    stop = time.perf_counter() + seconds

    def work() -> None:
        while time.perf_counter() < stop:
            with lock:
                p = counter[0]
                counter[0] += 1
            t0 = time.perf_counter()
            r = client.append_group(CLUSTER, f"t{p % 100}", p, 1, _events(p, segs, COPY_STARTED))
            t1 = time.perf_counter()
            client.append_group(CLUSTER, f"t{p % 100}", p, 1, _events(p, segs, COPY_FINISHED, list(r.segment_ids)))
            t2 = time.perf_counter()
            with lock:
                lat.extend((t1 - t0, t2 - t1))

    threads = [threading.Thread(target=work) for _ in range(writers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    groups = len(lat)
    return {"writers": writers, "groups": groups, "events": groups * segs, "seconds": wall,
            "groups_per_s": groups / wall, "events_per_s": groups * segs / wall,
            "append_p50_ms": 1000 * _pct(lat, 0.5), "append_p99_ms": 1000 * _pct(lat, 0.99)}


def fetch_latency(client: TieredClient, partitions: int, samples: int) -> dict[str, Any]:
    cur, grp = [], []
    for _ in range(samples):
        p = random.randrange(partitions)
        t0 = time.perf_counter()
        client.current_state(CLUSTER, f"t{p % 100}", p)
        t1 = time.perf_counter()
        client.fetch_groups(CLUSTER, f"t{p % 100}", p, 0, 1000)
        t2 = time.perf_counter()
        cur.append(t1 - t0)
        grp.append(t2 - t1)
    return {"current_state_p50_ms": 1000 * _pct(cur, .5), "current_state_p99_ms": 1000 * _pct(cur, .99),
            "fetch_groups_p50_ms": 1000 * _pct(grp, .5), "fetch_groups_p99_ms": 1000 * _pct(grp, .99)}


def meta_partition(p: int) -> int:
    return zlib.crc32(f"{CLUSTER}/t{p % 100}-{p}".encode()) % META_PARTITIONS


def topic_write(bootstrap: str, segs: int, stored: dict[int, list[int]]) -> dict[str, Any]:
    """The same events, one record each, to the 50-partition metadata topic (TBRLMM's layout): every
    record of the partitions in ``stored`` (those of the metadata partitions written), in partition order."""
    from kafka import KafkaProducer

    prod = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=256 * 1024,
                         max_request_size=8 << 20)
    t0 = time.perf_counter()
    n = 0
    for p in sorted(stored):
        mp_ = meta_partition(p)
        for kind in (COPY_STARTED, COPY_FINISHED):
            for i, sid in enumerate(stored[p]):
                value = json.dumps({"tp": f"t{p % 100}-{p}", "segment_id": sid, "state": kind,
                                    "start": 1000 * i, "end": 1000 * i + 999, "epoch": 1, "size": 1 << 30,
                                    "path": f"/remote/{CLUSTER}/t{p % 100}/{p}/{1000 * i:020d}.log"}).encode()
                prod.send("__remote_log_metadata", value=value, key=f"t{p % 100}-{p}".encode(), partition=mp_)
                n += 1
    prod.flush()
    prod.close()
    return {"records": n, "seconds": time.perf_counter() - t0}


def topic_bootstrap(bootstrap: str, p: int) -> tuple[float, int, int]:
    """Replay the metadata partition holding ``p`` from its beginning; keep p's records (seconds, kept, read)."""
    from kafka import KafkaConsumer, TopicPartition

    t0 = time.perf_counter()
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      max_partition_fetch_bytes=4 << 20, fetch_max_bytes=16 << 20)
    tp = TopicPartition("__remote_log_metadata", meta_partition(p))
    c.assign([tp])
    c.seek_to_beginning(tp)
    end = c.end_offsets([tp])[tp]
    want = f"t{p % 100}-{p}".encode()
    kept = read = 0
    segments: dict[int, int] = {}
    while c.position(tp) < end:
        for recs in c.poll(timeout_ms=500).values():
            for r in recs:
                read += 1
                if r.key == want:
                    kept += 1
                    ev = json.loads(r.value)
                    segments[ev["segment_id"]] = ev["state"]
    c.close()
    return time.perf_counter() - t0, kept, read


def guardian_bootstrap(client: TieredClient, p: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    state = client.current_state(CLUSTER, f"t{p % 100}", p)
    groups = client.all_groups(CLUSTER, f"t{p % 100}", p)
    return time.perf_counter() - t0, len(state.segments) + sum(len(g.events) for g in groups)


def restart_follower(cluster: ServiceCluster, leader: int) -> dict[str, Any]:
    follower = next(n for n in cluster.procs if n != leader)
    rss = {n: _rss_mib(cluster.procs[n].pid) for n in cluster.procs}
    cluster.kill(follower)
    target = (_status(cluster, leader) or {}).get("store_watermark", 0)
    t0 = time.perf_counter()
    cluster.start(follower)
    while True:
        st = _status(cluster, follower)
        if st and st.get("ready") and st.get("store_watermark", 0) >= target:
            break
        if time.perf_counter() - t0 > 120:
            return {"rss_mib": rss, "restart_to_ready_s": float("nan"),
                    "restart_error": f"node {follower} not caught up in 120 s (see {cluster.root}/node{follower}.log)"}
        time.sleep(0.05)
    return {"rss_mib": rss, "restart_to_ready_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--segments", type=int, default=100_000)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--append-seconds", type=float, default=15.0)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--bootstraps", type=int, default=10)
    ap.add_argument("--meta-written", type=int, default=META_PARTITIONS,
                    help="metadata partitions written to kafkasim (those the sampled partitions hash to)")
    args = ap.parse_args()
    segs = max(1, args.segments // args.partitions)
    random.seed(7)
    written = set(random.sample(range(META_PARTITIONS), min(META_PARTITIONS, args.meta_written)))
    candidates = [p for p in range(args.partitions) if meta_partition(p) in written]
    picks = random.sample(candidates, min(args.bootstraps, len(candidates)))
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    sim = ctx.Process(target=_sim_process, args=(q, stop), daemon=True)
    sim.start()
    bootstrap = None
    for _ in range(120):
        try:
            bootstrap = q.get(timeout=1)
            break
        except Exception:
            if not sim.is_alive():
                raise SystemExit("kafkasim did not start") from None
    assert bootstrap is not None
    root = Path(tempfile.mkdtemp(prefix="bench-tiered-"))
    cluster = ServiceCluster(root, tiered=True)
    result: dict[str, Any] = {"partitions": args.partitions, "segments": args.partitions * segs,
                              "segments_per_partition": segs, "meta_partitions_written": len(written)}
    try:
        result["seed"], stored = seed(root / "seed", args.partitions, segs, set(candidates))
        for n in range(1, cluster.size + 1):
            target = root / f"node{n}" / "tiered" / "store"
            target.mkdir(parents=True)
            shutil.copyfile(root / "seed" / "compact.mdb", target / "data.mdb")
        shutil.rmtree(root / "seed")
        t0 = time.perf_counter()
        cluster.start_all()
        cluster.wait_up(120)
        leader = _leader(cluster, 120)
        result["cold_start_to_ready_s"] = time.perf_counter() - t0
        client = TieredClient(cluster.grpc_addresses, cluster.token, timeout=30)
        result["appends"] = append_window(client, args.partitions, segs, args.writers, args.append_seconds)
        result["fetch"] = fetch_latency(client, args.partitions, args.samples)
        result["topic_write"] = topic_write(bootstrap, segs, stored)
        g = [guardian_bootstrap(client, p) for p in picks]
        t = [topic_bootstrap(bootstrap, p) for p in picks]
        assert all(k == 2 * segs for _, k, _ in t), "the topic replay must find every event of the partition"
        assert all(k == 3 * segs for _, k in g), "Guardian's answer must hold every event and live segment"
        result["bootstrap"] = {
            "samples": len(picks),
            "guardian_median_ms": 1000 * statistics.median(x for x, _ in g),
            "guardian_max_ms": 1000 * max(x for x, _ in g),
            "topic_median_ms": 1000 * statistics.median(x for x, _, _ in t),
            "topic_max_ms": 1000 * max(x for x, _, _ in t),
            "topic_records_read_per_bootstrap": statistics.median(r for _, _, r in t),
            "records_of_the_partition": 2 * segs}
        result["node"] = restart_follower(cluster, leader)
    finally:
        cluster.close()
        stop.set()
        sim.join(30)
        shutil.rmtree(root, ignore_errors=True)
    path = write_result("tiered", result)
    a, f, b, n = result["appends"], result["fetch"], result["bootstrap"], result["node"]
    print(f"tiered metadata, {args.partitions:,} partitions / {result['segments']:,} segments "
          f"({segs} per partition), 3 Raft nodes, {args.writers} gRPC writers; store {result['seed']['store_mib']:.0f} "
          f"MiB seeded at {result['seed']['groups_per_s']:.0f} groups/s; cold start to ready "
          f"{result['cold_start_to_ready_s']:.1f} s")
    print(f"{'measure':52s} {'Guardian':>14s} {'topic (TBRLMM)':>16s}")
    print(f"{'bootstrap one partition, median ms':52s} {b['guardian_median_ms']:14.1f} {b['topic_median_ms']:16.1f}")
    print(f"{'bootstrap one partition, max ms':52s} {b['guardian_max_ms']:14.1f} {b['topic_max_ms']:16.1f}")
    print(f"{'records read per bootstrap':52s} {b['records_of_the_partition']:14d} "
          f"{b['topic_records_read_per_bootstrap']:16.0f}")
    print(f"{'writes: groups/s (events/s)':52s} {a['groups_per_s']:8.0f} ({a['events_per_s']:.0f}) "
          f"{result['topic_write']['records'] / result['topic_write']['seconds']:10.0f} rec/s")
    print(f"{'append p50 / p99 ms':52s} {a['append_p50_ms']:6.1f} / {a['append_p99_ms']:.1f}")
    print(f"{'CurrentState p50 / p99 ms':52s} {f['current_state_p50_ms']:6.2f} / {f['current_state_p99_ms']:.2f}")
    print(f"{'FetchGroups p50 / p99 ms':52s} {f['fetch_groups_p50_ms']:6.2f} / {f['fetch_groups_p99_ms']:.2f}")
    print(f"{'node RSS MiB (whole guardian serve): total (anon + file)':52s} "
          + "  ".join(f"{v['VmRSS']:.0f} ({v['RssAnon']:.0f} + {v['RssFile']:.0f})" for v in n["rss_mib"].values()))
    print(f"{'follower restart-to-ready s (kill -9, caught up)':52s} {n['restart_to_ready_s']:6.2f} "
          f"{n.get('restart_error', '')}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
