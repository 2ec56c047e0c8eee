"""Self-healing: the leader's loop that turns the observer's rounds into anomalies and, where a cluster opted
in, into fixes run by the existing planners and executor.

Goal: warn about every anomaly (:mod:`planners.anomalies`) and heal the fixable ones — a dead broker after its
grace period, a failed log dir, a fail-slow disk — exactly once, across leader changes, never during a mass
failure, inside a grace period or on a broker in maintenance.

Method: per cluster, each new published round (:mod:`controlplane.service.observation`) becomes a
:class:`~planners.anomalies.HealthRound` in a short history (the maintenance flags of the replicated state,
admin errors per broker from the round's coverage, copies in flight); the detectors run over it. Findings
are synchronised with the replicated anomalies (``anomaly.raise``: new, or promoted to ``confirmed``);
open anomalies no longer observed close as ``fixed`` (a broker that returned: its running fix is stopped).
Fixes, when ``cluster.self_healing`` is enabled: a plan from :mod:`planners.healing` checked by the one
invariant checker, proposed and approved as ``self-healing``, the anomaly moved ``confirmed -> fixing`` with
the plan id (the state refuses a second start: ``expect``), then the executor starts it. Each pass first
carries every ``fixing`` anomaly forward from the replicated state — approve/start a plan a previous leader
left, close the anomaly when its execution ends — so a new leader continues a fix and never starts it twice.
A plan the executor refuses (e.g. metadata that still named a broker just lost) expires at once and the
anomaly goes back to ``confirmed`` to be planned anew from the next round, at most ``MAX_RETRIES`` times
before it ends ``failed``.
A fail-slow disk loses its leadership at once; if it is still slow ``evacuate_slow_after_s`` after its slow
streak began (on the round clock: the simulator's where it exports one), its replicas move (same broker's
healthy dirs first); once that execution ends, the disk is planned again only from a round whose listing of
its broker's log dirs was read after the end (an evacuation already done would otherwise be planned twice).
A failed log dir's replicas are offline, so they are re-created on other brokers.

Guarantee: a mass failure (share of brokers, or a whole IDC) raises one alert and moves nothing; at most
``max_concurrent_fixes`` anomalies of a cluster are ``fixing`` at once (and the executor runs one execution
per cluster); a fix is started only on a usable round. Every action is in the action log and notified.
Each cluster is evaluated on its own through the loop's
:class:`~controlplane.service.fanout.ClusterFanout` (per-cluster deadline, bounded concurrency).
Cost: the detectors' (O(rounds x (disks + partitions))) per new round; one plan per fix started.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from controlplane.service.context import ServiceContext
from controlplane.service.fanout import ClusterFanout, loop_fanout
from controlplane.service.notify import Notifier
from controlplane.service.observation import LatestRound, Round
from controlplane.state.commands import OPEN_ANOMALY_STATES, meta
from domain import BrokerState, Plan, check_plan, plan_to_dict
from planners.anomalies import (
    BROKER_DEAD,
    DISK_FAIL_SLOW,
    FIXABLE,
    KINDS,
    LOG_DIR_OFFLINE,
    MASS_FAILURE,
    DetectorConfig,
    Finding,
    HealthRound,
    detect_all,
)
from planners.healing import plan_evacuate_disk, plan_leaders_off, plan_replace_broker
from planners.workspace import PlannerError

log = logging.getLogger(__name__)
WHO = "self-healing"
HISTORY = 120
MAX_RETRIES = 2
"""Plans of one anomaly the executor may refuse before the anomaly ends ``failed`` (each retry plans anew)."""
_BROKER_ERROR = re.compile(r"broker (\d+)$")


@dataclass(frozen=True)
class HealingSettings:
    """A cluster's ``self_healing`` record (defaults: off)."""

    enabled: bool = False
    grace_s: float = 300.0
    max_concurrent_fixes: int = 1
    mass_failure_share: float = 0.34
    evacuate_slow_after_s: float = 1800.0

    @classmethod
    def of(cls, record: Mapping[str, Any] | None) -> HealingSettings:
        """From the replicated record (missing keys take the defaults)."""
        r = dict(record or {})
        return cls(**{k: r[k] for k in ("enabled", "grace_s", "max_concurrent_fixes", "mass_failure_share",
                                         "evacuate_slow_after_s") if k in r})


def health_round(r: Round, maintenance: frozenset[int]) -> HealthRound:
    """What a published round says about health: its clock is the round's sample clock (the simulator's time
    where exported), else when this node observed it."""
    at = r.collected.sample_clock if r.collected.sample_clock is not None else r.observed_at.timestamp()
    unresponsive: dict[int, str] = {}
    for key, err in sorted(r.coverage.kafka_errors.items()):
        m = _BROKER_ERROR.search(key)
        if m:
            unresponsive.setdefault(int(m.group(1)), f"{key}: {err}")
    moving: dict[tuple[str, int], float] = {}
    for c in r.copies:
        moving[(c.topic, c.partition)] = moving.get((c.topic, c.partition), 0.0) + max(c.bytes_per_s, 0.0)
    cov = r.coverage
    offline_dirs = {int(b): frozenset(paths) for b, paths in cov.offline_log_dirs.items() if paths}
    offline_replicas: dict[int, set[tuple[str, int]]] = {}
    for name, brokers in cov.offline_replicas.items():
        topic, _, part = name.rpartition("-")
        for b in brokers:
            offline_replicas.setdefault(int(b), set()).add((topic, int(part)))
    return HealthRound(r.snapshot, at=float(at), maintenance=maintenance, offline_dirs=offline_dirs,
                       offline_replicas={b: frozenset(v) for b, v in offline_replicas.items()},
                       unresponsive=unresponsive, reassigning=moving)


class SelfHealingJob:
    """Scheduler job ``self_healing`` (see the module docstring)."""

    def __init__(self, rounds: LatestRound, notifier: Notifier | None = None,
                 detector: DetectorConfig | None = None) -> None:
        self.rounds = rounds
        self.notifier = notifier
        self.detector = detector or DetectorConfig()
        self.history: dict[str, deque[HealthRound]] = {}
        self.seen: dict[str, int] = {}
        self.last: dict[str, dict[str, Any]] = {}
        self.began: dict[str, float] = {}
        """Per cluster: when (wall clock) the collection of the round in hand began."""
        self.listed: dict[str, dict[int, float]] = {}
        """Per cluster: broker -> when (wall clock) the log-dir listing in the round in hand was read (a broker
        without one: :attr:`began`)."""
        self.fanout: ClusterFanout | None = None
        """Each cluster's detection and fixes on its own (a fix starts an execution: the cluster's lease)."""
        self.counters: dict[str, Counter[str]] = {}
        """Per cluster: ``rounds`` evaluated and, per kind, the rounds it was found in (``confirmed:<kind>``
        when confirmed)."""

    def __call__(self, ctx: ServiceContext) -> list[dict[str, Any]]:
        if self.notifier is None:
            self.notifier = Notifier([n.model_dump() for n in ctx.settings.notifications],
                                     dead_letter=ctx.settings.data_dir / "notifications-dead.jsonl")
        clusters, settings, maintenance = ctx.store.read(lambda s: (
            sorted(s["clusters"]), {n: dict(v) for n, v in (s.get("self_healing") or {}).items()},
            {n: frozenset(int(b) for b in m) for n, m in s["maintenance"].items()}))
        for gone in set(self.history) - set(clusters):
            self.history.pop(gone, None)
            self.seen.pop(gone, None)
        if self.fanout is None:
            self.fanout = loop_fanout("self_healing", ctx.settings.intervals, ctx.cluster_status,
                                      count_error=ctx.metrics.loop_errors.labels("self_healing").inc)
        self.fanout.forget(set(clusters))
        done = self.fanout.run({name: partial(self.run_cluster, ctx, name, HealingSettings.of(settings.get(name)),
                                              maintenance.get(name, frozenset())) for name in clusters})
        return [{"cluster": name, **done[name]} for name in clusters if name in done]

    # ------------------------------------------------------------------ one cluster
    def run_cluster(self, ctx: ServiceContext, name: str, settings: HealingSettings,
                    maintenance: frozenset[int]) -> dict[str, Any]:
        """Detect on a new round, sync the anomalies, carry fixes forward, start new ones."""
        r = self.rounds.latest(name)
        if r is None or self.seen.get(name) == r.seq:
            return {"action": "skip", "why": "no new round"}
        self.seen[name] = r.seq
        self.began[name] = r.snapshot.taken_at.timestamp() - float(r.collected.round_seconds.get("total", 0.0))
        self.listed[name] = r.collected.log_dirs_read_at
        hist = self.history.setdefault(name, deque(maxlen=HISTORY))
        hist.append(health_round(r, maintenance))
        cfg = replace(self.detector, grace_s=settings.grace_s, mass_failure_share=settings.mass_failure_share)
        findings = detect_all(list(hist), cfg)
        tally = self.counters.setdefault(name, Counter())
        tally["rounds"] += 1
        tally.update({f.kind for f in findings})
        tally.update({f"confirmed:{f.kind}" for f in findings if f.confirmed})
        open_ = self._sync(ctx, name, findings)
        counts: dict[str, int] = {k: 0 for k in KINDS}
        for rec in open_.values():
            counts[rec["kind"]] = counts.get(rec["kind"], 0) + 1
        for kind, n in counts.items():
            ctx.metrics.open_anomalies.labels(name, kind).set(n)
        self._carry(ctx, name, open_, findings, settings, hist[-1])
        decision = self._start(ctx, name, findings, settings, hist[-1])
        self.last[name] = {"round": r.seq, "at": hist[-1].at, "findings": [f.key for f in findings], **decision}
        return decision

    def _open(self, ctx: ServiceContext, name: str) -> dict[str, dict[str, Any]]:
        return ctx.store.read(lambda s: {a["key"]: dict(a) for a in (s.get("anomalies") or {}).values()
                                         if a["cluster"] == name and a["status"] in OPEN_ANOMALY_STATES})

    def _sync(self, ctx: ServiceContext, name: str, findings: list[Finding]) -> dict[str, dict[str, Any]]:
        open_ = self._open(ctx, name)
        for f in findings:
            rec = open_.get(f.key)
            if rec is not None and not (f.confirmed and rec["status"] == "detected"):
                continue
            res = ctx.store.propose({"type": "anomaly.raise", "meta": meta(WHO, f.summary), "cluster": name,
                                     "key": f.key, "kind": f.kind, "subject": dict(f.subject),
                                     "evidence": dict(f.evidence), "summary": f.summary, "confirmed": f.confirmed})
            self._notify(name, "anomaly." + res["status"], f.kind, res["anomaly_id"], f.summary, dict(f.evidence))
        now = {f.key for f in findings}
        for key, rec in self._open(ctx, name).items():
            if key in now or rec["status"] == "fixing":
                continue  # a fixing anomaly is closed by _carry (its execution decides)
            self._close(ctx, name, rec, "fixed", "no longer observed")
        return self._open(ctx, name)

    def _close(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], status: str, why: str) -> None:
        ctx.store.propose({"type": "anomaly.update", "meta": meta(WHO, why), "anomaly_id": rec["id"],
                           "status": status, "reason": why})
        self._notify(name, "anomaly." + status, rec["kind"], rec["id"], f"{rec['summary']} -> {status}: {why}", {})

    # ------------------------------------------------------------------ fixes in flight
    def _carry(self, ctx: ServiceContext, name: str, open_: Mapping[str, dict[str, Any]], findings: list[Finding],
               settings: HealingSettings, now: HealthRound) -> None:
        observed = {f.key: f for f in findings}
        plans, executions = ctx.store.read(lambda s: ({k: dict(v) for k, v in s["plans"].items()},
                                                      {k: dict(v) for k, v in s["executions"].items()}))
        for key, rec in open_.items():
            if rec["status"] != "fixing" or rec.get("plan_id") is None:
                continue
            plan = plans.get(str(rec["plan_id"]), {})
            ex = executions.get(str(plan.get("execution_id"))) if plan.get("execution_id") else None
            back = {b.id for b in now.snapshot.brokers if b.state is not BrokerState.DEAD}
            if rec["kind"] == BROKER_DEAD and key not in observed and int(rec["subject"]["broker"]) in back:
                if ex is not None and ex["status"] in ("running", "stopping") and ctx.executor is not None:
                    ctx.store.propose({"type": "execution.stop", "meta": meta(WHO, "the broker returned"),
                                       "execution_id": ex["id"], "rollback": False})
                self._close(ctx, name, rec, "fixed", "the broker returned: its replicas are back; fix cancelled")
                continue
            if plan.get("status") in ("proposed", "approved"):
                self._run(ctx, name, rec, int(rec["plan_id"]))  # a previous leader left it here
                continue
            if ex is None or ex["status"] in ("running", "stopping"):
                continue
            if ex["status"] != "completed":
                self._close(ctx, name, rec, "failed", f"execution {ex['id']} {ex['status']}: {ex.get('reason', '')}")
                continue
            if rec["kind"] == DISK_FAIL_SLOW and key in observed:
                ended = datetime.fromisoformat(ex["finished_at"]).timestamp() if ex.get("finished_at") else 0.0
                listed = self.listed.get(name, {}).get(int(rec["subject"]["broker"]), self.began.get(name, 0.0))
                if listed >= ended:  # dirs listed before the end would re-plan done work (rotating listings)
                    self._maybe_evacuate(ctx, name, rec, settings, now)
                continue
            self._close(ctx, name, rec, "fixed", f"execution {ex['id']} completed")

    def _maybe_evacuate(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], settings: HealingSettings,
                        now: HealthRound) -> None:
        since = (rec.get("evidence") or {}).get("slow_since")
        if isinstance(since, int | float):  # the round clock (the simulator's where it exports one)
            slow_for = now.at - float(since)
        else:
            began = next((h["at"] for h in rec["history"] if h["status"] == "fixing"), rec["detected_at"])
            slow_for = (datetime.now(UTC) - datetime.fromisoformat(began)).total_seconds()
        disk = (int(rec["subject"]["broker"]), str(rec["subject"]["log_dir"]))
        if slow_for < settings.evacuate_slow_after_s:
            return
        plan = plan_evacuate_disk(now.snapshot, disk)
        if not plan.moves:
            self._close(ctx, name, rec, "fixed", "leadership moved off; nothing left to evacuate")
            return
        self._propose_fix(ctx, name, rec, plan, f"disk {disk[1]} of broker {disk[0]} still slow after "
                                                f"{slow_for:.0f} s: evacuate it", expect="fixing")

    # ------------------------------------------------------------------ new fixes
    def _start(self, ctx: ServiceContext, name: str, findings: list[Finding], settings: HealingSettings,
               now: HealthRound) -> dict[str, Any]:
        if any(f.kind == MASS_FAILURE for f in findings):
            return {"action": "alert", "why": "mass failure: alert only, no healing"}
        if not settings.enabled:
            return {"action": "skip", "why": "self-healing is off for this cluster"}
        if ctx.executor is None:
            return {"action": "skip", "why": "no executor on this node"}
        open_ = self._open(ctx, name)
        fixing = [a for a in open_.values() if a["status"] == "fixing"]
        if len(fixing) >= settings.max_concurrent_fixes:
            return {"action": "wait", "why": f"{len(fixing)} fix(es) running (cap {settings.max_concurrent_fixes})"}
        busy = ctx.store.read(lambda s: [e["id"] for e in s["executions"].values()
                                         if e["cluster"] == name and e["status"] in ("running", "stopping")])
        if busy:
            return {"action": "wait", "why": f"execution {busy[0]} runs on the cluster"}
        order = {BROKER_DEAD: 0, LOG_DIR_OFFLINE: 1, DISK_FAIL_SLOW: 2}
        for f in sorted(findings, key=lambda f: (order.get(f.kind, 9), f.key)):
            rec = open_.get(f.key)
            if f.kind not in FIXABLE or not f.confirmed or rec is None or rec["status"] != "confirmed":
                continue
            plan, why = self._plan_for(f, now)
            if plan is None:
                continue
            problems = check_plan(now.snapshot, plan)
            if problems:
                self._close(ctx, name, rec, "failed", "no valid plan: " + "; ".join(str(p) for p in problems[:3]))
                continue
            if not plan.moves and not plan.leaders:
                self._close(ctx, name, rec, "fixed", "nothing to move: " + "; ".join(plan.notes))
                continue
            self._propose_fix(ctx, name, rec, plan, why, expect="confirmed")
            return {"action": "fix", "why": why, "anomaly_id": rec["id"]}
        return {"action": "none", "why": "nothing to fix"}

    def _plan_for(self, f: Finding, now: HealthRound) -> tuple[Plan | None, str]:
        alive = {b.id for b in now.snapshot.brokers if b.state is BrokerState.ALIVE}
        try:
            if f.kind == BROKER_DEAD:
                return plan_replace_broker(now.snapshot, [int(f.subject["broker"])]), \
                    f"re-create the replicas of dead broker {f.subject['broker']}: {f.summary}"
            disk = (int(f.subject["broker"]), str(f.subject["log_dir"]))
            if f.kind == LOG_DIR_OFFLINE:  # offline replicas: only other brokers can take them (planners.healing)
                return plan_evacuate_disk(now.snapshot, disk, same_broker=False), \
                    f"re-create the replicas of failed log dir elsewhere: {f.summary}"
            if f.kind == DISK_FAIL_SLOW and disk[0] in alive:
                return plan_leaders_off(now.snapshot, [disk]), f"move leadership off fail-slow disk: {f.summary}"
        except PlannerError as exc:
            return None, str(exc)
        return None, ""

    def _propose_fix(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], plan: Plan, why: str,
                     expect: str) -> None:
        """Write-ahead: the plan, then the anomaly's ``fixing`` with the plan id (refused if another leader
        already started it), then approval and the execution."""
        plan_id = ctx.store.propose({"type": "plan.propose", "meta": meta(WHO, why), "cluster": name,
                                     "kind": plan.kind, "plan": plan_to_dict(plan)})["plan_id"]
        try:
            ctx.store.propose({"type": "anomaly.update", "meta": meta(WHO, why), "anomaly_id": rec["id"],
                               "status": "fixing", "expect": expect, "plan_id": plan_id, "reason": why})
        except Exception as exc:
            ctx.store.propose({"type": "plan.expire", "meta": meta(WHO, f"fix not started: {exc}"), "plan_id": plan_id})
            return
        self._notify(name, "fix.started", rec["kind"], rec["id"], why,
                     {"plan_id": plan_id, "moves": len(plan.moves), "leaders": len(plan.leaders)})
        self._run(ctx, name, rec, plan_id)

    def _run(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], plan_id: int) -> None:
        status = ctx.store.read(lambda s: s["plans"][str(plan_id)]["status"])
        if status == "proposed":
            ctx.store.propose({"type": "plan.approve", "meta": meta(WHO, "self-healing policy"), "plan_id": plan_id})
        try:
            execution_id = ctx.executor.start_approved(plan_id, why=f"{WHO}: anomaly {rec['id']}")
        except Exception as exc:  # refused by the executor: the plan must not stay approved
            ctx.store.propose({"type": "plan.expire", "meta": meta(WHO, f"executor refused: {exc}"),
                               "plan_id": plan_id})
            why = f"executor refused plan {plan_id}: {exc}"
            tries = sum(1 for h in rec.get("history", []) if str(h.get("reason", "")).startswith("retry: "))
            if tries < MAX_RETRIES:  # e.g. metadata that still named a broker just lost: plan again next round
                ctx.store.propose({"type": "anomaly.update", "meta": meta(WHO, why), "anomaly_id": rec["id"],
                                   "status": "confirmed", "reason": f"retry: {why}"[:2000]})
                return
            self._close(ctx, name, rec, "failed", why)
            return
        ctx.store.propose({"type": "anomaly.update", "meta": meta(WHO, "execution started"), "anomaly_id": rec["id"],
                           "status": "fixing", "execution_id": execution_id})

    def _notify(self, cluster: str, event: str, kind: str, anomaly_id: int, text: str,
                evidence: Mapping[str, Any]) -> None:
        if self.notifier is not None:
            self.notifier.send({"event": event, "cluster": cluster, "kind": kind, "anomaly_id": anomaly_id,
                                "text": text, "evidence": dict(evidence)})
