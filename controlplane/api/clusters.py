"""The federation's clusters: register, list, get, forget, and their policies (auto-rebalance window,
IDC placement, resource pools).

Goal: the admin's view of which clusters Guardian manages and under which rules. Method: each write is
one replicated command (``cluster.register``, ``cluster.remove``, ``cluster.auto_rebalance``,
``placement.set``, ``pool.assign``); the state machine refuses what its preconditions forbid (409).
Guarantee: a 404 for an unknown cluster is answered before anything is proposed; a cluster's cached
snapshot is dropped only after its removal committed. Cost: one state read per call plus, for writes,
one Raft round trip; ``GET /clusters/{name}`` adds the pool statistics of the latest snapshot
(O(replicas)).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from controlplane.api.deps import Admin, Ctx, Viewer, cluster_or_404, propose, read
from domain import pool_stats

router = APIRouter(tags=["federation"])


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ClusterIn(_In):
    name: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")]
    bootstrap_servers: Annotated[list[str], Field(min_length=1)]
    metrics_urls: dict[str, str] = Field(default_factory=dict)
    control_url: str | None = None
    capabilities: dict[str, bool] = Field(default_factory=dict)


class AutoRebalanceIn(_In):
    enabled: bool
    window_cron: str = "0 2 * * *"
    window_minutes: Annotated[int, Field(ge=1, le=1440)] = 240
    threshold: Annotated[float, Field(gt=1.0, le=100.0)] = 1.25
    max_partitions: Annotated[int, Field(ge=1, le=100_000)] = 50
    load_basis: Literal["window", "modelled_peak"] = "window"


class PlacementIn(_In):
    topic: str | None = None
    placement: dict[str, Annotated[int, Field(ge=1, le=16)]] | None


class PoolIn(_In):
    brokers: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


@router.get("/api/v1/clusters")
def list_clusters(ctx: Ctx, _: Viewer) -> list[dict[str, Any]]:
    """Registered clusters with their connection settings and policies."""
    clusters: list[dict[str, Any]] = read(ctx, lambda s: list(s["clusters"].values()))
    return clusters


@router.post("/api/v1/clusters", status_code=201)
def register_cluster(ctx: Ctx, body: ClusterIn, request: Request, who: Admin) -> Any:
    """Register (or update) a cluster."""
    return propose(ctx, request, who, {"type": "cluster.register", **body.model_dump()})


@router.get("/api/v1/clusters/{name}")
def get_cluster(ctx: Ctx, name: str, _: Viewer) -> dict[str, Any]:
    """One cluster, with the figures of its latest snapshot when there is one."""
    cluster = cluster_or_404(ctx, name)
    snap = ctx.snapshots.get(name)
    if snap is not None:
        cluster["snapshot"] = {
            "taken_at": snap.taken_at.isoformat(), "brokers": len(snap.brokers),
            "partitions": len(snap.index.partitions),
            "pools": {p: {"max_util": s.max_util, "mean_util": s.mean_util, "peak_to_mean": s.peak_to_mean}
                      for p, s in pool_stats(snap).items()}}
    cluster["maintenance"] = read(ctx, lambda s: dict(s["maintenance"].get(name, {})))
    return cluster


@router.delete("/api/v1/clusters/{name}")
def remove_cluster(ctx: Ctx, name: str, request: Request, who: Admin) -> Any:
    """Forget a cluster (refused while an execution runs on it)."""
    cluster_or_404(ctx, name)
    result = propose(ctx, request, who, {"type": "cluster.remove", "name": name})
    ctx.snapshots.drop(name)
    return result


@router.put("/api/v1/clusters/{name}/auto-rebalance")
def set_auto_rebalance(ctx: Ctx, name: str, body: AutoRebalanceIn, request: Request, who: Admin) -> Any:
    """Opt a cluster in or out of scheduled auto-rebalance (cron window, imbalance threshold)."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "cluster.auto_rebalance", "name": name, **body.model_dump()})


@router.put("/api/v1/clusters/{name}/placement")
def set_placement(ctx: Ctx, name: str, body: PlacementIn, request: Request, who: Admin) -> Any:
    """Set the cluster default (no topic) or a topic's IDC placement policy; null clears it."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "placement.set", "cluster": name, **body.model_dump()})


@router.put("/api/v1/clusters/{name}/pools/{pool}")
def assign_pool(ctx: Ctx, name: str, pool: str, body: PoolIn, request: Request, who: Admin) -> Any:
    """Move brokers into resource pool ``pool``."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "pool.assign", "cluster": name, "pool": pool, **body.model_dump()})
