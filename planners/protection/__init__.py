"""Partition-level throttle protection: snapshot + history -> throttle decisions (pure, deterministic).

The pipeline, per disk (log dir), one pass per collection interval:

1. **Health** (:func:`step_health`): util and await against the thresholds of the disk's kind, with
   hysteresis — a disk *enters* the unhealthy state after ``enter_samples`` consecutive samples above
   the high mark (either metric) and *leaves* it after ``leave_samples`` consecutive samples below the
   low marks (both metrics). Missing or non-finite samples change nothing (no entering, no leaving).
   A firing on-call alert for the disk counts as "above the high mark" at once.
2. **Root cause** (:func:`disk_flows`): the disk's I/O split into the six behaviours (user read/write,
   replication read/write, migration read/write) per partition, from the snapshot (``bytes_in_per_s``
   on every in-sync replica, ``disk_read_bytes_per_s`` = the page-cache-miss estimate on the leader)
   plus the in-flight :class:`Transfer` s (reassignment and intra-broker copies, follower catch-up).
3. **Abnormal behaviour queue** (:func:`abnormal_queue`): writes above the partition's expected rate
   (history / traffic model; copies and catch-up are always above the steady-state expectation) and
   every disk read, sorted by current traffic, largest first (ties by a stable key).
4. **Action** (:func:`plan_throttles`): walk the queue from the top, cutting each entry only as much as
   needed, until the predicted util is under ``target_util``; the mechanism depends on the behaviour
   and on the cluster's capability (see :class:`NamedLever`). In-sync replication is never throttled and a
   follower catch-up throttle never goes below ``max(isr_floor, bytes_in x (1 + margin))``.
5. **Relaxation**: on a healthy disk each protection throttle is released once its cause is gone (its
   flow vanished or it no longer binds), else raised by ``relax_factor`` per interval while the
   predicted util stays below the low mark (hysteresis), and released when it reaches its original rate.
   A client quota is released for a vanished flow only after ``quota_quiet_samples`` quiet evaluations in a
   row (the caller counts them), and relaxed only while ``max(util, its rate / the disk's ceiling)`` plus the
   step stays under the low mark: Kafka enforces a quota by muting the client for its throttle time, so its
   flow vanishes between bursts while the client still lags (seen on real Kafka: releasing or relaxing on
   such a sample let the consumer drive the disk back to util 1 within seconds).

Complexity: O(replicas + transfers) to index flows, O(q log q) per unhealthy disk with q flows on it.
Everything here is plain data; nothing reads a clock or does I/O.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from domain.model import ClusterSnapshot, DiskId, DiskKind, Partition, PartitionId
from domain.throttles import (
    CONSUMER_QUOTA,
    FOLLOWER,
    INTRA_BROKER,
    MIGRATION,
    PARTITION_FETCH,
    PARTITION_PRODUCE,
    PRODUCER_QUOTA,
)

BEHAVIOURS = ("user_read", "user_write", "replication_read", "replication_write", "migration_read",
              "migration_write")
Behaviour = Literal["user_read", "user_write", "replication_read", "replication_write", "migration_read",
                    "migration_write"]
WHO = "throttle-protection"


# --------------------------------------------------------------------------- configuration
@dataclass(frozen=True, slots=True)
class HealthThresholds:
    """High/low marks of one disk kind; ``enter_samples`` is the k of the hysteresis."""

    util_high: float = 0.85
    util_low: float = 0.70
    await_high_ms: float = 50.0
    await_low_ms: float = 20.0
    enter_samples: int = 2
    leave_samples: int = 2

    def __post_init__(self) -> None:
        if not (0 < self.util_low < self.util_high and 0 < self.await_low_ms < self.await_high_ms):
            raise ValueError("thresholds need 0 < low < high for util and await")
        if self.enter_samples < 1 or self.leave_samples < 1:
            raise ValueError("enter_samples and leave_samples must be >= 1")


DEFAULT_THRESHOLDS: Mapping[DiskKind, HealthThresholds] = {
    DiskKind.HDD: HealthThresholds(0.85, 0.70, 60.0, 25.0),
    DiskKind.SSD: HealthThresholds(0.85, 0.70, 10.0, 4.0),
    DiskKind.NVME: HealthThresholds(0.85, 0.70, 3.0, 1.0),
}


@dataclass(frozen=True, slots=True)
class ProtectionConfig:
    """Knobs of the protection (all rates in bytes/s)."""

    thresholds: Mapping[DiskKind, HealthThresholds] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    target_util: float = 0.65
    write_tolerance: float = 1.5
    """A user write is abnormal above ``expected x write_tolerance``."""
    min_abnormal_bytes_per_s: float = 256 * 1024
    """Flows smaller than this are noise, never queued."""
    min_rate_bytes_per_s: float = 512 * 1024
    """No lever is set below this (a throttle never stops a client or a copy entirely)."""
    isr_floor_bytes_per_s: float = 1024 * 1024
    catch_up_margin: float = 0.2
    """A follower catch-up throttle keeps at least ``bytes_in x (1 + margin)`` so the replica still gains."""
    relax_factor: float = 2.0
    release_unbound_ratio: float = 0.8
    """Release when the lever carries less than this fraction of its rate (it no longer binds)."""
    max_queue_evidence: int = 10
    quota_quiet_samples: int = 10
    """A client quota whose flow vanished is released only after this many consecutive quiet evaluations: Kafka
    mutes a throttled client for up to its quota window (11 s by default) and again while its average stays
    over the quota — on the lab, 12 s of silence after a quota cut from 2.2 to 0.5 MB/s — so a shorter silence
    is the quota working, not the cause gone."""

    def thresholds_for(self, kind: DiskKind) -> HealthThresholds:
        """The thresholds of ``kind`` (HDD's when the kind is not configured)."""
        return self.thresholds.get(kind) or self.thresholds.get(DiskKind.HDD) or HealthThresholds()


# --------------------------------------------------------------------------- health with hysteresis
@dataclass(frozen=True, slots=True)
class DiskHealth:
    """Hysteresis state of one disk; ``unhealthy`` flips only after enough consecutive samples."""

    unhealthy: bool = False
    above: int = 0
    below: int = 0
    missing: int = 0
    samples: int = 0
    last_util: float | None = None
    last_await_ms: float | None = None
    reason: str = ""


def _finite(x: float | None) -> float | None:
    return x if x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 else None


def step_health(state: DiskHealth, util: float | None, await_ms: float | None, th: HealthThresholds,
                alert: bool = False) -> DiskHealth:
    """Advance the hysteresis by one sample.

    Guarantees: a missing/non-finite sample (both metrics) leaves ``unhealthy``, ``above`` and ``below``
    unchanged; the state turns unhealthy only after ``th.enter_samples`` consecutive samples above a
    high mark (or at once with ``alert``), and healthy only after ``th.leave_samples`` consecutive
    samples with every finite metric below its low mark (and no alert). Values between the marks
    reset both counters, so noise inside the band never flips the state.
    """
    u, a = _finite(util), _finite(await_ms)
    if u is None and a is None and not alert:
        return replace(state, missing=state.missing + 1, samples=state.samples + 1)
    hot = alert or (u is not None and u > th.util_high) or (a is not None and a > th.await_high_ms)
    cool = not alert and (u is None or u < th.util_low) and (a is None or a < th.await_low_ms)
    above = state.above + 1 if hot else 0
    below = state.below + 1 if cool else 0
    unhealthy = state.unhealthy
    reason = state.reason
    if not unhealthy and (alert or above >= th.enter_samples):
        unhealthy = True
        parts = []
        if alert:
            parts.append("on-call alert firing")
        if u is not None and u > th.util_high:
            parts.append(f"util {u:.2f} > {th.util_high:.2f}")
        if a is not None and a > th.await_high_ms:
            parts.append(f"await {a:.1f} ms > {th.await_high_ms:.1f} ms")
        reason = ", ".join(parts) + f" for {above} sample(s)"
    elif unhealthy and below >= th.leave_samples:
        unhealthy = False
        reason = f"below util {th.util_low:.2f} / await {th.await_low_ms:.1f} ms for {below} sample(s)"
    return DiskHealth(unhealthy=unhealthy, above=above, below=below, missing=state.missing,
                      samples=state.samples + 1, last_util=u if u is not None else state.last_util,
                      last_await_ms=a if a is not None else state.last_await_ms, reason=reason)


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


# --------------------------------------------------------------------------- flows (root cause)
@dataclass(frozen=True, slots=True)
class DiskFlow:
    """Bytes/s one behaviour of one partition puts on one disk."""

    disk: DiskId
    behaviour: Behaviour
    topic: str
    partition: int
    bytes_per_s: float
    broker: int
    """The broker the flow is served by (leader for user traffic, the copying replica for transfers)."""
    transfer: Transfer | None = None


def disk_flows(snapshot: ClusterSnapshot, transfers: Sequence[Transfer] = ()) -> dict[DiskId, list[DiskFlow]]:
    """Split every disk's I/O into the six behaviours per partition. O(replicas + transfers).

    User write = ``bytes_in`` on the leader's dir; replication write = ``bytes_in`` on each in-sync
    follower's dir; user read = ``disk_read_bytes_per_s`` (page-cache misses) on the leader's dir;
    transfers add migration (reassign / intra-broker) or replication (catch-up) read on the source
    and write on the destination. Non-finite or negative rates count as 0.
    """
    known = set(snapshot.index.disk_ids)
    flows: dict[DiskId, list[DiskFlow]] = defaultdict(list)

    def add(disk: DiskId | None, behaviour: Behaviour, p: Partition | Transfer, rate: float, broker: int,
            transfer: Transfer | None = None) -> None:
        r = _finite(rate)
        if disk is None or disk not in known or not r:
            return
        flows[disk].append(DiskFlow(disk, behaviour, p.topic, p.partition, r, broker, transfer))

    for p in snapshot.iter_partitions():
        for i, broker in enumerate(p.replicas):
            if i >= len(p.log_dirs) or broker not in p.isr:
                continue
            disk = (broker, p.log_dirs[i])
            if broker == p.leader:
                add(disk, "user_write", p, p.bytes_in_per_s, broker)
                add(disk, "user_read", p, p.disk_read_bytes_per_s, broker)
            else:
                add(disk, "replication_write", p, p.bytes_in_per_s, broker)
    for t in transfers:
        if t.kind == "catch_up":
            add(t.source, "replication_read", t, t.bytes_per_s, t.dest[0], t)
            add(t.dest, "replication_write", t, t.bytes_per_s, t.dest[0], t)
        else:
            add(t.source, "migration_read", t, t.bytes_per_s, t.dest[0], t)
            add(t.dest, "migration_write", t, t.bytes_per_s, t.dest[0], t)
    return dict(flows)


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """An abnormal behaviour on an unhealthy disk: its current traffic and why it is abnormal."""

    flow: DiskFlow
    expected_bytes_per_s: float
    why: str

    @property
    def sort_key(self) -> tuple[float, str, str, int, int]:
        """Largest traffic first; ties broken by behaviour, topic, partition, broker (stable)."""
        f = self.flow
        return (-f.bytes_per_s, f.behaviour, f.topic, f.partition, f.broker)


def abnormal_queue(flows: Iterable[DiskFlow], expected_bytes_in: Mapping[PartitionId, float],
                   config: ProtectionConfig) -> list[QueueEntry]:
    """The abnormal behaviours among ``flows``, sorted by current traffic, largest first.

    Abnormal: any disk read; a user write above ``expected x write_tolerance`` (unknown or non-finite
    expectation: not abnormal); every migration write and catch-up replication write (steady state
    expects none). In-sync replication writes are never queued (they follow the leader's writes and
    KIP-73 cannot slow them). Flows below ``min_abnormal_bytes_per_s`` are ignored.
    """
    out: list[QueueEntry] = []
    for f in flows:
        if f.bytes_per_s < config.min_abnormal_bytes_per_s:
            continue
        if f.behaviour.endswith("_read"):
            out.append(QueueEntry(f, 0.0, f"disk read ({f.behaviour.replace('_', ' ')}) is abnormal"))
        elif f.behaviour == "user_write":
            exp = _finite(expected_bytes_in.get((f.topic, f.partition)))
            if exp is not None and f.bytes_per_s > exp * config.write_tolerance:
                out.append(QueueEntry(f, exp, f"writes {f.bytes_per_s:.0f} B/s > expected {exp:.0f} B/s "
                                              f"x {config.write_tolerance}"))
        elif f.transfer is not None:
            out.append(QueueEntry(f, 0.0, f"{f.transfer.kind.replace('_', '-')} copy writes this disk"))
    out.sort(key=lambda e: e.sort_key)
    return out


# --------------------------------------------------------------------------- levers and decisions
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._:/@-]")


def _safe(s: object) -> str:
    return _KEY_UNSAFE.sub("_", str(s))[:120] or "_"


@dataclass(frozen=True, slots=True)
class NamedLever:
    """One throttle mechanism instance: the unit a decision sets, relaxes or releases."""

    key: str
    kind: str
    target: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ThrottleDecision:
    """Set (new or tighter), relax (higher rate) or release one lever; ``evidence`` says why.

    The one decision record of both protections — this module's (per disk) and
    :mod:`planners.line_protection`'s (per leased line): the service applies and records either alike."""

    action: Literal["set", "relax", "release"]
    key: str
    kind: str
    target: Mapping[str, Any]
    rate_bytes_per_s: float
    protects: DiskId | tuple[str, str]
    """What the lever is moved for: a disk ``(broker, log dir)`` here, a leased line ``(src IDC, dst IDC)``
    in the line protection."""
    why: str
    evidence: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DiskReport:
    """What the planner saw and did for one disk (for ``explain``)."""

    disk: DiskId
    kind: str
    health: DiskHealth
    util: float | None
    await_ms: float | None
    predicted_util: float | None
    behaviours: Mapping[str, float]
    queue: tuple[QueueEntry, ...]


@dataclass(frozen=True, slots=True)
class ProtectionPlan:
    """The outcome of one evaluation: new health states, decisions, and a report per examined disk."""

    health: Mapping[DiskId, DiskHealth]
    decisions: tuple[ThrottleDecision, ...]
    reports: tuple[DiskReport, ...]
    lever_flows: Mapping[str, float] = field(default_factory=dict)
    """Bytes/s of the throttled behaviour still on the disk, per active lever examined for relaxation (the
    caller counts a client quota's quiet samples from it: :attr:`ProtectionInput.quiet`)."""


def _partition_index(snapshot: ClusterSnapshot) -> tuple[dict[PartitionId, Partition], dict[int, set[PartitionId]]]:
    parts = {p.id: p for p in snapshot.iter_partitions()}
    led: dict[int, set[PartitionId]] = defaultdict(set)
    for p in parts.values():
        if p.leader is not None:
            led[p.leader].add(p.id)
    return parts, led


def _client_rate_on_broker(client: str, broker_parts: set[PartitionId], parts: Mapping[PartitionId, Partition],
                           lineage: Lineage, read: bool) -> float:
    """Bytes/s ``client`` moves through the partitions one broker leads *now*: each partition's current
    traffic times the client's share of it (audit lineage of the partition; else its share of the topic's
    bytes, or an equal share when the topic's shares carry no bytes; a partition read by consumer groups whose
    assignments are known: an equal share per group, given to the member assigned it). Lineage says who, the
    live metrics say how much (audit intervals and lineage runs lag behind)."""
    per_part = lineage.fetch if read else lineage.produce
    per_topic = lineage.topic_consumers if read else lineage.topic_producers
    total = 0.0
    for pid in sorted(broker_parts):
        p = parts[pid]
        now = p.bytes_out_per_s if read else p.bytes_in_per_s
        shares = per_part.get(pid)
        if shares:
            whole = sum(s.bytes_per_s for s in shares)
            mine = sum(s.bytes_per_s for s in shares if s.client_id == client)
            total += now * (mine / whole) if whole > 0 else 0.0
            continue
        assigned = lineage.assignments.get(pid) if read else None
        if assigned:  # each group reading the partition gets an equal share of its bytes out
            groups = {a.group for a in assigned}
            total += now * len({a.group for a in assigned if a.client_id == client}) / len(groups)
            continue
        tshares = per_topic.get(pid[0], ())
        if any(s.client_id == client for s in tshares):
            whole = sum(s.bytes_per_s for s in tshares)
            mine = sum(s.bytes_per_s for s in tshares if s.client_id == client)
            total += now * (mine / whole) if whole > 0 else now / len(tshares)
    return total


NO_PARTITION_THROTTLE = "the cluster has no partition-level throttle"


def _responsible(entry: QueueEntry, lineage: Lineage, read: bool) -> tuple[list[ClientShare], str, str]:
    """The clients whose quota relieves ``entry``, where they came from (recorded on the lever) and the lever's
    explanation.

    A fetch flow prefers the consumer-group members assigned the partition: those of the groups estimated to
    read it from disk, else of every group assigned it. Then the audit lineage of the partition, then the
    topic's top clients."""
    pid = (entry.flow.topic, entry.flow.partition)
    name = f"{entry.flow.topic}-{entry.flow.partition}"
    assigned = lineage.assignments.get(pid) if read else None
    if assigned:
        lagging = [a for a in assigned if a.reads_disk]
        chosen = lagging or list(assigned)
        groups = sorted({a.group for a in chosen})
        clients = sorted({a.client_id for a in chosen})
        label = "group " + ", ".join(groups) if len(groups) == 1 else "groups " + ", ".join(groups)
        why = f"client quota of {label}'s members assigned {name} (consumer-group assignment)"
        if not lagging:
            why += "; no group is estimated to read it from disk, so every group assigned it"
        return [ClientShare(c, 0.0) for c in clients], "consumer-group assignment", why
    missing = lineage.unassigned.get(pid, ()) if read else ()
    gap = f"; no member assignment for {name}: {'; '.join(missing)}" if missing else ""
    shares = (lineage.fetch if read else lineage.produce).get(pid)
    if shares:
        return (sorted(shares, key=lambda s: (-s.bytes_per_s, s.client_id)), "audit lineage of the partition",
                f"client quota (audit lineage of {name}){gap}")
    tshares = (lineage.topic_consumers if read else lineage.topic_producers).get(entry.flow.topic, ())
    source = f"top clients of the topic from {lineage.topic_source} (no audit lineage for the partition)"
    return (sorted(tshares, key=lambda s: (-s.bytes_per_s, s.client_id))[:3], source,
            f"client quota ({source}){gap}")


@dataclass
class _Cut:
    """A proposed lever setting while walking one disk's queue."""

    lever: NamedLever
    rate: float
    original: float
    relieved: float
    mechanism: str
    entries: list[QueueEntry]


def _levers_for(entry: QueueEntry, cut: float, snapshot: ClusterSnapshot, inp: ProtectionInput,
                parts: Mapping[PartitionId, Partition], led: Mapping[int, set[PartitionId]],
                config: ProtectionConfig) -> tuple[list[tuple[NamedLever, float, float]], float, str]:
    """Levers (with new rate and the rate they govern now) that cut ``cut`` bytes/s off the entry's flow.

    Returns the levers, the disk bytes/s actually relieved (after floors) and the mechanism's name.
    """
    f = entry.flow
    floor = config.min_rate_bytes_per_s
    pid = (f.topic, f.partition)
    p = parts.get(pid)
    if f.transfer is not None:
        t = f.transfer
        if t.kind == "catch_up":
            bytes_in = p.bytes_in_per_s if p else 0.0
            floor = max(config.isr_floor_bytes_per_s, bytes_in * (1 + config.catch_up_margin), floor)
            rate = max(floor, t.bytes_per_s - cut)
            lever = NamedLever(f"follower:{_safe(f.topic)}:{f.partition}:{t.dest[0]}", FOLLOWER,
                          {"topic": f.topic, "partition": f.partition, "broker": t.dest[0]})
            return [(lever, rate, t.bytes_per_s)], max(t.bytes_per_s - rate, 0.0), "KIP-73 follower throttle"
        kind = MIGRATION if t.kind == "reassign" else INTRA_BROKER
        # the rate is per broker (shared by its copies): scale the broker's total copy rate
        total = sum(x.bytes_per_s for x in inp.transfers if x.kind == t.kind and x.dest[0] == t.dest[0])
        rate = max(floor, total - cut)
        lever = NamedLever(f"{'migration' if kind == MIGRATION else 'intra'}:broker:{t.dest[0]}", kind,
                      {"broker": t.dest[0], "source_broker": t.source[0] if t.source else None})
        relieved = min(max(total - rate, 0.0), cut)
        name = "executor migration rate" if kind == MIGRATION else "intra-broker move rate"
        return [(lever, rate, total)], relieved, name
    read = f.behaviour == "user_read"
    if p is None:
        return [], 0.0, "none"
    lever_total = p.bytes_out_per_s if read else p.bytes_in_per_s
    # disk bytes per lever byte: a fetch throttle also slows reads served from the page cache
    ratio = min(1.0, f.bytes_per_s / lever_total) if lever_total > 0 else 1.0
    if inp.partition_throttle:
        rate = max(floor, lever_total - cut / ratio) if ratio > 0 else lever_total
        kind = PARTITION_FETCH if read else PARTITION_PRODUCE
        lever = NamedLever(f"{'fetch' if read else 'produce'}:{_safe(f.topic)}:{f.partition}", kind,
                      {"topic": f.topic, "partition": f.partition})
        return [(lever, rate, lever_total)], max(lever_total - rate, 0.0) * ratio, "partition-level throttle"
    clients, source, mechanism = _responsible(entry, inp.lineage, read)
    if not clients:
        return [], 0.0, f"client quota (no client known for the topic): {NO_PARTITION_THROTTLE}"
    out: list[tuple[NamedLever, float, float]] = []
    relieved = 0.0
    share_total = sum(c.bytes_per_s for c in clients) or float(len(clients))
    broker_parts = led.get(f.broker, set())
    for c in clients:
        weight = (c.bytes_per_s or 1.0) / share_total
        on_broker = _client_rate_on_broker(c.client_id, broker_parts, parts, inp.lineage, read)
        if on_broker <= 0:
            continue
        want = cut * weight / ratio if ratio > 0 else 0.0
        rate = max(floor, on_broker - want)
        kind = CONSUMER_QUOTA if read else PRODUCER_QUOTA
        lever = NamedLever(f"{'consumer' if read else 'producer'}-quota:{_safe(c.client_id)}", kind,
                      {"client_id": c.client_id, "quota": "consumer_byte_rate" if read else "producer_byte_rate",
                       "lineage": source})
        out.append((lever, rate, on_broker))
        relieved += min(max(on_broker - rate, 0.0), want) * ratio
    return out, min(relieved, f.bytes_per_s), f"{mechanism}: {NO_PARTITION_THROTTLE}"


def _util_now(util: float | None, disk_bytes: float, max_bps: float) -> float | None:
    if util is not None:
        return util
    return disk_bytes / max_bps if max_bps > 0 else None


def plan_throttles(snapshot: ClusterSnapshot, inp: ProtectionInput, health: Mapping[DiskId, DiskHealth],
                   config: ProtectionConfig | None = None, only: Iterable[DiskId] | None = None) -> ProtectionPlan:
    """One evaluation: advance every disk's health, throttle unhealthy disks, relax recovered ones.

    Deterministic for equal inputs. ``only`` restricts the evaluation to some disks (an alert's);
    other disks keep their health state untouched. Decisions on one lever are merged: the tightest
    set wins, a lever is never both set and relaxed in one plan, and a lever with an active throttle
    is only ever *tightened* by a set.
    """
    config = config or ProtectionConfig()
    flows = disk_flows(snapshot, inp.transfers)
    parts, led = _partition_index(snapshot)
    active = {a.key: a for a in inp.active}
    wanted = set(only) if only is not None else None
    new_health: dict[DiskId, DiskHealth] = dict(health)
    decisions: dict[str, ThrottleDecision] = {}
    lever_flows: dict[str, float] = {}
    reports: list[DiskReport] = []
    for broker in snapshot.brokers:
        if not broker.is_alive:
            continue
        for disk in broker.disks:
            did: DiskId = (broker.id, disk.path)
            if wanted is not None and did not in wanted:
                continue
            th = config.thresholds_for(disk.kind)
            state = step_health(health.get(did, DiskHealth()), disk.util, disk.await_ms, th, did in inp.alerts)
            if did in inp.fail_slow:  # the disk, not a client, is at fault: report it, throttle nobody
                state = replace(state, unhealthy=False, reason=f"skipped: fail-slow disk ({inp.fail_slow[did]})")
            new_health[did] = state
            dflows = flows.get(did, [])
            per_behaviour = {b: 0.0 for b in BEHAVIOURS}
            for fl in dflows:
                per_behaviour[fl.behaviour] += fl.bytes_per_s
            util = _util_now(_finite(disk.util), sum(per_behaviour.values()), disk.max_bytes_per_s)
            queue: list[QueueEntry] = []
            predicted = util
            if state.unhealthy:
                queue = abnormal_queue(dflows, inp.expected_bytes_in, config)
                predicted = _throttle_disk(did, disk.max_bytes_per_s, util, state, queue, snapshot, inp, parts,
                                           led, active, decisions, config, th)
            elif state.below > 0 or (util is not None and util < th.util_low):
                _relax_disk(did, disk.max_bytes_per_s, util, dflows, parts, active, decisions, config, th, state,
                            inp.quiet, lever_flows)
            reports.append(DiskReport(did, disk.kind.value, state, util, _finite(disk.await_ms), predicted,
                                      per_behaviour, tuple(queue)))
    # throttles on disks that no longer exist or whose broker died: release them
    alive_disks = {(b.id, d.path) for b in snapshot.brokers if b.is_alive for d in b.disks}
    for a in inp.active:
        if a.set_by != WHO or a.key in decisions:
            continue
        gone = _disk_of(a)
        if gone is not None and gone not in alive_disks:
            decisions[a.key] = ThrottleDecision("release", a.key, a.kind, a.target, a.rate_bytes_per_s, gone,
                                                "the disk it protected is gone or its broker is down",
                                                {"disk": list(gone)})
    ordered = tuple(sorted(decisions.values(), key=lambda d: (d.protects, d.action, d.key)))
    return ProtectionPlan(new_health, ordered, tuple(reports), lever_flows)


def _disk_of(a: ActiveThrottle) -> DiskId | None:
    disk = a.evidence.get("disk") if isinstance(a.evidence, Mapping) else None
    if isinstance(disk, (list, tuple)) and len(disk) == 2:
        try:
            return (int(disk[0]), str(disk[1]))
        except (TypeError, ValueError):
            return None
    return None


def _entry_evidence(e: QueueEntry) -> dict[str, Any]:
    f = e.flow
    return {"behaviour": f.behaviour, "topic": f.topic, "partition": f.partition, "broker": f.broker,
            "bytes_per_s": round(f.bytes_per_s, 1), "expected_bytes_per_s": round(e.expected_bytes_per_s, 1),
            "why": e.why}


def _throttle_disk(did: DiskId, max_bps: float, util: float | None, state: DiskHealth, queue: list[QueueEntry],
                   snapshot: ClusterSnapshot, inp: ProtectionInput, parts: Mapping[PartitionId, Partition],
                   led: Mapping[int, set[PartitionId]], active: Mapping[str, ActiveThrottle],
                   decisions: dict[str, ThrottleDecision], config: ProtectionConfig,
                   th: HealthThresholds) -> float | None:
    if util is None or max_bps <= 0:
        return util
    predicted = util
    cuts: dict[str, _Cut] = {}
    for entry in queue:
        if predicted < config.target_util:
            break
        need = (predicted - config.target_util) * max_bps
        cut = min(need, entry.flow.bytes_per_s)
        levers, relieved, mechanism = _levers_for(entry, cut, snapshot, inp, parts, led, config)
        if not levers or relieved <= 0:
            continue
        for lever, rate, original in levers:
            old = cuts.get(lever.key)
            if old is None:
                cuts[lever.key] = _Cut(lever, rate, original, relieved, mechanism, [entry])
            else:  # the same lever relieves a second entry: cut further from what is already proposed
                old.rate = max(config.min_rate_bytes_per_s, old.rate - max(original - rate, 0.0))
                old.relieved += relieved
                old.entries.append(entry)
        predicted -= relieved / max_bps
    queue_ev = [_entry_evidence(e) for e in queue[: config.max_queue_evidence]]
    for key, c in cuts.items():
        current = active.get(key)
        if current is not None and current.rate_bytes_per_s <= c.rate * 1.0001:
            continue  # already at least this tight: nothing to do (idempotent)
        original = c.original
        if current is not None:
            original = float(current.evidence.get("original_rate_bytes_per_s", original) or original)
        prev = decisions.get(key)
        if prev is not None and prev.action == "set" and prev.rate_bytes_per_s <= c.rate:
            continue
        causes = [_entry_evidence(e) for e in c.entries]
        why = (f"disk {did[0]}:{did[1]} unhealthy ({state.reason}); {causes[0]['behaviour']} of "
               f"{causes[0]['topic']}-{causes[0]['partition']} at {causes[0]['bytes_per_s'] / 1e6:.1f} MB/s is "
               f"abnormal; limit {c.lever.kind} to {c.rate / 1e6:.2f} MB/s — {c.mechanism}")
        evidence = {"disk": list(did), "util": util, "await_ms": state.last_await_ms,
                    "thresholds": {"util_high": th.util_high, "util_low": th.util_low,
                                   "await_high_ms": th.await_high_ms, "await_low_ms": th.await_low_ms,
                                   "enter_samples": th.enter_samples},
                    "health": state.reason, "mechanism": c.mechanism, "target_util": config.target_util,
                    "predicted_util": round(predicted, 4), "causes": causes, "queue": queue_ev,
                    "original_rate_bytes_per_s": original, "relax_step": 0}
        decisions[key] = ThrottleDecision("set", key, c.lever.kind, dict(c.lever.target), c.rate, did, why, evidence)
    return predicted


def _relax_disk(did: DiskId, max_bps: float, util: float | None, dflows: Sequence[DiskFlow],
                parts: Mapping[PartitionId, Partition], active: Mapping[str, ActiveThrottle],
                decisions: dict[str, ThrottleDecision], config: ProtectionConfig, th: HealthThresholds,
                state: DiskHealth, quiet: Mapping[str, int], lever_flows: dict[str, float]) -> None:
    mine = [a for a in active.values() if a.set_by == WHO and _disk_of(a) == did and a.key not in decisions]
    budget = util if util is not None else 0.0
    for a in sorted(mine, key=lambda x: x.key):
        flow_now, carried = _lever_load(a, dflows, parts)
        lever_flows[a.key] = flow_now
        quota = a.kind in (CONSUMER_QUOTA, PRODUCER_QUOTA)
        original = float(a.evidence.get("original_rate_bytes_per_s", 0.0) or 0.0)
        step = int(a.evidence.get("relax_step", 0) or 0)
        base = {**dict(a.evidence), "disk": list(did), "util": util, "health": state.reason}
        vanished = flow_now < config.min_abnormal_bytes_per_s
        if vanished and quota and quiet.get(a.key, 0) + 1 < config.quota_quiet_samples:
            continue  # Kafka mutes a throttled client for its throttle time: a short silence is the quota working
        if vanished:
            decisions[a.key] = ThrottleDecision(
                "release", a.key, a.kind, a.target, a.rate_bytes_per_s, did,
                f"disk {did[0]}:{did[1]} healthy and the throttled behaviour no longer loads it "
                f"({flow_now / 1e6:.2f} MB/s): released", {**base, "flow_bytes_per_s": flow_now})
            continue
        if carried is not None and carried < config.release_unbound_ratio * a.rate_bytes_per_s:
            decisions[a.key] = ThrottleDecision(
                "release", a.key, a.kind, a.target, a.rate_bytes_per_s, did,
                f"throttle no longer binds ({carried / 1e6:.2f} of {a.rate_bytes_per_s / 1e6:.2f} MB/s): released",
                {**base, "carried_bytes_per_s": carried})
            continue
        new_rate = a.rate_bytes_per_s * config.relax_factor
        share = flow_now / carried if carried else 1.0
        extra = (new_rate - a.rate_bytes_per_s) * min(share, 1.0) / max_bps if max_bps > 0 else math.inf
        # a quota'd client that still reads here reads all its quota allows, between its muted spells: judge
        # the relaxation on that, not on one sample that may fall in a mute
        load = max(budget, a.rate_bytes_per_s / max_bps) if quota and max_bps > 0 else budget
        if load + extra >= th.util_low:
            continue  # hold: relaxing now would push the disk back above the low mark
        budget = load + extra
        if original and new_rate >= original:
            decisions[a.key] = ThrottleDecision(
                "release", a.key, a.kind, a.target, a.rate_bytes_per_s, did,
                f"relaxed back to the original rate {original / 1e6:.2f} MB/s: released",
                {**base, "predicted_util": round(budget, 4)})
        else:
            decisions[a.key] = ThrottleDecision(
                "relax", a.key, a.kind, a.target, new_rate, did,
                f"disk {did[0]}:{did[1]} recovered (util {util if util is not None else float('nan'):.2f}); "
                f"relax step {step + 1}: {a.rate_bytes_per_s / 1e6:.2f} -> {new_rate / 1e6:.2f} MB/s",
                {**base, "relax_step": step + 1, "predicted_util": round(budget, 4)})


def _lever_load(a: ActiveThrottle, dflows: Sequence[DiskFlow], parts: Mapping[PartitionId, Partition]
                ) -> tuple[float, float | None]:
    """(bytes/s of the throttled behaviour still on the disk, bytes/s the lever carries now or None)."""
    t = a.target
    if a.kind in (PARTITION_FETCH, PARTITION_PRODUCE):
        read = a.kind == PARTITION_FETCH
        beh = "user_read" if read else "user_write"
        pid = (str(t.get("topic")), int(t.get("partition", -1)))
        flow = sum(f.bytes_per_s for f in dflows if f.behaviour == beh and (f.topic, f.partition) == pid)
        p = parts.get(pid)
        return flow, (p.bytes_out_per_s if read else p.bytes_in_per_s) if p else None
    if a.kind in (CONSUMER_QUOTA, PRODUCER_QUOTA):
        beh = "user_read" if a.kind == CONSUMER_QUOTA else "user_write"
        causes = a.evidence.get("causes") or []
        pids = {(str(c.get("topic")), int(c.get("partition", -1))) for c in causes if isinstance(c, Mapping)}
        flow = sum(f.bytes_per_s for f in dflows if f.behaviour == beh and (f.topic, f.partition) in pids)
        if beh == "user_write":  # a write is only a cause while above its expectation
            exp = sum(float(c.get("expected_bytes_per_s", 0.0)) for c in causes if isinstance(c, Mapping))
            flow = flow if flow > exp * 1.0 else 0.0
        return flow, None
    if a.kind == FOLLOWER:
        pid = (str(t.get("topic")), int(t.get("partition", -1)))
        flow = sum(f.bytes_per_s for f in dflows if f.transfer is not None and f.transfer.kind == "catch_up"
                   and (f.topic, f.partition) == pid and f.transfer.dest[0] == t.get("broker"))
        return flow, flow
    kind = "reassign" if a.kind == MIGRATION else "intra_broker"
    flow = sum(f.bytes_per_s for f in dflows if f.transfer is not None and f.transfer.kind == kind
               and f.transfer.dest[0] == t.get("broker"))
    return flow, None


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
