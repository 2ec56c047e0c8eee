"""Multi-step migrations as chained executions: every step to completion, in order, on the Raft leader.

Goal: one operator command (``POST /api/v1/migrations``, ``guardian migrate-idc``) runs a migration whose
planner cut it into several plans (an IDC migration keeps ``min_insync`` replicas in sync by moving at
most ``RF - min_insync`` replicas of a partition per step). Method: the migration is a parent record in
the replicated state (``migrations``: its approved step plans, the current step, the execution of each
step, status); each pass of the leader's executor loop calls :meth:`MigrationDriver.run_once`, which looks
at the current step's plan and acts on it, level-based like the reconcile pass:

* approved and the cluster idle -> start it as an ordinary execution (the migration's caps and throttle
  settings, ``options.migration`` naming the parent, started by the human who started the migration),
  recording the execution on the parent;
* executing -> wait (its progress is an execution's progress);
* completed -> the next step, or the migration completes after the last;
* stopped, failed, rejected, expired -> the migration ends with that reason (nothing further starts);
* a step the live cluster refuses (:class:`PlanRejected`) fails the migration with the violations.

Guarantee: at most one step of a migration runs at a time and step ``k + 1`` starts only after step ``k``
completed; every decision is a replicated command, so a new leader after a failover continues exactly
where the old one stopped (a step's start is idempotent: the plan is ``executing`` once it started). Each
step is an execution, so it keeps offsets (reassignments copy the log), is throttled and reports progress
like any other. Cost: one state read per pass; a few commands per step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from controlplane.executor.conflicts import ExecutionConflict
from controlplane.executor.reconcile import PlanRejected
from controlplane.executor.release import ReleaseError
from controlplane.state.commands import meta
from controlplane.state.reads import migration_record, plan_record
from controlplane.state.store import StateStore
from domain.execution import ACTIVE_STATUSES, ExecutionStatus
from domain.migration import MigrationRecord, MigrationStatus
from domain.plan_record import PlanRecord, PlanStatus
from kafkaio.errors import AdminError
from raft.protocol import JsonDict

log = logging.getLogger("guardian.executor")
DRIVER = "guardian-migrations"
StartStep = Callable[..., int]
"""``start(plan_id, caps=..., why=..., by=..., options=...) -> execution id`` (the executor service's)."""


def migrations_of(state: Mapping[str, Any]) -> dict[str, JsonDict]:
    """The migrations of a state (an older state has none)."""
    found: dict[str, JsonDict] = state.get("migrations", {})
    return found


def migration_progress(state: Mapping[str, Any], migration: Mapping[str, Any]) -> JsonDict:
    """The migration's progress: step k of n, bytes done of every step's bytes (executions' figures where a
    step ran, the plan's summary where it has not yet), the current execution's rate and ETA."""
    done = total = 0
    current: JsonDict = {}
    executions = list(migration.get("executions", []))
    for k, plan_id in enumerate(migration["steps"]):
        execution = state["executions"].get(str(executions[k])) if k < len(executions) and executions[k] else None
        if execution is not None:
            progress = execution.get("progress") or {}
            step_total = int(progress.get("bytes_total") or 0)
            step_done = int(progress.get("bytes_done") or 0)
            if execution["status"] == ExecutionStatus.COMPLETED:
                step_done = step_total
            if k == migration["step"]:
                current = {"execution_id": execution["id"], "status": execution["status"],
                           "rate_bytes_per_s": progress.get("rate_bytes_per_s"), "eta_s": progress.get("eta_s")}
        else:
            plan = state["plans"].get(str(plan_id)) or {}
            step_total = int(((plan.get("plan") or {}).get("summary") or {}).get("bytes_to_move") or 0)
            step_done = 0
        done += min(step_done, step_total)
        total += step_total
    n = len(migration["steps"])
    finished = migration["status"] == MigrationStatus.COMPLETED
    return {"step": min(migration["step"] + 1, n), "steps": n, "bytes_done": total if finished else done,
            "bytes_total": total, "fraction": 1.0 if finished else (done / total if total else 0.0), **current}


class MigrationDriver:
    """Starts each step of every running migration once the previous one completed (leader only)."""

    def __init__(self, store: StateStore, start: StartStep) -> None:
        self.store = store
        self.start = start

    def _propose(self, command_type: str, why: str, who: str = DRIVER, **payload: Any) -> Any:
        return self.store.propose({"type": command_type, "meta": meta(who, why), **payload})

    def run_once(self) -> list[int]:
        """Advance every running migration as far as it can go now; the ids of those that changed."""
        changed = []
        running = self.store.read(lambda s: sorted(int(m["id"]) for m in migrations_of(s).values()
                                                   if m["status"] == MigrationStatus.RUNNING))
        for migration_id in running:
            try:
                moved = False
                for _ in range(3):  # a completed step and the start of the next in one pass
                    if not self._advance(migration_id):
                        break
                    moved = True
                if moved:
                    changed.append(migration_id)
            except Exception as exc:  # one migration's trouble never stops the others (retried next pass)
                log.warning("migration %s: %s", migration_id, exc)
        return changed

    def _read(self, migration_id: int) -> tuple[MigrationRecord, PlanRecord | None, bool]:
        def read(s: JsonDict) -> tuple[MigrationRecord, PlanRecord | None, bool]:
            m = migration_record(s, migration_id)
            if m is None:
                raise KeyError(f"unknown migration {migration_id}")
            busy = any(e["cluster"] == m.cluster and e["status"] in ACTIVE_STATUSES
                       for e in s["executions"].values())
            return m, plan_record(s, m.current_step_plan), busy
        return self.store.read(read)

    def _advance(self, migration_id: int) -> bool:
        """One decision on the current step; True when something changed."""
        m, plan, busy = self._read(migration_id)
        if not m.running:
            return False
        step, n = m.step, len(m.steps)
        label = f"migration {migration_id}: step {step + 1} of {n}"
        status = plan.status if plan is not None else None
        if (plan is not None and status in (PlanStatus.EXECUTING, PlanStatus.COMPLETED) and plan.execution_id
                and m.execution_of(step) != plan.execution_id):
            self._propose("migration.step", label, migration_id=migration_id, step=step,
                          execution_id=plan.execution_id)
            return True
        if status == PlanStatus.APPROVED:
            return self._start(m, step, label) if not busy else False
        if status == PlanStatus.EXECUTING:
            return False
        if status == PlanStatus.COMPLETED:
            if step + 1 < n:
                self._propose("migration.step", f"{label} completed", migration_id=migration_id, step=step + 1)
            else:
                self._propose("migration.finish", f"all {n} steps completed", migration_id=migration_id,
                              status=MigrationStatus.COMPLETED.value)
            return True
        reason = self._failure(plan)
        end = MigrationStatus.STOPPED if status == PlanStatus.STOPPED else MigrationStatus.FAILED
        self._propose("migration.finish", f"{label}: plan {m.steps[step]} {status}{reason}",
                      migration_id=migration_id, status=end.value)
        return True

    def _failure(self, plan: PlanRecord | None) -> str:
        execution_id = plan.execution_id if plan is not None else None
        if not execution_id:
            return ""
        reason = self.store.read(lambda s: (s["executions"].get(str(execution_id)) or {}).get("reason", ""))
        return f" ({reason})" if reason else ""

    def _start(self, m: MigrationRecord, step: int, label: str) -> bool:
        plan_id = m.steps[step]
        options = {**m.options, "migration": {"id": m.id, "step": step + 1, "of": len(m.steps)}}
        try:
            execution_id = self.start(plan_id, caps=dict(m.caps) or None, why=label, by=m.started_by,
                                      options=options)
        except PlanRejected as exc:
            self._propose("migration.finish", f"{label}: the live cluster refuses plan {plan_id}: {exc}"[:2000],
                          migration_id=m.id, status=MigrationStatus.FAILED.value)
            return True
        except (ExecutionConflict, AdminError, ReleaseError) as exc:  # another executor, or unreachable: retry
            log.info("%s waits: %s", label, exc)
            return False
        self._propose("migration.step", f"{label} started", migration_id=m.id, step=step,
                      execution_id=execution_id)
        return True
