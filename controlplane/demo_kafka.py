"""``make demo-kafka``: the demo's acts on real Apache Kafka brokers (``guardian lab``) instead of kafkasim.

1. ``guardian lab``: four Kafka 4.x brokers in two IDCs, three JBOD log dirs each (an ext4 loop device per
   dir when run as root, else plain directories — said so), SASL_SSL/SCRAM, the JMX exporter agent and
   node_exporter. A topic is laid on brokers 1-3 only and a producer writes to it all along, so broker 4's
   disks idle while the others take every byte.
2. The controller (as ``make demo``'s) registers the lab from its endpoints document through the API.
3. A rebalance is proposed, approved and executed through the API under real KIP-73/KIP-113 throttles until
   the pool's peak/mean disk load is within the threshold; the summary, the before/after table and
   ``out/demo-kafka/disk-load.png`` are those of ``make demo``. The lab's loop devices idle at a few % util,
   under the planner's floor (0.30) below which Guardian leaves a pool alone — auto-rebalance included — so
   the act asks for this rebalance with ``floor`` 0, as an operator would to even out an idle pool.
4. "3 a.m." (as root, on loop devices): a consumer group starts replaying 160 MB of a partition led by
   broker 2, whose JVM is confined as ``guardian lab confine`` does (a 512 MiB memory cgroup, its cached
   pages dropped, reads of its disk capped at 2 MiB/s — so the replay reads a real, slow disk). Stock Kafka
   has no per-partition fetch throttle: protection sets the client-id quota of the group member assigned that
   partition, holds the disk near its target, and removes the quota once the consumer has gone.
5. Every throttle config Guardian set is gone at the end (checked with DescribeConfigs on every broker and
   topic), and the lab is stopped and its devices released.

Guarantee: exit 0 only when the pool balanced within the time limit, no throttle config was left, and (when
the act ran) the replay's quota was set and released. Cost: ~1 min to start the lab, a few minutes of copies
at the adaptive rate, ~2 min for the replay; four JVMs of 384 MiB heap.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from kafka import KafkaProducer
from rich.console import Console

from controlplane import demo
from controlplane.bootstrap import Service, build_service
from controlplane.logs import setup_logging
from controlplane.picture import disk_utils, measured_utils, plot_before_after
from controlplane.report import snapshot_table
from kafkalab import lab as kl
from kafkalab.errors import LabError
from planners.protection import ProtectionConfig

TOPIC = "orders"
PRODUCE_BYTES_PER_S = 3_000_000
SEED_BYTES = 240_000_000
REPLAY_TOPIC, REPLAY_BROKER, REPLAY_GROUP, REPLAY_CLIENT = "replay", 2, "replay", "replay-1"
REPLAY_BYTES = 160_000_000
REPLAY_MEMORY = 512 << 20  # the confined broker's memory cgroup: 384 MiB heap, non-heap and a small page cache
REPLAY_READ_CAP = 2 << 20  # bytes/s its disk reads at most (declared as its disks' ceiling)
HOLD_S = 60.0  # seconds the replay is watched once the quota is set


def _produce(cfg: dict[str, Any], stop: threading.Event, seed_bytes: int) -> None:
    """Seed ``seed_bytes`` into the topic's six partitions, then write ~3 MB/s until ``stop``."""
    producer = KafkaProducer(acks=1, linger_ms=50, batch_size=512 * 1024, **cfg)
    payload = os.urandom(1000)
    sent = 0
    try:
        while sent < seed_bytes and not stop.is_set():
            producer.send(TOPIC, payload, partition=(sent // 1000) % 6)
            sent += 1000
        producer.flush()
        while not stop.is_set():
            t0 = time.monotonic()
            for i in range(PRODUCE_BYTES_PER_S // 10_000):
                producer.send(TOPIC, payload, partition=i % 6)
            producer.flush()
            stop.wait(max(0.0, 0.1 - (time.monotonic() - t0)))
    finally:
        producer.close()


def _replay_consumer(cfg: dict[str, Any], stop: threading.Event) -> None:
    """A lagging consumer of the replay topic: from the beginning, small fetches, until ``stop``."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(REPLAY_TOPIC, group_id=REPLAY_GROUP, client_id=REPLAY_CLIENT,
                             auto_offset_reset="earliest", max_partition_fetch_bytes=256 * 1024, **cfg)
    try:
        while not stop.is_set():
            consumer.poll(500)
    finally:
        consumer.close()


def replay_act(doc: dict[str, Any], lab_dir: Path, endpoints_file: Path, service: Service, api: httpx.Client,
               console: Console, timeout_s: float = 180.0) -> dict[str, Any]:
    """3 a.m. on real Kafka (module docstring, act 4): what protection did — the disk's util (node_exporter,
    through Guardian's snapshot) before / at worst / the highest 15 s mean while the quota held, the seconds
    until the quota was set,
    the lever, and whether it was released after the consumer left."""
    if doc["disks"] != "loop" or os.geteuid() != 0:
        return {"skipped": "needs root and loop devices (a memory cgroup and a read cap on the broker's disk)"}
    console.rule("3 a.m.: a consumer replays a week of data (real Kafka)")
    api.put(f"/api/v1/clusters/{demo.CLUSTER}/auto-rebalance", json={"enabled": False}).raise_for_status()
    cfg = kl.admin_config(doc)
    other = next(n["id"] for n in doc["nodes"] if n["id"] != REPLAY_BROKER)
    kl.create_topic(doc, REPLAY_TOPIC, {0: [REPLAY_BROKER, other]})
    kl.confine(lab_dir, REPLAY_BROKER, memory_bytes=REPLAY_MEMORY)  # what it writes from here is its own cache
    producer = KafkaProducer(acks=1, linger_ms=20, batch_size=1 << 20, max_request_size=2 << 20, **cfg)
    payload = os.urandom(64 * 1024)
    try:
        for _ in range(REPLAY_BYTES // len(payload)):
            producer.send(REPLAY_TOPIC, payload, partition=0)
        producer.flush(180)
    finally:
        producer.close()
    confined = kl.confine(lab_dir, REPLAY_BROKER, read_bytes_per_s=REPLAY_READ_CAP, evict_cache=True,
                          endpoints_file=endpoints_file)
    cluster = kl.endpoints_document(confined)["clusters"][doc["cluster"]]
    api.put(f"/api/v1/clusters/{demo.CLUSTER}/topology",  # the confined disks' ceiling, as an operator declares it
            json={k: cluster[k] for k in ("rack_to_idc", "hardware") if k in cluster}).raise_for_status()
    console.print(f"a consumer group {REPLAY_GROUP!r} starts replaying {REPLAY_BYTES / 1e6:.0f} MB of "
                  f"{REPLAY_TOPIC}-0 from broker {REPLAY_BROKER}, whose disk reads at most "
                  f"{REPLAY_READ_CAP / 2**20:.0f} MiB/s and whose page cache is small", markup=False)
    key = f"consumer-quota:{REPLAY_CLIENT}"

    def hot_util() -> float:
        snap = service.ctx.snapshots.get(demo.CLUSTER)
        if snap is None:
            return float("nan")
        p = next((p for t in snap.topics if t.name == REPLAY_TOPIC for p in t.partitions), None)
        if p is None or p.leader is None or p.leader not in p.replicas:
            return float("nan")
        disk = snap.index.disk_by_id.get((p.leader, p.log_dirs[p.replicas.index(p.leader)]))
        return disk.util if disk is not None else float("nan")

    def quota() -> list[dict[str, Any]]:
        return [t for t in api.get("/api/v1/throttles", params={"cluster": demo.CLUSTER}).json() if t["key"] == key]

    before = hot_util()
    stop = threading.Event()
    reader = threading.Thread(target=_replay_consumer, args=(cfg, stop), name="demo-replay", daemon=True)
    start = time.monotonic()
    reader.start()
    worst, quota_after = before, None
    held: list[tuple[float, float]] = []  # (seconds since the quota was set, util) while it holds
    try:
        while time.monotonic() - start < timeout_s and not (held and held[-1][0] >= HOLD_S):
            time.sleep(3.0)
            util = hot_util()
            worst = max(worst, util) if util == util else worst
            if quota():
                quota_after = quota_after or time.monotonic() - start
                held.append((time.monotonic() - start - quota_after, util))
            console.print(f"[{time.strftime('%H:%M:%S')}] disk util {util:.2f}; quota on {REPLAY_CLIENT}: "
                          f"{'in force' if quota_after else 'none yet'}", markup=False)
        lever = quota()
    finally:
        stop.set()
        reader.join(30)
    released = demo.wait_released(quota, 90.0)
    problems = kl.unconfine(lab_dir, REPLAY_BROKER, endpoints_file)
    # Kafka enforces a client quota over its 11 s window by muting the client, so a quota'd replay reads in
    # bursts: the disk is judged over 15 s spans (a scrape interval), as tests/e2e/test_lab_protection.py does
    spans = [[u for t, u in held if k * 15 <= t < (k + 1) * 15 and u == u] for k in range(int(HOLD_S // 15))]
    held_util = max((sum(v) / len(v) for v in spans if v), default=float("nan"))
    result = {"partition": f"{REPLAY_TOPIC}-0", "broker": REPLAY_BROKER, "lever": lever[0] if lever else None,
              "util_before": before, "util_worst": worst, "util_held_max_15s": held_util,
              "quota_after_s": quota_after, "released_after_replay": released, "unconfine_problems": problems}
    console.print(f"disk util {before:.2f} before, {worst:.2f} at worst, {held_util:.2f} at most per 15 s over the "
                  f"{HOLD_S:.0f} s the quota held (target {ProtectionConfig().target_util:.2f}); quota set "
                  f"{quota_after or float('nan'):.0f} s after the replay began; "
                  f"{'released' if released else 'NOT released'} once the consumer left", markup=False)
    return result


def main(out_dir: Path = demo.ROOT / "out" / "demo-kafka", timeout_s: float = 600.0) -> int:
    """Run the acts on the lab; the exit code as the module docstring says."""
    console = Console(width=max(120, Console().width))
    setup_logging("WARNING")
    for noisy in ("asyncio", "kafka"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / "state").exists():  # every run starts from an empty controller
        shutil.rmtree(out_dir / "state")
    console.rule("Guardian demo on real Apache Kafka (guardian lab)")
    lab_dir = out_dir / "lab"
    if kl.state_path(lab_dir).exists():
        kl.down(lab_dir)
    try:
        doc = kl.up(kl.LabSpec(brokers=4, log_dirs=3, idcs=2, cluster=demo.CLUSTER, directory=lab_dir,
                               heap="384m"), out_dir / "endpoints.json")
    except LabError as exc:
        console.print(f"[red]guardian lab could not start:[/] {exc}")
        return 2
    endpoints = doc["endpoints"]
    console.print(f"Kafka {doc['kafka_version']}: {len(doc['nodes'])} brokers on {doc['bootstrap_servers']} "
                  f"(SASL_SSL SCRAM-SHA-512); {endpoints['lab']['disks_note']}", markup=False)
    cfg = kl.admin_config(doc)
    kl.create_topic(doc, TOPIC, {p: [1 + p % 3, 1 + (p + 1) % 3] for p in range(6)})
    stop = threading.Event()
    writer = threading.Thread(target=_produce, args=(cfg, stop, SEED_BYTES), name="demo-producer", daemon=True)
    service: Service | None = None
    server: uvicorn.Server | None = None
    code = 1
    try:
        service = build_service(demo.settings_for(out_dir / "state"))
        service.store.node.wait_ready(10)
        port = demo.free_port()
        server = uvicorn.Server(uvicorn.Config(service.app, host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=server.run, name="demo-http", daemon=True).start()
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                           headers={"Authorization": f"Bearer {demo.TOKEN}", "X-Guardian-Reason": "make demo-kafka"})
        demo.wait_for("the API", lambda: demo._up(api), 20, console)
        r = api.post("/api/v1/clusters", json=demo.registration(endpoints["clusters"][demo.CLUSTER]))
        if r.status_code != 201:
            console.print(f"[red]registration refused:[/] {r.status_code} {r.text}")
            return 2
        service.scheduler.start()
        writer.start()
        console.print(f"topic {TOPIC!r}: six partitions on brokers 1-3 only, a producer writing "
                      f"{PRODUCE_BYTES_PER_S / 1e6:.0f} MB/s after seeding {SEED_BYTES / 1e6:.0f} MB", markup=False)
        time.sleep(40)  # the seed, then the producer's load shows in collection rounds
        before = demo.wait_for("a usable snapshot", lambda: service.ctx.snapshots.get(demo.CLUSTER), 60, console)
        console.print(snapshot_table(before))
        # idle loop devices are under the floor that keeps Guardian (and auto-rebalance) off an idle pool
        console.print("the lab's disks idle under the 0.30 util floor auto-rebalance keeps to: the operator asks "
                      "for a rebalance with floor 0", markup=False)
        r = api.post("/api/v1/plans", json={"cluster": demo.CLUSTER, "kind": "rebalance", "params": {"floor": 0.0}})
        if r.status_code >= 300:
            console.print(f"[red]the rebalance was refused:[/] {r.status_code} {r.text}")
            return 1
        plan_id = r.json()["plan_id"]
        api.post(f"/api/v1/plans/{plan_id}/approve").raise_for_status()
        api.post(f"/api/v1/plans/{plan_id}/execute", json={}).raise_for_status()
        settled = demo.wait_balanced(service, api, console, timeout_s, every_s=2.0, floor=0.0)
        balanced = demo.balanced(settled, floor=0.0)
        after = demo.representative(settled) if settled else service.ctx.snapshots.get(demo.CLUSTER) or before
        summary: dict[str, Any] = {"kafka_version": doc["kafka_version"], "disks": endpoints["lab"]["disks_note"],
                                   "balanced": balanced, "threshold": demo.THRESHOLD,
                                   "before": demo.figures(before), "after": demo.figures(after),
                                   "executions": api.get("/api/v1/executions").json()}
        console.print(demo.before_after_table(summary["before"], summary["after"], "node_exporter"))
        picture = plot_before_after(disk_utils(before), disk_utils(after), out_dir / "disk-load.png",
                                    f"lab {demo.CLUSTER}: estimated disk utilisation before / after",
                                    means=demo.table_means(summary["after"]),
                                    measured=(measured_utils(before), measured_utils(after)))
        stop.set()
        summary["replay"] = replay_act(doc, lab_dir, out_dir / "endpoints.json", service, api, console)
        left = kl.throttle_overrides(doc, [TOPIC, REPLAY_TOPIC])
        summary["throttle_configs_left"] = left
        console.print(f"throttle configs left on the brokers and topics: {left or 'none'}", markup=False)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        console.print(f"picture: {picture}\nsummary: {out_dir / 'summary.json'}", markup=False)
        replay = summary["replay"]
        replay_ok = "skipped" in replay or (replay["quota_after_s"] is not None and replay["released_after_replay"])
        code = 0 if balanced and not left and replay_ok else 1
    finally:
        stop.set()
        if server is not None:
            server.should_exit = True
        if service is not None:
            service.close()
        problems = kl.down(lab_dir)
        for p in problems:
            console.print(f"[red]lab down:[/] {p}")
        if writer.is_alive():
            writer.join(10)
    return code


if __name__ == "__main__":
    sys.exit(main())
