"""Audit-analytics results served from ClickHouse (the latest finished run of each job).

Who writes and reads a topic (lineage), what each tenant costs, idle topics, cross-IDC traffic and
the per-partition traffic model the pre-allocation planner takes. 503 when this node has no
ClickHouse; the results exist once `guardian analytics run ...` has produced them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import Depends, FastAPI

from analytics_spark import store as analytics_store
from analytics_spark.clickhouse import ClickHouse
from controlplane.api.auth import Principal, require
from controlplane.api.errors import ApiError
from controlplane.service.context import ServiceContext

Viewer = Annotated[Principal, Depends(require("viewer"))]
T = TypeVar("T")


def add_analytics_routes(app: FastAPI, ctx: ServiceContext) -> None:
    """Mount ``/api/v1/analytics/...`` on ``app``."""

    def query(fn: Callable[[ClickHouse], T]) -> T:
        if ctx.clickhouse is None:
            raise ApiError(503, "no ClickHouse on this node ([clickhouse] mode is off or it failed to open)")
        return fn(ctx.clickhouse)

    @app.get("/api/v1/analytics/traffic-model", tags=["analytics"])
    def traffic_model(_: Viewer, cluster: str | None = None) -> dict[str, float]:
        """Expected bytes/s per topic (what `guardian plan preallocate --model` takes)."""
        return query(lambda ch: analytics_store.traffic_model(ch, cluster))

    @app.get("/api/v1/analytics/lineage/{cluster}/{topic}", tags=["analytics"])
    def lineage(cluster: str, topic: str, _: Viewer,
                role: Literal["producer", "consumer"] | None = None) -> list[dict[str, Any]]:
        """Client ids, users and IDCs that write or read a topic, with bytes."""
        return query(lambda ch: analytics_store.topic_clients(ch, cluster, topic, role))

    @app.get("/api/v1/analytics/costs", tags=["analytics"])
    def costs(_: Viewer) -> list[dict[str, Any]]:
        """Bytes in/out, storage and replicas per tenant and pool."""
        return query(analytics_store.tenant_costs)

    @app.get("/api/v1/analytics/idle-topics", tags=["analytics"])
    def idle_topics(_: Viewer) -> list[dict[str, Any]]:
        """Topics with no producer or no consumer over the job's window."""
        return query(analytics_store.idle_topics)

    @app.get("/api/v1/analytics/runs", tags=["analytics"])
    def runs(_: Viewer) -> dict[str, Any]:
        """The latest run of every job (any engine, any node) and this node's last scheduled pass
        (``scheduled``: null when ``[analytics]`` is off or it has not run here yet)."""
        latest = query(analytics_store.latest_runs)
        job = ctx.analytics
        return {"jobs": latest, "scheduled": job.last if job is not None else None,
                "schedule": {"enabled": job is not None, "interval_s": ctx.settings.analytics.interval_s,
                             "engine": ctx.settings.analytics.engine}}

    @app.get("/api/v1/analytics/cross-idc", tags=["analytics"])
    def cross_idc(_: Viewer) -> dict[str, list[dict[str, Any]]]:
        """Leased-line traffic per IDC pair and the clients that cause it."""
        return query(analytics_store.cross_idc)
