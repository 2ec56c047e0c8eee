"""Self-healing: the leader's loop that turns the observer's rounds into anomalies and, where a cluster opted
in, into fixes run by the existing planners and executor.

Goal: warn about every anomaly (:mod:`planners.anomalies`) and heal the fixable ones — a dead broker after its
grace period, a failed log dir, a fail-slow disk — exactly once, across leader changes, never during a mass
failure, inside a grace period or on a broker in maintenance.

Method: per cluster, each new published round (:mod:`controlplane.service.observation`) becomes a
:class:`~planners.anomalies.HealthRound` in a short history (the maintenance flags of the replicated state,
admin errors per broker from the round's coverage, copies in flight, the replicas moves add); Guardian's own
copies are attributed to their disks over the round's whole measurement window (the previous round's copies in
flight, and the executions' tasks in flight or just completed), so the fail-slow detector does not judge a disk
busy with them. The detectors run over the history. Findings are synchronised with the replicated anomalies
(``anomaly.raise``: new, or promoted to ``confirmed``); an open anomaly no longer observed closes ``fixed`` when a
fix of it ran, else ``cleared`` (the cause went away by itself); the residue of a fixed fault (a dead dir emptied)
opens no second anomaly. Fixes, when ``cluster.self_healing`` is enabled: a plan from :mod:`planners.healing`,
planned around every dead log dir (none is a target; a replica kept on one gets Kafka's ``"any"`` dir), checked by
the one invariant checker, proposed and approved as ``self-healing``, the anomaly moved ``confirmed -> fixing``
with the plan id (the state refuses a second start: ``expect``), then the executor starts it. A plan that copies
data carries its heal budget (:func:`planners.healing.heal_budget`: the allowed heal rate, the executor's and
the leased-line protection's floor for its copies, and the bottleneck when a line or a disk sets the pace,
named in the anomaly's reason) and runs ``urp_first``. Each pass first carries every ``fixing`` anomaly forward
from the replicated state — approve/start a plan a previous leader left, judge the anomaly when its execution
ends — so a new leader continues a fix and never starts it twice. ``fixed`` only once a round collected after
the end no longer shows the fault. A refused plan (it expires at once), an execution that did not complete, a
fault that outlived its fix or a heal that cannot be planned sends the anomaly back to ``confirmed`` with the
reason and the next try, backed off (:data:`BACKOFF_S`): one anomaly per fault, never a refused-plan loop.
A fail-slow disk loses its leadership at once; if it is still slow ``evacuate_slow_after_s`` after its slow
streak began (on the round clock: the simulator's where it exports one), its replicas move (same broker's
healthy dirs first); it is ``fixed`` once it holds none (planned again only from a round whose listing of its
broker's log dirs was read after the evacuation's end), ``cleared`` if judged healthy first; it stays open while
slow. A failed log dir's replicas are offline, so they are re-created on other brokers.
Metrics: ``guardian_under_replicated_partitions`` and ``guardian_under_replicated_seconds`` per cluster.

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
from domain import BrokerState, ClusterSnapshot, Plan, check_plan, plan_to_dict
from domain.execution import ACTIVE_STATUSES, ExecutionStatus
from domain.plan_record import PlanStatus
from planners.anomalies import (
    BROKER_DEAD,
    DISK_FAIL_SLOW,
    FIXABLE,
    KINDS,
    LOG_DIR_OFFLINE,
    MASS_FAILURE,
    UNDER_REPLICATED,
    DetectorConfig,
    Finding,
    HealthRound,
    detect_all,
    disk_judged_healthy,
)
from planners.healing import (
    HealBudget,
    heal_budget,
    keep_dead_in_place,
    plan_evacuate_disk,
    plan_leaders_off,
    plan_replace_broker,
    without_dead_dirs,
)
from planners.workspace import PlannerError

log = logging.getLogger(__name__)
WHO = "self-healing"
HISTORY = 120
BACKOFF_S = 10.0
BACKOFF_MAX_S = 600.0
"""A retry (refused plan, execution that did not complete, fault that outlived its fix) waits
``BACKOFF_S x 2^(n-1)`` wall seconds after the n-th, at most ``BACKOFF_MAX_S``: one anomaly per fault, no loop."""
RETRY = "retry: "
OWN_UNKNOWN = 1e12
"""Bytes/s credited to a disk for a copy of ours whose rate is not measured yet: the whole load is ours."""
_BROKER_ERROR = re.compile(r"broker (\d+)$")


@dataclass(frozen=True)
class HealingSettings:
    """A cluster's ``self_healing`` record (defaults: off)."""

    enabled: bool = False
    grace_s: float = 300.0
    max_concurrent_fixes: int = 1
    mass_failure_share: float = 0.34
    evacuate_slow_after_s: float = 1800.0
    heal_bound_s: float = 3600.0
    heal_rate_bytes_per_s: float = 50e6

    @classmethod
    def of(cls, record: Mapping[str, Any] | None) -> HealingSettings:
        """From the replicated record (missing keys take the defaults)."""
        r = dict(record or {})
        return cls(**{k: r[k] for k in ("enabled", "grace_s", "max_concurrent_fixes", "mass_failure_share",
                                         "evacuate_slow_after_s", "heal_bound_s", "heal_rate_bytes_per_s")
                      if k in r})


def health_round(r: Round, maintenance: frozenset[int],
                 executing: Mapping[tuple[str, int], frozenset[int]] | None = None) -> HealthRound:
    """What a published round says about health: its clock is the round's sample clock (the simulator's time
    where exported), else when this node observed it. ``executing``: the replicas running executions are
    adding (with the round's in-flight reassignments: partitions under-replicated only by a move)."""
    at = r.collected.sample_clock if r.collected.sample_clock is not None else r.observed_at.timestamp()
    unresponsive: dict[int, str] = {}
    for key, err in sorted(r.coverage.kafka_errors.items()):
        m = _BROKER_ERROR.search(key)
        if m:
            unresponsive.setdefault(int(m.group(1)), f"{key}: {err}")
    moving: dict[tuple[str, int], float] = {}
    copy_bytes: dict[tuple[int, str], float] = {}
    for c in r.copies:
        rate = max(c.bytes_per_s, 0.0) if c.bytes_per_s == c.bytes_per_s else 0.0
        moving[(c.topic, c.partition)] = moving.get((c.topic, c.partition), 0.0) + rate
        for d in {c.source, c.dest}:
            if d is not None:
                copy_bytes[(int(d[0]), str(d[1]))] = copy_bytes.get((int(d[0]), str(d[1])), 0.0) + rate
    adding: dict[tuple[str, int], frozenset[int]] = {tp: frozenset(bs) for tp, bs in r.collected.adding.items()}
    for tp, bs in (executing or {}).items():
        adding[tp] = adding.get(tp, frozenset()) | bs
    cov = r.coverage
    offline_dirs = {int(b): frozenset(paths) for b, paths in cov.offline_log_dirs.items() if paths}
    offline_replicas: dict[int, set[tuple[str, int]]] = {}
    for name, brokers in cov.offline_replicas.items():
        topic, _, part = name.rpartition("-")
        for b in brokers:
            offline_replicas.setdefault(int(b), set()).add((topic, int(part)))
    return HealthRound(r.snapshot, at=float(at), maintenance=maintenance, offline_dirs=offline_dirs,
                       offline_replicas={b: frozenset(v) for b, v in offline_replicas.items()},
                       unresponsive=unresponsive, reassigning=moving, copy_bytes=copy_bytes, adding=adding)


def _adding(executions: Mapping[str, Mapping[str, Any]], cluster: str) -> dict[tuple[str, int], frozenset[int]]:
    """Replicas the running executions of ``cluster`` are adding, per partition (tasks not done yet)."""
    out: dict[tuple[str, int], frozenset[int]] = {}
    for ex in executions.values():
        if ex.get("cluster") != cluster or ex.get("status") not in ("running", "stopping"):
            continue
        for t in (ex.get("tasks") or {}).values():
            if t.get("state") != "IN_PROGRESS":
                continue
            new = frozenset(int(b) for b in t.get("target_replicas") or ()) - \
                frozenset(int(b) for b in t.get("source_replicas") or ())
            if new:
                tp = (str(t["topic"]), int(t["partition"]))
                out[tp] = out.get(tp, frozenset()) | new
    return out


def _task_copies(executions: Mapping[str, Mapping[str, Any]], cluster: str, since: float,
                 leaders: Mapping[tuple[str, int], tuple[int, str]]) -> dict[tuple[int, str], float]:
    """Disk -> bytes/s of Guardian's copies that ran on it since ``since`` (wall clock): every task in flight, or
    completed since then, at its measured rate on its destination dirs and its leader's (``leaders``: partition ->
    its leader's disk now) (a copy that began and ended
    inside one measurement window shows in no round's copies in flight, but in the window's disk rates). A
    rate not measured yet counts as the disk's whole load (:data:`OWN_UNKNOWN`)."""
    out: dict[tuple[int, str], float] = {}
    for ex in executions.values():
        if ex.get("cluster") != cluster:
            continue
        for t in (ex.get("tasks") or {}).values():
            state = t.get("state")
            recent = state == "COMPLETED" and str(t.get("updated_at") or "") and \
                datetime.fromisoformat(str(t["updated_at"])).timestamp() >= since
            if state != "IN_PROGRESS" and not recent:
                continue
            rate = float(t.get("rate_bytes_per_s") or 0.0) or OWN_UNKNOWN
            src = [int(b) for b in t.get("source_replicas") or ()]
            dst = [int(b) for b in t.get("target_replicas") or ()]
            src_dirs, dst_dirs = list(t.get("source_log_dirs") or ()), list(t.get("target_log_dirs") or ())
            disks = {(b, str(dst_dirs[i])) for i, b in enumerate(dst)
                     if i < len(dst_dirs) and dst_dirs[i] and (b not in src or src_dirs[src.index(b)] != dst_dirs[i])}
            lead = leaders.get((str(t.get("topic")), int(t.get("partition", -1))))
            if disks and lead is not None:
                disks.add(lead)  # the copies read from the leader
            for d in disks:
                out[d] = out.get(d, 0.0) + rate
    return out


def _retries(rec: Mapping[str, Any]) -> tuple[int, float | None]:
    """How many times the anomaly went back to ``confirmed`` for a retry, and when (wall clock) the last time."""
    times = [h["at"] for h in rec.get("history", []) if str(h.get("reason", "")).startswith(RETRY)]
    return len(times), (datetime.fromisoformat(times[-1]).timestamp() if times else None)


def backoff_left(rec: Mapping[str, Any], now: float | None = None) -> float:
    """Wall seconds before the anomaly may be planned again (0: now); see :data:`BACKOFF_S`."""
    n, last = _retries(rec)
    if not n or last is None:
        return 0.0
    wait = min(BACKOFF_S * 2 ** (n - 1), BACKOFF_MAX_S)
    return max(last + wait - (datetime.now(UTC).timestamp() if now is None else now), 0.0)


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
        self.under_since: dict[str, float] = {}
        """Per cluster: the round clock its current under-replicated streak began (absent: none)."""
        self.cfg: dict[str, DetectorConfig] = {}
        self.copies_seen: dict[str, dict[tuple[int, str], float]] = {}
        """Per cluster: the copies in flight of the previous round, per disk (their window overlaps the next)."""
        self.adding_seen: dict[str, dict[tuple[str, int], frozenset[int]]] = {}
        """Per cluster: the previous round's moves in flight (replicas they add)."""

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
            self.under_since.pop(gone, None)
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
        began = r.snapshot.taken_at.timestamp() - float(r.collected.round_seconds.get("total", 0.0))
        since = self.began.get(name, began - 60.0)  # the previous round's start: this round's rates span since
        self.began[name] = began
        self.listed[name] = r.collected.log_dirs_read_at

        def recent(v: Mapping[str, Any]) -> bool:
            return v["status"] in ACTIVE_STATUSES or (
                bool(v.get("finished_at")) and datetime.fromisoformat(v["finished_at"]).timestamp() >= since)
        executions = ctx.store.read(lambda s: {k: {"cluster": v["cluster"], "status": v["status"],
                                                   "tasks": v.get("tasks") or {}}
                                               for k, v in s["executions"].items()
                                               if v["cluster"] == name and recent(v)})
        hist = self.history.setdefault(name, deque(maxlen=HISTORY))
        now = health_round(r, maintenance, _adding(executions, name))
        leaders = {p.id: (p.leader, p.log_dirs[p.replicas.index(p.leader)]) for p in now.snapshot.iter_partitions()
                   if p.leader is not None and p.leader in p.replicas and p.replicas.index(p.leader) < len(p.log_dirs)}
        copies = dict(now.copy_bytes)
        ours = _task_copies(executions, name, since, leaders)
        for d, rate in [*self.copies_seen.get(name, {}).items(), *ours.items()]:
            copies[d] = max(copies.get(d, 0.0), rate)  # copies of the previous round overlap this one's window
        adding = dict(now.adding)
        for tp, bs in self.adding_seen.get(name, {}).items():  # the previous round's own, one round only
            p = now.snapshot.index.partition_by_id.get(tp)
            if tp not in adding and p is not None and bs <= set(p.replicas) - set(p.isr):
                adding[tp] = bs  # still mid-move: a listing read a moment apart from metadata may miss it
        self.copies_seen[name] = dict(now.copy_bytes)
        self.adding_seen[name] = dict(now.adding)
        hist.append(replace(now, copy_bytes=copies, adding=adding))
        cfg = replace(self.detector, grace_s=settings.grace_s, mass_failure_share=settings.mass_failure_share)
        self.cfg[name] = cfg
        findings = detect_all(list(hist), cfg)
        tally = self.counters.setdefault(name, Counter())
        tally["rounds"] += 1
        tally.update({f.kind for f in findings})
        tally.update({f"confirmed:{f.kind}" for f in findings if f.confirmed})
        self._under_replicated(ctx, name, findings, hist[-1].at)
        open_ = self._sync(ctx, name, findings)
        counts: dict[str, int] = {k: 0 for k in KINDS}
        for rec in open_.values():
            counts[rec["kind"]] = counts.get(rec["kind"], 0) + 1
        for kind, n in counts.items():
            ctx.metrics.open_anomalies.labels(name, kind).set(n)
        self._carry(ctx, name, open_, findings, settings, hist)
        decision = self._start(ctx, name, findings, settings, hist[-1])
        self.last[name] = {"round": r.seq, "at": hist[-1].at, "findings": [f.key for f in findings], **decision}
        return decision

    def _under_replicated(self, ctx: ServiceContext, name: str, findings: list[Finding], at: float) -> None:
        """``guardian_under_replicated_partitions`` and ``guardian_under_replicated_seconds`` (how long, on the
        round clock, the cluster has had at least one under-replicated partition; 0 without)."""
        urp = next((int(f.evidence.get("count", 0)) for f in findings if f.kind == UNDER_REPLICATED), 0)
        if urp:
            self.under_since.setdefault(name, at)
        else:
            self.under_since.pop(name, None)
        ctx.metrics.under_replicated.labels(name).set(urp)
        ctx.metrics.under_replicated_seconds.labels(name).set(at - self.under_since[name] if urp else 0.0)

    def _open(self, ctx: ServiceContext, name: str) -> dict[str, dict[str, Any]]:
        return ctx.store.read(lambda s: {a["key"]: dict(a) for a in (s.get("anomalies") or {}).values()
                                         if a["cluster"] == name and a["status"] in OPEN_ANOMALY_STATES})

    def _sync(self, ctx: ServiceContext, name: str, findings: list[Finding]) -> dict[str, dict[str, Any]]:
        open_ = self._open(ctx, name)
        fixed = ctx.store.read(lambda s: {a["key"] for a in (s.get("anomalies") or {}).values()
                                          if a["cluster"] == name and a["status"] == "fixed"})
        for f in findings:
            rec = open_.get(f.key)
            if rec is not None and not (f.confirmed and rec["status"] == "detected"):
                continue
            if rec is None and not f.confirmed and f.key in fixed and f.kind in FIXABLE:
                continue  # the residue of a fault fixed (a dead dir emptied): its anomaly said so, not a new one
            res = ctx.store.propose({"type": "anomaly.raise", "meta": meta(WHO, f.summary), "cluster": name,
                                     "key": f.key, "kind": f.kind, "subject": dict(f.subject),
                                     "evidence": dict(f.evidence), "summary": f.summary, "confirmed": f.confirmed})
            self._notify(name, "anomaly." + res["status"], f.kind, res["anomaly_id"], f.summary, dict(f.evidence))
        now = {f.key for f in findings}
        for key, rec in self._open(ctx, name).items():
            if key in now or rec["status"] == "fixing":
                continue  # a fixing anomaly is closed by _carry (its execution decides)
            if rec.get("plan_id") is not None:  # a fix ran, and the fault is gone since
                self._close(ctx, name, rec, "fixed", "no longer observed after its fix")
            else:
                self._close(ctx, name, rec, "cleared", "no longer observed (nothing was fixed)")
        return self._open(ctx, name)

    def _close(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], status: str, why: str) -> None:
        ctx.store.propose({"type": "anomaly.update", "meta": meta(WHO, why), "anomaly_id": rec["id"],
                           "status": status, "reason": why})
        self._notify(name, "anomaly." + status, rec["kind"], rec["id"], f"{rec['summary']} -> {status}: {why}", {})

    def _retry(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], why: str) -> None:
        """Back to ``confirmed`` (from ``fixing``) or a note (already ``confirmed``) — planned again after the
        backoff; the reason says why and when."""
        n, _ = _retries(rec)
        wait = min(BACKOFF_S * 2 ** n, BACKOFF_MAX_S)
        reason = f"{RETRY}{why}; next try in {wait:.0f} s"[:2000]
        if rec["status"] == "fixing":
            ctx.store.propose({"type": "anomaly.update", "meta": meta(WHO, why), "anomaly_id": rec["id"],
                               "status": "confirmed", "reason": reason})
        else:
            ctx.store.propose({"type": "anomaly.note", "meta": meta(WHO, why), "anomaly_id": rec["id"],
                               "reason": reason})
        self._notify(name, "fix.retry", rec["kind"], rec["id"], reason, {})

    # ------------------------------------------------------------------ fixes in flight
    def _carry(self, ctx: ServiceContext, name: str, open_: Mapping[str, dict[str, Any]], findings: list[Finding],
               settings: HealingSettings, hist: deque[HealthRound]) -> None:
        now = hist[-1]
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
                if ex is not None and ex["status"] in ACTIVE_STATUSES and ctx.executor is not None:
                    ctx.store.propose({"type": "execution.stop", "meta": meta(WHO, "the broker returned"),
                                       "execution_id": ex["id"], "rollback": False})
                self._close(ctx, name, rec, "cleared", "the broker returned: its replicas are back; fix cancelled")
                continue
            if plan.get("status") in ("proposed", "approved"):
                self._run(ctx, name, rec, int(rec["plan_id"]))  # a previous leader left it here
                continue
            if ex is None or ex["status"] in ACTIVE_STATUSES:
                continue
            if ex["status"] != ExecutionStatus.COMPLETED:
                self._retry(ctx, name, rec, f"execution {ex['id']} {ex['status']}: {ex.get('reason', '')}"[:300])
                continue
            ended = datetime.fromisoformat(ex["finished_at"]).timestamp() if ex.get("finished_at") else 0.0
            if rec["kind"] == DISK_FAIL_SLOW:
                self._carry_slow(ctx, name, rec, plan, ex, ended, observed.get(key), settings, hist)
                continue
            if self.began.get(name, 0.0) < ended:
                continue  # the round in hand began before the execution ended: judge from the next one
            if key in observed and observed[key].confirmed:
                self._retry(ctx, name, rec, f"execution {ex['id']} completed but the fault remains "
                                            f"({observed[key].summary}): planning the rest")
                continue
            self._close(ctx, name, rec, "fixed", f"execution {ex['id']} completed; the fault is gone"
                        + ("; the dir holds no replica any more: replace the disk" if rec["kind"] == LOG_DIR_OFFLINE
                           else ""))

    def _carry_slow(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], plan: Mapping[str, Any],
                    ex: Mapping[str, Any], ended: float, finding: Finding | None, settings: HealingSettings,
                    hist: deque[HealthRound]) -> None:
        """A fail-slow disk after a completed fix: leadership off -> evacuated after ``evacuate_slow_after_s``
        -> ``fixed`` once it holds no replica; ``cleared`` if it is judged healthy again first."""
        disk = (int(rec["subject"]["broker"]), str(rec["subject"]["log_dir"]))
        listed = self.listed.get(name, {}).get(disk[0], self.began.get(name, 0.0))
        if listed < ended:
            return  # dirs listed before the end would re-plan done work (rotating listings)
        held = sum(1 for p in hist[-1].snapshot.iter_partitions() for i, b in enumerate(p.replicas)
                   if b == disk[0] and i < len(p.log_dirs) and p.log_dirs[i] == disk[1])
        if plan.get("kind") == "heal-disk" and not held:
            self._close(ctx, name, rec, "fixed", f"evacuated by execution {ex['id']}: the slow disk holds no "
                                                 "replica (replace it; a new disk starts a new history)")
            return
        if finding is None and disk_judged_healthy(list(hist), disk, self.cfg.get(name, self.detector)):
            self._close(ctx, name, rec, "cleared", "the disk is no longer slow (judged healthy "
                                                   f"{self.detector.slow_rounds} rounds running)")
            return
        self._maybe_evacuate(ctx, name, rec, settings, hist[-1], finding)

    def _maybe_evacuate(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], settings: HealingSettings,
                        now: HealthRound, finding: Finding | None) -> None:
        evidence = finding.evidence if finding is not None else (rec.get("evidence") or {})
        since = evidence.get("slow_since")
        if isinstance(since, int | float):  # the round clock (the simulator's where it exports one)
            slow_for = now.at - float(since)
        else:
            began = next((h["at"] for h in rec["history"] if h["status"] == "fixing"), rec["detected_at"])
            slow_for = (datetime.now(UTC) - datetime.fromisoformat(began)).total_seconds()
        disk = (int(rec["subject"]["broker"]), str(rec["subject"]["log_dir"]))
        if slow_for < settings.evacuate_slow_after_s or backoff_left(rec) > 0:
            return
        plan = self._evacuation(now, disk)
        if not plan.moves:
            self._retry(ctx, name, rec, f"disk {disk[1]} of broker {disk[0]} still slow but no replica can leave "
                                        "it: " + "; ".join(plan.notes))
            return
        self._propose_fix(ctx, name, rec, plan, f"disk {disk[1]} of broker {disk[0]} still slow after "
                                                f"{slow_for:.0f} s: evacuate it", expect=rec["status"], now=now,
                          settings=settings)

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
                                         if e["cluster"] == name and e["status"] in ACTIVE_STATUSES])
        if busy:
            return {"action": "wait", "why": f"execution {busy[0]} runs on the cluster"}
        order = {BROKER_DEAD: 0, LOG_DIR_OFFLINE: 1, DISK_FAIL_SLOW: 2}
        waiting: list[str] = []
        for f in sorted(findings, key=lambda f: (order.get(f.kind, 9), f.key)):
            rec = open_.get(f.key)
            if f.kind not in FIXABLE or not f.confirmed or rec is None or rec["status"] != "confirmed":
                continue
            left = backoff_left(rec)
            if left > 0:
                waiting.append(f"anomaly {rec['id']} backs off {left:.0f} s ({rec.get('reason', '')[:120]})")
                continue
            if f.kind == DISK_FAIL_SLOW and self._leaders_moved(ctx, rec):
                self._maybe_evacuate(ctx, name, rec, settings, now, f)  # leadership already off: evacuation next
                continue
            plan, why = self._plan_for(f, now)
            if plan is None:
                if why:
                    self._retry(ctx, name, rec, f"no plan: {why}")
                continue
            problems = check_plan(now.snapshot, plan)
            if problems:
                self._retry(ctx, name, rec, "no valid plan: " + "; ".join(str(p) for p in problems[:3]))
                continue
            if not plan.moves and not plan.leaders:
                if f.kind == DISK_FAIL_SLOW:  # nothing led from it: straight on to the evacuation clock
                    self._maybe_evacuate(ctx, name, rec, settings, now, f)
                    continue
                self._retry(ctx, name, rec, "nothing can move now: " + "; ".join(plan.notes))
                continue
            self._propose_fix(ctx, name, rec, plan, why, expect="confirmed", now=now, settings=settings)
            return {"action": "fix", "why": why, "anomaly_id": rec["id"]}
        if waiting:
            return {"action": "wait", "why": "; ".join(waiting)[:500]}
        return {"action": "none", "why": "nothing to fix"}

    @staticmethod
    def _leaders_moved(ctx: ServiceContext, rec: Mapping[str, Any]) -> bool:
        """Whether the anomaly's last fix completed (leadership off its disk; a refused one did not)."""
        if rec.get("plan_id") is None:
            return False
        plan = ctx.store.read(lambda s: dict(s["plans"].get(str(rec["plan_id"])) or {}))
        return plan.get("status") == "completed"

    @staticmethod
    def _planning(now: HealthRound) -> ClusterSnapshot:
        """The snapshot heals are planned on: dead log dirs shown full (no goal targets them)."""
        return without_dead_dirs(now.snapshot, now.offline_dirs)

    def _evacuation(self, now: HealthRound, disk: tuple[int, str], same_broker: bool = True) -> Plan:
        dead = [(b, d) for b, dirs in now.offline_dirs.items() for d in dirs]
        plan = plan_evacuate_disk(self._planning(now), disk, avoid=dead, same_broker=same_broker)
        return keep_dead_in_place(plan, now.offline_dirs)

    def _plan_for(self, f: Finding, now: HealthRound) -> tuple[Plan | None, str]:
        alive = {b.id for b in now.snapshot.brokers if b.state is BrokerState.ALIVE}
        try:
            if f.kind == BROKER_DEAD:
                plan = plan_replace_broker(self._planning(now), [int(f.subject["broker"])])
                return keep_dead_in_place(plan, now.offline_dirs), \
                    f"re-create the replicas of dead broker {f.subject['broker']}: {f.summary}"
            disk = (int(f.subject["broker"]), str(f.subject["log_dir"]))
            if f.kind == LOG_DIR_OFFLINE:  # offline replicas: only other brokers can take them (planners.healing)
                return self._evacuation(now, disk, same_broker=False), \
                    f"re-create the replicas of failed log dir elsewhere: {f.summary}"
            if f.kind == DISK_FAIL_SLOW and disk[0] in alive:
                return plan_leaders_off(now.snapshot, [disk]), f"move leadership off fail-slow disk: {f.summary}"
        except PlannerError as exc:
            return None, str(exc)
        return None, ""

    def _budget(self, ctx: ServiceContext, name: str, plan: Plan, now: HealthRound,
                settings: HealingSettings) -> HealBudget:
        """The heal's allowed rate and its bottleneck. Replication first: on a protected line the heal may take
        everything under the line's target mark but what protection never slows — replication and produce
        crossing it now (the latest accounting); migrations and consumer fetches make room for it."""
        headroom: dict[tuple[str, str], float] = {}
        lines = getattr(ctx.throttle, "lines", None)
        if lines is not None:
            held = lines.latest.get(name)
            for pair, limit in lines.config.limits.items():
                usage = held.account.usage(pair) if held is not None else None
                fixed = sum(float(usage.bytes_per_s.get(k, 0.0)) for k in ("replication", "client_produce")) \
                    if usage is not None else 0.0
                headroom[pair] = max(limit.capacity_bytes_per_s * limit.target - fixed, 0.0)
        return heal_budget(now.snapshot, plan, bound_s=settings.heal_bound_s,
                           min_rate=settings.heal_rate_bytes_per_s, line_headroom=headroom)

    def _propose_fix(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], plan: Plan, why: str,
                     expect: str, now: HealthRound, settings: HealingSettings) -> None:
        """Write-ahead: the plan, then the anomaly's ``fixing`` with the plan id (refused if another leader
        already started it), then approval and the execution. A plan that copies data runs at the allowed heal
        rate (:func:`planners.healing.heal_budget`); where a line or a disk cannot carry the wanted rate, the
        reason names that bottleneck."""
        budget = self._budget(ctx, name, plan, now, settings) if plan.moves else None
        if budget is not None and budget.bytes:
            why += (f"; heal {budget.bytes / 1e9:.1f} GB at >= {budget.rate_bytes_per_s / 1e6:.0f} MB/s, "
                    f"done in <= {budget.eta_s:.0f} s")
            if budget.bottleneck:
                why += (f"; bottleneck: {budget.bottleneck} carries only {budget.rate_bytes_per_s / 1e6:.0f} of the "
                        f"{budget.wanted_bytes_per_s / 1e6:.0f} MB/s wanted")
        plan_id = ctx.store.propose({"type": "plan.propose", "meta": meta(WHO, why), "cluster": name,
                                     "kind": plan.kind, "plan": plan_to_dict(plan)})["plan_id"]
        try:
            ctx.store.propose({"type": "anomaly.update", "meta": meta(WHO, why), "anomaly_id": rec["id"],
                               "status": "fixing", "expect": expect, "plan_id": plan_id, "reason": why[:2000]})
        except Exception as exc:
            ctx.store.propose({"type": "plan.expire", "meta": meta(WHO, f"fix not started: {exc}"), "plan_id": plan_id})
            return
        self._notify(name, "fix.started", rec["kind"], rec["id"], why,
                     {"plan_id": plan_id, "moves": len(plan.moves), "leaders": len(plan.leaders),
                      **({"heal": budget.as_dict()} if budget is not None and budget.bytes else {})})
        self._run(ctx, name, rec, plan_id, budget)

    def _run(self, ctx: ServiceContext, name: str, rec: Mapping[str, Any], plan_id: int,
             budget: HealBudget | None = None) -> None:
        status = ctx.store.read(lambda s: s["plans"][str(plan_id)]["status"])
        if status == PlanStatus.PROPOSED:
            ctx.store.propose({"type": "plan.approve", "meta": meta(WHO, "self-healing policy"), "plan_id": plan_id})
        options = {"heal": budget.as_dict(), "ordering": "urp_first"} if budget is not None and budget.bytes else {}
        try:
            if ctx.executor is None:
                raise RuntimeError("no executor on this node")
            why = f"{WHO}: anomaly {rec['id']}"
            execution_id = (ctx.executor.start_approved(plan_id, why=why, options=options) if options
                            else ctx.executor.start_approved(plan_id, why=why))
        except Exception as exc:  # refused by the executor: the plan must not stay approved
            ctx.store.propose({"type": "plan.expire", "meta": meta(WHO, f"executor refused: {exc}"),
                               "plan_id": plan_id})
            fresh = ctx.store.read(lambda s: dict(s["anomalies"][str(rec["id"])]))
            self._retry(ctx, name, fresh, f"executor refused plan {plan_id}: {exc}")
            return
        ctx.store.propose({"type": "anomaly.update", "meta": meta(WHO, "execution started"), "anomaly_id": rec["id"],
                           "status": "fixing", "execution_id": execution_id})

    def _notify(self, cluster: str, event: str, kind: str, anomaly_id: int, text: str,
                evidence: Mapping[str, Any]) -> None:
        if self.notifier is not None:
            self.notifier.send({"event": event, "cluster": cluster, "kind": kind, "anomaly_id": anomaly_id,
                                "text": text, "evidence": dict(evidence)})
