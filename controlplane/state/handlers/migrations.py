"""Handlers of the migration aggregate (``state["migrations"]``, created on first use): start a chained
migration of approved step plans, record its step, stop or finish it.

Guarantee: one running migration per cluster; every step plan approved and of the cluster when it starts; a
migration moves only along :data:`domain.migration.MIGRATION_TRANSITIONS` (an ended one is answered
unchanged). Cost: O(steps).
"""

from __future__ import annotations

import copy

from controlplane.state.commands import MigrationStart, MigrationUpdate
from controlplane.state.handlers.registry import Ledger, handles
from domain.migration import MIGRATION_TRANSITIONS, MigrationStatus
from domain.plan_record import PlanStatus
from raft.protocol import CommandRejected, JsonDict


def _migration(led: Ledger, migration_id: int) -> JsonDict:
    migration = led.migrations().get(str(migration_id))
    if migration is None:
        raise CommandRejected(f"unknown migration {migration_id}")
    return dict(migration)


@handles(MigrationStart)
def start(led: Ledger, cmd: MigrationStart) -> JsonDict:
    led.cluster(cmd.cluster)
    migrations = led.migrations()
    busy = [m["id"] for m in migrations.values()
            if m["cluster"] == cmd.cluster and m["status"] == MigrationStatus.RUNNING]
    if busy:
        raise CommandRejected(f"cluster {cmd.cluster!r} already runs migration {busy[0]}; stop it first")
    for plan_id in cmd.steps:
        plan = led.plan(plan_id)
        if plan["cluster"] != cmd.cluster or plan["status"] != PlanStatus.APPROVED:
            raise CommandRejected(f"step plan {plan_id} is {plan['status']} on cluster {plan['cluster']!r}; "
                                  f"every step must be an approved plan of {cmd.cluster!r}")
    migration_id = led.allocate()
    migrations[str(migration_id)] = {
        "id": migration_id, "cluster": cmd.cluster, "kind": cmd.kind, "topics": list(cmd.topics),
        "placement": dict(cmd.placement), "previous_placement": copy.deepcopy(cmd.previous_placement),
        "steps": list(cmd.steps), "step": 0, "executions": [], "status": MigrationStatus.RUNNING.value,
        "started_by": cmd.meta.who, "started_at": cmd.meta.at.isoformat(), "finished_at": None, "reason": "",
        "caps": dict(cmd.caps), "options": copy.deepcopy(cmd.options)}
    return {"migration_id": migration_id, "steps": len(cmd.steps), "status": MigrationStatus.RUNNING.value}


@handles(MigrationUpdate, "migration.step")
def step(led: Ledger, cmd: MigrationUpdate) -> JsonDict:
    migration = _migration(led, cmd.migration_id)
    if migration["status"] != MigrationStatus.RUNNING:
        return {"migration_id": cmd.migration_id, "status": migration["status"], "changed": False}
    at = migration["step"] if cmd.step is None else cmd.step
    if at >= len(migration["steps"]):
        raise CommandRejected(f"migration {cmd.migration_id} has {len(migration['steps'])} steps, no step {at}")
    executions = list(migration["executions"])
    if cmd.execution_id is not None:
        executions = executions[:at] + [None] * (at - len(executions)) + [cmd.execution_id]
    migration.update(step=at, executions=executions)
    led.state["migrations"][str(cmd.migration_id)] = migration
    return {"migration_id": cmd.migration_id, "step": at, "execution_id": cmd.execution_id, "changed": True}


@handles(MigrationUpdate, "migration.stop")
def stop(led: Ledger, cmd: MigrationUpdate) -> JsonDict:
    return _end(led, cmd, MigrationStatus.STOPPED)


@handles(MigrationUpdate, "migration.finish")
def finish(led: Ledger, cmd: MigrationUpdate) -> JsonDict:
    if cmd.status is None:
        raise CommandRejected("$.status: required to finish a migration")
    return _end(led, cmd, MigrationStatus(cmd.status))


def _end(led: Ledger, cmd: MigrationUpdate, status: MigrationStatus) -> JsonDict:
    migration = _migration(led, cmd.migration_id)
    current = MigrationStatus(migration["status"])
    if status not in MIGRATION_TRANSITIONS[current]:  # ended already: unchanged
        return {"migration_id": cmd.migration_id, "status": current.value, "changed": False}
    migration.update(status=status.value, finished_at=cmd.meta.at.isoformat(), reason=cmd.meta.why)
    led.state["migrations"][str(cmd.migration_id)] = migration
    return {"migration_id": cmd.migration_id, "status": status.value, "changed": True}
