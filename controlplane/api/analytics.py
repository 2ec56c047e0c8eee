"""Audit-analytics results served from ClickHouse (the latest finished run of each job).

Goal: who writes and reads a topic (lineage), what each tenant costs, idle topics, cross-IDC traffic
and the per-partition traffic model the pre-allocation planner takes. Method: each route is one query
of :mod:`analytics_spark.clickhouse.store` over this node's ClickHouse. Guarantee: 503 (never a 500) when this
node has no ClickHouse; the results exist once `guardian analytics run ...` has produced them.
Cost: one ClickHouse query over the latest run's result table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from fastapi import APIRouter

from analytics_spark.clickhouse import ClickHouse
from analytics_spark.clickhouse import store as analytics_store
from controlplane.api.deps import Ctx, Viewer
from controlplane.api.errors import ApiError
from controlplane.api.schemas import problem_response
from controlplane.service.context import ServiceContext

T = TypeVar("T")
router = APIRouter(tags=["analytics"], responses={503: problem_response(503)})


def query(ctx: ServiceContext, fn: Callable[[ClickHouse], T]) -> T:
    """``fn`` over this node's ClickHouse; 503 when it has none."""
    if ctx.clickhouse is None:
        raise ApiError(503, "no ClickHouse on this node ([clickhouse] mode is off or it failed to open)")
    return fn(ctx.clickhouse)


@router.get("/api/v1/analytics/traffic-model")
def traffic_model(ctx: Ctx, _: Viewer, cluster: str | None = None) -> dict[str, float]:
    """Expected bytes/s per topic (what `guardian plan preallocate --model` takes)."""
    return query(ctx, lambda ch: analytics_store.traffic_model(ch, cluster))


@router.get("/api/v1/analytics/lineage/{cluster}/{topic}")
def lineage(ctx: Ctx, cluster: str, topic: str, _: Viewer,
            role: Literal["producer", "consumer"] | None = None) -> list[dict[str, Any]]:
    """Client ids, users and IDCs that write or read a topic, with bytes."""
    return query(ctx, lambda ch: analytics_store.topic_clients(ch, cluster, topic, role))


@router.get("/api/v1/analytics/costs")
def costs(ctx: Ctx, _: Viewer) -> list[dict[str, Any]]:
    """Bytes in/out, storage and replicas per tenant and pool."""
    return query(ctx, analytics_store.tenant_costs)


@router.get("/api/v1/analytics/idle-topics")
def idle_topics(ctx: Ctx, _: Viewer) -> list[dict[str, Any]]:
    """Topics with no producer or no consumer over the job's window."""
    return query(ctx, analytics_store.idle_topics)


@router.get("/api/v1/analytics/runs")
def runs(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    """The latest run of every job (any engine, any node) and this node's last scheduled pass
    (``scheduled``: null when ``[analytics]`` is off or it has not run here yet)."""
    latest = query(ctx, analytics_store.latest_runs)
    job = ctx.analytics
    return {"jobs": latest, "scheduled": job.last if job is not None else None,
            "schedule": {"enabled": job is not None, "interval_s": ctx.settings.analytics.interval_s,
                         "engine": ctx.settings.analytics.engine}}


@router.get("/api/v1/analytics/cross-idc")
def cross_idc(ctx: Ctx, _: Viewer) -> dict[str, list[dict[str, Any]]]:
    """Leased-line traffic per IDC pair and the clients that cause it."""
    return query(ctx, analytics_store.cross_idc)
