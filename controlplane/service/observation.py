"""The published collection round of each cluster, and the port its consumers read it through.

Goal: observe each cluster once. The collection job (:mod:`controlplane.service.collection`) is the one
observer per cluster; every round it completes is published here as a :class:`Round`, and throttle
protection, auto-rebalance (through the snapshot cache, fed from the same round) and the executor read
the latest round instead of observing the cluster themselves.

Method: a :class:`Round` wraps the collectors' :class:`~collectors.builder.Collected` with the replicated
policies overlaid on its snapshot and the moment this node observed it, and names what consumers take
from it: copies in flight, throttle configs, per-disk measured rates, and the two disk-read estimates
*named apart* — :attr:`Round.position_disk_reads` (the collectors' consumer-position page-cache
estimate, the snapshot's ``disk_read_bytes_per_s``) and :attr:`Round.attributed_disk_reads` (measured
disk reads attributed to the partitions led there; see :mod:`collectors.pagecache`). Each consumer
applies its own :class:`~collectors.completeness.UsabilityPolicy` through :meth:`Round.refusals`
(Cruise Control's one LoadMonitor with per-consumer completeness requirements), so a round too partial
for planning can still protect a disk.

Guarantee: a published round is immutable; :meth:`RoundBoard.latest` never goes back to an older round
of the same cluster; rounds carry a per-cluster sequence number so a consumer can tell a new round from
one it already used. Cost: publishing is O(1); the derived views are computed once per round, on first use.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from typing import Any, Protocol

from collectors.builder import PLACEHOLDER_DIR, Collected, CopyInFlight
from collectors.completeness import Coverage, UsabilityPolicy, refusal_reasons
from collectors.disk_rates import DiskRate, round_disk_rates
from collectors.pagecache import attributed_disk_reads
from controlplane.executor.observed import ObservedCluster
from controlplane.executor.service import Binding
from controlplane.service.clusters import ClusterBindings
from domain import Broker, BrokerState, ClusterSnapshot, DiskId, PartitionId


@dataclass(frozen=True)
class Round:
    """One published collection round of one cluster."""

    cluster: str
    seq: int
    """1, 2, ... per cluster on this node (a consumer that saw ``seq`` has nothing new until it grows)."""
    collected: Collected
    snapshot: ClusterSnapshot
    """The collected snapshot with the replicated policies (maintenance, pools, placement) overlaid."""
    observed_at: datetime
    """When this node finished the round (its own clock: a simulator's clock may run faster)."""

    @property
    def coverage(self) -> Coverage:
        """Which brokers, disks and partitions the round covers."""
        return self.collected.coverage

    @property
    def copies(self) -> list[CopyInFlight]:
        """Replica copies in flight with their measured rates."""
        return self.collected.copies

    @property
    def throttles(self) -> dict[str, Any]:
        """Throttle configs in force on the cluster (brokers' rates, topics' lists and partition rates)."""
        return self.collected.throttles

    @property
    def broker_configs(self) -> dict[int, dict[str, str]]:
        """Throttle and capability configs per broker as last read."""
        return self.collected.broker_configs

    @cached_property
    def disk_rates(self) -> dict[DiskId, DiskRate]:
        """Per-disk measured load (util, bytes/s, max bytes/s) of the disks scraped this round."""
        return round_disk_rates(self.collected)

    @cached_property
    def observed_brokers(self) -> tuple[Broker, ...]:
        """The alive brokers with their measured disks (no placeholder dir)."""
        return tuple(replace(b, disks=tuple(d for d in b.disks if d.path != PLACEHOLDER_DIR))
                     for b in self.collected.snapshot.brokers if b.state != BrokerState.DEAD)

    @cached_property
    def position_disk_reads(self) -> Mapping[PartitionId, float]:
        """The collectors' consumer-position page-cache estimate of each partition's disk reads (bytes/s)."""
        return {p.id: p.disk_read_bytes_per_s for p in self.collected.snapshot.iter_partitions()
                if p.disk_read_bytes_per_s}

    @cached_property
    def attributed_disk_reads(self) -> Mapping[PartitionId, float]:
        """Each disk's measured reads (minus copy reads) attributed to the partitions led there (bytes/s)."""
        copy_reads: dict[DiskId, float] = {}
        for c in self.copies:
            if c.dest[1] != PLACEHOLDER_DIR and c.source is not None and c.source[1] != PLACEHOLDER_DIR:
                copy_reads[c.source] = copy_reads.get(c.source, 0.0) + c.bytes_per_s
        parts = sorted(self.collected.snapshot.iter_partitions(), key=lambda p: p.topic)
        return attributed_disk_reads(parts, self.observed_brokers, copy_reads)

    def refusals(self, policy: UsabilityPolicy, now: float | None = None) -> list[str]:
        """Why a consumer with ``policy`` must not act on this round (empty: usable)."""
        at = self.collected.snapshot.taken_at.timestamp() if now is None else now
        return refusal_reasons(self.collected.snapshot, policy, now=at, coverage=self.coverage)


PROTECTION_POLICY = UsabilityPolicy(max_age_s=math.inf, min_broker_fraction=0.0, min_partition_fraction=0.0,
                                    allow_first_round=True, max_unknown_log_dirs=2**62)
"""Throttle protection acts on whatever disks a round measured (a partial round still protects the disks
it saw; its own age limit applies separately); it refuses only a round with no broker metrics at all."""


class LatestRound(Protocol):
    """Port: the latest published round of a cluster."""

    def latest(self, cluster: str) -> Round | None:
        """The newest round of ``cluster`` (None before the first)."""
        ...


class RoundBoard:
    """Thread-safe cluster -> latest :class:`Round`; the observer publishes, consumers read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, Round] = {}
        self._seq: dict[str, int] = {}

    def publish(self, collected: Collected, snapshot: ClusterSnapshot, observed_at: datetime) -> Round:
        """Publish a round of ``snapshot.cluster`` (the next sequence number)."""
        with self._lock:
            seq = self._seq.get(snapshot.cluster, 0) + 1
            self._seq[snapshot.cluster] = seq
            published = Round(snapshot.cluster, seq, collected, snapshot, observed_at)
            self._latest[snapshot.cluster] = published
            return published

    def latest(self, cluster: str) -> Round | None:
        """The newest round of ``cluster`` (None before the first)."""
        with self._lock:
            return self._latest.get(cluster)

    def drop(self, cluster: str) -> None:
        """Forget ``cluster`` (it was removed)."""
        with self._lock:
            self._latest.pop(cluster, None)


def executor_binding(rounds: LatestRound, bindings: ClusterBindings
                     ) -> Callable[[str, Mapping[str, Any]], Binding | None]:
    """The executor service's ``bind`` in the service: the cluster's shared admin client, and its disk load
    and broker facts read from the observer's latest round (the record's declarations filling gaps)."""
    def bind(name: str, record: Mapping[str, Any]) -> Binding | None:
        if not record.get("bootstrap_servers"):
            return None
        clients = bindings.get(name, record)

        def latest() -> Collected | None:
            r = rounds.latest(name)
            return None if r is None else r.collected

        view = ObservedCluster(latest, declared=clients.endpoints)
        return clients.admin, view, view

    return bind
