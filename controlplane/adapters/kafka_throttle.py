"""Throttle-protection adapters over the wire: observe a cluster (Kafka admin + Prometheus text) and
set/remove its levers (topic/broker configs, client quotas).

:class:`KafkaThrottleSource` implements the throttle service's ``ThrottleSource`` port. One
``observe()`` does one scrape round over the brokers' ``/metrics`` (JMX-exporter + node_exporter
names, see :mod:`kafkasim.metrics`) and a handful of admin calls (metadata, DescribeLogDirs,
ListPartitionReassignments, DescribeConfigs once for the capability), and turns counters into rates
with the measured elapsed time between scrapes (reset or too-short intervals give *missing* values,
never infinities). Until the collectors' snapshot builder is merged this is the throttle's own,
deliberately small collector:

* disk util = Δ io_time / Δt, await = Δ(read+write time) / Δ(reads+writes), read/write bytes/s;
* per-partition bytes in/out from the leader's per-partition counters;
* transfers: reassignment and intra-broker copies from the growth of the copy's size
  (DescribeLogDirs) between observations;
* page-cache-miss estimate: the disk's measured read bytes minus copy reads are attributed to the
  partitions led on that disk in proportion to their fetch traffic beyond the topic's tailing
  fan-out (median bytes_out/bytes_in over the topic's partitions) — tailing consumers are served from
  the page cache, what reads beyond them is what lags and misses it;
* lineage: the audit topic (``__guardian_audit``, one JSON record per client x partition x interval)
  read with an assigned consumer (no group needed): fetch/produce bytes/s per client per partition.

:class:`KafkaThrottleActuator` implements ``ThrottleActuator``: partition-level throttle topic configs
(``guardian.partition.throttle.{fetch,produce}.bytes.per.second`` = ``p:rate,...``, merged with the other
partitions' entries), client quotas (``consumer_byte_rate`` / ``producer_byte_rate`` per client id via
AlterClientQuotas), KIP-73 follower throttles (rate + ``follower.replication.throttled.replicas``
entries, APPEND/SUBTRACT so nobody else's entries are clobbered) and the intra-broker move rate.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from controlplane.domain import Broker, ClusterSnapshot, Disk, DiskId, DiskKind, Partition, Topic
from controlplane.service.throttle_loop import Observation
from planners.throttle import (
    CONSUMER_QUOTA,
    FOLLOWER,
    INTRA_BROKER,
    MIGRATION,
    PARTITION_FETCH,
    PARTITION_PRODUCE,
    PRODUCER_QUOTA,
    ClientShare,
    Lineage,
    Transfer,
)

log = logging.getLogger(__name__)

PT_FETCH = "guardian.partition.throttle.fetch.bytes.per.second"
PT_PRODUCE = "guardian.partition.throttle.produce.bytes.per.second"
PT_ENABLE = "guardian.partition.throttle.enable"
FOLLOWER_RATE = "follower.replication.throttled.rate"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
ALTER_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
AUDIT_TOPIC = "__guardian_audit"
DEFAULT_MAX_BPS = {"hdd": 200e6, "ssd": 500e6, "nvme": 2000e6}
MIN_ELAPSED_S = 0.5

Sample = tuple[str, dict[str, str], float]


class ObserveError(RuntimeError):
    """The cluster could not be observed (no broker answered, metadata unavailable)."""


def parse_prometheus(text: str) -> list[Sample]:
    """(name, labels, value) of every sample line; malformed lines and non-finite values are skipped."""
    out: list[Sample] = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        labels: dict[str, str] = {}
        if "{" in line:
            name, _, rest = line.partition("{")
            body, _, value_part = rest.rpartition("}")
            for item in _split_labels(body):
                key, _, val = item.partition("=")
                labels[key.strip()] = val.strip().strip('"').replace('\\"', '"').replace("\\\\", "\\")
        else:
            name, _, value_part = line.partition(" ")
        fields = value_part.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            out.append((name.strip(), labels, value))
    return out


def _split_labels(body: str) -> list[str]:
    items, cur, quoted, escaped = [], [], False, False
    for ch in body:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            cur.append(ch)
            escaped = True
        elif ch == '"':
            quoted = not quoted
            cur.append(ch)
        elif ch == "," and not quoted:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        items.append("".join(cur))
    return [i for i in items if "=" in i]


def _http_get(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return str(resp.read().decode("utf-8", "replace"))


class _Counters:
    """Counter -> rate over the measured elapsed time. A reset gives None; an interval too short to
    measure (an alert right after a scheduled pass) repeats the last rate instead of dividing by ~0."""

    def __init__(self) -> None:
        self.prev: dict[Any, tuple[float, float]] = {}
        self.last: dict[Any, float | None] = {}

    def rate(self, key: Any, t: float, value: float | None) -> float | None:
        if value is None or not math.isfinite(value):
            return None
        old = self.prev.get(key)
        if old is not None and t - old[0] < MIN_ELAPSED_S and value >= old[1]:
            return self.last.get(key)
        self.prev[key] = (t, value)
        rate = None if old is None or value < old[1] else (value - old[1]) / (t - old[0])
        self.last[key] = rate
        return rate


def _admin(bootstrap: str, client_id: str) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id, request_timeout_ms=10_000)


class KafkaThrottleSource:
    """Observes one cluster for the throttle planner (see the module docstring)."""

    def __init__(self, cluster: str, bootstrap_servers: str, metrics_urls: Sequence[str],
                 audit_topic: str | None = AUDIT_TOPIC, scrape_timeout_s: float = 5.0) -> None:
        if not metrics_urls:
            raise ValueError(f"cluster {cluster!r}: no metrics URLs to observe disks with")
        self.cluster = cluster
        self.bootstrap = bootstrap_servers
        self.metrics_urls = list(metrics_urls)
        self.audit_topic = audit_topic
        self.scrape_timeout_s = scrape_timeout_s
        self.counters = _Counters()
        self.sizes = _Counters()
        self._admin: Any = None
        self._consumer: Any = None
        self._capable: bool | None = None
        self._audit: dict[tuple[str, str, int], tuple[str, dict[str, float]]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the admin client and the audit consumer."""
        for c in (self._admin, self._consumer):
            if c is not None:
                try:
                    c.close()
                except Exception:  # closing is best effort
                    log.debug("close failed", exc_info=True)
        self._admin = self._consumer = None

    def _adm(self) -> Any:
        if self._admin is None:
            self._admin = _admin(self.bootstrap, "guardian-throttle")
        return self._admin

    # ------------------------------------------------------------------ observe
    def observe(self) -> Observation:
        """One scrape round + admin reads -> snapshot, transfers, lineage, capability."""
        with self._lock:
            try:
                return self._observe()
            except ObserveError:
                raise
            except Exception as exc:
                self.close()  # reconnect next time (controller moved, broker died)
                raise ObserveError(f"cluster {self.cluster}: {type(exc).__name__}: {exc}") from exc

    def _observe(self) -> Observation:
        scraped: list[tuple[float, list[Sample]]] = []
        for url in self.metrics_urls:
            try:
                samples = parse_prometheus(_http_get(url, self.scrape_timeout_s))
            except OSError as exc:
                log.info("scrape %s failed: %s", url, exc)
                continue
            sim_t = next((v for n, _, v in samples if n == "kafkasim_sim_time_seconds"), None)
            scraped.append((sim_t if sim_t is not None else time.time(), samples))
        if not scraped:
            raise ObserveError(f"cluster {self.cluster}: no broker metrics endpoint answered")
        admin = self._adm()
        topics = [t for t in admin.list_topics()]
        described = admin.describe_topics(topics) if topics else []
        brokers_meta = {b["node_id"] if "node_id" in b else b["broker_id"]: b
                        for b in admin.describe_cluster()["brokers"]}
        log_dirs = admin.describe_log_dirs(brokers=sorted(brokers_meta))
        ongoing = admin.list_partition_reassignments()
        if self._capable is None:
            self._capable = self._detect_capability(admin, min(brokers_meta))
        t_obs = max(t for t, _ in scraped)

        # ---- per broker metrics
        disks_of: dict[int, list[Disk]] = {}
        broker_info: dict[int, dict[str, str]] = {}
        p_in: dict[tuple[str, int], float] = {}
        p_out: dict[tuple[str, int], float] = {}
        p_msgs: dict[tuple[str, int], float] = {}
        p_size: dict[tuple[str, int], int] = {}
        for t, samples in scraped:
            info = next((lab for n, lab, _ in samples if n == "kafkasim_broker_info"), None)
            if info is None or "broker_id" not in info:
                continue
            bid = int(info["broker_id"])
            broker_info[bid] = info
            disks_of[bid] = self._disks(bid, t, samples)
            for n, lab, v in samples:
                if "topic" not in lab or "partition" not in lab:
                    continue
                pid = (lab["topic"], int(lab["partition"]))
                if n == "kafka_server_brokertopicpartitionmetrics_bytesin_total":
                    r = self.counters.rate(("in", bid, pid), t, v)
                    if r is not None:
                        p_in[pid] = r
                elif n == "kafka_server_brokertopicpartitionmetrics_bytesout_total":
                    r = self.counters.rate(("out", bid, pid), t, v)
                    if r is not None:
                        p_out[pid] = r
                elif n == "kafka_server_brokertopicpartitionmetrics_messagesin_total":
                    r = self.counters.rate(("msgs", bid, pid), t, v)
                    if r is not None:
                        p_msgs[pid] = r
                elif n == "kafka_log_log_size" and bid == _leader_of(described, pid):
                    p_size[pid] = int(v)

        # ---- replica -> log dir, copies in flight
        dir_of: dict[tuple[int, str, int], str] = {}
        future_of: dict[tuple[int, str, int], tuple[str, float]] = {}
        for entry in log_dirs:
            bid = int(entry["broker"])
            for d in entry["log_dirs"]:
                for tp in d["topics"]:
                    for p in tp["partitions"]:
                        key = (bid, tp["name"], int(p["partition_index"]))
                        size = float(p.get("partition_size", 0) or 0)
                        if p.get("is_future_key"):
                            future_of[key] = (d["log_dir"], size)
                        else:
                            dir_of[key] = d["log_dir"]
                            self.sizes.rate(("size", *key), t_obs, size)
        transfers: list[Transfer] = []
        leaders = {(t["name"], int(p["partition_index"])): int(p["leader_id"])
                   for t in described for p in t["partitions"]}
        for tp, info_r in sorted(ongoing.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
            leader = leaders.get((tp.topic, tp.partition), -1)
            src_dir = dir_of.get((leader, tp.topic, tp.partition))
            for b in info_r.get("adding_replicas", []):
                dest_dir = dir_of.get((int(b), tp.topic, tp.partition))
                copied = self._replica_size(log_dirs, int(b), tp.topic, tp.partition)
                copy_rate = self.sizes.rate(("copy", b, tp.topic, tp.partition), t_obs, copied)
                if dest_dir is None or copy_rate is None:
                    continue
                transfers.append(Transfer("reassign", tp.topic, tp.partition,
                                          (leader, src_dir) if src_dir else None, (int(b), dest_dir), copy_rate))
        for (bid, topic, part), (fdir, fsize) in sorted(future_of.items()):
            future_rate = self.sizes.rate(("future", bid, topic, part), t_obs, fsize)
            src = dir_of.get((bid, topic, part))
            if future_rate is not None and src is not None:
                transfers.append(Transfer("intra_broker", topic, part, (bid, src), (bid, fdir), future_rate))

        # ---- brokers, topics, page-cache-miss estimate
        brokers = []
        for bid, meta_b in sorted(brokers_meta.items()):
            info = broker_info.get(bid, {})
            rack = meta_b.get("rack") or info.get("rack") or ""
            brokers.append(Broker(id=bid, host=str(meta_b.get("host", "")), port=int(meta_b.get("port", 0)),
                                  idc=info.get("idc", rack.rsplit("-r", 1)[0] if rack else ""), rack=rack,
                                  pool=info.get("pool", "shared"), disks=tuple(disks_of.get(bid, ()))))
        parts: list[Partition] = []
        for t in described:
            for p in t["partitions"]:
                pid = (t["name"], int(p["partition_index"]))
                replicas = tuple(int(r) for r in p["replica_nodes"])
                leader = int(p["leader_id"])
                parts.append(Partition(
                    topic=pid[0], partition=pid[1], replicas=replicas, leader=leader if leader >= 0 else None,
                    isr=tuple(int(r) for r in p["isr_nodes"]),
                    log_dirs=tuple(dir_of.get((r, pid[0], pid[1]), "") for r in replicas),
                    size_bytes=p_size.get(pid, 0), bytes_in_per_s=p_in.get(pid, 0.0),
                    bytes_out_per_s=p_out.get(pid, 0.0), messages_in_per_s=p_msgs.get(pid, 0.0)))
        parts = _estimate_disk_reads(parts, brokers, transfers)
        by_topic: dict[str, list[Partition]] = defaultdict(list)
        for p in parts:
            by_topic[p.topic].append(p)
        snap = ClusterSnapshot(cluster=self.cluster, taken_at=datetime.now(UTC), brokers=tuple(brokers),
                               topics=tuple(Topic(name=n, partitions=tuple(ps)) for n, ps in sorted(by_topic.items())))
        lineage = self._lineage(t_obs) if self.audit_topic and self.audit_topic in topics else Lineage()
        return Observation(snapshot=snap, transfers=tuple(transfers), lineage=lineage,
                           partition_throttle=bool(self._capable))

    @staticmethod
    def _replica_size(log_dirs: Any, broker: int, topic: str, partition: int) -> float | None:
        for entry in log_dirs:
            if int(entry["broker"]) != broker:
                continue
            for d in entry["log_dirs"]:
                for tp in d["topics"]:
                    if tp["name"] != topic:
                        continue
                    for p in tp["partitions"]:
                        if int(p["partition_index"]) == partition and not p.get("is_future_key"):
                            return float(p.get("partition_size", 0) or 0)
        return None

    def _disks(self, bid: int, t: float, samples: list[Sample]) -> list[Disk]:
        by: dict[str, dict[str, float]] = defaultdict(dict)
        dirs: dict[str, tuple[str, str]] = {}
        caps: dict[str, float] = {}
        for n, lab, v in samples:
            dev = lab.get("device")
            if n == "kafkasim_log_dir_info" and dev:
                dirs[dev] = (lab.get("log_dir", ""), lab.get("kind", "hdd"))
            elif n.startswith("node_disk_") and dev:
                by[dev][n] = v
            elif n == "kafkasim_disk_max_bytes_per_second" and dev:
                caps[dev] = v
            elif n == "node_filesystem_size_bytes" and "mountpoint" in lab:
                caps["fs:" + lab["mountpoint"]] = v
        out = []
        for dev, (path, kind) in sorted(dirs.items(), key=lambda kv: kv[1][0]):
            m = by.get(dev, {})

            def r(name: str, dev: str = dev, m: dict[str, float] = m) -> float | None:
                return self.counters.rate((bid, dev, name), t, m.get(name))

            util = r("node_disk_io_time_seconds_total")
            rd, wr = r("node_disk_read_bytes_total"), r("node_disk_written_bytes_total")
            rt, wt = r("node_disk_read_time_seconds_total"), r("node_disk_write_time_seconds_total")
            ro, wo = r("node_disk_reads_completed_total"), r("node_disk_writes_completed_total")
            await_ms: float = math.nan
            if None not in (rt, wt, ro, wo):
                ops = (ro or 0.0) + (wo or 0.0)
                await_ms = ((rt or 0.0) + (wt or 0.0)) / ops * 1000.0 if ops > 0 else 0.0
            try:
                disk_kind = DiskKind(kind)
            except ValueError:
                disk_kind = DiskKind.HDD
            out.append(Disk(path=path, kind=disk_kind,
                            capacity_bytes=int(caps.get("fs:" + path, 1)) or 1,
                            max_bytes_per_s=caps.get(dev, DEFAULT_MAX_BPS.get(kind, 200e6)),
                            util=min(util, 1.0) if util is not None else math.nan, await_ms=await_ms,
                            read_bytes_per_s=rd if rd is not None else math.nan,
                            write_bytes_per_s=wr if wr is not None else math.nan))
        return out

    @staticmethod
    def _detect_capability(admin: Any, broker_id: int) -> bool:
        from kafka.admin import ConfigResource, ConfigResourceType

        try:
            res = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(broker_id))],
                                         config_filter="all")
            entry = res["broker"][str(broker_id)].get(PT_ENABLE)
            return bool(entry) and str(entry.get("value")).lower() == "true"
        except Exception:
            log.info("capability probe failed; assuming no partition-level throttle", exc_info=True)
            return False

    # ------------------------------------------------------------------ audit lineage
    def _lineage(self, t_obs: float) -> Lineage:
        from kafka import KafkaConsumer, TopicPartition

        if self._consumer is None:
            self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, client_id="guardian-throttle-audit",
                                           group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
                                           consumer_timeout_ms=500)
            parts = self._consumer.partitions_for_topic(self.audit_topic) or set()
            self._consumer.assign([TopicPartition(self.audit_topic, p) for p in sorted(parts)])
        batches = self._consumer.poll(timeout_ms=100, max_records=50_000)
        for records in batches.values():
            for rec in records:
                try:
                    a = json.loads(rec.value)
                    key = (str(a["kind"]), str(a["topic"]), int(a["partition"]))
                    ts, interval = str(a["ts"]), float(a.get("interval_s") or 60.0)
                    rate = float(a["bytes"]) / interval
                except (ValueError, KeyError, TypeError):
                    continue
                old = self._audit.get(key)
                if old is None or old[0] < ts:
                    self._audit[key] = (ts, {})
                    old = self._audit[key]
                if old[0] == ts:
                    client = str(a.get("client_id", ""))
                    old[1][client] = old[1].get(client, 0.0) + rate
        fetch: dict[tuple[str, int], tuple[ClientShare, ...]] = {}
        produce: dict[tuple[str, int], tuple[ClientShare, ...]] = {}
        t_cons: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        t_prod: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for (kind, topic, part), (_, clients) in self._audit.items():
            shares = tuple(ClientShare(c, r) for c, r in sorted(clients.items()) if c)
            if kind == "fetch":
                fetch[(topic, part)] = shares
                for s in shares:
                    t_cons[topic][s.client_id] += s.bytes_per_s
            elif kind == "produce":
                produce[(topic, part)] = shares
                for s in shares:
                    t_prod[topic][s.client_id] += s.bytes_per_s
        return Lineage(fetch=fetch, produce=produce,
                       topic_consumers={t: tuple(ClientShare(c, r) for c, r in sorted(v.items()))
                                        for t, v in t_cons.items()},
                       topic_producers={t: tuple(ClientShare(c, r) for c, r in sorted(v.items()))
                                        for t, v in t_prod.items()})


def _leader_of(described: Sequence[Mapping[str, Any]], pid: tuple[str, int]) -> int:
    for t in described:
        if t["name"] == pid[0]:
            for p in t["partitions"]:
                if int(p["partition_index"]) == pid[1]:
                    return int(p["leader_id"])
    return -1


def _estimate_disk_reads(parts: list[Partition], brokers: Sequence[Broker],
                         transfers: Sequence[Transfer]) -> list[Partition]:
    """Attribute each disk's measured user reads to the partitions led there (see module docstring)."""
    fanout: dict[str, float] = {}
    by_topic: dict[str, list[float]] = defaultdict(list)
    for p in parts:
        if p.bytes_in_per_s > 1.0:
            by_topic[p.topic].append(p.bytes_out_per_s / p.bytes_in_per_s)
    for topic, ratios in by_topic.items():
        fanout[topic] = statistics.median(ratios)
    measured: dict[DiskId, float] = {}
    for b in brokers:
        for d in b.disks:
            if math.isfinite(d.read_bytes_per_s):
                measured[(b.id, d.path)] = d.read_bytes_per_s
    for t in transfers:
        if t.source is not None and t.source in measured:
            measured[t.source] = max(measured[t.source] - t.bytes_per_s, 0.0)
    led: dict[DiskId, list[int]] = defaultdict(list)
    for i, p in enumerate(parts):
        if p.leader is not None and p.leader in p.replicas:
            led[(p.leader, p.log_dirs[p.replicas.index(p.leader)])].append(i)
    reads = [0.0] * len(parts)
    for disk, idx in led.items():
        total = measured.get(disk, 0.0)
        if total <= 0:
            continue
        excess = {i: max(parts[i].bytes_out_per_s - fanout.get(parts[i].topic, 0.0) * parts[i].bytes_in_per_s, 0.0)
                  for i in idx}
        weights = excess if sum(excess.values()) > 0 else {i: parts[i].bytes_out_per_s for i in idx}
        wsum = sum(weights.values())
        if wsum <= 0:
            continue
        for i, w in weights.items():
            reads[i] = min(total * w / wsum, parts[i].bytes_out_per_s)
    from dataclasses import replace

    return [replace(p, disk_read_bytes_per_s=r) if r else p for p, r in zip(parts, reads, strict=True)]


class KafkaThrottleActuator:
    """Sets and removes throttle levers on one cluster over the Kafka protocol (idempotent)."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap = bootstrap_servers
        self._admin: Any = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the admin client."""
        if self._admin is not None:
            try:
                self._admin.close()
            finally:
                self._admin = None

    def _adm(self) -> Any:
        if self._admin is None:
            self._admin = _admin(self.bootstrap, "guardian-throttle-actuator")
        return self._admin

    def apply(self, kind: str, target: Mapping[str, Any], rate_bytes_per_s: float) -> None:
        """Make the lever effective at ``rate_bytes_per_s`` (rounded to whole bytes/s, at least 1)."""
        rate = max(int(rate_bytes_per_s), 1)
        with self._lock:
            try:
                self._change(kind, target, rate)
            except Exception:
                self.close()
                raise

    def remove(self, kind: str, target: Mapping[str, Any]) -> None:
        """Remove the lever (no-op when absent)."""
        with self._lock:
            try:
                self._change(kind, target, None)
            except Exception:
                self.close()
                raise

    def _change(self, kind: str, target: Mapping[str, Any], rate: int | None) -> None:
        if kind in (PARTITION_FETCH, PARTITION_PRODUCE):
            self._partition_rate(PT_FETCH if kind == PARTITION_FETCH else PT_PRODUCE, str(target["topic"]),
                                 int(target["partition"]), rate)
        elif kind in (CONSUMER_QUOTA, PRODUCER_QUOTA):
            key = "consumer_byte_rate" if kind == CONSUMER_QUOTA else "producer_byte_rate"
            self._quota(str(target["client_id"]), key, rate)
        elif kind == INTRA_BROKER:
            self._broker_config(int(target["broker"]), ALTER_DIRS_RATE, rate)
        elif kind == FOLLOWER:
            broker = int(target["broker"])
            self._broker_config(broker, FOLLOWER_RATE, rate)
            self._topic_list(str(target["topic"]), FOLLOWER_REPLICAS, f"{int(target['partition'])}:{broker}",
                             add=rate is not None)
        elif kind == MIGRATION:
            broker = int(target["broker"])
            self._broker_config(broker, FOLLOWER_RATE, rate)
            if rate is not None:  # list the replicas being copied to the broker (KIP-73 throttles listed ones)
                for topic, entries in self._moving_to(broker).items():
                    for entry in entries:
                        self._topic_list(topic, FOLLOWER_REPLICAS, entry, add=True)
            else:  # remove every entry naming the broker: finished moves must leave nothing behind
                for topic, entries in self._listed_for(broker).items():
                    for entry in entries:
                        self._topic_list(topic, FOLLOWER_REPLICAS, entry, add=False)
        else:
            raise ValueError(f"unknown throttle kind {kind!r}")

    def _alter(self, resource: Any) -> None:
        res = self._adm().alter_configs([resource], raise_on_unknown=False)
        for by_name in res.values():
            for name, result in by_name.items():
                if result != "OK":  # kafka-python reports "OK" or the error's text
                    raise RuntimeError(f"alter configs of {name}: {result}")

    def _partition_rate(self, key: str, topic: str, partition: int, rate: int | None) -> None:
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        cur = self._adm().describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        value = (cur.get("topic", {}).get(topic, {}).get(key) or {}).get("value") or ""
        entries: dict[str, str] = {}
        for item in str(value).split(","):
            p, _, r = item.partition(":")
            if p.strip() and r.strip():
                entries[p.strip()] = r.strip()
        if rate is None:
            entries.pop(str(partition), None)
        else:
            entries[str(partition)] = str(rate)
        new = ",".join(f"{p}:{r}" for p, r in sorted(entries.items(), key=lambda kv: (kv[0] == "*", kv[0])))
        op = (AlterConfigOp.SET, new) if new else (AlterConfigOp.DELETE, None)
        self._alter(ConfigResource(ConfigResourceType.TOPIC, topic, configs={key: op}))

    def _broker_config(self, broker: int, key: str, rate: int | None) -> None:
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        op = (AlterConfigOp.SET, str(rate)) if rate is not None else (AlterConfigOp.DELETE, None)
        self._alter(ConfigResource(ConfigResourceType.BROKER, str(broker), configs={key: op}))

    def _topic_list(self, topic: str, key: str, entry: str, add: bool) -> None:
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        op = AlterConfigOp.APPEND if add else AlterConfigOp.SUBTRACT
        self._alter(ConfigResource(ConfigResourceType.TOPIC, topic, configs={key: (op, entry)}))

    def _moving_to(self, broker: int) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for tp, info in self._adm().list_partition_reassignments().items():
            if broker in info.get("adding_replicas", []):
                out[tp.topic].append(f"{tp.partition}:{broker}")
        return dict(out)

    def _listed_for(self, broker: int) -> dict[str, list[str]]:
        from kafka.admin import ConfigResource, ConfigResourceType

        admin = self._adm()
        topics = sorted(admin.list_topics())
        if not topics:
            return {}
        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics])
        out: dict[str, list[str]] = {}
        for topic, configs in res.get("topic", {}).items():
            value = str((configs.get(FOLLOWER_REPLICAS) or {}).get("value") or "")
            mine = [e.strip() for e in value.split(",") if e.strip().endswith(f":{broker}")]
            if mine:
                out[topic] = mine
        return out

    def _quota(self, client_id: str, key: str, rate: int | None) -> None:
        from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest

        entry = AlterClientQuotasRequest.EntryData
        req = AlterClientQuotasRequest(entries=[entry(
            entity=[entry.EntityData(entity_type="client-id", entity_name=client_id)],
            ops=[entry.OpData(key=key, value=float(rate or 0), remove=rate is None)])], validate_only=False)
        admin = self._adm()

        async def go() -> Any:
            return await admin._manager.send(req)

        resp = admin._manager.run(go)
        errors = [(e.error_code, e.error_message) for e in resp.entries if e.error_code]
        if errors:
            raise RuntimeError(f"alter client quota {client_id}/{key}: {errors}")
