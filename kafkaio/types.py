"""The records of the Kafka edge: what a cluster's metadata, log dirs and reassignments say, once.

Goal: one set of plain records shared by the bulk reader (:mod:`kafkaio.source`, for the collectors)
and the port implementation (:mod:`kafkaio.admin`, for the executor and the levers), so a replica's
log dir or an in-flight reassignment has one shape wherever it is read — and so that the callers of
either port (the executor's collaborators, the collectors' pure stages) import records, never an I/O
module. :class:`KafkaState` is what one bulk read learned (its groups' records are in
:mod:`kafkaio.group_types`).

Method: frozen, slotted dataclasses keyed by ``(topic, partition)`` (:data:`TP`), field names as the
Kafka protocol names them where callers did not already rely on others. A partition without a
leader carries :data:`NO_LEADER` (``-1``, Kafka's own wire value), so a leader is always an ``int``
and numpy arrays of leaders need no conversion.

Guarantee: these records hold no client, no socket and no secret; they are safe to log, copy and
share between threads.
Cost: one small object per broker / partition / replica (slots: ~70-100 bytes each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from domain.throttles import BROKER_THROTTLE_KEYS, TOPIC_THROTTLE_KEYS
from kafkaio.group_types import GroupOffsets, ShareGroup

TP = tuple[str, int]
"""``(topic, partition)``."""

NO_LEADER = -1
"""The leader id of a partition without a leader (Kafka's ``-1``)."""


@dataclass(frozen=True, slots=True)
class BrokerMeta:
    """An alive broker as the metadata reports it."""

    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    """A partition's assignment as the metadata reports it (``replicas`` in assignment order).

    ``leader`` is :data:`NO_LEADER` when the partition has none; ``offline`` lists replicas on
    offline log dirs (empty where the source does not report them).
    """

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()

    @property
    def has_leader(self) -> bool:
        """True when the partition has a leader."""
        return self.leader >= 0


@dataclass(frozen=True, slots=True)
class ReplicaDir:
    """One replica (or future replica, KIP-113) in a log dir of its broker (DescribeLogDirs)."""

    log_dir: str
    size: int
    offset_lag: int
    is_future: bool


@dataclass(slots=True)
class LogDirMeta:
    """One log dir of a broker (DescribeLogDirs); ``total_bytes``/``usable_bytes`` where KIP-827 reports them."""

    path: str
    error_code: int
    total_bytes: int | None
    usable_bytes: int | None
    replicas: dict[TP, ReplicaDir] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One broker config as DescribeConfigs reports it: its value (``None`` when unset), where the value
    comes from (``STATIC_BROKER_CONFIG`` = server.properties, ``DYNAMIC_BROKER_CONFIG``,
    ``DYNAMIC_DEFAULT_BROKER_CONFIG``, ``DEFAULT_CONFIG``) and whether the broker refuses to change it at
    run time (``read_only``: Kafka's "Update Mode: read-only", e.g. ``broker.rack``,
    ``replica.selector.class``)."""

    value: str | None
    source: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class Reassignment:
    """An in-flight KIP-455 reassignment (ListPartitionReassignments)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass
class LiveCluster:
    """One consistent-enough read of a cluster for the executor (metadata + in-flight reassignments)."""

    alive: frozenset[int]
    partitions: dict[TP, PartitionMeta]
    topic_sizes: dict[str, int]
    reassignments: dict[TP, Reassignment]
    racks: dict[int, str] = field(default_factory=dict)

    @property
    def under_replicated(self) -> int:
        """Partitions whose ISR is smaller than their replica set (in-flight reassignments excluded)."""
        return sum(1 for tp, p in self.partitions.items()
                   if tp not in self.reassignments and len(set(p.isr)) < len(set(p.replicas)))


@dataclass(frozen=True)
class LogRecord:
    """One record of a small topic Guardian keeps on the cluster (the lease log)."""

    offset: int
    ts_ms: int
    """The record's timestamp (the broker's append time on a ``LogAppendTime`` topic)."""
    value: bytes


@dataclass(frozen=True)
class LogRead:
    """Records of one partition read from ``first`` (the log's first offset, or later) to ``end``."""

    first: int
    end: int
    records: tuple[LogRecord, ...]


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a classic consumer group as DescribeGroups reports it, its assignment decoded
    (the consumer protocol's ``ConsumerProtocolAssignment``: the partitions the group leader gave it)."""

    member_id: str
    client_id: str
    client_host: str
    assignment: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """One group as DescribeGroups answers for it.

    ``error`` is ``None`` when Kafka described the group, else its answer in words. Kafka 4.x answers
    DescribeGroups v6 for a KIP-848 ``consumer`` group (and share or streams groups) with
    ``GROUP_ID_NOT_FOUND`` "Group G is not a classic group." — its members and assignments are only in
    ConsumerGroupDescribe (API 69), which kafka-python 3.x does not implement — and, before v6, with state
    ``Dead`` and no members, as for a group that does not exist. ``members`` is empty then, and for a
    classic group that is ``Empty`` (offsets only, no consumer running) or rebalancing."""

    group: str
    state: str
    protocol_type: str
    members: tuple[GroupMember, ...] = ()
    error: str | None = None


@dataclass
class KafkaState:
    """Everything one admin round learned about a cluster."""

    cluster_id: str | None
    controller_id: int | None
    brokers: dict[int, BrokerMeta]
    partitions: dict[tuple[str, int], PartitionMeta]
    internal_topics: set[str] = field(default_factory=set)
    log_dirs: dict[int, dict[str, LogDirMeta]] = field(default_factory=dict)
    reassignments: dict[tuple[str, int], Reassignment] = field(default_factory=dict)
    broker_configs: dict[int, dict[str, str]] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    quotas: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    fetched_at: float = 0.0  # time.time()
    duration_s: float = 0.0
    full: bool = True
    """False when some log dirs or configs were carried over from earlier rounds."""
    details_age_s: float = 0.0
    """Age of the oldest log-dir listing of an alive broker (0 when every one was read this round)."""
    log_dirs_at: dict[int, float] = field(default_factory=dict)
    """broker -> time.time() its log dirs and broker configs were read."""
    log_dirs_fresh: set[int] = field(default_factory=set)
    """Brokers whose log dirs were read in this round."""
    futures_by_broker: dict[int, list[tuple[int, str, tuple[str, int], int]]] = field(default_factory=dict)
    group_offsets: GroupOffsets = field(default_factory=GroupOffsets.empty)
    """Consumer groups' committed offsets, as columns (read this round when :attr:`group_offsets_fresh`)."""
    group_offsets_fresh: bool = False
    groups_listed: int = 0
    """Consumer groups the last ListGroups found (before the ``groups_max`` cap)."""
    share_groups: dict[str, ShareGroup] = field(default_factory=dict)
    """KIP-932 share groups (members, assignments, share-partition start offsets), read with the consumer groups'
    offsets (:mod:`kafkaio.share_groups`)."""

    @property
    def futures(self) -> list[tuple[int, str, tuple[str, int], int]]:
        """In-flight intra-broker moves: (broker, destination log dir, partition, bytes copied)."""
        return [f for b in sorted(self.futures_by_broker) for f in self.futures_by_broker[b]]

    @property
    def topics(self) -> list[str]:
        """Topic names, sorted."""
        return sorted({t for t, _ in self.partitions})

    def replica_dir(self, broker: int, topic: str, partition: int) -> str | None:
        """The (non-future) log dir of a replica, or None when unknown."""
        for path, d in self.log_dirs.get(broker, {}).items():
            r = d.replicas.get((topic, partition))
            if r is not None and not r.is_future:
                return path
        return None

    def offline_log_dirs(self) -> dict[int, list[str]]:
        """Log dirs of alive brokers that DescribeLogDirs answered with an error (KAFKA_STORAGE_ERROR: the
        disk failed, KIP-112), as last read: broker -> sorted paths."""
        return {b: sorted(p for p, d in dirs.items() if d.error_code) for b, dirs in sorted(self.log_dirs.items())
                if b in self.brokers and any(d.error_code for d in dirs.values())}

    def offline_replicas(self) -> dict[str, list[int]]:
        """``topic-partition`` -> replicas Metadata lists offline although their broker is alive (on a failed
        log dir); replicas of dead brokers are not repeated here."""
        return {f"{t}-{p}": [b for b in pm.offline if b in self.brokers]
                for (t, p), pm in sorted(self.partitions.items()) if any(b in self.brokers for b in pm.offline)}

    def throttles(self) -> dict[str, Any]:
        """Throttle configs currently set: broker rates and topic throttled-replica lists."""
        return {
            "brokers": {str(b): {k: v for k, v in cfg.items() if k in BROKER_THROTTLE_KEYS}
                        for b, cfg in sorted(self.broker_configs.items())
                        if any(k in BROKER_THROTTLE_KEYS for k in cfg)},
            "topics": {t: {k: v for k, v in cfg.items() if k in TOPIC_THROTTLE_KEYS and v}
                       for t, cfg in sorted(self.topic_configs.items())
                       if any(k in TOPIC_THROTTLE_KEYS and v for k, v in cfg.items())},
        }
