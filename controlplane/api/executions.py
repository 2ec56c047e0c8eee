"""Executions: list them with task counts, one with every task and its progress, stop (with rollback).

Goal: follow and control what the executor does on a cluster. Method: reads select from the
replicated state (task counts per state; bytes moved of bytes to move counted from the tasks by the one
:func:`domain.execution.progress_json`, so list, detail and dashboard agree and never pass 100%);
``stop`` is one replicated ``execution.stop`` command that the leader's executor acts on in its next
pass; ``caps`` changes a running execution's concurrency caps (``execution.caps``, read by the executor every
pass). Guarantee: 404 for an unknown execution before anything is proposed; stopping a finished
execution changes nothing and says so (``changed: false``). Cost: O(tasks) per read; one Raft round trip per stop.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request

from controlplane.api.deps import Ctx, Operator, Viewer, propose, read
from controlplane.api.errors import ApiError
from controlplane.api.plan_params import CapsIn
from controlplane.api.schemas import StrictIn
from controlplane.service.context import ServiceContext
from domain.execution import progress_json

router = APIRouter(tags=["executions"])


class StopIn(StrictIn):
    rollback: bool = False


def execution_or_404(ctx: ServiceContext, execution_id: int) -> dict[str, Any]:
    """The execution ``execution_id`` (a copy); 404 when unknown."""
    execution = read(ctx, lambda s: s["executions"].get(str(execution_id)))
    if execution is None:
        raise ApiError(404, f"unknown execution {execution_id}")
    return dict(execution)


@router.get("/api/v1/executions")
def list_executions(ctx: Ctx, _: Viewer, cluster: str | None = None) -> list[dict[str, Any]]:
    """Executions with task counts by state, newest first."""
    def pick(s: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for e in s["executions"].values():
            if cluster is None or e["cluster"] == cluster:
                counts: dict[str, int] = {}
                for t in e["tasks"].values():
                    counts[t["state"]] = counts.get(t["state"], 0) + 1
                out.append({k: v for k, v in e.items() if k != "tasks"} | {"task_states": counts,
                                                                          "progress": progress_json(e)})
        return out
    return sorted(read(ctx, pick), key=lambda e: -e["id"])


@router.get("/api/v1/executions/{execution_id}")
def get_execution(ctx: Ctx, execution_id: int, _: Viewer) -> dict[str, Any]:
    """One execution with every task, its state and progress."""
    execution = execution_or_404(ctx, execution_id)
    execution["progress"] = progress_json(execution)
    return execution


@router.post("/api/v1/executions/{execution_id}/stop")
def stop_execution(ctx: Ctx, execution_id: int, request: Request, who: Operator,
                   body: Annotated[StopIn | None, Body()] = None) -> Any:
    """Stop submitting new tasks; with rollback, cancel the in-flight ones too."""
    execution_or_404(ctx, execution_id)
    return propose(ctx, request, who, {"type": "execution.stop", "execution_id": execution_id,
                                       "rollback": bool(body and body.rollback)})


@router.put("/api/v1/executions/{execution_id}/caps")
def set_caps(ctx: Ctx, execution_id: int, body: CapsIn, request: Request, who: Operator) -> Any:
    """Change the concurrency caps of an execution (``guardian exec caps`` for a service execution)."""
    execution_or_404(ctx, execution_id)
    caps = body.given()
    if not caps:
        raise ApiError(400, "$: give at least one of per_broker, per_disk, per_cluster")
    return propose(ctx, request, who, {"type": "execution.caps", "execution_id": execution_id, "caps": caps})
