"""Tiered storage on a real Kafka broker: Kafka's TopicBasedRemoteLogMetadataManager vs. Guardian's RLMM.

The same workload, in one run, on two labs started one after the other (``guardian lab up --tiered``, one
Kafka 4.2 broker, Kafka's ``LocalTieredStorage`` as the RSM for both): ``--partitions`` partitions of one
topic, ``--segments`` segments of 1 MiB each per partition (``local.retention.bytes=1``: every rolled segment
is copied, then deleted locally).  Both managers run inside ``TimedRemoteLogMetadataManager`` (the plug-in's
measuring wrapper: the same code path times either one).  Figures per manager:

* **metadata write latency per segment copy**: the broker's ``addRemoteLogSegmentMetadata`` (copy started)
  and ``updateRemoteLogSegmentMetadata`` (copy finished) calls, each until its future completes (what the
  copy task waits for): p50/p99;
* **copy-all time**: from the last record produced until every rolled segment of every partition is copied
  and deleted locally;
* the **remote lookup** (``remoteLogSegmentMetadata``) p50/p99 while a consumer reads every partition from
  offset 0, and whether every record comes back;
* **restart to first remote fetch**: ``kill -9`` of the broker, start again, time until a consumer at offset 0
  gets its first record (served from remote storage by the restarted leader: Kafka's manager must first
  consume its metadata topic's partitions, Guardian's asks the service);
* the broker's CPU seconds and peak RSS over the run, and for Guardian its service's three processes' CPU.

Run (it starts real brokers: on a shared machine under ``flock /tmp/guardian-lab.lock``):
``python -m benchmarks.bench_tiered_kafka [--partitions 20 --segments 6]``; writes out/bench/tiered_kafka.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from kafkalab import lab as kl
from kafkalab.plugin import RLMM_CLASS

TIMED = "guardian.tiered.rlmm.TimedRemoteLogMetadataManager"
TBRLMM = "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
SEGMENT = 1 << 20
RECORD = 1000
TOPIC = "bench-tiered"
CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Sampler(threading.Thread):
    """Peak RSS of a pid, sampled every 0.5 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop_ = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop_.wait(0.5):
            self.peak = max(self.peak, rss_mib(self.pid))


def local_starts(doc: dict[str, Any], partitions: int) -> list[int]:
    d = Path(doc["nodes"][0]["log_dirs"][0])
    out = []
    for p in range(partitions):
        segs = sorted((d / f"{TOPIC}-{p}").glob("*.log"))
        out.append(int(segs[0].stem) if segs else 0)
    return out


def run(manager: str, partitions: int, segments: int, base: Path) -> dict[str, Any]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaError

    directory = base / manager
    stats_file = base / f"{manager}-rlmm.json"
    props = {"remote.log.metadata.manager.class.name": TIMED, "rlmm.config.guardian.bench.out": str(stats_file),
             "rlmm.config.guardian.bench.inner": TBRLMM if manager == "kafka" else RLMM_CLASS}
    spec = kl.LabSpec(brokers=1, log_dirs=1, disks="dir", directory=directory, heap="512m", tiered=True,
                      rlmm=manager, extra_props=props)
    t0 = time.monotonic()
    doc = kl.up(spec)
    result: dict[str, Any] = {"manager": manager, "lab_up_s": round(time.monotonic() - t0, 1)}
    try:
        conf = kl.admin_config(doc)
        broker = int(doc["nodes"][0]["pid"])
        service = [int(n["pid"]) for n in (doc.get("tiered") or {}).get("nodes", [])]
        cpu0, svc0 = cpu_seconds(broker), sum(cpu_seconds(p) for p in service)
        sampler = Sampler(broker)
        sampler.start()
        admin = KafkaAdminClient(**conf)
        admin.create_topics([NewTopic(TOPIC, partitions, 1, topic_configs={
            "remote.storage.enable": "true", "segment.bytes": str(SEGMENT), "local.retention.bytes": "1",
            "retention.bytes": "-1", "retention.ms": "-1"})])
        admin.close()
        per_partition = segments * SEGMENT // (RECORD + 70) + 50
        payload = os.urandom(RECORD)
        producer = KafkaProducer(**conf, acks=1, linger_ms=50, batch_size=256 << 10)
        t_prod = time.monotonic()
        for _ in range(per_partition):
            for part in range(partitions):
                producer.send(TOPIC, payload, partition=part)
        producer.flush()
        producer.close()
        produced = time.monotonic()
        result["produce_s"] = round(produced - t_prod, 1)
        ends: list[int] = []
        consumer = KafkaConsumer(**conf)
        tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
        ends = [consumer.end_offsets(tps)[tp] for tp in tps]
        consumer.close()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # every rolled segment copied and deleted locally
            starts = local_starts(doc, partitions)
            if all(s >= e - 2 * SEGMENT // RECORD for s, e in zip(starts, ends, strict=True)):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{manager}: segments not all copied within 300 s (local starts {starts})")
        result["copy_all_s"] = round(time.monotonic() - produced, 1)
        # read every partition back from offset 0 (the copied part from remote storage)
        consumer = KafkaConsumer(**conf, enable_auto_commit=False, fetch_max_bytes=8 << 20)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        got = 0
        t_read = time.monotonic()
        while got < sum(ends) and time.monotonic() - t_read < 600:
            got += sum(len(r) for r in consumer.poll(1000).values())
        consumer.close()
        result["read_back"] = {"records": got, "expected": sum(ends), "seconds": round(time.monotonic() - t_read, 1)}
        result["broker_cpu_s"] = round(cpu_seconds(broker) - cpu0, 1)
        result["service_cpu_s"] = round(sum(cpu_seconds(p) for p in service) - svc0, 1) if service else None
        sampler.stop_.set()
        result["broker_peak_rss_mib"] = round(sampler.peak)
        result["rlmm"] = json.loads(stats_file.read_text()) if stats_file.exists() else {}
        # restart: kill -9 the broker, start it, time to the first record at offset 0 (a remote fetch)
        kl.kill_node(directory, 1)
        t_start = time.monotonic()
        kl.start_node(directory, 1)
        first = None
        while time.monotonic() - t_start < 300 and first is None:
            try:
                c = KafkaConsumer(**conf, enable_auto_commit=False, request_timeout_ms=5000)
                c.assign([tps[0]])
                c.seek(tps[0], 0)
                for _ in range(5):
                    if c.poll(1000):
                        first = time.monotonic() - t_start
                        break
                c.close()
            except (KafkaError, OSError):  # the broker is not up yet
                time.sleep(0.5)
        result["restart_to_first_remote_fetch_s"] = None if first is None else round(first, 1)
        return result
    finally:
        problems = kl.down(directory)
        if problems:
            print(f"lab down left: {problems}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--segments", type=int, default=6, help="1 MiB segments per partition")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-tiered-kafka-"))
    results = [run(m, args.partitions, args.segments, base) for m in ("kafka", "guardian")]
    data = {"partitions": args.partitions, "segments_per_partition": args.segments, "segment_bytes": SEGMENT,
            "results": results}
    path = write_result("tiered_kafka", data)
    print(json.dumps(data, indent=2))
    print(table(data))
    print(f"wrote {path}")


def _lat(r: dict[str, Any], op: str) -> str:
    s = r.get("rlmm", {}).get(op)
    return "-" if not s else f"{s['p50_us'] / 1000:.1f} / {s['p99_us'] / 1000:.1f} ms ({s['calls']})"


def table(data: dict[str, Any]) -> str:
    rows = [("", *(r["manager"] for r in data["results"]))]
    for label, fn in [
        ("add (copy started) p50/p99", lambda r: _lat(r, "add")),
        ("update (copy finished) p50/p99", lambda r: _lat(r, "update_copy_segment_finished")),
        ("remote lookup p50/p99", lambda r: _lat(r, "lookup")),
        ("copy-all time", lambda r: f"{r['copy_all_s']} s"),
        ("read back", lambda r: f"{r['read_back']['records']}/{r['read_back']['expected']} in "
                                f"{r['read_back']['seconds']} s"),
        ("restart -> first remote fetch", lambda r: f"{r['restart_to_first_remote_fetch_s']} s"),
        ("broker CPU / peak RSS", lambda r: f"{r['broker_cpu_s']} s / {r['broker_peak_rss_mib']} MiB"),
        ("metadata service CPU", lambda r: "-" if r["service_cpu_s"] is None else f"{r['service_cpu_s']} s"),
    ]:
        rows.append((label, *(fn(r) for r in data["results"])))
    return "\n".join(f"| {' | '.join(map(str, row))} |" for row in rows)


if __name__ == "__main__":
    main()
