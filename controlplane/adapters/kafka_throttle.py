"""Throttle-protection adapters over the wire: observe a cluster (Kafka admin + Prometheus text) and
set/remove its levers (topic/broker configs, client quotas).

:class:`KafkaThrottleSource` implements the throttle service's ``ThrottleSource`` port on top of the
collectors (:class:`collectors.collector.ClusterCollector`: concurrent scrapes of the brokers'
``/metrics``, rates over measured elapsed time with every bad sample dropped, metadata, DescribeLogDirs,
configs).  From one collection round it takes:

* disks: util, await, read/write bytes/s (collectors' rates of the node_exporter counters);
* partitions: bytes in/out, messages in, size, replica log dirs;
* transfers: reassignment and intra-broker copies with their measured rates (collectors' copies in flight);
* capability: ``guardian.partition.throttle.enable`` among the broker configs the collectors read;
* page-cache-miss estimate (the throttle's own): the disk's measured read bytes minus copy reads are
  attributed to the partitions led on that disk in proportion to their fetch traffic beyond the
  topic's tailing fan-out (median bytes_out/bytes_in over the topic's partitions) — tailing consumers
  are served from the page cache, what reads beyond them is what lags and misses it;
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
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from controlplane.service.throttle_loop import Observation
from domain import Broker, BrokerState, ClusterSnapshot, DiskId, Partition, Topic
from domain.throttles import ALTER_DIRS_RATE, FOLLOWER_RATE, FOLLOWER_REPLICAS, PT_ENABLE, PT_FETCH, PT_PRODUCE
from kafkaio.connection import KafkaConnection
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

AUDIT_TOPIC = "__guardian_audit"

class ObserveError(RuntimeError):
    """The cluster could not be observed (no broker answered, metadata unavailable)."""


def _admin(bootstrap: str, client_id: str) -> Any:
    return KafkaConnection(bootstrap, client_id=client_id, request_timeout_ms=10_000).client()


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
        self._collector: Any = None
        self._consumer: Any = None
        self._capable: bool | None = None
        self._audit: dict[tuple[str, str, int], tuple[str, dict[str, float]]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the collector (admin client, metadata connection) and the audit consumer."""
        for c in (self._collector, self._consumer):
            if c is not None:
                try:
                    c.close()
                except Exception:  # closing is best effort
                    log.debug("close failed", exc_info=True)
        self._collector = self._consumer = None

    def _coll(self) -> Any:
        """The cluster's :class:`collectors.collector.ClusterCollector` (log dirs and configs of every
        broker each observation: copies in flight are measured from their size growth)."""
        if self._collector is None:
            from collectors.collector import ClusterCollector
            from kafkaio.endpoints import endpoints_from_options
            from kafkaio.source import KafkaSourceOptions

            eps = endpoints_from_options(self.cluster, self.bootstrap, self.metrics_urls)
            self._collector = ClusterCollector(eps, source_options=KafkaSourceOptions(client_id="guardian-throttle"),
                                               scrape_timeout_s=self.scrape_timeout_s, full_admin_every=1)
        return self._collector

    # ------------------------------------------------------------------ observe
    def observe(self) -> Observation:
        """One collection round (collectors/) -> snapshot, transfers, lineage, capability."""
        with self._lock:
            try:
                return self._observe()
            except ObserveError:
                raise
            except Exception as exc:
                self.close()  # reconnect next time (controller moved, broker died)
                raise ObserveError(f"cluster {self.cluster}: {type(exc).__name__}: {exc}") from exc

    def _observe(self) -> Observation:
        from collectors.builder import PLACEHOLDER_DIR
        from collectors.collector import CollectionError

        try:
            c = self._coll().collect_once()
        except CollectionError as exc:
            raise ObserveError(f"cluster {self.cluster}: {exc}") from None
        if not c.coverage.brokers_with_metrics:
            raise ObserveError(f"cluster {self.cluster}: no broker metrics endpoint answered")
        snap = c.snapshot
        alive = [b for b in snap.brokers if b.state != BrokerState.DEAD]
        brokers = tuple(replace(b, disks=tuple(d for d in b.disks if d.path != PLACEHOLDER_DIR)) for b in alive)
        if self._capable is None and alive:
            flag = c.broker_configs.get(min(b.id for b in alive), {}).get(PT_ENABLE, "")
            self._capable = str(flag).lower() == "true"
        transfers = tuple(Transfer("reassign" if cp.kind == "reassign" else "intra_broker", cp.topic, cp.partition,
                                   cp.source if cp.source is not None and cp.source[1] != PLACEHOLDER_DIR else None,
                                   cp.dest, cp.bytes_per_s)
                          for cp in c.copies if cp.dest[1] != PLACEHOLDER_DIR)
        # the throttle's own page-cache-miss attribution (see the module docstring) replaces the
        # collectors' consumer-position estimate: it needs only the disks' measured reads
        parts = [replace(p, disk_read_bytes_per_s=0.0) for t in sorted(snap.topics, key=lambda t: t.name)
                 for p in t.partitions]
        parts = _estimate_disk_reads(parts, brokers, transfers)
        by_topic: dict[str, list[Partition]] = defaultdict(list)
        for p in parts:
            by_topic[p.topic].append(p)
        out = ClusterSnapshot(cluster=self.cluster, taken_at=snap.taken_at, brokers=brokers,
                              topics=tuple(Topic(name=n, partitions=tuple(ps)) for n, ps in by_topic.items()))
        t_obs = time.time()
        lineage = self._lineage(t_obs) if self.audit_topic and self.audit_topic in by_topic else Lineage()
        return Observation(snapshot=out, transfers=transfers, lineage=lineage, partition_throttle=bool(self._capable))

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
