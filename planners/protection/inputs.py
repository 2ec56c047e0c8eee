"""Throttle protection's inputs beyond the snapshot: copies in flight, who reads and writes what, levers in force.

Goal: everything one evaluation consumes, as plain frozen records, so the planner stays pure. Method: the
service's observer fills an :class:`Observation` per round (snapshot + transfers + lineage + capability); the
replicated state's throttles are parsed into :class:`ActiveThrottle` rows (:func:`parse_active`); both feed
:class:`ProtectionInput`. Guarantee: a bad throttle row is skipped, never raised. Cost: O(rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from domain.model import ClusterSnapshot, DiskId, PartitionId
from planners.protection.config import WHO

if TYPE_CHECKING:  # planners.line_accounting imports Transfer from here
    from planners.line_accounting import AuditFlow


# --------------------------------------------------------------------------- inputs beyond the snapshot
@dataclass(frozen=True, slots=True)
class Transfer:
    """An in-flight copy: a reassignment adding a replica (``reassign``), an intra-broker move
    (``intra_broker``) or an out-of-sync follower catching up (``catch_up``), at its current rate."""

    kind: Literal["reassign", "intra_broker", "catch_up"]
    topic: str
    partition: int
    source: DiskId | None
    dest: DiskId
    bytes_per_s: float


@dataclass(frozen=True, slots=True)
class ClientShare:
    """One client's share of a partition's (or topic's) traffic."""

    client_id: str
    bytes_per_s: float


@dataclass(frozen=True, slots=True)
class AssignedClient:
    """A consumer-group member assigned a partition (Kafka's DescribeGroups answer for a classic group), by the
    client id its quota is set on. ``reads_disk``: the collectors' position estimate has the group reading the
    partition beyond the page cache (a lagging group), rather than tailing it from memory."""

    group: str
    client_id: str
    reads_disk: bool = False


@dataclass(frozen=True, slots=True)
class Lineage:
    """Who reads and writes what: per partition from audit data, or per topic (top clients) as fallback.

    ``topic_source`` says where the per-topic clients came from (the live audit topic, or a lineage run
    of the audit analytics); it is recorded with every client-quota decision. ``assignments`` are the
    consumer-group members assigned each partition (read only where it matters: partitions read from an
    overloaded disk of a cluster without a partition-level throttle); they are the preferred source of a
    fetch flow's clients. ``unassigned`` says, per partition, which reading groups' assignments could not be
    read and why (e.g. a KIP-848 group)."""

    fetch: Mapping[PartitionId, tuple[ClientShare, ...]] = field(default_factory=dict)
    produce: Mapping[PartitionId, tuple[ClientShare, ...]] = field(default_factory=dict)
    topic_consumers: Mapping[str, tuple[ClientShare, ...]] = field(default_factory=dict)
    topic_producers: Mapping[str, tuple[ClientShare, ...]] = field(default_factory=dict)
    topic_source: str = "the audit topic"
    assignments: Mapping[PartitionId, tuple[AssignedClient, ...]] = field(default_factory=dict)
    unassigned: Mapping[PartitionId, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ActiveThrottle:
    """A throttle in force (from the replicated state)."""

    key: str
    kind: str
    target: Mapping[str, Any]
    rate_bytes_per_s: float
    evidence: Mapping[str, Any] = field(default_factory=dict)
    set_by: str = WHO


@dataclass(frozen=True, slots=True)
class ProtectionInput:
    """Everything one evaluation consumes besides the snapshot."""

    transfers: tuple[Transfer, ...] = ()
    lineage: Lineage = field(default_factory=Lineage)
    expected_bytes_in: Mapping[PartitionId, float] = field(default_factory=dict)
    """Expected write rate per partition (history median or traffic model); absent = unknown."""
    partition_throttle: bool = False
    """The cluster accepts partition-level throttles (else client quotas are used)."""
    active: tuple[ActiveThrottle, ...] = ()
    alerts: frozenset[DiskId] = frozenset()
    """Disks with a firing on-call alert."""
    quiet: Mapping[str, int] = field(default_factory=dict)
    """Per active client-quota lever, the consecutive evaluations (before this one) in which its flow was below
    ``min_abnormal_bytes_per_s`` (:attr:`ProtectionPlan.lever_flows`)."""
    fail_slow: Mapping[DiskId, str] = field(default_factory=dict)
    """Disks the fail-slow detector flags (-> why): slow at normal load is the hardware's fault, so no client
    is throttled for it (self-healing moves leadership off instead); the skip is reported as the disk's reason."""


@dataclass(frozen=True)
class Observation:
    """What one observation of a cluster yields for the throttle planner."""

    snapshot: ClusterSnapshot
    transfers: tuple[Transfer, ...] = ()
    lineage: Lineage = field(default_factory=Lineage)
    partition_throttle: bool = False
    round_seq: int | None = None
    """The published round it was read from (None: a source of its own, every observation is new)."""
    audit_flows: tuple[AuditFlow, ...] = ()
    """The audit topic's latest intervals with client IDC and serving broker (leased-line accounting)."""


def parse_active(throttles: Mapping[str, Mapping[str, Any]]) -> tuple[ActiveThrottle, ...]:
    """Active throttles of one cluster from the replicated state's ``throttles[cluster]`` (bad rows skipped)."""
    out = []
    for key, t in sorted(throttles.items()):
        try:
            out.append(ActiveThrottle(key=str(key), kind=str(t["kind"]), target=dict(t.get("target") or {}),
                                      rate_bytes_per_s=float(t["rate_bytes_per_s"]),
                                      evidence=dict(t.get("evidence") or {}), set_by=str(t.get("set_by", ""))))
        except (KeyError, TypeError, ValueError):
            continue
    return tuple(out)
