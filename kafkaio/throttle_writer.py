"""Throttle levers over the Kafka port: make a protection lever effective on a cluster, or remove it.

Goal: one place that knows how each lever kind of :mod:`domain.throttles` maps onto Kafka configs, so
throttle protection (and the API's manual throttles, through its reconcile) never talks to a client.

Method: every lever is an idempotent change through the cluster's one :class:`~kafkaio.port.KafkaCluster`
(the client the service binds once per cluster — shared with the observer and the executor):

* partition fetch/produce: the topic config ``guardian.partition.throttle.{fetch,produce}.bytes.per.second``
  = ``p:rate,...`` read, merged with the other partitions' entries and written back (SET, or DELETE when
  the last entry goes);
* consumer/producer quota: ``consumer_byte_rate`` / ``producer_byte_rate`` of the client id
  (AlterClientQuotas);
* intra-broker: the broker's KIP-113 ``replica.alter.log.dirs.io.max.bytes.per.second``;
* follower / migration: the broker's KIP-73 follower rate plus ``follower.replication.throttled.replicas``
  entries by APPEND/SUBTRACT, so nobody else's entries are clobbered; a migration lever lists the replicas
  being copied to the broker when set and removes every entry naming the broker when removed (finished
  moves must leave nothing behind).

Guarantee: applying the same lever twice changes nothing the second time; a failed change raises
(:class:`~kafkaio.admin.AdminError`) and the client reconnects on its next call.
Cost: one to three admin requests per change; removing a migration lever describes every topic's configs.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from domain.throttles import (
    ALTER_DIRS_RATE,
    CONSUMER_QUOTA,
    FOLLOWER,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    INTRA_BROKER,
    MIGRATION,
    PARTITION_FETCH,
    PARTITION_PRODUCE,
    PRODUCER_QUOTA,
    PT_FETCH,
    PT_PRODUCE,
)
from kafkaio.port import KafkaCluster


class ThrottleWriter:
    """Sets and removes throttle levers on one cluster through its shared client (thread-safe)."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()

    def apply(self, kind: str, target: Mapping[str, Any], rate_bytes_per_s: float) -> None:
        """Make the lever effective at ``rate_bytes_per_s`` (rounded to whole bytes/s, at least 1)."""
        with self._lock:
            self._change(kind, target, max(int(rate_bytes_per_s), 1))

    def remove(self, kind: str, target: Mapping[str, Any]) -> None:
        """Remove the lever (no-op when absent)."""
        with self._lock:
            self._change(kind, target, None)

    def _change(self, kind: str, target: Mapping[str, Any], rate: int | None) -> None:
        if kind in (PARTITION_FETCH, PARTITION_PRODUCE):
            self._partition_rate(PT_FETCH if kind == PARTITION_FETCH else PT_PRODUCE, str(target["topic"]),
                                 int(target["partition"]), rate)
        elif kind in (CONSUMER_QUOTA, PRODUCER_QUOTA):
            key = "consumer_byte_rate" if kind == CONSUMER_QUOTA else "producer_byte_rate"
            self.cluster.set_client_quotas(str(target["client_id"]), {key: None if rate is None else float(rate)})
        elif kind == INTRA_BROKER:
            self._broker_rate(int(target["broker"]), ALTER_DIRS_RATE, rate)
        elif kind == FOLLOWER:
            broker = int(target["broker"])
            self._broker_rate(broker, FOLLOWER_RATE, rate)
            self._listed(str(target["topic"]), f"{int(target['partition'])}:{broker}", add=rate is not None)
        elif kind == MIGRATION:
            broker = int(target["broker"])
            self._broker_rate(broker, FOLLOWER_RATE, rate)
            entries = self._moving_to(broker) if rate is not None else self._listed_for(broker)
            for topic, names in entries.items():
                for entry in names:
                    self._listed(topic, entry, add=rate is not None)
        else:
            raise ValueError(f"unknown throttle kind {kind!r}")

    def _partition_rate(self, key: str, topic: str, partition: int, rate: int | None) -> None:
        value = self.cluster.topic_configs([topic], (key,)).get(topic, {}).get(key, "")
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
        self.cluster.set_topic_configs({topic: {key: new or None}})

    def _broker_rate(self, broker: int, key: str, rate: int | None) -> None:
        self.cluster.set_broker_configs({broker: {key: None if rate is None else str(rate)}})

    def _listed(self, topic: str, entry: str, add: bool) -> None:
        if add:
            self.cluster.alter_topic_lists(topic, FOLLOWER_REPLICAS, append=[entry])
        else:
            self.cluster.alter_topic_lists(topic, FOLLOWER_REPLICAS, subtract=[entry])

    def _moving_to(self, broker: int) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for (topic, partition), ra in sorted(self.cluster.live().reassignments.items()):
            if broker in ra.adding:
                out[topic].append(f"{partition}:{broker}")
        return dict(out)

    def _listed_for(self, broker: int) -> dict[str, list[str]]:
        topics = sorted({t for t, _ in self.cluster.live().partitions})
        out: dict[str, list[str]] = {}
        for topic, configs in self.cluster.topic_configs(topics, (FOLLOWER_REPLICAS,)).items():
            value = str(configs.get(FOLLOWER_REPLICAS) or "")
            mine = [e.strip() for e in value.split(",") if e.strip().endswith(f":{broker}")]
            if mine:
                out[topic] = mine
        return out
