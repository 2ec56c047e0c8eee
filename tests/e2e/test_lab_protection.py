"""Partition-level protection on stock Kafka holds a real hot disk, and the page-cache read estimate against the
disk's real reads (``guardian lab``: real Apache Kafka, each log dir on its own loop device, node_exporter).

The scene: topic ``orders``, whose partition 3 (leader broker 2) holds 320 MB written before a consumer group
``replay`` (client id ``replay-1``, fetches of at most 256 KiB) starts reading it from the beginning — a lagging
consumer replaying a partition nobody writes any more. Broker 2 is
confined as an operator would with ``guardian lab confine``: its JVM in a 512 MiB memory cgroup (heap, non-heap
and page cache), its log dirs' cached pages dropped, and its reads of the disk under its log dirs capped at
2 MiB/s (blkio on the backing device: the log dir's own loop device is busy while a read waits, so node_exporter
sees util ~1 at that rate — the ceiling the lab's endpoints document then declares for broker 2's disks). The
lab is registered with ``guardian clusters register -e`` and Guardian's loops run in-process (collection every
2 s, protection every 1 s). Kafka has no per-partition client throttle, so the lever must be the client-id quota
(``consumer_byte_rate``) of the members of ``replay`` assigned ``orders-3``, found through DescribeGroups.

Measured from node_exporter's own counters for the hot log dir's device, scraped by the test every 2.5 s
(util = Δ ``node_disk_io_time_seconds_total`` / Δt, reads = Δ ``node_disk_read_bytes_total`` / Δt):

* item 4 — the max util over the 60 s after Guardian set the quota (AlterClientQuotas answered), in 15 s
  intervals, is ≤ target + 0.1 (target 0.65, Guardian's default), the disk having been above its high mark
  before; the consumer still lags at the end (the disk was held, not emptied). Why 15 s (the usual Prometheus
  scrape interval) and not finer: Kafka enforces a client quota over its quota window (11 x 1 s samples by
  default) by muting the client for its throttle time, so a quota'd lagging consumer reads in bursts at the
  disk's full speed between mutes — after a quota is lowered it is muted for seconds, after one is raised it
  bursts until its 11 s average reaches the new rate. Per 5 s the disk still touches util 1 (printed); over
  any interval longer than the quota window the lever holds. That is the stock lever's resolution (the seed's
  partition-level throttle paced each fetch); it is printed beside the 15 s figure.
* item 5 — Guardian's two read estimates for ``orders-3`` (each round's, averaged over the rounds) against the
  device's mean read bytes/s over the same span:

  - the **position estimate** (committed offsets of the groups: a group reading beyond the page cache reads its
    offset rate x bytes per message from disk), over the 60 s window, within ±25 %: its error sources here are
    the auto-commit (1 s) quantising each 2 s round's offset rate (averaged over ~25 rounds: a few %), the
    bytes per message taken from the log's size over its offsets (record-batch overhead is on disk too), and
    what the device reads besides the log (ext4 metadata, index files, readahead past the last fetch — a few
    %); 25 % leaves room for the rounds and the test's scrapes not covering exactly the same seconds;
  - the **attribution estimate** (the disk's measured reads split over the partitions led there, each capped
    at the partition's fetch traffic; what protection weighs) is printed, not asserted: it is not a page-cache
    estimate but node_exporter's own counter split over partitions, and here it reads low — about -20 % while
    the consumer reads steadily at the cap, about -40 % under the quota's bursts — because of the per-round cap
    at the partition's bytes-out (reads and bytes-out come from two exporters scraped at different instants of
    a bursty flow; each round keeps the smaller). Left as a finding (issue 31, item 5).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka.admin import NewTopic

from controlplane.bootstrap import Service
from controlplane.config import IntervalsConf, TokenConf, hash_token
from kafkalab import lab as kl
from planners.protection import ProtectionConfig
from tests.support.lab_support import Lab, replica_sizes, running_lab, wait_for
from tests.support.service_support import served_service

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

TOKEN = "lab-protect-token"
TOPIC, HOT_PARTITION, HOT_BROKER = "orders", 3, 2
GROUP, CLIENT = "replay", "replay-1"
READ_CAP = 2 << 20  # bytes/s: broker 2's disks read at most this (its declared ceiling)
MEMORY = 512 << 20  # broker 2's memory cgroup limit: 384 MiB heap, non-heap and a small page cache
LAGGED_BYTES = 320_000_000
"""The replay outlasts the scene however late Guardian acts: the longest wait for the quota (90 s) plus the
window (60 s), both read at up to READ_CAP (~315 MB). With 160 MB a replay once ended inside the window (quota
set late on a quiet machine: the consumer caught up, lag 0)."""
RECORD = 64 * 1024
FETCH_BYTES = 256 * 1024  # the lagging consumer's max.partition.fetch.bytes: one fetch is 1/8 s of the disk
WINDOW_S = 60.0
SCRAPE_S = 2.5
TARGET = ProtectionConfig().target_util


def guardian(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "controlplane.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})}, check=False)


@dataclass
class Scene:
    """What the run measured (node_exporter's samples, Guardian's rounds) and when Guardian acted."""

    device: str
    samples: list[tuple[float, float, float]] = field(default_factory=list)
    """(wall time, read bytes, io seconds) of the hot device, from node_exporter."""
    rounds: dict[int, tuple[float, float, float, list[str]]] = field(default_factory=dict)
    """round seq -> (observed at, position estimate, attribution estimate, disk-reading groups) of orders-3."""
    acted_at: float = 0.0
    throttle: dict[str, Any] = field(default_factory=dict)
    explain: str = ""
    quota_on_kafka: list[dict[str, Any]] = field(default_factory=list)
    lag_at_end: int = 0
    history: list[tuple[str, str, str]] = field(default_factory=list)
    """(at, action type, what) of every throttle action Guardian recorded."""
    timings: dict[str, float] = field(default_factory=dict)

    def util(self, start: float, end: float, span_s: float = 5.0) -> list[tuple[float, float]]:
        """(interval start, util) over consecutive ~``span_s`` intervals of the samples within [start, end]."""
        pts = [s for s in self.samples if start - 0.01 <= s[0] <= end + 0.01]
        out = []
        i = 0
        while i < len(pts) - 1:
            j = i + 1
            while j < len(pts) - 1 and pts[j][0] - pts[i][0] < span_s - 0.1:
                j += 1
            out.append((pts[i][0], (pts[j][2] - pts[i][2]) / (pts[j][0] - pts[i][0])))
            i = j
        return out

    def read_rate(self, start: float, end: float) -> float:
        pts = [s for s in self.samples if start - 0.01 <= s[0] <= end + 0.01]
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def _series(text: str, name: str, device: str) -> float:
    m = re.search(rf'^{name}\{{[^}}]*device="{device}"[^}}]*\}} (\S+)$', text, re.M)
    assert m is not None, f"node_exporter has no {name} for {device}"
    return float(m.group(1))


def produce(lab: Lab, nbytes: int) -> None:
    producer = lab.producer(acks=1, linger_ms=20, batch_size=1 << 20, max_request_size=2 << 20)
    payload = os.urandom(RECORD)
    try:
        for _ in range(nbytes // RECORD):
            producer.send(TOPIC, payload, partition=HOT_PARTITION)
        producer.flush(180)
    finally:
        producer.close()


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    t0 = time.monotonic()
    with running_lab(tmp_path_factory.mktemp("lab"), brokers=3, log_dirs=2, heap="384m") as lab:
        timings = {"lab_up_s": time.monotonic() - t0}
        admin = lab.admin()
        try:
            admin.create_topics([NewTopic(TOPIC, replica_assignments={0: [1, 2], 1: [2, 3], 2: [3, 1], 3: [2, 1]})])
        finally:
            admin.close()
        # the page cache is broker 2's own from here on: what it writes is charged to its memory cgroup
        kl.confine(lab.directory, HOT_BROKER, memory_bytes=MEMORY)
        t1 = time.monotonic()
        produce(lab, LAGGED_BYTES)
        timings["produce_s"] = time.monotonic() - t1
        hot_dir = next(d for (p, b, d, future) in replica_sizes(lab, TOPIC)
                       if (p, b, future) == (HOT_PARTITION, HOT_BROKER, False))
        device = lab.device_of(hot_dir)
        assert device is not None
        lab.doc = kl.confine(lab.directory, HOT_BROKER, read_bytes_per_s=READ_CAP, evict_cache=True,
                             endpoints_file=lab.endpoints_file)
        with served_service(tmp_path_factory.mktemp("guardian"),
                            intervals=IntervalsConf(collect_s=2.0, throttle_s=1.0, executor_s=5.0),
                            tokens=[TokenConf(name="op", role="admin", sha256=hash_token(TOKEN))]) as (svc, url):
            yield run(lab, svc, url, Scene(device=device, timings=timings))


def run(lab: Lab, svc: Service, url: str, scene: Scene) -> Scene:
    stop = threading.Event()
    positions: dict[str, int] = {}

    def consume() -> None:
        from kafka import TopicPartition

        c = lab.consumer(TOPIC, group_id=GROUP, client_id=CLIENT, auto_offset_reset="earliest",
                         auto_commit_interval_ms=1000, max_partition_fetch_bytes=FETCH_BYTES)
        try:
            while not stop.is_set():
                c.poll(500)
            tp = TopicPartition(TOPIC, HOT_PARTITION)
            with contextlib.suppress(Exception):
                positions["at"] = c.position(tp)
                positions["end"] = c.end_offsets([tp])[tp]
        finally:
            c.close()

    def scrape() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                text = lab.scrape(lab.node_exporter_url)
                scene.samples.append((time.time(), _series(text, "node_disk_read_bytes_total", scene.device),
                                      _series(text, "node_disk_io_time_seconds_total", scene.device)))
            with contextlib.suppress(Exception):
                binding = svc.ctx.throttle.bindings.get(lab.cluster) if svc.ctx.throttle else None
                r = binding.source.rounds.latest(lab.cluster) if binding is not None else None  # type: ignore[attr-defined]
                if r is not None and r.seq not in scene.rounds:
                    pid = (TOPIC, HOT_PARTITION)
                    detail = r.collected.partitions.get(pid)
                    scene.rounds[r.seq] = (r.observed_at.timestamp(), r.position_disk_reads.get(pid, 0.0),
                                           r.attributed_disk_reads.get(pid, 0.0),
                                           list(detail.disk_readers) if detail is not None else [])
            stop.wait(SCRAPE_S if not scene.rounds else 1.0)

    threads = [threading.Thread(target=consume, daemon=True), threading.Thread(target=scrape, daemon=True)]
    for t in threads:
        t.start()
    try:
        reg = guardian("clusters", "register", "-c", lab.cluster, "-e", str(lab.endpoints_file), "--url", url,
                       env={"GUARDIAN_TOKEN": TOKEN})
        assert reg.returncode == 0, reg.stdout + reg.stderr
        svc.scheduler.start()
        key = f"consumer-quota:{CLIENT}"

        def quota_set() -> dict[str, Any] | None:
            # Guardian has acted once AlterClientQuotas returned (the service notes the lever as applied)
            if svc.ctx.throttle is None or key not in svc.ctx.throttle.applied.get(lab.cluster, {}):
                return None
            return svc.ctx.store.read(lambda s: dict(s["throttles"].get(lab.cluster, {})).get(key))

        try:
            scene.throttle = wait_for("Guardian's quota on the lagging consumer", quota_set, 90, 0.25)
        except AssertionError:
            import json

            explained = svc.ctx.throttle.explain(lab.cluster) if svc.ctx.throttle else {}
            raise AssertionError(f"no quota; last evaluation: {json.dumps(explained, indent=1)[:6000]}; "
                                 f"rounds: {scene.rounds}; util: {scene.util(scene.samples[0][0], time.time())}"
                                 ) from None
        scene.acted_at = time.time()
        time.sleep(WINDOW_S + SCRAPE_S)
        r = binding_round(svc, lab.cluster)
        scene.quota_on_kafka = [q for q in (r.collected.quotas if r is not None else [])
                                if CLIENT in str(q)]
        ex = guardian("throttle", "explain", lab.cluster, "--url", url, env={"GUARDIAN_TOKEN": TOKEN})
        scene.history = svc.ctx.store.read(lambda s: [
            (a["at"][11:19], a["type"], re.sub(r".*(limit|relax|released)", r"\1", a["why"])[:90])
            for a in s["actions"] if a["type"].startswith("throttle.")])
        scene.explain = ex.stdout + ex.stderr
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    scene.lag_at_end = positions.get("end", 0) - positions.get("at", 0)
    return scene


def binding_round(svc: Service, cluster: str) -> Any:
    binding = svc.ctx.throttle.bindings.get(cluster) if svc.ctx.throttle else None
    return binding.source.rounds.latest(cluster) if binding is not None else None  # type: ignore[attr-defined]


def test_protection_holds_a_real_hot_disk_with_the_assigned_consumers_quota(scene: Scene) -> None:
    before = scene.util(scene.samples[0][0], scene.acted_at)
    after5 = scene.util(scene.acted_at, scene.acted_at + WINDOW_S)
    after15 = scene.util(scene.acted_at, scene.acted_at + WINDOW_S, 15.0)
    peak_before = max(u for _, u in before)
    peak_after = max(u for _, u in after15)
    # over the window's second half (30 s): the quota'd consumer's disk reads come in bursts — a mute of Kafka's
    # quota window (11 s), or readahead that serves the next fetches from the page cache: over the last 10 s
    # one read 0.41 MB/s, over the last 15 s one 0.18 MB/s (10 s without a disk read after a 5 s burst at util
    # 1.00), each while the consumer was held and still lagging
    tail_reads = scene.read_rate(scene.acted_at + WINDOW_S / 2, scene.acted_at + WINDOW_S)
    mean = scene.util(scene.acted_at, scene.acted_at + WINDOW_S, WINDOW_S)[0][1]
    print(f"\nhot device {scene.device} (broker {HOT_BROKER}, reads capped at {READ_CAP / 1e6:.2f} MB/s): "
          f"max util before Guardian acted {peak_before:.2f}; after, over {WINDOW_S:.0f} s: max {peak_after:.2f} in "
          f"{len(after15)} x 15 s intervals (target {TARGET:.2f} + 0.1), max {max(u for _, u in after5):.2f} in "
          f"{len(after5)} x 5 s intervals, mean {mean:.2f}; "
          f"reads in the last {WINDOW_S / 2:.0f} s {tail_reads / 1e6:.2f} MB/s; consumer still {scene.lag_at_end} "
          "messages behind")
    print(f"lever: {scene.throttle['kind']} {scene.throttle['target']} at "
          f"{scene.throttle['rate_bytes_per_s'] / 1e6:.2f} MB/s; why: {scene.throttle.get('why')}")
    print(f"timings: {scene.timings}")
    print("util per 5 s after acting: " + ", ".join(f"{t - scene.acted_at:+.0f}s {u:.2f}" for t, u in after5))
    print("util per 15 s after acting: " + ", ".join(f"{t - scene.acted_at:+.0f}s {u:.2f}" for t, u in after15))
    print(f"Guardian's throttle actions: {scene.history}")
    assert peak_before > 0.85, "the disk was not hot before Guardian acted: nothing was shown"
    assert len(after15) >= 3 and peak_after <= TARGET + 0.1
    # held, not emptied: the consumer still read from disk at the end of the window and still lags
    assert tail_reads > 0.2 * READ_CAP and scene.lag_at_end > 0
    # the lever: the client-id quota of the member of `replay` assigned orders-3, on Kafka itself
    assert scene.throttle["target"]["client_id"] == CLIENT
    assert scene.throttle["target"]["quota"] == "consumer_byte_rate"
    assert any("consumer_byte_rate" in str(q) for q in scene.quota_on_kafka), scene.quota_on_kafka
    text = " ".join(scene.explain.split())
    assert (f"client quota of group {GROUP}'s members assigned {TOPIC}-{HOT_PARTITION} (consumer-group assignment): "
            "the cluster has no partition-level throttle") in text, scene.explain
    assert "levers: client-id quotas" in text


def test_the_page_cache_read_estimates_against_the_devices_real_reads(scene: Scene) -> None:
    start, end = scene.acted_at, scene.acted_at + WINDOW_S
    rounds = [v for v in scene.rounds.values() if start + 2.0 <= v[0] <= end]
    steady = [v for v in scene.rounds.values() if v[0] <= start and v[2] > 0]
    measured = scene.read_rate(start, end)
    measured_steady = scene.read_rate(steady[0][0] - 2.0, steady[-1][0]) if len(steady) >= 2 else 0.0
    position = sum(v[1] for v in rounds) / len(rounds)
    attributed = sum(v[2] for v in rounds) / len(rounds)
    attributed_steady = sum(v[2] for v in steady) / max(len(steady), 1)
    readers = sorted({g for v in rounds for g in v[3]})
    print(f"\n{TOPIC}-{HOT_PARTITION}, the {WINDOW_S:.0f} s after acting ({len(rounds)} rounds): node_exporter reads "
          f"of {scene.device} {measured / 1e6:.3f} MB/s; Guardian's position estimate {position / 1e6:.3f} MB/s "
          f"({position / measured - 1:+.1%}, disk-reading groups {readers}); attribution estimate "
          f"{attributed / 1e6:.3f} MB/s ({attributed / measured - 1:+.1%})")
    print(f"before acting ({len(steady)} rounds at the cap): node_exporter {measured_steady / 1e6:.3f} MB/s; "
          f"attribution estimate {attributed_steady / 1e6:.3f} MB/s")
    assert len(rounds) >= 15
    assert readers == [GROUP]
    assert position == pytest.approx(measured, rel=0.25)
