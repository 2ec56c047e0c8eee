"""The applying side of throttle protection: observe, decide (planners.protection), act, record.

One :class:`ProtectionService` per node; its :meth:`ProtectionService.job` runs on the leader every
``intervals.throttle_s`` (fixed delay) and :meth:`ProtectionService.on_alerts` runs an immediate
evaluation of the disks named by on-call alerts. Per pass and cluster:

1. observe the cluster through its :class:`ProtectionSource` (snapshot + transfers + lineage +
   capability); a failing or stale observation skips the cluster with a logged reason (never acts).
   In the service the source reads the round the collection job published (one observer per cluster,
   :mod:`controlplane.service.protection_source`); a scheduled pass evaluates each round once (a round
   it already evaluated only re-applies the levers of the replicated state), an alert evaluates at once.
   When a lineage port is wired (the audit analytics' latest lineage run in ClickHouse) and it has rows
   for the cluster, the topic -> client ids map comes from it; else from the observation (the live audit
   topic). Per-partition shares always come from the live audit topic. The source is recorded with
   every client-quota decision and in :meth:`ProtectionService.explain`;
2. plan with :func:`planners.protection.plan_throttles` (health hysteresis state is kept here, per disk);
3. for every decision: a *set/relax* is recorded first (``throttle.set`` by ``throttle-protection`` with
   the evidence) and then applied through the :class:`LeverActuator`; a *release* is removed from the
   cluster first and then cleared (``throttle.clear``), so a failed removal is retried next pass;
4. reconcile: every lever-kind throttle in the replicated state that this node has not applied yet
   (new leader after a failover, manual throttles from the API) is applied; levers this node applied
   that left the state are removed.

Clusters are evaluated side by side through a :class:`~controlplane.service.fanout.ClusterFanout` (a
per-cluster deadline, bounded concurrency; a cluster whose levers hang is that cluster's ``timeout``
status, never a late evaluation of another).

The source/actuator are ports: :class:`controlplane.service.protection_source.RoundProtectionSource` reads
the observer's rounds, :class:`kafkaio.throttle_writer.ThrottleWriter` sets the levers through the cluster's shared
client.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from controlplane.config import ProtectionConf
from controlplane.service.cluster_status import ClusterStatus
from controlplane.service.fanout import ClusterFanout
from controlplane.service.leased_lines import LineService, heal_floors
from controlplane.state.commands import meta
from controlplane.state.store import StateStore
from domain import ClusterSnapshot, DiskId, DiskKind, PartitionId
from domain.execution import ACTIVE_STATUSES
from domain.throttles import LEVER_KINDS, Lever, Owner, lever_owner
from planners.line_protection import WHO as LINE_WHO
from planners.protection import (
    DEFAULT_THRESHOLDS,
    WHO,
    ActiveThrottle,
    DiskHealth,
    HealthThresholds,
    Lineage,
    Observation,
    ProtectionConfig,
    ProtectionInput,
    ProtectionPlan,
    ThrottleDecision,
    parse_active,
    plan_throttles,
)

log = logging.getLogger(__name__)
HISTORY_SAMPLES = 30
MAX_ALERTS = 10_000


class ProtectionSource(Protocol):
    """Port: a fresh observation of one cluster (raises on failure)."""

    def observe(self) -> Observation:
        """Snapshot with measured disk health, per-partition rates and page-cache-miss estimates."""
        ...


class LeverActuator(Protocol):
    """Port: make a lever effective on the cluster, or remove it (both idempotent)."""

    def apply(self, lever: Lever) -> None:
        """Set ``lever.kind`` on ``lever.target`` to ``lever.rate`` bytes/s."""
        ...

    def remove(self, lever: Lever) -> None:
        """Remove the lever entirely (no throttle left behind)."""
        ...


@dataclass
class ClusterBinding:
    """How the throttle service reaches one cluster."""

    source: ProtectionSource
    actuator: LeverActuator


@dataclass
class AlertRecord:
    """One Alertmanager alert as last received (keyed by fingerprint)."""

    fingerprint: str
    cluster: str
    disk: DiskId
    status: str
    starts_at: str
    labels: dict[str, str]
    received_at: str


@dataclass
class Evaluation:
    """The last evaluation of a cluster (for the API and ``guardian throttle explain``)."""

    at: str
    trigger: str
    plan: ProtectionPlan | None
    applied: list[dict[str, Any]]
    skipped: str = ""
    lineage: dict[str, Any] = field(default_factory=dict)
    levers: str = ""
    """Which levers protection uses on the cluster, and why (its capability)."""


class ProtectionService:
    """Throttle protection for every bound cluster; thread-safe (one evaluation per cluster at a time; clusters
    are evaluated side by side, each within the fan-out's deadline)."""

    def __init__(self, store: StateStore, config: ProtectionConfig | None = None,
                 bind: Callable[[str, Mapping[str, Any]], ClusterBinding | None] | None = None,
                 max_snapshot_age_s: float = 120.0, clock: Callable[[], datetime] | None = None,
                 lineage: Callable[[str], Lineage | None] | None = None,
                 lines: LineService | None = None, status: ClusterStatus | None = None,
                 deadline_s: float = 10.0, workers: int = 8) -> None:
        self.store = store
        self.lines = lines
        """Leased-line accounting and protection (None: neither)."""
        self.lineage = lineage
        """Port: cluster -> topic-level client shares of the latest lineage run (None/empty: no rows)."""
        self.config = config or ProtectionConfig()
        self._bind = bind
        self.bindings: dict[str, ClusterBinding] = {}
        self.max_snapshot_age_s = max_snapshot_age_s
        self.clock = clock or (lambda: datetime.now(UTC))
        self.health: dict[str, dict[DiskId, DiskHealth]] = defaultdict(dict)
        self.history: dict[str, dict[PartitionId, deque[float]]] = defaultdict(dict)
        self.quiet: dict[str, dict[str, int]] = defaultdict(dict)
        """Per cluster and lever, the consecutive evaluations in which its throttled flow was quiet."""
        self.alerts: dict[str, AlertRecord] = {}
        self.applied: dict[str, dict[str, tuple[str, dict[str, Any], float]]] = defaultdict(dict)
        self.last: dict[str, Evaluation] = {}
        self.evaluated_round: dict[str, int] = {}
        """Per cluster, the published round the last evaluation used."""
        self.runs = 0
        self._lock = threading.RLock()
        """Guards the alerts and the per-cluster locks; an evaluation holds its cluster's lock only."""
        self._locks: dict[str, threading.RLock] = {}
        self.status = status or ClusterStatus()
        self.fanout = ClusterFanout("throttle", self.status, deadline_s=deadline_s, workers=workers,
                                    suspect_workers=max(1, workers // 2))

    # ------------------------------------------------------------------ wiring
    def bind(self, cluster: str, binding: ClusterBinding) -> None:
        """Use ``binding`` for ``cluster`` (tests, bootstrap)."""
        with self._lock:
            self.bindings[cluster] = binding

    def _binding(self, cluster: str, record: Mapping[str, Any]) -> ClusterBinding | None:
        binding = self.bindings.get(cluster)
        if binding is None and self._bind is not None:
            try:
                binding = self._bind(cluster, record)
            except Exception as exc:  # a cluster we cannot reach is skipped, never crashes the loop
                log.warning("throttle: cannot bind cluster %s: %s", cluster, exc)
                return None
            if binding is not None:
                self.bindings[cluster] = binding
        return binding

    # ------------------------------------------------------------------ the loop
    def job(self, _ctx: object = None) -> list[dict[str, Any]]:
        """One scheduled pass over every registered cluster (the scheduler's ``Job.run``): each cluster through
        the loop's fan-out (its own deadline; one slow cluster never delays another's evaluation)."""
        clusters = self.store.read(lambda s: {n: dict(c) for n, c in s["clusters"].items()})
        self.fanout.forget(set(clusters))
        done = self.fanout.run({name: partial(self.evaluate, name, "interval", None, record)
                                for name, record in clusters.items()})
        self.runs += 1
        return [{"cluster": name, **done[name]} for name in sorted(done)]

    def _cluster_lock(self, cluster: str) -> threading.RLock:
        with self._lock:
            lock = self._locks.get(cluster)
            if lock is None:
                lock = self._locks[cluster] = threading.RLock()
            return lock

    def evaluate(self, cluster: str, trigger: str = "interval", only: set[DiskId] | None = None,
                 record: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Observe, plan, act and record for one cluster; returns what was done (never raises)."""
        with self._cluster_lock(cluster):
            at = self.clock().isoformat()
            if record is None:
                record = self.store.read(lambda s: dict(s["clusters"].get(cluster) or {}))
            if not record:
                return self._skip(cluster, at, trigger, f"unknown cluster {cluster!r}")
            binding = self._binding(cluster, record)
            if binding is None:
                return self._skip(cluster, at, trigger, "no metrics source bound to the cluster")
            try:
                obs = binding.source.observe()
            except Exception as exc:
                return self._skip(cluster, at, trigger, f"observation failed: {exc}")
            if obs.round_seq is not None:
                if trigger == "interval" and self.evaluated_round.get(cluster) == obs.round_seq:
                    self._reconcile(cluster, binding)  # nothing new observed: keep the levers as recorded
                    return {"trigger": trigger, "skipped": "no new collection round since the last evaluation",
                            "decisions": []}
                self.evaluated_round[cluster] = obs.round_seq
            age = (self.clock() - obs.snapshot.taken_at).total_seconds()
            if age > self.max_snapshot_age_s:
                return self._skip(cluster, at, trigger, f"snapshot is {age:.0f} s old; not acting on it")
            active = parse_active(self.store.read(lambda s: dict(s["throttles"].get(cluster, {}))))
            with self._lock:
                alert_disks = frozenset(a.disk for a in self.alerts.values()
                                        if a.cluster == cluster and a.status == "firing")
            lineage, lineage_info = self._lineage_for(cluster, obs.lineage)
            inp = ProtectionInput(transfers=obs.transfers, lineage=lineage,
                                expected_bytes_in=self._expected(cluster), partition_throttle=obs.partition_throttle,
                                active=active, alerts=alert_disks, fail_slow=fail_slow_disks(self.store, cluster),
                                quiet=dict(self.quiet[cluster]))
            plan = plan_throttles(obs.snapshot, inp, self.health[cluster], self.config, only)
            self.health[cluster] = dict(plan.health)
            self.quiet[cluster] = {k: self.quiet[cluster].get(k, 0) + 1 if f < self.config.min_abnormal_bytes_per_s
                                   else 0 for k, f in plan.lever_flows.items()}
            self._note_spared(cluster, plan)
            applied = []
            for decision in plan.decisions:
                done = self._act(cluster, binding, decision)
                if done is not None:
                    applied.append(done)
            if only is None:
                applied += self._lines(cluster, binding, obs, active, plan, at)
            self._reconcile(cluster, binding)
            self._learn(cluster, obs.snapshot, plan)
            self.last[cluster] = Evaluation(at, trigger, plan, applied, lineage=lineage_info,
                                            levers=levers_of(obs.partition_throttle))
            unhealthy = sorted(f"{d[0]}:{d[1]}" for d, h in plan.health.items() if h.unhealthy)
            return {"trigger": trigger, "unhealthy": unhealthy, "decisions": applied, "lineage": lineage_info}

    def _lines(self, cluster: str, binding: ClusterBinding, obs: Observation, active: tuple[ActiveThrottle, ...],
               plan: ProtectionPlan, at: str) -> list[dict[str, Any]]:
        """Leased-line accounting and protection of the round; a line decision on a lever the disk protection
        set tighter this pass is dropped (the tightest wins)."""
        if self.lines is None:
            return []
        try:
            floors = self.store.read(lambda s: heal_floors(s, cluster))
            line_plan = self.lines.evaluate(cluster, at, obs.snapshot, obs.transfers, obs.audit_flows, active, floors)
        except Exception as exc:  # accounting must never stop the disk protection
            log.warning("throttle %s: leased-line evaluation failed: %s", cluster, exc)
            return []
        disk = {d.key: d for d in plan.decisions}
        out = []
        for d in line_plan.decisions:
            other = disk.get(d.key)
            if other is not None and other.action == "set" and other.rate_bytes_per_s <= d.rate_bytes_per_s:
                continue
            done = self._act(cluster, binding, d, who=LINE_WHO)
            if done is not None:
                out.append(done)
        return out

    def _note_spared(self, cluster: str, plan: ProtectionPlan) -> None:
        """Once per fail-slow anomaly, when its disk crossed its thresholds and protection throttled nobody for
        it, write why into the anomaly's history (and so the action log)."""
        spared = [r for r in plan.reports if r.health.above and r.health.reason.startswith("skipped: fail-slow")]
        if not spared:
            return

        def open_slow(s: Mapping[str, Any]) -> dict[DiskId, tuple[int, bool]]:
            return {(int(a["subject"]["broker"]), str(a["subject"]["log_dir"])):
                    (int(a["id"]), any(h.get("by") == WHO and h.get("note") for h in a["history"]))
                    for a in (s.get("anomalies") or {}).values()
                    if a["cluster"] == cluster and a["kind"] == "disk-fail-slow"
                    and a["status"] in ("detected", "confirmed", "fixing")}
        anomalies = self.store.read(open_slow)
        for r in spared:
            found = anomalies.get(r.disk)
            if found is None or found[1]:
                continue
            why = (f"throttle protection spared the clients of {r.disk[0]}:{r.disk[1]} (util {r.util}, await "
                   f"{r.await_ms} ms over its thresholds for {r.health.above} sample(s)): {r.health.reason}")
            try:
                self.store.propose({"type": "anomaly.note", "meta": meta(WHO, why), "anomaly_id": found[0],
                                    "reason": why[:2000]})
            except Exception as exc:  # a note is never worth a failed evaluation
                log.warning("throttle %s: note on anomaly %s failed: %s", cluster, found[0], exc)

    def _lineage_for(self, cluster: str, observed: Lineage) -> tuple[Lineage, dict[str, Any]]:
        """The lineage the planner uses and a description of where it came from (for explain)."""
        modelled: Lineage | None = None
        error = ""
        if self.lineage is not None:
            try:
                modelled = self.lineage(cluster)
            except Exception as exc:  # analytics unavailable: fall back, never stop protecting the disks
                log.warning("throttle %s: lineage from analytics failed, using the audit topic: %s", cluster, exc)
                error = str(exc)
        info: dict[str, Any] = {"partition_shares": "the audit topic",
                                "partitions_with_shares": len(observed.fetch) + len(observed.produce)}
        if modelled is not None and (modelled.topic_consumers or modelled.topic_producers):
            lineage = replace(observed, topic_consumers=modelled.topic_consumers,
                              topic_producers=modelled.topic_producers, topic_source=modelled.topic_source)
            fallback = ""
        else:
            lineage = observed
            fallback = error or ("no lineage port wired" if self.lineage is None
                                 else "no lineage run yet" if modelled is None
                                 else "the latest lineage run has no rows for the cluster")
        info.update({"topic_clients": lineage.topic_source,
                     "topics": len(set(lineage.topic_consumers) | set(lineage.topic_producers))})
        if lineage.assignments or lineage.unassigned:
            info["member_assignments"] = {f"{t}-{p}": sorted({f"{a.group}/{a.client_id}" for a in rows})
                                          for (t, p), rows in sorted(lineage.assignments.items())}
        if lineage.unassigned:
            info["unassigned"] = {f"{t}-{p}": list(why) for (t, p), why in sorted(lineage.unassigned.items())}
        if fallback:
            info["fallback_reason"] = fallback
        return lineage, info

    def _skip(self, cluster: str, at: str, trigger: str, why: str) -> dict[str, Any]:
        before = self.last.get(cluster)
        if before is None or before.skipped != why:  # said once per reason, not every pass
            log.info("throttle %s: skipped: %s", cluster, why)
        self.last[cluster] = Evaluation(at, trigger, None, [], skipped=why)
        return {"trigger": trigger, "skipped": why, "decisions": []}

    def _executor_owns(self, cluster: str, kind: str) -> bool:
        """True when the executor writes levers of ``kind`` now (the kernel's ownership rule,
        :func:`~domain.throttles.lever_owner`): a protection lever of that kind is then only recorded, as a
        ceiling for the executor's migration rate."""
        if lever_owner(kind, execution_running=True) is not Owner.EXECUTOR:
            return False  # no need to read the state: this kind is never the executor's
        running = bool(self.store.read(lambda s: any(e["cluster"] == cluster and e["status"] in ACTIVE_STATUSES
                                                     for e in s["executions"].values())))
        return lever_owner(kind, running) is Owner.EXECUTOR

    def _act(self, cluster: str, binding: ClusterBinding, d: ThrottleDecision,
             who: str = WHO) -> dict[str, Any] | None:
        summary = {"action": d.action, "key": d.key, "kind": d.kind, "target": dict(d.target),
                   "rate_bytes_per_s": d.rate_bytes_per_s, "why": d.why}
        deferred = self._executor_owns(cluster, d.kind)
        try:
            if d.action == "release":
                if not deferred:  # else the reconcile removes it once the execution is over
                    binding.actuator.remove(Lever.of(d.kind, d.target))
                    self.applied[cluster].pop(d.key, None)
                self.store.propose({"type": "throttle.clear", "meta": meta(who, d.why), "cluster": cluster,
                                    "key": d.key})
            else:
                evidence = _jsonable(dict(d.evidence))
                if deferred:
                    evidence["enforced_by"] = "executor (ceiling for its migration rate while it runs)"
                self.store.propose({"type": "throttle.set", "meta": meta(who, d.why), "cluster": cluster,
                                    "key": d.key, "kind": d.kind, "target": _jsonable(dict(d.target)),
                                    "rate_bytes_per_s": d.rate_bytes_per_s, "evidence": evidence})
                if not deferred:
                    binding.actuator.apply(Lever.of(d.kind, d.target, d.rate_bytes_per_s))
                    self.applied[cluster][d.key] = (d.kind, dict(d.target), d.rate_bytes_per_s)
                summary["deferred_to_executor"] = deferred
        except Exception as exc:
            log.warning("throttle %s: %s %s failed: %s", cluster, d.action, d.key, exc)
            return {**summary, "error": str(exc)}
        log.info("throttle %s: %s %s at %.0f B/s: %s", cluster, d.action, d.key, d.rate_bytes_per_s, d.why)
        return summary

    def _reconcile(self, cluster: str, binding: ClusterBinding) -> None:
        wanted = self.store.read(lambda s: {k: (t["kind"], dict(t["target"]), float(t["rate_bytes_per_s"]))
                                            for k, t in s["throttles"].get(cluster, {}).items()
                                            if t.get("kind") in LEVER_KINDS})
        mine = self.applied[cluster]
        for key, (kind, target, rate) in sorted(wanted.items()):
            if mine.get(key) == (kind, target, rate) or self._executor_owns(cluster, kind):
                continue
            try:
                binding.actuator.apply(Lever.of(kind, target, rate))
                mine[key] = (kind, target, rate)
            except Exception as exc:
                log.warning("throttle %s: re-applying %s failed: %s", cluster, key, exc)
        for key in sorted(set(mine) - set(wanted)):
            kind, target, _ = mine[key]
            if self._executor_owns(cluster, kind):
                continue
            try:
                binding.actuator.remove(Lever.of(kind, target))
                del mine[key]
            except Exception as exc:
                log.warning("throttle %s: removing %s failed: %s", cluster, key, exc)

    # ------------------------------------------------------------------ history (expected write rates)
    def _expected(self, cluster: str) -> dict[PartitionId, float]:
        out = {}
        for pid, window in self.history[cluster].items():
            if len(window) >= 3:
                values = sorted(window)
                out[pid] = values[len(values) // 2]
        return out

    def _learn(self, cluster: str, snapshot: ClusterSnapshot, plan: ProtectionPlan) -> None:
        """Record each partition's write rate, except while its leader's disk is unhealthy (an anomaly
        must not become its own expectation)."""
        hist = self.history[cluster]
        unhealthy = {d for d, h in plan.health.items() if h.unhealthy}
        for p in snapshot.iter_partitions():
            if p.leader is None or not math.isfinite(p.bytes_in_per_s):
                continue
            try:
                leader_dir = p.log_dirs[p.replicas.index(p.leader)]
            except (ValueError, IndexError):
                continue
            if (p.leader, leader_dir) in unhealthy:
                continue
            hist.setdefault(p.id, deque(maxlen=HISTORY_SAMPLES)).append(p.bytes_in_per_s)

    # ------------------------------------------------------------------ alerts
    def on_alerts(self, alerts: list[AlertRecord]) -> dict[str, Any]:
        """Record alerts (idempotent per fingerprint+status) and evaluate the disks of new firing ones now."""
        with self._lock:
            new, dup, resolved = [], 0, 0
            for a in alerts:
                old = self.alerts.get(a.fingerprint)
                if old is not None and old.status == a.status and old.starts_at == a.starts_at:
                    dup += 1
                    continue
                self.alerts[a.fingerprint] = a
                if len(self.alerts) > MAX_ALERTS:  # forget the oldest resolved alerts first
                    resolved_keys = [k for k, v in self.alerts.items() if v.status != "firing"]
                    for k in (resolved_keys or list(self.alerts))[: len(self.alerts) - MAX_ALERTS]:
                        del self.alerts[k]
                if a.status == "firing":
                    new.append(a)
                else:
                    resolved += 1
            by_cluster: dict[str, set[DiskId]] = defaultdict(set)
            for a in new:
                by_cluster[a.cluster].add(a.disk)
        # evaluated outside the service-wide lock: each cluster under its own
        results = [{"cluster": c, **self.evaluate(c, trigger="alert", only=disks)}
                   for c, disks in sorted(by_cluster.items())]
        return {"accepted": len(alerts) - dup, "duplicates": dup, "firing": len(new), "resolved": resolved,
                "evaluations": results}

    # ------------------------------------------------------------------ explain
    def explain(self, cluster: str) -> dict[str, Any]:
        """The last evaluation of ``cluster``: health per disk, queue and decisions (JSON-able)."""
        with self._lock:
            ev = self.last.get(cluster)
            if ev is None:
                return {"cluster": cluster, "evaluated": False}
            out: dict[str, Any] = {"cluster": cluster, "evaluated": True, "at": ev.at, "trigger": ev.trigger,
                                   "skipped": ev.skipped, "applied": ev.applied, "lineage": ev.lineage,
                                   "levers": ev.levers, "disks": []}
            if ev.plan is not None:
                rated = [r for r in ev.plan.reports if r.util is not None]
                out["disks_evaluated"] = len(ev.plan.reports)
                out["unhealthy_disks"] = sum(1 for r in ev.plan.reports if r.health.unhealthy)
                if rated:
                    hot = max(rated, key=lambda r: (r.util or 0.0, r.disk))
                    out["hottest"] = {"broker": hot.disk[0], "path": hot.disk[1], "util": hot.util,
                                      "await_ms": hot.await_ms}
                for r in ev.plan.reports:
                    if not (r.health.unhealthy or r.queue or r.health.above or r.health.missing):
                        continue
                    out["disks"].append({
                        "broker": r.disk[0], "path": r.disk[1], "kind": r.kind, "unhealthy": r.health.unhealthy,
                        "reason": r.health.reason, "util": r.util, "await_ms": r.await_ms,
                        "predicted_util": r.predicted_util, "samples_above": r.health.above,
                        "missing_samples": r.health.missing,
                        "behaviours": {k: round(v, 1) for k, v in r.behaviours.items()},
                        "queue": [{"behaviour": e.flow.behaviour, "topic": e.flow.topic,
                                   "partition": e.flow.partition, "bytes_per_s": round(e.flow.bytes_per_s, 1),
                                   "why": e.why} for e in r.queue[:20]]})
            if self.lines is not None:
                out["leased_lines"] = self.lines.report(cluster)
            out["alerts"] = [{"fingerprint": a.fingerprint, "status": a.status, "disk": list(a.disk),
                              "received_at": a.received_at} for a in self.alerts.values() if a.cluster == cluster]
            return _jsonable(out)


def levers_of(partition_throttle: bool) -> str:
    """Which levers throttle protection uses on a cluster with (or without) the partition-level throttle, and why."""
    if partition_throttle:
        return ("partition-level throttles (topic configs guardian.partition.throttle.fetch/produce.bytes.per.second): "
                "the brokers report guardian.partition.throttle.enable=true")
    return ("client-id quotas (consumer_byte_rate / producer_byte_rate, AlterClientQuotas) of the clients of the hot "
            "partition — for a read, the consumer-group members assigned it (DescribeGroups), else the audit "
            "lineage: the cluster has no partition-level throttle (its brokers report no "
            "guardian.partition.throttle.enable, as stock Kafka)")


def fail_slow_disks(store: StateStore, cluster: str) -> dict[DiskId, str]:
    """Disks of ``cluster`` with an open ``disk-fail-slow`` anomaly in the replicated state (-> its summary)."""
    def read(s: Mapping[str, Any]) -> dict[DiskId, str]:
        return {(int(a["subject"]["broker"]), str(a["subject"]["log_dir"])): f"anomaly {a['id']}: {a['summary']}"
                for a in (s.get("anomalies") or {}).values()
                if a["cluster"] == cluster and a["kind"] == "disk-fail-slow"
                and a["status"] in ("detected", "confirmed", "fixing")}
    return store.read(read)


def throttle_config(conf: ProtectionConf) -> ProtectionConfig:
    """The planner's configuration from the service settings' ``[throttle]`` section."""
    thresholds = dict(DEFAULT_THRESHOLDS)
    for kind, th in conf.thresholds.items():
        thresholds[DiskKind(kind)] = HealthThresholds(th.util_high, th.util_low, th.await_high_ms, th.await_low_ms,
                                                      th.enter_samples, th.leave_samples)
    return ProtectionConfig(thresholds=thresholds, target_util=conf.target_util, write_tolerance=conf.write_tolerance,
                          min_rate_bytes_per_s=conf.min_rate_bytes_per_s,
                          isr_floor_bytes_per_s=conf.isr_floor_bytes_per_s, relax_factor=conf.relax_factor)


def _jsonable(value: Any) -> Any:
    """``value`` with tuples as lists and non-finite floats as None (the state rejects NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
