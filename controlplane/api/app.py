"""The REST API ``/api/v1`` (FastAPI, OpenAPI at ``/docs`` and ``/openapi.json``): the app factory.

Goal: one place that assembles the API — the routers (one module per resource), the error handlers
and the middleware — over a :class:`ServiceContext`. Method: :func:`create_app` puts the context on
``app.state`` (routers reach it through :data:`controlplane.api.deps.Ctx`), installs the RFC 7807
error handlers, the access-log and metrics middleware, and includes the routers. Guarantee: reads need
role viewer, actions operator, configuration admin; every mutating call becomes a command in the
replicated state (who = the token's name, why = the ``X-Guardian-Reason`` header) and is also written
to this node's access log with its result; errors are RFC 7807 problems. Cost: the middleware adds a
counter increment per request and one appended line per mutating call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from fastapi import FastAPI, Request, Response

from controlplane.api import (
    actions,
    alerts,
    analytics,
    clusters,
    executions,
    health,
    ids,
    maintenance,
    plans,
    snapshots,
    throttles,
)
from controlplane.api.errors import install_error_handlers
from controlplane.service.context import ServiceContext
from controlplane.service.throttle_loop import ThrottleService

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ROUTERS = (health, clusters, snapshots, maintenance, plans, executions, throttles, ids, actions, alerts, analytics)
"""Router modules in the order their routes are matched (each has ``router``)."""


def create_app(ctx: ServiceContext) -> FastAPI:
    """The FastAPI application over ``ctx``. A context without a throttle service gets one that is bound
    to no cluster (alerts are recorded and evaluations skipped with a reason; nothing is contacted)."""
    app = FastAPI(title="Guardian", version="0.1.0",
                  description="Control plane for a federation of Kafka clusters.")
    app.state.ctx = ctx
    app.state.http_of = ctx.http_of
    if ctx.throttle is None:
        ctx.throttle = ThrottleService(ctx.store, max_snapshot_age_s=ctx.settings.max_snapshot_age_s)
    install_error_handlers(app)

    @app.middleware("http")
    async def record(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        ctx.metrics.http_requests.labels(request.method, route, str(response.status_code)).inc()
        if request.method in MUTATING and route.startswith("/api/"):
            principal = getattr(request.state, "principal", None)
            entry = {"at": datetime.now(UTC).isoformat(), "who": principal.name if principal else None,
                     "method": request.method, "path": request.url.path, "status": response.status_code,
                     "why": request.headers.get("x-guardian-reason", ""),
                     "ms": round((time.perf_counter() - start) * 1000, 2)}
            ctx.access_log.parent.mkdir(parents=True, exist_ok=True)
            with ctx.access_log.open("a") as out:
                out.write(json.dumps(entry) + "\n")
        return response

    for module in ROUTERS:
        app.include_router(module.router)
    return app
