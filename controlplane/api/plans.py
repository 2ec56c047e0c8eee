"""Plans: create one with a planner, import a plan file, list, validate, approve, reject, execute.

Goal: the operator's path from a snapshot to an approved plan and its execution. Method: a new plan is
computed over the cluster's latest fresh snapshot (or parsed from a guardian.plan/v1 document), checked
with the shared invariant checker and recorded as a ``plan.propose`` command. Every planner kind is here:
``rebalance``, ``leaders``, ``drain``, ``pool-shrink``, ``preallocate``, ``read-local``, ``restore`` (undo
a finished drain execution, judged against the placement it recorded, as ``guardian exec restore`` is),
``pool-grow`` (records the brokers to move into the pool, moved when it is executed) and ``migrate-idc``
(one plan per step, the placement policy set when step 1 is executed; the one-command form is
:mod:`controlplane.api.migrations`) — each with typed parameters (the models of :mod:`planners.params`,
which the registry and the CLI use too; :mod:`controlplane.api.plan_params`, 400 naming
``$.params.<field>``). ``execute`` takes optional caps and
migration throttle settings (``exec run``'s options), recorded on the execution. Decisions are
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
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from pydantic import Field

from controlplane.api.auth import Principal
from controlplane.api.deps import Ctx, Operator, Viewer, propose, read, snapshot_or_409
from controlplane.api.errors import ApiError
from controlplane.api.guard import MiB, max_body
from controlplane.api.plan_params import (
    PARAMS_BY_KIND,
    RECORDED_KINDS,
    ExecuteIn,
    RestoreParams,
    checked,
    execution_settings,
)
from controlplane.api.schemas import StrictIn
from controlplane.executor.reconcile import ExecutionConflict, PlanRejected
from controlplane.executor.release import ReleaseError
from controlplane.service.context import ServiceContext
from controlplane.service.planning import PlanRequestError, make_proposal, make_restore
from domain import (
    ClusterSnapshot,
    Plan,
    apply_plan,
    check_any_plan,
    check_plan,
    parse_plan,
    plan_from_dict,
    plan_to_dict,
)
from domain.execution import ExecutionStatus
from domain.plan_record import LIVE_PLAN_STATUSES, PlanStatus
from kafkaio.errors import AdminError, KafkaAuthError
from planners.registry import Proposal

router = APIRouter(tags=["plans"])
PLAN_MAX_BODY = 32 * MiB
"""A plan moving 100k partitions is ~15 MB of JSON."""


KINDS_DOC = ("Planner parameters. Every kind takes max_bytes, max_partitions (alias max_moves), capacity_headroom "
             "and load_basis (window | modelled_peak). rebalance: target (threshold), floor, evacuate_dead; "
             "leaders: tolerance; drain: brokers; pool-shrink: pool, brokers | count, free_pool; preallocate: topic, "
             "partitions, replication_factor, bytes_in_per_s, pool, placement, traffic_model; read-local: demand, "
             "threshold; restore: drain_execution; pool-grow: pool, count, free_pool; migrate-idc: placement, "
             "topics | pool, min_insync. Each kind's schema: x-guardian-params.")


class PlanIn(StrictIn):
    cluster: str
    kind: str = Field("rebalance", description="rebalance, leaders, drain, pool-shrink, preallocate, restore, "
                                                "pool-grow or migrate-idc")
    params: dict[str, Any] = Field(default_factory=dict, description=KINDS_DOC)


def plan_or_404(ctx: ServiceContext, plan_id: int, *, moves: bool = True) -> dict[str, Any]:
    """The recorded plan ``plan_id`` (a copy; without its ``plan`` document unless ``moves``: a decision needs
    its status, not a copy of 15 MB of moves); 404 when unknown."""
    def pick(s: dict[str, Any]) -> dict[str, Any] | None:
        doc = s["plans"].get(str(plan_id))
        return doc if doc is None or moves else {k: v for k, v in doc.items() if k != "plan"}
    plan = read(ctx, pick)
    if plan is None:
        raise ApiError(404, f"unknown plan {plan_id}")
    return dict(plan)


def plan_json_or_404(ctx: ServiceContext, plan_id: int) -> bytes:
    """The recorded plan ``plan_id`` as the JSON a response carries, encoded under the state's read lock: one
    pass over the plan (no deep copy, then no second walk by the response encoder); 404 when unknown."""
    def encode(s: dict[str, Any]) -> bytes | None:
        doc = s["plans"].get(str(plan_id))
        return None if doc is None else json.dumps(doc, ensure_ascii=False, allow_nan=False,
                                                   separators=(",", ":")).encode()
    text = ctx.store.read(encode)
    if text is None:
        raise ApiError(404, f"unknown plan {plan_id}")
    return text


@router.get("/api/v1/plans")
def list_plans(ctx: Ctx, _: Viewer, cluster: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
    """Plans (without their move lists), newest first."""
    def pick(s: dict[str, Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in p.items() if k != "plan"} | {"summary": p["plan"].get("summary")}
                for p in s["plans"].values()
                if (cluster is None or p["cluster"] == cluster) and (status is None or p["status"] == status)]
    return sorted(read(ctx, pick), key=lambda p: -p["id"])


def finished_drain(ctx: ServiceContext, cluster: str, execution_id: int | None) -> dict[str, Any]:
    """The finished drain execution ``execution_id`` of ``cluster`` (default: the latest); 409 when none."""
    def pick(s: dict[str, Any]) -> list[dict[str, Any]]:
        return [e for e in s["executions"].values()
                if e["cluster"] == cluster and e["status"] in (ExecutionStatus.COMPLETED, ExecutionStatus.STOPPED)
                and "drain" in (e.get("options", {}).get("release"), e.get("options", {}).get("kind"),
                                (s["plans"].get(str(e["plan_id"])) or {}).get("kind"))]
    drains = read(ctx, pick)
    if execution_id is not None:
        drains = [e for e in drains if e["id"] == execution_id]
    if not drains:
        which = f" {execution_id}" if execution_id is not None else ""
        raise ApiError(409, f"no finished drain execution{which} on cluster {cluster!r} to restore")
    drain = max(drains, key=lambda e: e["id"])
    drain.setdefault("options", {}).setdefault("kind", "drain")
    return dict(drain)


def checked_steps(snapshot: ClusterSnapshot, plans: tuple[Plan, ...]) -> None:
    """409 with the violations unless every plan is valid against the snapshot the previous ones leave."""
    current = snapshot
    for n, plan in enumerate(plans, start=1):
        violations = check_any_plan(current, plan)  # (a pre-allocation: the new topic's assignment)
        if violations:
            step = f" (step {n} of {len(plans)})" if len(plans) > 1 else ""
            raise ApiError(409, f"the planner produced an invalid plan{step}", violations=[str(v) for v in violations])
        if n < len(plans):  # the next step is checked against what this one leaves (no copy after the last)
            current = apply_plan(current, plan)


def propose_all(ctx: ServiceContext, request: Request, who: Principal, cluster: str, snap: ClusterSnapshot,
                plans: tuple[Plan, ...], params: dict[str, Any], prerequisites: dict[str, Any]) -> list[int]:
    """Record ``plans`` as proposals, in order; the first carries the metadata changes they need."""
    ids = []
    for n, plan in enumerate(plans):
        result = propose(ctx, request, who, {
            "type": "plan.propose", "cluster": cluster, "kind": plan.kind, "plan": plan_to_dict(plan),
            "snapshot_taken_at": snap.taken_at.isoformat(), "params": params,
            "prerequisites": prerequisites if n == 0 else {}})
        ids.append(int(result["plan_id"]))
    return ids


def proposal_for(ctx: ServiceContext, cluster: str, snap: ClusterSnapshot, kind: str,
                 params: dict[str, Any]) -> tuple[Proposal, dict[str, Any]]:
    """Run planner ``kind`` (typed parameters checked first); the proposal and the parameters to record."""
    model = PARAMS_BY_KIND.get(kind)
    if model is not None:
        params = checked(model, params, ("params",)).model_dump(exclude_none=True)
    try:
        if kind == "restore":
            drain = finished_drain(ctx, cluster, RestoreParams.model_validate(params).drain_execution)
            plan, recorded = make_restore(snap, drain)
            violations = check_plan(snap, plan, recorded=recorded)
            if violations:
                raise ApiError(409, "the restore breaks constraints", violations=[str(v) for v in violations])
            return Proposal(plans=(plan,), snapshot=snap), {"drain_execution": drain["id"]}
        return make_proposal(snap, kind, params, load_model=ctx.load_model), params
    except PlanRequestError as exc:
        raise ApiError(400, str(exc)) from None


@router.post("/api/v1/plans", status_code=201, openapi_extra={"x-guardian-params": {
    kind: model.model_json_schema() for kind, model in PARAMS_BY_KIND.items()}})
def create_plan(ctx: Ctx, body: PlanIn, request: Request, who: Operator) -> Any:
    """Run a planner over the cluster's latest fresh snapshot and record the result as a proposal
    (``migrate-idc``: one proposal per step, ``plan_ids`` in order)."""
    snap = snapshot_or_409(ctx, body.cluster)
    proposal, params = proposal_for(ctx, body.cluster, snap, body.kind, dict(body.params))
    if not proposal.plans:
        raise ApiError(409, f"{body.kind}: nothing to do (the selected topics already meet the policy)")
    if body.kind != "restore":
        checked_steps(proposal.snapshot, proposal.plans)
    recorded = params if body.kind in RECORDED_KINDS else {}
    ids = propose_all(ctx, request, who, body.cluster, snap, proposal.plans, recorded, proposal.prerequisites)
    out: dict[str, Any] = {"plan_id": ids[0], "status": "proposed"}
    if len(ids) > 1:
        out.update(plan_ids=ids, steps=len(ids))
    if proposal.prerequisites:
        out["prerequisites"] = proposal.prerequisites
    return out


@router.post("/api/v1/plans/import", status_code=201, openapi_extra=max_body(PLAN_MAX_BODY, raw_json=True))
async def import_plan(ctx: Ctx, request: Request, who: Operator) -> Any:
    """Record a guardian.plan/v1 document as a proposal after checking it against the latest snapshot."""
    plan = parse_plan(await request.body())
    snap = snapshot_or_409(ctx, plan.cluster)
    violations = check_any_plan(snap, plan)
    if violations:
        raise ApiError(409, "the plan breaks constraints", violations=[str(v) for v in violations])
    return propose(ctx, request, who, {"type": "plan.propose", "cluster": plan.cluster, "kind": plan.kind,
                                       "plan": plan_to_dict(plan), "snapshot_taken_at": snap.taken_at.isoformat()})


@router.get("/api/v1/plans/{plan_id}", response_class=Response,
            responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}}})
def get_plan(ctx: Ctx, plan_id: int, _: Viewer) -> Response:
    """One plan, with its guardian.plan/v1 document."""
    return Response(plan_json_or_404(ctx, plan_id), media_type="application/json")


@router.post("/api/v1/plans/{plan_id}/validate")
def validate_plan(ctx: Ctx, plan_id: int, _: Viewer) -> dict[str, Any]:
    """Check a recorded plan against the cluster's latest snapshot."""
    record = plan_or_404(ctx, plan_id)
    snap = snapshot_or_409(ctx, record["cluster"])
    violations = check_any_plan(snap, plan_from_dict(record["plan"]))
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
    record = plan_or_404(ctx, plan_id, moves=False)
    if ctx.settings.approval.four_eyes and who.name == record.get("proposed_by"):
        raise ApiError(409, f"four-eyes rule: plan {plan_id} was proposed by {record.get('proposed_by')!r}; "
                            f"{who.name!r} cannot approve it too, another operator must")
    decided_or_409(record, "approved")
    return propose(ctx, request, who, {"type": "plan.approve", "plan_id": plan_id})


@router.post("/api/v1/plans/{plan_id}/reject")
def reject_plan(ctx: Ctx, plan_id: int, request: Request, who: Operator) -> Any:
    """Reject a proposed plan (409 when already rejected)."""
    decided_or_409(plan_or_404(ctx, plan_id, moves=False), "rejected")
    return propose(ctx, request, who, {"type": "plan.reject", "plan_id": plan_id})


def apply_prerequisites(ctx: ServiceContext, request: Request, who: Principal, record: dict[str, Any]) -> None:
    """Put the metadata changes a plan needs in force (pool membership, placement policies) before it runs."""
    needs = record.get("prerequisites") or {}
    for pool, brokers in sorted((needs.get("pools") or {}).items()):
        propose(ctx, request, who, {"type": "pool.assign", "cluster": record["cluster"], "pool": pool,
                                    "brokers": list(brokers)})
    for topic, placement in sorted((needs.get("placements") or {}).items()):
        propose(ctx, request, who, {"type": "placement.set", "cluster": record["cluster"], "topic": topic,
                                    "placement": dict(placement)})


@router.post("/api/v1/plans/{plan_id}/execute", status_code=201)
def execute_plan(ctx: Ctx, plan_id: int, request: Request, who: Operator,
                 body: Annotated[ExecuteIn | None, Body()] = None) -> Any:
    """Start executing an approved plan; the executor re-checks it against the live cluster first. The body
    (optional) sets the execution's concurrency caps and migration throttle (mode, rates, time-of-day
    schedule), recorded on the execution. A plan's prerequisites (a pool-grow's brokers, a migrate-idc
    step 1's placement policy) are put in force first."""
    record = plan_or_404(ctx, plan_id, moves=False)
    if record["status"] not in LIVE_PLAN_STATUSES:
        raise ApiError(409, f"plan {plan_id} is {record['status']}; approve it before executing")
    if not read(ctx, lambda s: record["cluster"] in s["clusters"]):
        raise ApiError(409, f"plan {plan_id} is for cluster {record['cluster']!r}, which is no longer registered")
    caps, options = execution_settings(body, getattr(ctx.executor, "policy", None))
    if ctx.executor is None:
        raise ApiError(503, "no executor on this node")
    if record["status"] == PlanStatus.APPROVED:
        apply_prerequisites(ctx, request, who, record)
    return start_execution(ctx, record, request, who, caps, options)


def start_execution(ctx: ServiceContext, record: dict[str, Any], request: Request, who: Principal,
                    caps: dict[str, int], options: dict[str, Any]) -> dict[str, Any]:
    """Hand an approved plan to this node's executor; its refusals as problems (409, 503, 502)."""
    plan_id = int(record["id"])
    if ctx.executor is None:
        raise ApiError(503, "no executor on this node")
    try:
        execution_id = ctx.executor.start_approved(plan_id, caps=caps or None,
                                                   why=request.headers.get("x-guardian-reason", ""),
                                                   by=who.name, options=options or None)
    except PlanRejected as exc:
        raise ApiError(409, "the plan no longer fits the cluster",
                       violations=[str(v) for v in exc.violations]) from None
    except (ExecutionConflict, ReleaseError) as exc:
        raise ApiError(409, str(exc)) from None
    except AdminError as exc:
        if isinstance(exc, KafkaAuthError):
            raise  # 502 naming the cluster and its security settings (controlplane.api.errors)
        raise ApiError(503, f"cluster {record['cluster']!r} unreachable: {exc}") from None
    return {"execution_id": execution_id, "plan_id": plan_id, "executed_by": who.name,
            **({"caps": caps} if caps else {}), **options}
