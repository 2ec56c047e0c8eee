"""Migrations: one command that moves topics to a new IDC placement, every step to completion, in order.

Goal: ``migrate-idc`` as one operator action (``guardian migrate-idc TOPIC --to idc-b=3``), where the plan
route gives one proposal per step. Method: ``POST /api/v1/migrations`` plans every step over the
cluster's latest fresh snapshot (:func:`planners.registry.migrate_idc`, each step checked against the
snapshot the previous leave), records them as plans proposed *and approved* by the caller (the request
is the operator's decision; with ``[approval] four_eyes`` it is refused — use the plan route so another
operator approves each step), sets each topic's placement policy, and records the parent
``migration.start`` with the caps and migration throttle every step runs under. The leader's executor
then runs the steps one after another as ordinary executions (:mod:`controlplane.executor.migrations`):
each keeps offsets (a reassignment copies the log), is throttled and reports progress like any
execution; ``GET`` answers the migration with step k of n, bytes done of all steps' bytes and the
current execution's rate and ETA. ``stop`` ends it: no further step starts, the current execution is
stopped (with rollback, its in-flight moves revert). Guarantee: nothing is proposed unless every step
is valid; 404 for an unknown migration. Cost: planning O(the planner); a few Raft round trips per call.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Request

from controlplane.api.deps import Ctx, Operator, Viewer, propose, read, snapshot_or_409
from controlplane.api.errors import ApiError
from controlplane.api.plan_params import CapsIn, ExecuteIn, MigrationThrottleIn, execution_settings
from controlplane.api.plans import checked_steps, propose_all
from controlplane.api.schemas import Name, StrictIn
from controlplane.executor.migrations import migration_progress, migrations_of
from controlplane.service.context import ServiceContext
from controlplane.service.planning import PlanRequestError, make_proposal
from domain.execution import ACTIVE_STATUSES
from planners.params import MigrateIdcParams

router = APIRouter(tags=["migrations"])


class MigrationIn(MigrateIdcParams):
    """A one-command IDC migration of ``topics`` (or every topic of ``pool``) to ``placement``: the
    ``migrate-idc`` planner's parameters (:class:`planners.params.MigrateIdcParams`) with the cluster and the
    execution settings."""

    cluster: Name
    kind: Literal["migrate-idc"] = "migrate-idc"
    caps: CapsIn | None = None
    throttle: MigrationThrottleIn | None = None


class StopIn(StrictIn):
    rollback: bool = False


def migration_or_404(ctx: ServiceContext, migration_id: int) -> dict[str, Any]:
    """The migration with its progress and each step's plan id and execution; 404 when unknown."""
    def pick(s: dict[str, Any]) -> dict[str, Any] | None:
        m = migrations_of(s).get(str(migration_id))
        return None if m is None else {**m, "progress": migration_progress(s, m)}
    found = read(ctx, pick)
    if found is None:
        raise ApiError(404, f"unknown migration {migration_id}")
    return dict(found)


@router.post("/api/v1/migrations", status_code=201)
def start_migration(ctx: Ctx, body: MigrationIn, request: Request, who: Operator) -> Any:
    """Set the placement policy, plan every step and run them all, in order, as executions."""
    if ctx.settings.approval.four_eyes:
        raise ApiError(409, "four-eyes rule: a one-command migration approves its own steps; propose them with "
                            "POST /api/v1/plans (kind migrate-idc) so another operator approves each")
    snap = snapshot_or_409(ctx, body.cluster)
    caps, options = execution_settings(ExecuteIn(caps=body.caps, throttle=body.throttle),
                                       getattr(ctx.executor, "policy", None))
    params = body.model_dump(exclude={"cluster", "kind", "caps", "throttle"}, exclude_none=True)
    try:
        proposal = make_proposal(snap, "migrate-idc", params)
    except PlanRequestError as exc:
        raise ApiError(400, str(exc)) from None
    if not proposal.plans:
        raise ApiError(409, f"nothing to migrate: {sorted(proposal.placements)} already meet {body.placement}")
    checked_steps(proposal.snapshot, proposal.plans)
    if ctx.executor is None:
        raise ApiError(503, "no executor on this node")
    topics = sorted(proposal.placements)
    previous = read(ctx, lambda s: {t: s["clusters"][body.cluster]["placement"]["topics"].get(t) for t in topics})
    steps = propose_all(ctx, request, who, body.cluster, snap, proposal.plans, params, {})
    for plan_id in steps:
        propose(ctx, request, who, {"type": "plan.approve", "plan_id": plan_id})
    for topic in topics:
        propose(ctx, request, who, {"type": "placement.set", "cluster": body.cluster, "topic": topic,
                                    "placement": dict(body.placement)})
    result = propose(ctx, request, who, {"type": "migration.start", "cluster": body.cluster, "kind": body.kind,
                                         "topics": topics, "placement": dict(body.placement),
                                         "previous_placement": previous, "steps": steps, "caps": caps,
                                         "options": options})
    return {"migration_id": result["migration_id"], "steps": len(steps), "plan_ids": steps, "topics": topics,
            "placement": dict(body.placement), "status": "running"}


@router.get("/api/v1/migrations")
def list_migrations(ctx: Ctx, _: Viewer, cluster: str | None = None) -> list[dict[str, Any]]:
    """Migrations with their progress, newest first."""
    def pick(s: dict[str, Any]) -> list[dict[str, Any]]:
        return [{**m, "progress": migration_progress(s, m)} for m in migrations_of(s).values()
                if cluster is None or m["cluster"] == cluster]
    return sorted(read(ctx, pick), key=lambda m: -m["id"])


@router.get("/api/v1/migrations/{migration_id}")
def get_migration(ctx: Ctx, migration_id: int, _: Viewer) -> dict[str, Any]:
    """One migration: its steps (plan ids), the execution of each step so far, progress."""
    return migration_or_404(ctx, migration_id)


@router.post("/api/v1/migrations/{migration_id}/stop")
def stop_migration(ctx: Ctx, migration_id: int, request: Request, who: Operator,
                   body: Annotated[StopIn | None, Body()] = None) -> Any:
    """Start no further step and stop the current execution (with rollback, its in-flight moves revert)."""
    migration = migration_or_404(ctx, migration_id)
    result = propose(ctx, request, who, {"type": "migration.stop", "migration_id": migration_id})
    step = migration["step"]
    current = migration["executions"][step] if step < len(migration["executions"]) else None
    active = current is not None and read(ctx, lambda s: (s["executions"].get(str(current)) or {}).get(
        "status") in ACTIVE_STATUSES)
    if active:
        propose(ctx, request, who, {"type": "execution.stop", "execution_id": current,
                                    "rollback": bool(body and body.rollback)})
    return {**result, "execution_stopped": current if active else None}
