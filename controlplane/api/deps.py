"""What every router reaches the service through: the context, the caller, reads and proposals.

Goal: route handlers are module-level functions of their inputs, so each resource is its own module
and nothing is captured in a closure over the app. Method: FastAPI dependencies — ``Ctx`` resolves the
:class:`ServiceContext` that :func:`controlplane.api.app.create_app` put on ``app.state``; ``Viewer``,
``Operator`` and ``Admin`` resolve the authenticated caller holding at least that role. Guarantee:
reads return detached JSON copies (safe to change or serialise after the state lock is released);
every proposal carries who (the token's name) and why (``X-Guardian-Reason``) and is counted.
Cost: one dict lookup per dependency; a read copies only what ``fn`` selects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request

from controlplane.api.auth import Principal, require
from controlplane.api.errors import ApiError
from controlplane.service.context import ServiceContext
from controlplane.state.commands import meta
from controlplane.state.reads import detached
from domain import ClusterSnapshot


def get_ctx(request: Request) -> ServiceContext:
    """The service context of the app serving ``request``."""
    ctx: ServiceContext = request.app.state.ctx
    return ctx


Ctx = Annotated[ServiceContext, Depends(get_ctx)]
Viewer = Annotated[Principal, Depends(require("viewer"))]
Operator = Annotated[Principal, Depends(require("operator"))]
Admin = Annotated[Principal, Depends(require("admin"))]


def propose(ctx: ServiceContext, request: Request, principal: Principal, command: dict[str, Any]) -> Any:
    """Propose ``command`` as ``principal`` (why: the ``X-Guardian-Reason`` header); the state machine's result."""
    command["meta"] = meta(principal.name, request.headers.get("x-guardian-reason", ""))
    result = ctx.store.propose(command)
    ctx.metrics.actions.labels(command["type"]).inc()
    return result


def read(ctx: ServiceContext, fn: Callable[[dict[str, Any]], Any]) -> Any:
    """``fn`` over the state, returned as a detached JSON copy (safe to change or serialise later)."""
    return ctx.store.read(lambda s: detached(fn(s)))


def cluster_or_404(ctx: ServiceContext, name: str) -> dict[str, Any]:
    """The registered cluster ``name`` (a copy); 404 when unknown."""
    cluster = read(ctx, lambda s: s["clusters"].get(name))
    if cluster is None:
        raise ApiError(404, f"unknown cluster {name!r}")
    return dict(cluster)


def snapshot_or_409(ctx: ServiceContext, name: str) -> ClusterSnapshot:
    """The cluster's latest snapshot if fresh enough to act on; 404 unknown cluster, 409 none or stale."""
    cluster_or_404(ctx, name)
    return ctx.snapshots.fresh(name, ctx.settings.max_snapshot_age_s)
