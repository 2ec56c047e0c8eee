"""The Kafka ports: everything Guardian asks of a live cluster, as small ``Protocol`` s.

Goal: one edge to Kafka with one client lifecycle per cluster, so that the executor, throttle
protection and the collectors never open their own clients, and so that every loop's edge cases
(stale metadata, failed config apply, partial submission, a broker that times out) can be unit
tested against :mod:`kafkaio.fake` in milliseconds.

Method: :class:`KafkaCluster` (the executor and the levers), :class:`GroupReader` (throttle protection) and
:class:`BulkReader` (the collectors: one read of everything per round; real adapter
:class:`kafkaio.source.KafkaSource`, fake :class:`kafkaio.fake_source.FakeBulkReader`). The ports speak plain
data (the records of :mod:`kafkaio.types`, keyed by ``(topic, partition)``); the real adapter of the first two is
:class:`kafkaio.admin.KafkaAdmin` over kafka-python, the fake an in-memory cluster. Reads raise
:class:`kafkaio.errors.AdminError` when the cluster cannot be read at all; writes return a per-item error map
(``None`` = accepted) so a partial submission is visible item by item.

Guarantee: callers cannot tell the adapters apart (the same contract tests run against both).
Cost: one request per call (per-broker requests go out concurrently in the real adapter).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from kafkaio.types import TP, ConfigEntry, GroupDescription, KafkaState, LiveCluster, LogRead, ReplicaDir


class KafkaCluster(Protocol):
    """The executor- and lever-facing port of one cluster."""

    bootstrap_servers: str

    def close(self) -> None:
        """Release the connection (idempotent)."""

    # reads -------------------------------------------------------------------------------------
    def live(self) -> LiveCluster:
        """Alive brokers, every partition's replicas / leader / ISR, in-flight reassignments."""
        ...

    def log_dirs(self, brokers: Iterable[int], topics: Iterable[str] | None = None
                 ) -> dict[tuple[str, int, int], list[ReplicaDir]]:
        """Where each replica lives: ``(topic, partition, broker) -> [current dir, future dir...]``."""
        ...

    def disk_capacity(self, brokers: Iterable[int]) -> dict[tuple[int, str], tuple[int, int]]:
        """``(broker, log dir) -> (total bytes, usable bytes)`` where the broker reports it (KIP-827)."""
        ...

    def broker_configs(self, brokers: Iterable[int], keys: Iterable[str] = ...) -> dict[int, dict[str, str]]:
        """The named dynamic configs of each broker (unset keys absent)."""
        ...

    def describe_broker_configs(self, brokers: Iterable[int], keys: Iterable[str]
                                ) -> dict[int, dict[str, ConfigEntry]]:
        """Every named config of each broker, whatever its source, with its source and read-only flag
        (a key the broker does not know is absent)."""
        ...

    def topic_configs(self, topics: Iterable[str], keys: Iterable[str] = ...) -> dict[str, dict[str, str]]:
        """The named configs of each topic (unset keys absent)."""
        ...

    # writes ------------------------------------------------------------------------------------
    def alter_reassignments(self, targets: Mapping[TP, list[int] | None]) -> dict[TP, str | None]:
        """Submit (a replica list) or cancel (``None``) KIP-455 reassignments; per-partition errors."""
        ...

    def alter_log_dirs(self, moves: Mapping[tuple[str, int, int], str]) -> dict[tuple[str, int, int], str | None]:
        """KIP-113 moves ``(topic, partition, broker) -> log dir``; per-replica errors."""
        ...

    def elect_preferred(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """KIP-460 preferred-leader elections; per-partition error codes (0 = elected or already)."""
        ...

    def set_broker_configs(self, changes: Mapping[int, Mapping[str, str | None]]) -> None:
        """Incremental SET (a value) / DELETE (``None``) of broker dynamic configs."""

    def alter_topic_lists(self, topic: str, key: str, append: Iterable[str] = (),
                          subtract: Iterable[str] = ()) -> None:
        """Incremental APPEND / SUBTRACT on a list-valued topic config (throttled-replica lists)."""

    def set_topic_configs(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """Incremental SET (a value) / DELETE (``None``) of topic configs (partition-level throttles)."""

    def set_client_quotas(self, client_id: str, quotas: Mapping[str, float | None]) -> None:
        """Set (a rate) / remove (``None``) client-id quotas (``consumer_byte_rate``, ``producer_byte_rate``)."""

    def create_topic(self, topic: str, assignment: Mapping[int, Sequence[int]],
                     configs: Mapping[str, str] | None = None) -> None:
        """CreateTopics with an explicit replica assignment (partition -> replicas, first = preferred leader);
        :class:`~kafkaio.errors.TopicExists` when the topic exists, :class:`AdminError` on any other refusal."""

    # a small log kept on the cluster (the execution lease) ------------------------------------
    def ensure_log(self, topic: str, configs: Mapping[str, str]) -> None:
        """Create the one-partition ``topic`` with ``configs`` unless it exists."""

    def append_log(self, topic: str, key: bytes, value: bytes) -> tuple[int, int]:
        """Append one record to ``topic``-0 (acks=all); returns (its offset, the time the log stamped on it, ms)."""
        ...

    def read_log(self, topic: str, start: int = 0) -> LogRead:
        """``topic``-0's records from ``start`` (or its first offset, if later) to its end."""
        ...


class GroupReader(Protocol):
    """The consumer-group port: who is assigned what (throttle protection's finest stock lever on a cluster
    without a partition-level throttle is the client quota of the members assigned a hot partition)."""

    def describe_groups(self, groups: Iterable[str]) -> dict[str, GroupDescription]:
        """DescribeGroups of ``groups`` (each at its coordinator): state, protocol type and every member's
        client id, host and decoded assignment; a group Kafka could not describe carries its answer in
        ``error``. Raises :class:`~kafkaio.errors.AdminError` when the cluster cannot be asked at all."""
        ...


class BulkReader(Protocol):
    """The collectors' port: one bulk read of a cluster per round (metadata, reassignments, log dirs, configs,
    quotas, groups' offsets) into a :class:`~kafkaio.types.KafkaState`.

    A partial read (``full=False``) re-reads the log dirs and configs of ``refresh_brokers`` / ``refresh_topics``
    and of whatever changed since ``previous``, and carries the rest over (:mod:`kafkaio.refresh`). Failures of
    single requests are recorded in :attr:`KafkaState.errors`; only unreadable metadata fails the read, with
    :class:`~kafkaio.errors.KafkaSourceError`."""

    bootstrap_servers: str

    def fetch(self, full: bool = True, previous: KafkaState | None = None, refresh_brokers: Iterable[int] = (),
              refresh_topics: Iterable[str] = ()) -> KafkaState:
        """Read the cluster's current state."""
        ...

    def close(self) -> None:
        """Release the connection if the reader owns it (idempotent)."""
