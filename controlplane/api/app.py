"""The REST API ``/api/v1`` (FastAPI, OpenAPI at ``/docs`` and ``/openapi.json``): the app factory.

Goal: one place that assembles the API over a :class:`ServiceContext` — the routers (one module per
resource), the error handlers, the middleware and the OpenAPI document. Method: :func:`create_app`
puts the context on ``app.state`` (routers reach it through :data:`controlplane.api.deps.Ctx`),
installs the RFC 7807 error handlers (:mod:`~controlplane.api.errors`), wraps the router in the request
guard (authentication, role, content type and body cap before any body is read;
:mod:`~controlplane.api.guard`) inside the access recorder (counts every answer, logs and records
500s; :mod:`~controlplane.api.access`), and post-processes the OpenAPI document
(:mod:`~controlplane.api.openapi`). Guarantee: reads need role viewer, actions operator, configuration
admin; every mutating call becomes a command in the replicated state (who = the token's name, why =
the ``X-Guardian-Reason`` header) and is written to this node's access log with its result; every
error is an RFC 7807 problem. Cost: per request, one route match, one token hash and a counter.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.routing import APIRoute

from controlplane import __version__
from controlplane.api import (
    actions,
    alerts,
    analytics,
    anomalies,
    clusters,
    dashboard,
    executions,
    health,
    ids,
    leased_lines,
    maintenance,
    migrations,
    plans,
    read_local,
    snapshots,
    state_version,
    throttles,
    tiered,
    topics,
)
from controlplane.api.access import AccessRecorder
from controlplane.api.errors import install_error_handlers
from controlplane.api.guard import RequestGuard
from controlplane.api.openapi import install_openapi
from controlplane.service.context import ServiceContext
from controlplane.service.protection import ProtectionService

ROUTERS = (health, clusters, snapshots, maintenance, plans, executions, migrations, topics, throttles, leased_lines,
           ids, actions, alerts, analytics, anomalies, dashboard, tiered, read_local, state_version)
"""Router modules in the order their routes are matched (each has ``router``)."""


def create_app(ctx: ServiceContext) -> FastAPI:
    """The FastAPI application over ``ctx``. A context without a throttle service gets one that is bound
    to no cluster (alerts are recorded and evaluations skipped with a reason; nothing is contacted)."""
    app = FastAPI(title="Guardian", version=__version__, docs_url=None, redoc_url=None,  # /docs: dashboard.py, offline
                  description="Control plane for a federation of Kafka clusters. Every error is an RFC 7807 "
                              "problem (`application/problem+json`); request bodies are JSON.")
    app.state.ctx = ctx
    app.state.http_of = ctx.http_of
    if ctx.throttle is None:
        ctx.throttle = ProtectionService(ctx.store, max_snapshot_age_s=ctx.settings.max_snapshot_age_s)
    install_error_handlers(app)
    routes = [r for module in ROUTERS for r in module.router.routes if isinstance(r, APIRoute)]
    for module in ROUTERS:
        app.include_router(module.router)
    app.add_middleware(RequestGuard, ctx=ctx, routes=routes)  # inner: runs after the recorder started timing
    app.add_middleware(AccessRecorder, ctx=ctx)
    install_openapi(app, routes)
    return app
