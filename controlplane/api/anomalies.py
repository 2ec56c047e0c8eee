"""Anomalies and self-healing: list, explain and ignore anomalies; opt a cluster in to self-healing.

Goal: let an operator see what the detectors found, why (the evidence and the lifecycle history), stop
Guardian acting on one, and turn healing on per cluster with its knobs. Method: reads of the replicated
``anomalies`` / ``self_healing`` records; writes are one replicated command each (``anomaly.update`` to
``ignored``, ``cluster.self_healing``). Guarantee: 404 for an unknown cluster or anomaly; ignoring a fix
in flight is refused (409: stop its execution first). Cost: one state read, or one Raft round trip.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import Field

from controlplane.api.deps import Ctx, Operator, Viewer, cluster_or_404, propose, read
from controlplane.api.errors import ApiError
from controlplane.api.schemas import StrictIn

router = APIRouter(tags=["anomalies"])
AnomalyId = Annotated[int, Path(ge=1, le=2**31 - 1)]


class SelfHealingIn(StrictIn):
    """Opt a cluster in to (or out of) self-healing."""

    enabled: bool
    grace_s: Annotated[float, Field(ge=0, le=86_400)] = 300.0
    max_concurrent_fixes: Annotated[int, Field(ge=1, le=100)] = 1
    mass_failure_share: Annotated[float, Field(gt=0, lt=1)] = 0.34
    evacuate_slow_after_s: Annotated[float, Field(ge=0, le=86_400)] = 1800.0
    heal_bound_s: Annotated[float, Field(gt=0, le=7 * 86_400)] = 3600.0
    """A heal's copies never run slower than the rate that restores its bytes within this bound."""
    heal_rate_bytes_per_s: Annotated[float, Field(gt=0, le=100e9)] = 50e6
    """... nor slower than this rate (bytes/s): the allowed heal rate is max(this, bytes / heal_bound_s)."""


class IgnoreIn(StrictIn):
    """Why the anomaly is ignored (recorded)."""

    reason: Annotated[str, Field(max_length=2000)] = ""


@router.put("/api/v1/clusters/{name}/self-healing")
def set_self_healing(ctx: Ctx, name: str, body: SelfHealingIn, request: Request, who: Operator) -> Any:
    """Self-healing settings of a cluster (off by default): grace period, fix cap, mass-failure share."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "cluster.self_healing", "name": name, **body.model_dump()})


@router.get("/api/v1/anomalies")
def list_anomalies(ctx: Ctx, _: Viewer, cluster: str | None = None, status: str | None = None,
                   open_only: Annotated[bool, Query(alias="open")] = False,
                   limit: Annotated[int, Query(ge=1, le=5000)] = 200) -> list[dict[str, Any]]:
    """Anomalies, newest first (``?cluster=``, ``?status=``, ``?open=true``)."""
    rows: list[dict[str, Any]] = read(ctx, lambda s: [
        {k: v for k, v in a.items() if k != "history"} for a in (s.get("anomalies") or {}).values()
        if (cluster is None or a["cluster"] == cluster) and (status is None or a["status"] == status)
        and (not open_only or a["status"] in ("detected", "confirmed", "fixing"))])
    return sorted(rows, key=lambda a: -int(a["id"]))[:limit]


def _anomaly(ctx: Any, anomaly_id: int) -> dict[str, Any]:
    rec: dict[str, Any] | None = read(ctx, lambda s: (s.get("anomalies") or {}).get(str(anomaly_id)))
    if rec is None:
        raise ApiError(404, f"unknown anomaly {anomaly_id}")
    return dict(rec)


@router.get("/api/v1/anomalies/{anomaly_id}")
def explain_anomaly(ctx: Ctx, _: Viewer, anomaly_id: AnomalyId) -> dict[str, Any]:
    """One anomaly with its evidence, lifecycle history and the plan/execution of its fix."""
    rec = _anomaly(ctx, anomaly_id)
    if rec.get("plan_id"):
        plan = read(ctx, lambda s: dict(s["plans"].get(str(rec["plan_id"])) or {}))
        rec["plan"] = {k: plan.get(k) for k in ("id", "kind", "status", "execution_id", "reason")}
        rec["plan"]["notes"] = (plan.get("plan") or {}).get("notes", [])
    return rec


@router.post("/api/v1/anomalies/{anomaly_id}/ignore")
def ignore_anomaly(ctx: Ctx, anomaly_id: AnomalyId, body: IgnoreIn, request: Request, who: Operator) -> Any:
    """Stop Guardian acting on an anomaly (not one being fixed: stop its execution first)."""
    rec = _anomaly(ctx, anomaly_id)
    if rec["status"] == "fixing":
        raise ApiError(409, f"anomaly {anomaly_id} is being fixed (plan {rec.get('plan_id')}); stop its execution "
                            "first")
    return propose(ctx, request, who, {"type": "anomaly.update", "anomaly_id": anomaly_id, "status": "ignored",
                                       "reason": body.reason or "ignored by an operator"})
