"""The records of the Kafka edge: what a cluster's metadata, log dirs and reassignments say, once.

Goal: one set of plain records shared by the bulk reader (:mod:`kafkaio.source`, for the collectors)
and the port implementation (:mod:`kafkaio.admin`, for the executor and the levers), so a replica's
log dir or an in-flight reassignment has one shape wherever it is read.

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
