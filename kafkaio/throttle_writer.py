"""The one writer of throttle configs: every KIP-73 / KIP-113 and partition-throttle key goes through here.

Goal: one module that knows how each lever maps onto Kafka configs and is the only caller that writes them —
throttle protection (and the API's manual throttles, through its reconcile), the executor's migration rates and
lists, and the cleanup of a dead execution's leftovers all hand it their wishes. An AST test
(``tests/unit/test_throttle_writer_only.py``) fails if any other product module passes a throttle key to a
config write.

Merge rule (:mod:`domain.throttles`): at any moment one owner writes a lever (:func:`~domain.throttles.
lever_owner`): the executor owns the brokers' migration rates while an execution runs on the cluster, protection
owns everything else. Their wishes meet on the migration rates only, by one rule — **protection is a ceiling, the
executor's rate runs under it** (:func:`~domain.throttles.migration_rate`, never below what the copies need to
finish): while the executor owns them, a protection lever on a migration rate is only recorded in the replicated
state, and the executor writes ``migration_rate(its rate, that ceiling, its floor)`` here; once no execution runs,
protection writes its own rate again. The executor names the rates it wants and the throttled-replica entries it
adds or removes (:meth:`ThrottleWriter.set_migration_rates`, :meth:`ThrottleWriter.change_throttled_replicas`);
protection hands :class:`~domain.throttles.Lever` s (:meth:`ThrottleWriter.apply`, :meth:`ThrottleWriter.remove`).

Method: every change is idempotent, through the cluster's one :class:`~kafkaio.port.KafkaCluster` (the client the
service binds once per cluster — shared with the observer and the executor):

* partition fetch/produce: the topic config ``guardian.partition.throttle.{fetch,produce}.bytes.per.second``
  = ``p:rate,...`` read, merged with the other partitions' entries and written back (SET, or DELETE when
  the last entry goes);
* consumer/producer quota: ``consumer_byte_rate`` / ``producer_byte_rate`` of the client id
  (AlterClientQuotas);
* intra-broker: the broker's KIP-113 ``replica.alter.log.dirs.io.max.bytes.per.second``;
* follower / migration: the broker's KIP-73 follower rate plus ``follower.replication.throttled.replicas``
  entries by APPEND/SUBTRACT, so nobody else's entries are clobbered; a migration lever lists the replicas
  being copied to the broker when set and removes every entry naming the broker when removed (finished
  moves must leave nothing behind);
* the executor's rates: the broker's KIP-73 leader/follower and KIP-113 rates it names (SET or DELETE); its
  lists: APPEND/SUBTRACT of the entries it names on ``{leader,follower}.replication.throttled.replicas``.

Guarantee: applying the same lever twice changes nothing the second time; a key that is not a throttle key is
refused (``ValueError``) before anything is sent; a failed change raises (:class:`~kafkaio.errors.AdminError`)
and the client reconnects on its next call.
Cost: one to three admin requests per change; removing a migration lever describes every topic's configs.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from domain.throttles import (
    ALTER_DIRS_RATE,
    BROKER_THROTTLE_KEYS,
    CONSUMER_QUOTA,
    FOLLOWER,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    INTRA_BROKER,
    LEADER_REPLICAS,
    MIGRATION,
    PARTITION_FETCH,
    PARTITION_PRODUCE,
    PRODUCER_QUOTA,
    PT_FETCH,
    PT_PRODUCE,
    TARGET_FIELDS,
    Lever,
)
from kafkaio.port import KafkaCluster


class ThrottleWriter:
    """Writes the throttle configs of one cluster through its shared client (thread-safe; see the module)."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()

    def apply(self, lever: Lever) -> None:
        """Make a protection or manual lever effective at its rate (rounded to whole bytes/s, at least 1)."""
        if lever.rate is None:
            raise ValueError(f"lever {lever.kind} on {dict(lever.target)} has no rate: remove it instead")
        with self._lock:
            self._change(lever.kind, lever.target, max(int(lever.rate), 1))

    def remove(self, lever: Lever) -> None:
        """Remove a protection or manual lever (no-op when absent; its rate is ignored)."""
        with self._lock:
            self._change(lever.kind, lever.target, None)

    def set_migration_rates(self, broker: int, rates: Mapping[str, str | None]) -> None:
        """The executor's KIP-73 / KIP-113 rates on ``broker``: each key SET to its value, or DELETEd (``None``).
        The values are already merged with protection's ceilings (:func:`~domain.throttles.migration_rate`)."""
        unknown = sorted(set(rates) - set(BROKER_THROTTLE_KEYS))
        if unknown:
            raise ValueError(f"not a broker throttle rate: {', '.join(unknown)}")
        with self._lock:
            self.cluster.set_broker_configs({broker: dict(rates)})

    def change_throttled_replicas(self, topic: str, key: str, append: Iterable[str] = (),
                                  subtract: Iterable[str] = ()) -> None:
        """The executor's entries (``partition:broker``) added to / removed from ``topic``'s throttled-replica list
        ``key`` (leader or follower); others' entries are left alone."""
        if key not in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
            raise ValueError(f"not a throttled-replica list: {key}")
        with self._lock:
            self.cluster.alter_topic_lists(topic, key, append=append, subtract=subtract)

    def _change(self, kind: str, target: Mapping[str, Any], rate: int | None) -> None:
        missing = [f for f in TARGET_FIELDS.get(kind, ()) if f not in target]
        if missing:
            raise ValueError(f"a {kind} lever's target needs {', '.join(missing)}")
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
