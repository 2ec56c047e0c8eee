"""Frozen, typed model of one cluster's snapshot: brokers, disks (log dirs), topics, partitions.

Everything here is immutable plain data. Derived views (replicas per disk, disk load, per broker /
IDC / pool aggregates) live in :mod:`domain.views` and are computed once per snapshot
through :attr:`ClusterSnapshot.index`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from domain.views import SnapshotIndex

DiskId = tuple[int, str]
"""A disk (log dir) is identified by ``(broker_id, path)``."""

PartitionId = tuple[str, int]
"""A partition is identified by ``(topic, partition)``."""


class BrokerState(enum.StrEnum):
    """Lifecycle state of a broker as the control plane sees it."""

    ALIVE = "alive"
    DEAD = "dead"
    MAINTENANCE = "maintenance"
    DRAINING = "draining"


class DiskKind(enum.StrEnum):
    """Storage medium of a log dir; thresholds and speeds differ per kind."""

    HDD = "hdd"
    SSD = "ssd"
    NVME = "nvme"


@dataclass(frozen=True, slots=True)
class Disk:
    """One log dir of a broker, with its capacity, throughput limit and current health."""

    path: str
    kind: DiskKind
    capacity_bytes: int
    max_bytes_per_s: float
    used_bytes: int = 0
    util: float = 0.0
    await_ms: float = 0.0
    read_bytes_per_s: float = 0.0
    write_bytes_per_s: float = 0.0
    load_history: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Broker:
    """A Kafka broker: where it is (IDC, rack), which pool it serves and its disks."""

    id: int
    host: str
    port: int
    idc: str
    rack: str
    pool: str = "shared"
    state: BrokerState = BrokerState.ALIVE
    memory_bytes: int = 0
    disks: tuple[Disk, ...] = ()

    @property
    def is_alive(self) -> bool:
        """True when the broker runs and may receive new replicas or leadership."""
        return self.state is BrokerState.ALIVE


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition: its replica set (ordered, first = preferred leader) and its traffic.

    ``log_dirs[i]`` is the log dir of ``replicas[i]`` on that broker.
    """

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int | None
    isr: tuple[int, ...]
    log_dirs: tuple[str, ...]
    size_bytes: int = 0
    bytes_in_per_s: float = 0.0
    bytes_out_per_s: float = 0.0
    messages_in_per_s: float = 0.0
    disk_read_bytes_per_s: float = 0.0

    @property
    def id(self) -> PartitionId:
        """``(topic, partition)``."""
        return (self.topic, self.partition)

    def replica_load(self, broker_id: int) -> float:
        """Disk bytes/s the replica on ``broker_id`` costs its disk (DESIGN.md "Disk load").

        Every replica writes ``bytes_in_per_s``; the leader also reads ``disk_read_bytes_per_s``.
        """
        load = self.bytes_in_per_s
        if broker_id == self.leader:
            load += self.disk_read_bytes_per_s
        return load


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic, the resource pool it belongs to and its IDC placement policy."""

    name: str
    partitions: tuple[Partition, ...]
    pool: str = "shared"
    placement: Mapping[str, int] | None = None
    """IDC -> number of replicas required there (``None``: the cluster default applies)."""


@dataclass(frozen=True)
class ClusterSnapshot:
    """The state of one cluster at one instant — the unit planners consume.

    Construct it with brokers and topics in any order; the derived :attr:`index` is built lazily,
    once, in O(brokers x disks + replicas).
    """

    cluster: str
    taken_at: datetime
    brokers: tuple[Broker, ...]
    topics: tuple[Topic, ...]
    default_placement: Mapping[str, int] | None = None
    extra: Mapping[str, object] = field(default_factory=dict, compare=False)

    @cached_property
    def index(self) -> SnapshotIndex:
        """Derived views over this snapshot (computed on first access, then cached)."""
        from domain.views import SnapshotIndex

        return SnapshotIndex(self)

    def placement_of(self, topic: Topic) -> Mapping[str, int] | None:
        """The IDC placement policy in force for ``topic`` (topic override, else cluster default)."""
        return topic.placement if topic.placement is not None else self.default_placement

    def iter_partitions(self) -> tuple[Partition, ...]:
        """All partitions of all topics, in file order."""
        return self.index.partitions
