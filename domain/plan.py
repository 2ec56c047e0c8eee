"""Plans: the proposals planners produce and the executor carries out.

A plan is a set of partition moves (exactly Kafka's reassignment entries: target replica list
and per-replica log dirs) plus preferred-leader changes, with a summary of its effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from domain.model import PartitionId


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """Target assignment of one partition; ``log_dirs[i]`` is ``None`` for Kafka's ``"any"``."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    log_dirs: tuple[str | None, ...]

    @property
    def id(self) -> PartitionId:
        """``(topic, partition)``."""
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """Make ``leader`` the partition's leader (preferred-leader order + election, no data moved)."""

    topic: str
    partition: int
    leader: int

    @property
    def id(self) -> PartitionId:
        """``(topic, partition)``."""
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class UtilStats:
    """Estimated disk utilisation (disk load / max throughput) over a set of disks."""

    disks: int
    max_util: float
    mean_util: float

    @property
    def peak_to_mean(self) -> float:
        """``max_util / mean_util`` (1.0 is perfect balance; 0 when there is no load)."""
        return self.max_util / self.mean_util if self.mean_util > 0 else 0.0


@dataclass(frozen=True, slots=True)
class PlanSummary:
    """Before/after figures of a plan. ``pools`` maps pool -> (before, after).

    ``bytes_to_move`` counts every replica copy; ``intra_broker_bytes`` the part of it that moves between
    log dirs of one broker (no network); :attr:`network_bytes` the rest.
    """

    before: UtilStats
    after: UtilStats
    pools: Mapping[str, tuple[UtilStats, UtilStats]]
    bytes_to_move: int
    partitions_moved: int
    replicas_moved: int
    intra_broker_moves: int
    leader_changes: int
    intra_broker_bytes: int = 0

    @property
    def network_bytes(self) -> int:
        """Bytes copied between brokers (over the network)."""
        return self.bytes_to_move - self.intra_broker_bytes


@dataclass(frozen=True, slots=True)
class LoadOverride:
    """One partition whose write rate the plan weighed differently from the snapshot's window."""

    topic: str
    partition: int
    window_bytes_in_per_s: float
    bytes_in_per_s: float


@dataclass(frozen=True, slots=True)
class LoadBasis:
    """Which per-partition load a plan was made on: ``window`` (the snapshot's rates as collected) or
    ``modelled_peak`` (the traffic model's next-day peak). ``source`` names the model run and
    ``overrides`` lists every partition rate that differs from the snapshot, so applying them to the
    same snapshot reproduces the planner's input exactly."""

    basis: str
    source: str = ""
    overrides: tuple[LoadOverride, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A proposal for one cluster. Deterministic planners give equal plans for equal snapshots."""

    cluster: str
    kind: str
    moves: tuple[PartitionMove, ...] = ()
    leaders: tuple[LeaderChange, ...] = ()
    summary: PlanSummary | None = None
    notes: tuple[str, ...] = ()
    load_basis: LoadBasis | None = None
    extra: Mapping[str, object] = field(default_factory=dict, compare=False)
