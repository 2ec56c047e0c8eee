"""Liveness, readiness, Prometheus metrics (no token) and the node's Raft status (viewer).

Goal: what a load balancer, Prometheus and an operator ask a node about itself. Method: each answer is
read from the store's status (``/readyz`` is 503 as a problem document until a leader is known and this
node is caught up). Guarantee: ``/healthz`` touches nothing but the process; the token-free routes reveal
Raft figures and, on ``/metrics``, the federation's figures a Prometheus scrape needs (cluster, broker and
log-dir names with their load; no configuration, no credentials). Cost: ``/metrics`` renders the registry
and joins the cached per-cluster figures (O(series)); ``/status`` reads the cluster names.
"""

from __future__ import annotations

import platform
import threading
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controlplane import DISTRIBUTION, __version__
from controlplane.api.deps import Ctx, Viewer, read
from controlplane.api.errors import problem
from controlplane.api.schemas import problem_response

router = APIRouter(tags=["health"])
#: At most this many health/status reads run at once per process; the rest wait on the semaphore (not
#: for the GIL), so a read burst cannot crowd the Raft thread out of the interpreter.
_HEALTH_READS = threading.BoundedSemaphore(2)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None, responses={503: problem_response(503)})
def readyz(ctx: Ctx) -> dict[str, Any] | Response:
    """Readiness: a leader is known, this node's state is caught up, its Raft journal can append (its disk is
    above the reserve) and, on the leader, its loops run."""
    with _HEALTH_READS:
        status = ctx.store.status()
    if not status.get("ready"):
        if status.get("held"):
            return problem(503, f"not ready: this node holds ({status['held']})", raft=status)
        if status.get("storage_error"):
            return problem(503, f"not ready: the Raft journal cannot append ({status['storage_error']}); a leader "
                                "hands leadership over, and the node is ready again once space is back", raft=status)
        return problem(503, "not ready: no leader known or state not caught up", raft=status)
    loops = ctx.loops.report() if ctx.loops is not None else {}
    stale = ctx.loops.stale_loops() if ctx.loops is not None and status.get("is_leader") else {}
    if stale:
        names = ", ".join(f"{name} (silent {secs:.0f} s)" for name, secs in sorted(stale.items()))
        return problem(503, f"not ready: the leader's loops are not running: {names}", loops=loops,
                       state_version=status.get("state_version"))
    return {"status": "ready", "role": status.get("role"), "leader": status.get("leader"), "loops": loops,
            "state_version": status.get("state_version")}


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(ctx: Ctx) -> Response:
    """Guardian's own Prometheus metrics and the federation's figures (cached per cluster)."""
    with _HEALTH_READS:
        status = ctx.store.status()
        ctx.metrics.raft_is_leader.set(1 if status.get("is_leader") else 0)
        ctx.metrics.raft_term.set(float(status.get("term") or 0))
        ctx.metrics.raft_commit_index.set(float(status.get("commit_index") or 0))
        for kind, value in (status.get("state_version") or {}).items():
            if kind in ("group", "supported"):
                ctx.metrics.state_version.labels(kind).set(float(value))
        ctx.metrics.raft_held.set(1 if status.get("held") else 0)
        own = generate_latest(ctx.metrics.registry)
        federation = ctx.metrics.federation.exposition(
            ctx.snapshots.entries, ctx.store.read,
            awaited=ctx.cluster_status.expected() if status.get("is_leader") else None,
            errors=ctx.cluster_status.error_counts)
        return Response(own + federation.encode(), media_type=CONTENT_TYPE_LATEST)


@router.get("/api/v1/status")
def status(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    """Raft role, term, leader and commit index of this node, and the version it runs."""
    with _HEALTH_READS:
        return {"raft": ctx.store.status(), "clusters": read(ctx, lambda s: sorted(s["clusters"])),
                "version": __version__}


@router.get("/api/v1/whoami")
def whoami(who: Viewer) -> dict[str, str]:
    """The calling token's name and role (the dashboard shows the buttons that role may use)."""
    return {"name": who.name, "role": who.role}


@router.get("/api/v1/version")
def version(_: Viewer) -> dict[str, str]:
    """The version this node runs (as ``guardian --version`` and the ``guardian_build_info`` metric say)."""
    return {"version": __version__, "distribution": DISTRIBUTION, "python": platform.python_version()}
