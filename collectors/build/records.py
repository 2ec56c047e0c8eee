"""The records of one build: tunables, the round's result and the facts it carries.

Goal: the types that cross stage boundaries and leave the builder — :class:`ModelConfig`,
:class:`Collected` (what a round returns), :class:`PartitionDetail` / :class:`PartitionDetails`,
:class:`CopyInFlight`, :class:`ReplicaLayout`, :class:`FamilyRates` — in one module every stage can
import. Method: plain dataclasses; per-partition detail is a lazy mapping over the round's arrays.
Guarantee: no I/O, no state across rounds. Cost: :class:`PartitionDetails` builds one object per
access (100,000 objects per round would cost more than the rest of the build).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.build.names import M_NAMES
from collectors.build.share import ShareReader
from collectors.completeness import Coverage
from collectors.pagecache import Behaviours
from collectors.promtext import Payload
from collectors.rates import PhysicalLimits
from domain import ClusterSnapshot, DiskKind, settle_moves, snapshot_to_dict

BrokerPayloads = dict[int, tuple[Payload, float, str]]
"""broker id -> (its endpoints' payloads merged, the sample clock, the clock's kind: ``ts`` = sample
timestamps or ``mono`` = receive time); a family's own endpoint clock is in ``Payload.clocks``."""


@dataclass
class ModelConfig:
    """Tunables of the load model (defaults suit a 10 s collection interval)."""

    min_elapsed_s: float = 0.5
    """Rates over a shorter measured interval are dropped (``tiny_elapsed``)."""
    hold_s: float = 60.0
    """A figure whose source failed keeps its last good value for at most this long (then 0)."""
    max_util_overshoot: float = 0.05
    """util in (1, 1 + overshoot] is clamped to 1; above it the sample is dropped as implausible."""
    history_capacity: int = 360
    """Samples per disk/partition in the window (360 × 10 s = 1 h)."""
    history_points: int = 60
    """``load_history`` points written per disk (the window downsampled by chunk means)."""
    partition_history: tuple[str, ...] = ("bytes_in", "disk_read")
    """Per-partition series kept in the window (any of bytes_in, disk_read, bytes_out)."""
    partition_history_every: int = 6
    """Rounds averaged into one partition sample (6 × 10 s = 1-minute resolution: a 1 h window at
    100,000 partitions costs 100,000 × 60 × 4 B = 24 MB per series instead of 144 MB)."""
    default_disk_kind: DiskKind = DiskKind.HDD
    default_max_bytes_per_s: Mapping[str, float] = field(default_factory=lambda: {
        "hdd": 200e6, "ssd": 500e6, "nvme": 2000e6})
    default_idc: str = "unknown"
    default_pool: str = "shared"
    use_sample_timestamps: bool = True
    """An endpoint whose samples carry exposition-format timestamps is clocked by the newest of them
    (counters that advance in another time base, e.g. a simulator's); else by the receive time."""
    limits: PhysicalLimits = field(default_factory=PhysicalLimits)
    """Hardware ceilings of counter rates (NIC per broker, disk device); faster samples are refused."""


@dataclass
class DiskFacts:
    """Cached static facts about a log dir, and where its kind and ceiling came from (``declared`` by a
    hardware rule, ``default`` of the cluster's profile, ``measured`` from the host, ``assumed``)."""

    path: str
    kind: DiskKind
    capacity_bytes: int
    max_bytes_per_s: float
    device: str | None = None
    kind_source: str = "assumed"
    max_source: str = "assumed"


@dataclass
class Held:
    """A last good value with the time (wall, seconds) it was measured."""

    value: float
    at: float


@dataclass
class PartitionDetail:
    """Per-partition facts beyond the snapshot contract (for tests, the throttle, the API)."""

    bytes_in_method: str = "none"
    bytes_out_method: str = "none"
    leo: float | None = None
    residence_s: float | None = None
    disk_readers: list[str] = field(default_factory=list)
    cached_readers: list[str] = field(default_factory=list)
    lagging_followers: list[int] = field(default_factory=list)
    migration_bytes_per_s: float = 0.0
    share_groups: list[ShareReader] = field(default_factory=list)
    """KIP-932 share groups reading the partition: SPSO, lag, the members assigned it (one reader each in the
    readers above, whatever their member count)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"bytes_in_method": self.bytes_in_method, "bytes_out_method": self.bytes_out_method,
                "leo": self.leo, "residence_s": None if self.residence_s is None or math.isinf(self.residence_s)
                else round(self.residence_s, 3),
                "disk_readers": self.disk_readers, "cached_readers": self.cached_readers,
                "lagging_followers": self.lagging_followers,
                "migration_bytes_per_s": round(self.migration_bytes_per_s, 3),
                "share_groups": [s.as_dict() for s in self.share_groups]}


@dataclass(frozen=True, slots=True)
class CopyInFlight:
    """A replica copy in progress at its measured rate: a reassignment target growing
    (``reassign``; source = the leader's disk) or a KIP-113 future replica (``intra_broker``)."""

    kind: str
    topic: str
    partition: int
    source: tuple[int, str] | None
    dest: tuple[int, str]
    bytes_per_s: float


@dataclass
class Collected:
    """One round's result: the snapshot and everything known about how good it is."""

    snapshot: ClusterSnapshot
    coverage: Coverage
    behaviours: dict[tuple[int, str], Behaviours]
    partitions: Mapping[tuple[str, int], PartitionDetail]
    throttles: dict[str, Any]
    quotas: list[dict[str, Any]]
    round_seconds: dict[str, float] = field(default_factory=dict)
    copies: list[CopyInFlight] = field(default_factory=list)
    broker_configs: dict[int, dict[str, str]] = field(default_factory=dict)
    """Throttle and capability configs per broker as last read (see :mod:`kafkaio.source`)."""
    sample_clock: float | None = None
    """The round's sample clock: the newest broker payload's (its samples' timestamps when they carry
    them, else the scrape's monotonic receive time) — the time base of the round's rates."""
    removing: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    """Replicas each in-flight reassignment removes (the snapshot shows Kafka's in-flight lists; planners
    read :meth:`planning_snapshot`)."""
    adding: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    """Replicas each in-flight reassignment adds (copying, not yet in the ISR)."""
    log_dirs_read_at: dict[int, float] = field(default_factory=dict)
    """Broker -> when (wall clock) its log-dir listing in this round was read: listings are re-read in rotation,
    so an intra-broker move that began and ended between two reads of its broker shows only at the next."""

    def planning_snapshot(self) -> ClusterSnapshot:
        """The snapshot with every moving partition at its target replica set (:func:`domain.settle_moves`)."""
        return settle_moves(self.snapshot, self.removing)

    def to_dict(self) -> dict[str, Any]:
        """The ``guardian.snapshot/v1`` document plus optional members the v1 parser ignores:
        ``coverage`` (top level), ``behaviours`` (per disk), ``throttles`` and ``quotas``."""
        doc = snapshot_to_dict(self.snapshot)
        for b in doc["brokers"]:
            for d in b["disks"]:
                beh = self.behaviours.get((b["id"], d["path"]))
                if beh is not None:
                    d["behaviours"] = beh.as_dict()
        doc["coverage"] = self.coverage.as_dict()
        doc["throttles"] = self.throttles
        doc["quotas"] = self.quotas
        return doc



class PartitionDetails(Mapping[tuple[str, int], PartitionDetail]):
    """Per-partition detail, built on access from the round's arrays (100,000 objects per round
    would cost more than the rest of the build)."""

    def __init__(self, keys: list[tuple[str, int]], pidx: dict[tuple[str, int], int], arrays: dict[str, Any],
                 readers: dict[int, tuple[list[str], list[str]]], lagging: dict[int, list[int]],
                 share: dict[int, tuple[ShareReader, ...]] | None = None) -> None:
        self._keys = keys
        self._share = share or {}
        self._pidx = pidx
        self._a = arrays
        self._readers = readers
        self._lagging = lagging

    def __getitem__(self, key: tuple[str, int]) -> PartitionDetail:
        i = self._pidx[key]
        a = self._a
        leo = float(a["leo"][i])
        res = float(a["residence"][i])
        disk, cached = self._readers.get(i, ([], []))
        return PartitionDetail(bytes_in_method=M_NAMES[int(a["m_in"][i])], bytes_out_method=M_NAMES[int(a["m_out"][i])],
                               leo=None if math.isnan(leo) else leo, residence_s=None if math.isnan(res) else res,
                               disk_readers=list(disk), cached_readers=list(cached),
                               lagging_followers=list(self._lagging.get(i, [])),
                               migration_bytes_per_s=float(a["migration"][i]),
                               share_groups=list(self._share.get(i, ())))

    def share_read(self) -> dict[tuple[str, int], tuple[ShareReader, ...]]:
        """Only the partitions KIP-932 share groups read, with those groups (no object per other partition)."""
        return {self._keys[i]: rs for i, rs in sorted(self._share.items())}

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


@dataclass(frozen=True)
class ReplicaLayout:
    """Where every replica lives this round (reused while the topology is unchanged)."""

    disk_ids: dict[tuple[int, str], int]
    log_dirs: list[tuple[str, ...]]
    r_part: npt.NDArray[np.int64]
    r_disk: npt.NDArray[np.int64]
    r_role: npt.NDArray[np.int8]
    lead_disk: npt.NDArray[np.int64]
    unknown: int
    unknown_brokers: frozenset[int] = frozenset()
    isrs: list[tuple[int, ...]] = field(default_factory=list)
    """Each partition's ISR restricted to its replicas (a broker reporting strays is not trusted)."""


@dataclass
class FamilyRates:
    """One metric family of every broker in a round: brokers (segment order), their label strings,
    and the concatenated rates (NaN = dropped) and raw values; broker ``k`` is
    ``[offsets[k], offsets[k + 1])``."""

    bids: list[int]
    bodies: list[list[str]]
    rates: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]
    offsets: npt.NDArray[np.int64]

    def bid_per_sample(self) -> npt.NDArray[np.int64]:
        """The broker of every sample."""
        return np.repeat(np.asarray(self.bids, dtype=np.int64), np.diff(self.offsets))

    def segment(self, k: int) -> tuple[list[str], list[float], list[float]]:
        """(label strings, rates, values) of segment ``k`` as Python lists."""
        lo, hi = int(self.offsets[k]), int(self.offsets[k + 1])
        return self.bodies[k], self.rates[lo:hi].tolist(), self.values[lo:hi].tolist()
