"""Steps 4 and 5 of throttle protection: which levers to set, relax or release, and by how much.

Goal: bring every unhealthy disk under ``target_util`` by cutting the abnormal queue from the top, each entry only
as much as needed, and give the cut back once its cause is gone. Method: :func:`plan_throttles` walks each
unhealthy disk's queue (:mod:`.queue`) choosing a lever per behaviour and capability (partition throttle, client
quota, follower / migration / intra-broker rate: :class:`NamedLever`) and relaxes the levers of healthy disks
(see :mod:`planners.protection` for the rules). Guarantee: in-sync replication is never throttled, a catch-up
throttle keeps ``max(isr_floor, bytes_in x (1 + margin))``, a decision is deterministic for its input.
Cost: O(replicas + transfers) to index, O(q log q) per unhealthy disk with q flows.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from domain.model import ClusterSnapshot, DiskId, Partition, PartitionId
from domain.throttles import (
    CONSUMER_QUOTA,
    FOLLOWER,
    INTRA_BROKER,
    MIGRATION,
    PARTITION_FETCH,
    PARTITION_PRODUCE,
    PRODUCER_QUOTA,
)
from planners.protection.config import WHO, HealthThresholds, ProtectionConfig
from planners.protection.flows import BEHAVIOURS, DiskFlow, disk_flows
from planners.protection.health import DiskHealth, finite, step_health
from planners.protection.inputs import ActiveThrottle, ClientShare, Lineage, ProtectionInput
from planners.protection.queue import QueueEntry, abnormal_queue

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
            util = _util_now(finite(disk.util), sum(per_behaviour.values()), disk.max_bytes_per_s)
            queue: list[QueueEntry] = []
            predicted = util
            if state.unhealthy:
                queue = abnormal_queue(dflows, inp.expected_bytes_in, config)
                predicted = _throttle_disk(did, disk.max_bytes_per_s, util, state, queue, snapshot, inp, parts,
                                           led, active, decisions, config, th)
            elif state.below > 0 or (util is not None and util < th.util_low):
                _relax_disk(did, disk.max_bytes_per_s, util, dflows, parts, active, decisions, config, th, state,
                            inp.quiet, lever_flows)
            reports.append(DiskReport(did, disk.kind.value, state, util, finite(disk.await_ms), predicted,
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
