"""Throttle protection's view of the published round: the ``ThrottleSource`` port over the observer.

Goal: throttle protection observes nothing itself. It reads the latest round the collection job
published for the cluster (:mod:`controlplane.service.observation`) and turns it into the planner's
:class:`~controlplane.service.throttle_loop.Observation`.

Method (:func:`observation_of`, pure):

* disks: the round's alive brokers with their measured util, await, read/write bytes/s (placeholder
  dirs dropped);
* partitions: the round's rates, replica log dirs and sizes, with ``disk_read_bytes_per_s`` set to the
  round's *attributed* disk-read estimate (measured disk reads split over the partitions led there;
  the collectors' consumer-position estimate stays on the round as ``position_disk_reads``);
* transfers: the round's copies in flight with their measured rates (placeholder ends dropped);
* capability: ``guardian.partition.throttle.enable`` among the broker configs of the round (read once,
  from the lowest alive broker id);
* lineage: per-partition client shares from the live audit topic (:class:`~kafkaio.audit.AuditShares`),
  read only when the round shows the audit topic; with them, each client's IDC and serving broker
  (leased-line accounting).

The source refuses (raises :class:`ObserveError`) when there is no round yet or the round fails the
protection usability policy (no broker metrics at all); the throttle service then skips the cluster.
Guarantee: an unchanged round yields an :class:`Observation` with the same ``round_seq`` (the service
evaluates each round once). Cost: O(partitions) per new round.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from collectors.builder import PLACEHOLDER_DIR
from collectors.completeness import UsabilityPolicy
from controlplane.service.clusters import ClusterBindings, has_broker_metrics
from controlplane.service.leased_lines import audit_flows_of
from controlplane.service.observation import PROTECTION_POLICY, LatestRound, Round
from controlplane.service.share_lineage import with_round_share_members
from controlplane.service.throttle_loop import ClusterBinding, Observation
from domain import ClusterSnapshot, Partition, PartitionId, Topic
from domain.throttles import PT_ENABLE
from kafkaio.audit import AuditShares, ShareKey
from planners.line_accounting import AuditFlow
from planners.throttle import ClientShare, Lineage, Transfer

log = logging.getLogger(__name__)


class ObserveError(RuntimeError):
    """The cluster has no usable round for throttle protection."""


def transfers_of(r: Round) -> tuple[Transfer, ...]:
    """The round's copies in flight as the planner's transfers (placeholder ends dropped)."""
    return tuple(Transfer("reassign" if c.kind == "reassign" else "intra_broker", c.topic, c.partition,
                          c.source if c.source is not None and c.source[1] != PLACEHOLDER_DIR else None,
                          c.dest, c.bytes_per_s)
                 for c in r.copies if c.dest[1] != PLACEHOLDER_DIR)


def partition_throttle_capable(r: Round) -> bool:
    """Whether the cluster's brokers take partition-level throttles (the lowest alive broker's flag)."""
    alive = [b.id for b in r.observed_brokers]
    if not alive:
        return False
    return str(r.broker_configs.get(min(alive), {}).get(PT_ENABLE, "")).lower() == "true"


def observation_of(r: Round, lineage: Lineage | None = None, partition_throttle: bool = False,
                   audit_flows: tuple[AuditFlow, ...] = ()) -> Observation:
    """The throttle planner's input from one round (see the module docstring)."""
    reads = r.attributed_disk_reads
    by_topic: dict[str, list[Partition]] = defaultdict(list)
    for t in sorted(r.collected.snapshot.topics, key=lambda t: t.name):
        for p in t.partitions:
            by_topic[p.topic].append(replace(p, disk_read_bytes_per_s=reads.get(p.id, 0.0)))
    snapshot = ClusterSnapshot(cluster=r.cluster, taken_at=r.collected.snapshot.taken_at, brokers=r.observed_brokers,
                               topics=tuple(Topic(name=n, partitions=tuple(ps)) for n, ps in by_topic.items()))
    return Observation(snapshot=snapshot, transfers=transfers_of(r), lineage=lineage or Lineage(),
                       partition_throttle=partition_throttle, round_seq=r.seq, audit_flows=audit_flows)


def lineage_of(shares: Mapping[ShareKey, Mapping[str, float]]) -> Lineage:
    """Per-partition and per-topic client shares from the audit topic's latest intervals."""
    fetch: dict[PartitionId, tuple[ClientShare, ...]] = {}
    produce: dict[PartitionId, tuple[ClientShare, ...]] = {}
    t_cons: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    t_prod: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (kind, topic, part), clients in shares.items():
        row = tuple(ClientShare(c, rate) for c, rate in sorted(clients.items()) if c)
        if kind == "fetch":
            fetch[(topic, part)] = row
            for s in row:
                t_cons[topic][s.client_id] += s.bytes_per_s
        elif kind == "produce":
            produce[(topic, part)] = row
            for s in row:
                t_prod[topic][s.client_id] += s.bytes_per_s
    return Lineage(fetch=fetch, produce=produce,
                   topic_consumers={t: tuple(ClientShare(c, rate) for c, rate in sorted(v.items()))
                                    for t, v in t_cons.items()},
                   topic_producers={t: tuple(ClientShare(c, rate) for c, rate in sorted(v.items()))
                                    for t, v in t_prod.items()})


class RoundThrottleSource:
    """``ThrottleSource`` of one cluster over the observer's published rounds."""

    def __init__(self, rounds: LatestRound, cluster: str, audit: AuditShares | None = None,
                 policy: UsabilityPolicy = PROTECTION_POLICY) -> None:
        self.rounds = rounds
        self.cluster = cluster
        self.audit = audit
        self.policy = policy
        self._capable: bool | None = None
        self._lock = threading.Lock()

    def observe(self) -> Observation:
        """The latest round as the throttle planner's input; :class:`ObserveError` when there is none usable."""
        with self._lock:
            r = self.rounds.latest(self.cluster)
            if r is None:
                raise ObserveError(f"cluster {self.cluster}: no collection round yet")
            if not r.coverage.brokers_with_metrics:
                raise ObserveError(f"cluster {self.cluster}: no broker metrics endpoint answered")
            reasons = r.refusals(self.policy)
            if reasons:
                raise ObserveError(f"cluster {self.cluster}: " + "; ".join(reasons))
            if self._capable is None and r.observed_brokers:
                self._capable = partition_throttle_capable(r)
            lineage = Lineage()
            placed: tuple[AuditFlow, ...] = ()
            if self.audit is not None and any(t.name == self.audit.topic for t in r.collected.snapshot.topics):
                try:
                    lineage = lineage_of(self.audit.poll())
                    placed = audit_flows_of(self.audit.placed())
                except Exception as exc:  # the audit topic is optional evidence: protect without it
                    log.warning("throttle %s: reading the audit topic failed: %s", self.cluster, exc)
                    self.audit.close()
            lineage = with_round_share_members(lineage, r.collected)  # KIP-932: every member of a share group
            return observation_of(r, lineage, bool(self._capable), placed)


def round_binding(rounds: LatestRound, bindings: ClusterBindings) -> Callable[[str, Mapping[str, Any]],
                                                                            ClusterBinding | None]:
    """The throttle service's ``bind``: a registered cluster's round source and levers on its shared client
    (None when the cluster declares no broker metrics endpoint: its disks cannot be observed)."""
    def bind(cluster: str, record: Mapping[str, Any]) -> ClusterBinding | None:
        if not record.get("bootstrap_servers"):
            return None
        clients = bindings.get(cluster, record)
        if not has_broker_metrics(clients.endpoints):
            return None
        return ClusterBinding(RoundThrottleSource(rounds, cluster, clients.audit), clients.levers)

    return bind
