"""Throttle protection's view of the published round: the ``ProtectionSource`` port over the observer.

Goal: throttle protection observes nothing itself. It reads the latest round the collection job
published for the cluster (:mod:`controlplane.service.observation`) and turns it into the planner's
:class:`~planners.protection.Observation`.

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
  (leased-line accounting);
* member assignments (:class:`GroupAssignments`), on a cluster *without* the partition-level throttle only:
  stock Kafka's finest lever for a hot partition is the client-id quota of the consumers assigned it. The
  partitions that matter (:func:`watched_partitions`) are those with attributed disk reads led on a disk that
  is not clearly healthy (util or await above its kind's low mark); the groups that matter are the ones with
  committed offsets on them this round (the collectors' readers of the partition). Those groups — and only
  those — are described (DescribeGroups at their coordinators), each at most once per ``ttl_s``; the classic
  groups' decoded assignments name the members assigned each hot partition (:func:`assignments_of`). A KIP-848
  ``consumer`` group cannot be described this way: Kafka answers DescribeGroups with "not a classic group"
  and its assignment is only in ConsumerGroupDescribe, which kafka-python 3.x does not implement; the planner
  is told so per partition (``Lineage.unassigned``) and falls back to the audit lineage.

The source refuses (raises :class:`ObserveError`) when there is no round yet or the round fails the
protection usability policy (no broker metrics at all); the throttle service then skips the cluster.
Guarantee: an unchanged round yields an :class:`Observation` with the same ``round_seq`` (the service
evaluates each round once); a failed DescribeGroups never fails the observation (the planner falls back).
Cost: O(partitions) per new round; DescribeGroups (+ FindCoordinator) only while a disk is above its low mark,
for the groups reading its partitions, at most once per group per ``ttl_s``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from collectors.builder import PLACEHOLDER_DIR
from collectors.completeness import UsabilityPolicy
from controlplane.service.clusters import ClusterBindings, has_broker_metrics
from controlplane.service.leased_lines import audit_flows_of
from controlplane.service.observation import PROTECTION_POLICY, LatestRound, Round
from controlplane.service.protection import ClusterBinding
from controlplane.service.share_lineage import with_round_share_members
from domain import ClusterSnapshot, Partition, PartitionId, Topic
from domain.throttles import PT_ENABLE
from kafkaio.audit import AuditShares, ShareKey
from kafkaio.port import GroupReader
from kafkaio.types import GroupDescription
from planners.line_accounting import AuditFlow
from planners.protection import AssignedClient, ClientShare, Lineage, Observation, ProtectionConfig, Transfer

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


def watched_partitions(r: Round, config: ProtectionConfig) -> dict[PartitionId, tuple[list[str], list[str]]]:
    """The partitions whose readers matter, with the groups that read them: ``(disk readers, cached readers)``
    by the collectors' position estimate (groups with committed offsets on the partition this round).

    A partition matters when it is led on a disk whose util or await is above its kind's *low* mark (the planner
    may throttle there, or hold a throttle) and the attribution estimate gives it at least
    ``config.min_abnormal_bytes_per_s`` of disk reads (a flow the planner would queue). Pure; O(partitions)."""
    warm: set[tuple[int, str]] = set()
    for b in r.observed_brokers:
        for d in b.disks:
            th = config.thresholds_for(d.kind)
            util, wait = d.util, d.await_ms
            if (math.isfinite(util) and util > th.util_low) or (math.isfinite(wait) and wait > th.await_low_ms):
                warm.add((b.id, d.path))
    if not warm:
        return {}
    reads = r.attributed_disk_reads
    out: dict[PartitionId, tuple[list[str], list[str]]] = {}
    for p in r.collected.snapshot.iter_partitions():
        if reads.get(p.id, 0.0) < config.min_abnormal_bytes_per_s or p.leader is None or p.leader not in p.replicas:
            continue
        i = p.replicas.index(p.leader)
        if i >= len(p.log_dirs) or (p.leader, p.log_dirs[i]) not in warm:
            continue
        detail = r.collected.partitions.get(p.id)
        if detail is not None and (detail.disk_readers or detail.cached_readers):
            out[p.id] = (sorted(detail.disk_readers), sorted(detail.cached_readers))
    return out


NOT_CLASSIC = ("a KIP-848 consumer group: Kafka answers DescribeGroups with \"not a classic group\", and its "
               "assignment is only in ConsumerGroupDescribe, which kafka-python 3.x does not implement")


def assignments_of(watched: Mapping[PartitionId, tuple[list[str], list[str]]],
                   groups: Mapping[str, GroupDescription]
                   ) -> tuple[dict[PartitionId, tuple[AssignedClient, ...]], dict[PartitionId, tuple[str, ...]]]:
    """Per watched partition, the members assigned it (by group and client id; ``reads_disk`` for the groups the
    position estimate has reading from disk), and why some reading groups name nobody (not described, not a
    classic group, no member, or no member assigned the partition). Pure; O(groups x members)."""
    assigned: dict[PartitionId, tuple[AssignedClient, ...]] = {}
    missing: dict[PartitionId, tuple[str, ...]] = {}
    for pid, (disk, cached) in sorted(watched.items()):
        rows: list[AssignedClient] = []
        why: list[str] = []
        for g in sorted(set(disk) | set(cached)):
            d = groups.get(g)
            if d is None:
                why.append(f"group {g} was not described")
            elif d.error is not None:
                why.append(f"group {g} is {NOT_CLASSIC}" if "not a classic group" in d.error
                           else f"group {g}: {d.error}")
            elif d.protocol_type != "consumer":
                why.append(f"group {g} has protocol type {d.protocol_type!r}, not a consumer group's")
            elif not d.members:
                why.append(f"group {g} has no member ({d.state})")
            else:
                mine = sorted({m.client_id for m in d.members if pid in m.assignment})
                if not mine:
                    why.append(f"no member of group {g} is assigned {pid[0]}-{pid[1]} ({d.state})")
                rows += [AssignedClient(g, c, g in disk) for c in mine]
        if rows:
            assigned[pid] = tuple(rows)
        if why:
            missing[pid] = tuple(why)
    return assigned, missing


class GroupAssignments:
    """The member assignments of the groups reading the partitions that matter, described at most once per group
    per ``ttl_s`` (a classic group's assignment changes only when it rebalances) through the cluster's
    :class:`~kafkaio.port.GroupReader`."""

    def __init__(self, reader: GroupReader, ttl_s: float = 30.0, max_groups: int = 50,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reader = reader
        self.ttl_s = ttl_s
        self.max_groups = max_groups
        self.clock = clock
        self._seen: dict[str, tuple[float, GroupDescription]] = {}
        self.described = 0
        """Groups described so far (what this costs the cluster)."""

    def lineage(self, r: Round, config: ProtectionConfig, base: Lineage) -> Lineage:
        """``base`` with the assignments of the partitions that matter in round ``r`` (unchanged when none)."""
        watched = watched_partitions(r, config)
        if not watched:
            return base
        wanted = sorted({g for disk, cached in watched.values() for g in (*disk, *cached)})[: self.max_groups]
        now = self.clock()
        due = [g for g in wanted if g not in self._seen or now - self._seen[g][0] >= self.ttl_s]
        if due:
            try:
                got = self.reader.describe_groups(due)
            except Exception as exc:  # assignments are the preferred evidence, not a precondition
                log.warning("throttle %s: describing groups %s failed: %s", r.cluster, due, exc)
                got = {}
            for g, d in got.items():
                self._seen[g] = (now, d)
            self.described += len(got)
        known = {g: self._seen[g][1] for g in wanted if g in self._seen}
        assigned, missing = assignments_of(watched, known)
        return replace(base, assignments=assigned, unassigned=missing)


class RoundProtectionSource:
    """``ProtectionSource`` of one cluster over the observer's published rounds."""

    def __init__(self, rounds: LatestRound, cluster: str, audit: AuditShares | None = None,
                 policy: UsabilityPolicy = PROTECTION_POLICY, groups: GroupReader | None = None,
                 config: ProtectionConfig | None = None) -> None:
        self.rounds = rounds
        self.cluster = cluster
        self.audit = audit
        self.policy = policy
        self.assignments = GroupAssignments(groups) if groups is not None else None
        self.config = config or ProtectionConfig()
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
            if self.assignments is not None and not self._capable:
                lineage = self.assignments.lineage(r, self.config, lineage)
            lineage = with_round_share_members(lineage, r.collected)  # KIP-932: every member of a share group
            return observation_of(r, lineage, bool(self._capable), placed)


def round_binding(rounds: LatestRound, bindings: ClusterBindings, config: ProtectionConfig | None = None
                  ) -> Callable[[str, Mapping[str, Any]], ClusterBinding | None]:
    """The throttle service's ``bind``: a registered cluster's round source (group assignments read through its
    shared admin client) and levers on its shared client (None when the cluster declares no broker metrics
    endpoint: its disks cannot be observed)."""
    def bind(cluster: str, record: Mapping[str, Any]) -> ClusterBinding | None:
        if not record.get("bootstrap_servers"):
            return None
        clients = bindings.get(cluster, record)
        if not has_broker_metrics(clients.endpoints):
            return None
        return ClusterBinding(RoundProtectionSource(rounds, cluster, clients.audit, groups=clients.admin,
                                                    config=config), clients.levers)

    return bind
