"""Handlers of the execution aggregate: start, task updates, stop, caps, progress, finish, and the
action-log-only refusal (``state["executions"]``; the plan an execution runs follows its status).

Guarantee: tasks move only along :data:`domain.execution.TRANSITIONS` (every update of a command checked
before any is stored), executions along :data:`domain.execution.EXECUTION_TRANSITIONS`, their plans along
:data:`domain.plan_record.PLAN_TRANSITIONS`; one active execution per cluster. Cost: O(tasks of the command).
"""

from __future__ import annotations

from dataclasses import replace

from controlplane.state.commands import (
    ExecutionControl,
    ExecutionProgress,
    ExecutionRefused,
    ExecutionStart,
    ExecutionTasks,
)
from controlplane.state.handlers.registry import Ledger, handles
from domain.execution import (
    EXECUTION_TRANSITIONS,
    OPEN_STATES,
    ExecutionStatus,
    IllegalTransition,
    Task,
)
from domain.plan_record import PLAN_TRANSITIONS, PlanStatus
from raft.protocol import CommandRejected, JsonDict


@handles(ExecutionStart)
def start(led: Ledger, cmd: ExecutionStart) -> JsonDict:
    plan = led.plan(cmd.plan_id)
    status = PlanStatus(plan["status"])
    if status == PlanStatus.EXECUTING:  # idempotent retry after a failover
        return {"execution_id": plan["execution_id"], "plan_id": cmd.plan_id, "created": False}
    if PlanStatus.EXECUTING not in PLAN_TRANSITIONS[status]:
        raise CommandRejected(f"plan {cmd.plan_id} is {status}; approve it before executing")
    led.cluster(plan["cluster"])  # removed since it was approved (only a state from before the rule)
    busy = led.active_executions(plan["cluster"])
    if busy:
        raise CommandRejected(f"cluster {plan['cluster']!r} already runs execution {busy[0]}")
    keys = [t.key for t in cmd.tasks]
    if len(set(keys)) != len(keys):
        raise CommandRejected("task keys must be unique")
    unknown_deps = sorted({d for t in cmd.tasks for d in t.after if d not in set(keys)})
    if unknown_deps:
        raise CommandRejected(f"tasks depend on unknown task keys {unknown_deps[:5]}")
    execution_id = led.allocate()
    at = cmd.meta.at.isoformat()
    led.state["executions"][str(execution_id)] = {
        "id": execution_id, "plan_id": cmd.plan_id, "cluster": plan["cluster"],
        "status": ExecutionStatus.RUNNING.value,
        "rollback": False, "caps": dict(cmd.caps), "started_by": cmd.meta.who,
        "started_at": at, "finished_at": None, "reason": "",
        "partition_counts": dict(cmd.partition_counts), "options": dict(cmd.options), "progress": {},
        "tasks": {t.key: Task.planned(t.model_dump(mode="json"), at).to_json() for t in cmd.tasks},
    }
    plan.update(status=PlanStatus.EXECUTING.value, execution_id=execution_id)
    led.state["plans"][str(cmd.plan_id)] = plan
    return {"execution_id": execution_id, "plan_id": cmd.plan_id, "created": True}


@handles(ExecutionTasks)
def tasks(led: Ledger, cmd: ExecutionTasks) -> JsonDict:
    execution = led.execution(cmd.execution_id)
    stored = execution["tasks"]
    at = cmd.meta.at.isoformat()
    changes: list[tuple[str, Task]] = []
    for update in cmd.updates:  # check every update before changing anything (against the stored record)
        doc = stored.get(update.key)
        if doc is None:
            raise CommandRejected(f"execution {cmd.execution_id} has no task {update.key!r}")
        try:
            new = Task.from_json(doc).moved_to(update.state, update.reason)
        except IllegalTransition as exc:
            raise CommandRejected(str(exc)) from None
        new = new.with_progress(bytes_done=update.bytes_done, bytes_total=update.bytes_total,
                                rate_bytes_per_s=update.rate_bytes_per_s, attempts=update.attempts,
                                reader=update.reader, leader_attempts=update.leader_attempts)
        changes.append((update.key, replace(new, updated_at=at)))
    changed = sum(1 for key, new in changes if new.state != stored[key]["state"])
    new_tasks = dict(stored)
    for key, new in changes:
        new_tasks[key] = new.to_json()
    execution["tasks"] = new_tasks
    led.state["executions"][str(cmd.execution_id)] = execution
    return {"execution_id": cmd.execution_id, "changed": changed}


@handles(ExecutionControl, "execution.stop")
def stop(led: Ledger, cmd: ExecutionControl) -> JsonDict:
    execution = led.execution(cmd.execution_id)
    status = ExecutionStatus(execution["status"])
    if not EXECUTION_TRANSITIONS[status]:  # ended: a stop changes nothing
        return {"execution_id": cmd.execution_id, "status": status.value, "changed": False}
    execution.update(status=ExecutionStatus.STOPPING.value, rollback=execution["rollback"] or cmd.rollback,
                     reason=cmd.meta.why)
    led.state["executions"][str(cmd.execution_id)] = execution
    return {"execution_id": cmd.execution_id, "status": ExecutionStatus.STOPPING.value,
            "rollback": execution["rollback"], "changed": True}


@handles(ExecutionControl, "execution.caps")
def caps(led: Ledger, cmd: ExecutionControl) -> JsonDict:
    execution = led.execution(cmd.execution_id)
    execution["caps"] = {**execution["caps"], **cmd.caps}
    led.state["executions"][str(cmd.execution_id)] = execution
    return {"execution_id": cmd.execution_id, "caps": execution["caps"]}


@handles(ExecutionProgress)
def progress(led: Ledger, cmd: ExecutionProgress) -> JsonDict:
    execution = led.execution(cmd.execution_id)
    execution["progress"] = {**cmd.progress, "updated_at": cmd.meta.at.isoformat()}
    led.state["executions"][str(cmd.execution_id)] = execution
    return {"execution_id": cmd.execution_id}


@handles(ExecutionControl, "execution.finish")
def finish(led: Ledger, cmd: ExecutionControl) -> JsonDict:
    execution = led.execution(cmd.execution_id)
    if cmd.status is None:
        raise CommandRejected("$.status: required to finish an execution")
    current, target = ExecutionStatus(execution["status"]), ExecutionStatus(cmd.status)
    if target not in EXECUTION_TRANSITIONS[current]:  # ended already: unchanged
        return {"execution_id": cmd.execution_id, "status": current.value, "changed": False}
    open_tasks = [k for k, t in execution["tasks"].items()
                  if t["state"] in OPEN_STATES and target == ExecutionStatus.COMPLETED]
    if open_tasks:
        raise CommandRejected(f"execution {cmd.execution_id} still has open tasks {open_tasks[:5]}")
    plan = led.plan(execution["plan_id"])
    plan_status = PlanStatus(plan["status"])
    if PlanStatus(target.value) not in PLAN_TRANSITIONS[plan_status]:
        raise CommandRejected(f"plan {plan['id']} of execution {cmd.execution_id} is {plan_status}; it cannot "
                              f"become {target}")
    execution.update(status=target.value, finished_at=cmd.meta.at.isoformat(),
                     reason=cmd.meta.why or execution["reason"])
    led.state["executions"][str(cmd.execution_id)] = execution
    plan["status"] = target.value
    led.state["plans"][str(execution["plan_id"])] = plan
    return {"execution_id": cmd.execution_id, "status": target.value, "changed": True}


@handles(ExecutionRefused)
def refused(led: Ledger, cmd: ExecutionRefused) -> JsonDict:
    """An execution the executor refused to start: nothing changes but the action log."""
    led.cluster(cmd.cluster)
    return {"refused": True, "plan_id": cmd.plan_id, "reason": cmd.reason}
