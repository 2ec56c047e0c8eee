"""``make demo-kafka``: the demo's acts on real Apache Kafka brokers (``guardian lab``) instead of kafkasim.

1. ``guardian lab``: four Kafka 4.x brokers in two IDCs, three JBOD log dirs each (an ext4 loop device per
   dir when run as root, else plain directories — said so), SASL_SSL/SCRAM, the JMX exporter agent and
   node_exporter. A topic is laid on brokers 1-3 only and a producer writes to it all along, so broker 4's
   disks idle while the others take every byte.
2. The controller (as ``make demo``'s) registers the lab from its endpoints document through the API and
   opts it into auto-rebalance.
3. Auto-rebalance plans and executes under real KIP-73/KIP-113 throttles until the pool's peak/mean disk
   load is within the threshold; the summary, the before/after table and ``out/demo-kafka/disk-load.png``
   are those of ``make demo``.
4. Every throttle config Guardian set is gone at the end (checked with DescribeConfigs on every broker and
   topic), and the lab is stopped and its devices released.

Guarantee: exit 0 only when the pool balanced within the time limit and no throttle config was left.
Cost: ~1 min to start the lab, then a few minutes of copies at the adaptive rate; four JVMs of 512 MiB.
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

TOPIC = "orders"
PRODUCE_BYTES_PER_S = 3_000_000
SEED_BYTES = 240_000_000


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
        doc = kl.up(kl.LabSpec(brokers=4, log_dirs=3, idcs=2, cluster=demo.CLUSTER, directory=lab_dir),
                    out_dir / "endpoints.json")
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
        api.put(f"/api/v1/clusters/{demo.CLUSTER}/auto-rebalance",
                json={"enabled": True, "window_cron": "* * * * *", "window_minutes": 30,
                      "threshold": demo.THRESHOLD, "max_partitions": 4}).raise_for_status()
        settled = demo.wait_balanced(service, api, console, timeout_s, every_s=2.0)
        balanced = demo.balanced(settled)
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
        left = kl.throttle_overrides(doc, [TOPIC])
        summary["throttle_configs_left"] = left
        console.print(f"throttle configs left on the brokers and topics: {left or 'none'}", markup=False)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        console.print(f"picture: {picture}\nsummary: {out_dir / 'summary.json'}", markup=False)
        code = 0 if balanced and not left else 1
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
