"""Throttles: the ones in force (with their evidence), manual set/clear, explain and evaluate now.

Goal: see and steer throttle protection. Method: manual throttles are replicated ``throttle.set`` /
``throttle.clear`` commands that the leader's throttle loop applies to the cluster; ``explain`` joins
the throttle service's last evaluation with the throttles in force and their history from the action
log; ``evaluate`` runs one evaluation on the leader (a follower redirects, 307). Guarantee: 404 for an
unknown cluster or throttle before anything is proposed. Cost: one state read (explain scans the action
log, O(5,000)); evaluate costs one throttle evaluation of the cluster.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import Field, field_validator, model_validator

from controlplane.api.deps import Ctx, Operator, Viewer, cluster_or_404, propose, read
from controlplane.api.errors import ApiError
from controlplane.api.schemas import StrictIn
from controlplane.service.context import ServiceContext
from controlplane.service.protection import ProtectionService
from controlplane.state.reads import detached, throttle_records
from domain.throttles import LEVER_KINDS, TARGET_FIELDS
from raft.errors import NotLeaderError

router = APIRouter(tags=["throttles"])


class ManualLeverIn(StrictIn):
    """An operator's protection lever (``PUT /api/v1/throttles/{cluster}/{key}``), applied by the leader's
    protection reconcile like protection's own; a lever kind of :mod:`domain.throttles` and the target it needs."""

    kind: Annotated[str, Field(min_length=1)]
    target: dict[str, Any]
    rate_bytes_per_s: Annotated[float, Field(ge=0)]

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in LEVER_KINDS:  # else it would be recorded and never applied
            raise ValueError(f"unknown lever kind {kind!r}; known: {', '.join(LEVER_KINDS)}")
        return kind

    @model_validator(mode="after")
    def _target_fits(self) -> ManualLeverIn:
        missing = [f for f in TARGET_FIELDS[self.kind] if f not in self.target]
        if missing:
            raise ValueError(f"target: a {self.kind} lever needs {', '.join(missing)}")
        return self


def throttle_service(ctx: ServiceContext) -> ProtectionService:
    """This node's throttle service (:func:`controlplane.api.app.create_app` guarantees one)."""
    service = ctx.throttle
    assert service is not None
    return service


def leader_only(ctx: ServiceContext) -> None:
    """Raise :class:`NotLeaderError` (307 to the leader, or 503) unless this node leads."""
    if not ctx.store.is_leader:
        raise NotLeaderError(ctx.store.status().get("leader"))


@router.get("/api/v1/throttles")
def list_throttles(ctx: Ctx, _: Viewer, cluster: str | None = None) -> list[dict[str, Any]]:
    """Throttles in force, with the evidence that justified each."""
    def pick(s: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"cluster": c, **t} for c, items in sorted(s["throttles"].items()) for t in items.values()
                if cluster is None or c == cluster]
    throttles: list[dict[str, Any]] = read(ctx, pick)
    return throttles


@router.put("/api/v1/throttles/{cluster}/{key}")
def set_throttle(ctx: Ctx, cluster: str, key: str, body: ManualLeverIn, request: Request, who: Operator) -> Any:
    """Record a manual throttle (applied by the throttle loop on the leader)."""
    cluster_or_404(ctx, cluster)
    return propose(ctx, request, who, {"type": "throttle.set", "cluster": cluster, "key": key,
                                       "evidence": {"manual": True}, **body.model_dump()})


@router.delete("/api/v1/throttles/{cluster}/{key}")
def clear_throttle(ctx: Ctx, cluster: str, key: str, request: Request, who: Operator) -> Any:
    """Clear a throttle."""
    cluster_or_404(ctx, cluster)
    exists = read(ctx, lambda s: key in s["throttles"].get(cluster, {}))
    if not exists:
        raise ApiError(404, f"no throttle {key!r} on cluster {cluster!r}")
    return propose(ctx, request, who, {"type": "throttle.clear", "cluster": cluster, "key": key})


@router.get("/api/v1/throttle/explain/{cluster}")
def explain(ctx: Ctx, cluster: str, _: Viewer) -> dict[str, Any]:
    """Disk health, abnormal-behaviour queue and decisions of the last evaluation, with active throttles."""
    out = throttle_service(ctx).explain(cluster)
    out["throttles"] = [r.to_json() for r in ctx.store.read(lambda s: throttle_records(s, cluster)).values()]
    out["history"] = ctx.store.read(lambda s: detached(
        [a for a in s["actions"] if a["type"].startswith("throttle.") and a["subject"].get("cluster") == cluster]
        [-200:]))
    return out


@router.post("/api/v1/throttle/evaluate/{cluster}")
def evaluate(ctx: Ctx, cluster: str, _: Operator) -> dict[str, Any]:
    """Run one throttle evaluation of ``cluster`` now (leader only)."""
    service = throttle_service(ctx)
    leader_only(ctx)
    if not ctx.store.read(lambda s: cluster in s["clusters"]):
        raise ApiError(404, f"unknown cluster {cluster!r}")
    return service.evaluate(cluster, trigger="api")
