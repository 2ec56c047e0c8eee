"""Scheduled auto-rebalance: opt-in per cluster, inside its cron window, only when the imbalance
exceeds the cluster's threshold in two successive snapshots (one noisy measurement near the threshold
does not start a round) and no execution runs there. Proposes, approves and starts the plan as
``auto-rebalance`` so the action log says who did it and why.

In the service, :class:`AutoRebalanceJob` decides for each cluster on its own through the loop's
:class:`~controlplane.service.fanout.ClusterFanout` (starting a plan takes the cluster's lease: an
unreachable cluster must not hold up the others) and logs a cluster's decision only when it changed
(no "auto-rebalance is off" line per cluster per check)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from apscheduler.triggers.cron import CronTrigger

from collectors.builder import PLACEHOLDER_DIR
from controlplane.executor.conflicts import ExecutionConflict
from controlplane.service.context import ServiceContext
from controlplane.service.fanout import ClusterFanout, loop_fanout
from controlplane.service.planning import PlanRequestError, load_snapshot, make_plan
from controlplane.service.snapshots import StaleSnapshotError
from controlplane.state.commands import meta
from controlplane.state.state import ACTIVE_EXECUTION
from domain import BrokerState, ClusterSnapshot, Plan, check_plan, plan_to_dict, pool_stats

log = logging.getLogger(__name__)
WHO = "auto-rebalance"


def in_window(cron: str, minutes: int, now: datetime) -> bool:
    """True when ``now`` lies within ``minutes`` after a firing time of ``cron`` (5-field crontab, UTC)."""
    trigger = CronTrigger.from_crontab(cron, timezone="UTC")
    start = now - timedelta(minutes=minutes)
    fire = trigger.get_next_fire_time(None, start)
    return fire is not None and fire <= now


def run_auto_rebalance(ctx: ServiceContext, now: datetime | None = None) -> list[dict[str, Any]]:
    """One pass over every cluster; returns what it decided per cluster (also logged)."""
    now = now or datetime.now(UTC)
    clusters, busy, finished = _inputs(ctx)
    decisions = []
    for name, policy in sorted(clusters.items()):
        decision = _decide(ctx, name, policy, name in busy, finished.get(name), now)
        log.info("auto-rebalance %s: %s", name, decision)
        decisions.append({"cluster": name, **decision})
    return decisions


class AutoRebalanceJob:
    """Scheduler job ``auto_rebalance``: :func:`run_auto_rebalance`'s decisions, one cluster per fan-out task,
    each logged when it differs from that cluster's previous one."""

    def __init__(self) -> None:
        self.fanout: ClusterFanout | None = None
        self.last: dict[str, dict[str, Any]] = {}

    def __call__(self, ctx: ServiceContext, now: datetime | None = None) -> list[dict[str, Any]]:
        at = now or datetime.now(UTC)
        if self.fanout is None:
            self.fanout = loop_fanout("auto_rebalance", ctx.settings.intervals, ctx.cluster_status)
        clusters, busy, finished = _inputs(ctx)
        self.fanout.forget(set(clusters))
        for gone in set(self.last) - set(clusters):
            del self.last[gone]
        done = self.fanout.run({name: partial(self._one, ctx, name, policy, name in busy, finished.get(name), at)
                                for name, policy in clusters.items()})
        return [{"cluster": name, **done[name]} for name in sorted(done)]

    def _one(self, ctx: ServiceContext, name: str, policy: dict[str, Any], busy: bool, finished: datetime | None,
             now: datetime) -> dict[str, Any]:
        decision = _decide(ctx, name, policy, busy, finished, now)
        if decision != self.last.get(name):
            log.info("auto-rebalance %s: %s", name, decision)
        self.last[name] = decision
        return decision


def _inputs(ctx: ServiceContext) -> tuple[dict[str, dict[str, Any]], set[str], dict[str, datetime]]:
    result: tuple[dict[str, dict[str, Any]], set[str], dict[str, datetime]] = ctx.store.read(lambda s: (
        {n: dict(c["auto_rebalance"]) for n, c in s["clusters"].items()},
        {e["cluster"] for e in s["executions"].values() if e["status"] in ACTIVE_EXECUTION},
        _last_finished(s["executions"].values())))
    return result


def unexecutable(snap: ClusterSnapshot, plan: Plan) -> list[str]:
    """Why the executor would refuse ``plan``: a new replica or leader on a broker that is not alive (dead,
    maintenance, draining) or on a log dir nobody observed (the collectors' placeholder)."""
    state = {b.id: b.state for b in snap.brokers}
    problems = []
    for m in plan.moves:
        before = set(snap.index.partition_by_id[m.id].replicas) if m.id in snap.index.partition_by_id else set()
        for b, d in zip(m.replicas, m.log_dirs, strict=False):
            if b not in before and state.get(b) is not BrokerState.ALIVE:
                problems.append(f"{m.topic}-{m.partition}: target broker {b} is {state.get(b, 'unknown')}")
            if d == PLACEHOLDER_DIR:
                problems.append(f"{m.topic}-{m.partition}: unknown log dir on broker {b}")
    problems += [f"{lc.topic}-{lc.partition}: leader {lc.leader} is {state.get(lc.leader, 'unknown')}"
                 for lc in plan.leaders if state.get(lc.leader) is not BrokerState.ALIVE]
    return problems


def _last_finished(executions: Iterable[dict[str, Any]]) -> dict[str, datetime]:
    """Per cluster, when its most recent execution ended."""
    last: dict[str, datetime] = {}
    for e in executions:
        if e.get("finished_at"):
            at = datetime.fromisoformat(e["finished_at"])
            last[e["cluster"]] = max(at, last.get(e["cluster"], at))
    return last


def _decide(ctx: ServiceContext, name: str, policy: dict[str, Any], busy: bool, finished: datetime | None,
            now: datetime) -> dict[str, Any]:
    first_seen = ctx.imbalance_seen.pop(name, None)  # kept only while each decision confirms it
    if not policy.get("enabled"):
        return {"action": "skip", "why": "auto-rebalance is off"}
    if not in_window(policy["window_cron"], policy["window_minutes"], now):
        return {"action": "skip", "why": "outside the window"}
    if busy:
        return {"action": "skip", "why": "an execution is running"}
    if ctx.executor is None:
        return {"action": "skip", "why": "no executor on this node"}
    try:
        snap = ctx.snapshots.fresh(name, ctx.settings.max_snapshot_age_s, now)
    except StaleSnapshotError as exc:
        return {"action": "skip", "why": str(exc)}
    seen = ctx.snapshots.observed_at(name)
    settle = timedelta(seconds=ctx.settings.intervals.collect_s)
    if finished is not None and seen is not None and seen < finished + settle:
        # rates measured across the end of a move still count the old placement
        return {"action": "skip", "why": "no snapshot measured wholly after the last execution ended yet"}
    basis = policy.get("load_basis", "window")  # the imbalance is judged on the load the plan will weigh
    try:
        weighed, _ = load_snapshot(snap, basis, ctx.load_model)
        worst = max((s.peak_to_mean for s in pool_stats(weighed).values()), default=0.0)
        if worst <= policy["threshold"]:
            return {"action": "skip", "why": f"peak/mean {worst:.2f} within threshold {policy['threshold']}"}
        observed = seen or snap.taken_at
        if first_seen is None or first_seen >= observed:  # no earlier snapshot showed it yet
            ctx.imbalance_seen[name] = first_seen or observed
            return {"action": "skip", "why": f"peak/mean {worst:.2f} above threshold {policy['threshold']} in one "
                                             "snapshot; acting if the next one confirms it"}
        plan = make_plan(snap, "rebalance", {"max_partitions": int(policy.get("max_partitions", 50)),
                                             "load_basis": basis}, load_model=ctx.load_model)
    except PlanRequestError as exc:
        return {"action": "skip", "why": str(exc)}
    if not plan.moves or check_plan(snap, plan):
        return {"action": "skip", "why": "no valid improving plan"}
    refused = unexecutable(snap, plan)
    if refused:  # what the executor would refuse is never proposed
        return {"action": "skip", "why": "plan targets what the executor refuses: " + "; ".join(refused[:3])}
    why = f"peak/mean {worst:.2f} above threshold {policy['threshold']} in two successive snapshots"
    plan_id = ctx.store.propose({"type": "plan.propose", "meta": meta(WHO, why), "cluster": name,
                                 "kind": plan.kind, "plan": plan_to_dict(plan),
                                 "snapshot_taken_at": snap.taken_at.isoformat()})["plan_id"]
    ctx.store.propose({"type": "plan.approve", "meta": meta(WHO, "auto-rebalance policy"), "plan_id": plan_id})
    try:
        execution_id = ctx.executor.start_approved(plan_id, why=f"{WHO}: {why}")
    except ExecutionConflict as exc:  # another executor's lease, foreign moves: a later pass plans afresh
        ctx.store.propose({"type": "plan.expire", "meta": meta(WHO, f"executor refused: {exc}"), "plan_id": plan_id})
        return {"action": "refused", "why": str(exc), "plan_id": plan_id}
    except Exception as exc:  # never leave an approved plan nobody can execute
        ctx.store.propose({"type": "plan.expire", "meta": meta(WHO, f"executor refused: {exc}"), "plan_id": plan_id})
        return {"action": "skip", "why": f"executor refused plan {plan_id} (expired): {exc}", "plan_id": plan_id}
    return {"action": "execute", "why": why, "plan_id": plan_id, "execution_id": execution_id}
