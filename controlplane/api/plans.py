"""Plans: create one with a planner, import a plan file, list, validate, approve, reject, execute.

Goal: the operator's path from a snapshot to an approved plan and its execution. Method: a new plan is
computed over the cluster's latest fresh snapshot (or parsed from a guardian.plan/v1 document), checked
with the shared invariant checker and recorded as a ``plan.propose`` command; decisions are
``plan.approve``/``plan.reject`` (deciding twice is 409 naming the first decision; with
``[approval] four_eyes`` the proposer's own approval is 409 naming both); ``execute`` hands an approved
plan to this node's executor (recording the token that started it), which re-checks it against the live
cluster. Guarantee: a plan that breaks a constraint is never recorded
(409 with the violations); an unknown plan is 404 before anything is proposed; a plan whose cluster
was removed is 409, never handed to an executor. Bodies: JSON up to 1 MiB, a plan file up to 32 MiB. Cost: planning and
checking are O(the planner) on the snapshot; the rest is one state read and one Raft round trip.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field

from controlplane.api.deps import Ctx, Operator, Viewer, propose, read, snapshot_or_409
from controlplane.api.errors import ApiError
from controlplane.api.guard import MiB, max_body
from controlplane.api.schemas import StrictIn
from controlplane.executor.reconcile import ExecutionConflict, PlanRejected
from controlplane.service.context import ServiceContext
from controlplane.service.planning import PlanRequestError, make_plan
from domain import check_plan, parse_plan, plan_to_dict
from kafkaio.errors import AdminError, KafkaAuthError

router = APIRouter(tags=["plans"])
PLAN_MAX_BODY = 32 * MiB
"""A plan moving 100k partitions is ~15 MB of JSON."""


class PlanIn(StrictIn):
    cluster: str
    kind: str = "rebalance"
    params: dict[str, Any] = Field(default_factory=dict)


def plan_or_404(ctx: ServiceContext, plan_id: int) -> dict[str, Any]:
    """The recorded plan ``plan_id`` (a copy); 404 when unknown."""
    plan = read(ctx, lambda s: s["plans"].get(str(plan_id)))
    if plan is None:
        raise ApiError(404, f"unknown plan {plan_id}")
    return dict(plan)


@router.get("/api/v1/plans")
def list_plans(ctx: Ctx, _: Viewer, cluster: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
    """Plans (without their move lists), newest first."""
    def pick(s: dict[str, Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in p.items() if k != "plan"} | {"summary": p["plan"].get("summary")}
                for p in s["plans"].values()
                if (cluster is None or p["cluster"] == cluster) and (status is None or p["status"] == status)]
    return sorted(read(ctx, pick), key=lambda p: -p["id"])


@router.post("/api/v1/plans", status_code=201)
def create_plan(ctx: Ctx, body: PlanIn, request: Request, who: Operator) -> Any:
    """Run a planner over the cluster's latest fresh snapshot and record the result as a proposal."""
    snap = snapshot_or_409(ctx, body.cluster)
    try:
        plan = make_plan(snap, body.kind, body.params, load_model=ctx.load_model)
    except PlanRequestError as exc:
        raise ApiError(400, str(exc)) from None
    violations = check_plan(snap, plan)
    if violations:
        raise ApiError(409, "the planner produced an invalid plan", violations=[str(v) for v in violations])
    return propose(ctx, request, who, {"type": "plan.propose", "cluster": body.cluster, "kind": plan.kind,
                                       "plan": plan_to_dict(plan), "snapshot_taken_at": snap.taken_at.isoformat()})


@router.post("/api/v1/plans/import", status_code=201, openapi_extra=max_body(PLAN_MAX_BODY, raw_json=True))
async def import_plan(ctx: Ctx, request: Request, who: Operator) -> Any:
    """Record a guardian.plan/v1 document as a proposal after checking it against the latest snapshot."""
    plan = parse_plan(await request.body())
    snap = snapshot_or_409(ctx, plan.cluster)
    violations = check_plan(snap, plan)
    if violations:
        raise ApiError(409, "the plan breaks constraints", violations=[str(v) for v in violations])
    return propose(ctx, request, who, {"type": "plan.propose", "cluster": plan.cluster, "kind": plan.kind,
                                       "plan": plan_to_dict(plan), "snapshot_taken_at": snap.taken_at.isoformat()})


@router.get("/api/v1/plans/{plan_id}")
def get_plan(ctx: Ctx, plan_id: int, _: Viewer) -> dict[str, Any]:
    """One plan, with its guardian.plan/v1 document."""
    return plan_or_404(ctx, plan_id)


@router.post("/api/v1/plans/{plan_id}/validate")
def validate_plan(ctx: Ctx, plan_id: int, _: Viewer) -> dict[str, Any]:
    """Check a recorded plan against the cluster's latest snapshot."""
    record = plan_or_404(ctx, plan_id)
    snap = snapshot_or_409(ctx, record["cluster"])
    violations = check_plan(snap, parse_plan(json.dumps(record["plan"])))
    return {"plan_id": plan_id, "valid": not violations, "violations": [str(v) for v in violations]}


def decided_or_409(record: dict[str, Any], status: str) -> None:
    """A second approval (or rejection) is a refused state change: 409 naming who decided, and when."""
    if record["status"] == status:
        raise ApiError(409, f"plan {record['id']} is already {status} (by {record.get('decided_by')!r} at "
                            f"{record.get('decided_at')})")


@router.post("/api/v1/plans/{plan_id}/approve")
def approve_plan(ctx: Ctx, plan_id: int, request: Request, who: Operator) -> Any:
    """Approve a proposed plan (409 when already approved; with ``[approval] four_eyes``, 409 when the
    approver is the plan's proposer)."""
    record = plan_or_404(ctx, plan_id)
    if ctx.settings.approval.four_eyes and who.name == record.get("proposed_by"):
        raise ApiError(409, f"four-eyes rule: plan {plan_id} was proposed by {record.get('proposed_by')!r}; "
                            f"{who.name!r} cannot approve it too, another operator must")
    decided_or_409(record, "approved")
    return propose(ctx, request, who, {"type": "plan.approve", "plan_id": plan_id})


@router.post("/api/v1/plans/{plan_id}/reject")
def reject_plan(ctx: Ctx, plan_id: int, request: Request, who: Operator) -> Any:
    """Reject a proposed plan (409 when already rejected)."""
    decided_or_409(plan_or_404(ctx, plan_id), "rejected")
    return propose(ctx, request, who, {"type": "plan.reject", "plan_id": plan_id})


@router.post("/api/v1/plans/{plan_id}/execute", status_code=201)
def execute_plan(ctx: Ctx, plan_id: int, request: Request, who: Operator) -> Any:
    """Start executing an approved plan; the executor re-checks it against the live cluster first."""
    record = plan_or_404(ctx, plan_id)
    if record["status"] not in ("approved", "executing"):
        raise ApiError(409, f"plan {plan_id} is {record['status']}; approve it before executing")
    if not read(ctx, lambda s: record["cluster"] in s["clusters"]):
        raise ApiError(409, f"plan {plan_id} is for cluster {record['cluster']!r}, which is no longer registered")
    if ctx.executor is None:
        raise ApiError(503, "no executor on this node")
    try:
        execution_id = ctx.executor.start_approved(plan_id, why=request.headers.get("x-guardian-reason", ""),
                                                   by=who.name)
    except PlanRejected as exc:
        raise ApiError(409, "the plan no longer fits the cluster",
                       violations=[str(v) for v in exc.violations]) from None
    except ExecutionConflict as exc:
        raise ApiError(409, str(exc)) from None
    except AdminError as exc:
        if isinstance(exc, KafkaAuthError):
            raise  # 502 naming the cluster and its security settings (controlplane.api.errors)
        raise ApiError(503, f"cluster {record['cluster']!r} unreachable: {exc}") from None
    return {"execution_id": execution_id, "plan_id": plan_id, "executed_by": who.name}
