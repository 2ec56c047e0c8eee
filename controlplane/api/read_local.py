"""A cluster's nearest-replica reads (KIP-392): ``GET /clusters/{name}/read-local`` and its fix.

Goal: one per-cluster check an operator can read and act on — every broker's ``broker.rack`` maps to its
IDC, a rack-aware ``replica.selector.class`` is configured, which consumers read across IDCs (audit
lineage) and whether they set ``client.rack``, and the per-topic, per-IDC read demand to hand to the
``read-local`` planner kind (``POST /plans`` with ``{"kind": "read-local", "params": {"demand": ...}}``).
Method: :func:`controlplane.service.read_local.check_registered` over a short-lived admin connection and
ClickHouse's audit records of the last ``window_s`` seconds; ``POST .../read-local/fix`` (admin) applies
the fixes the brokers accept at run time and lists the read-only ones (server.properties + restart).
Guarantee: 404 for an unknown cluster; 503 naming the cluster within 5 s when it cannot be reached (calls
give up after 4 s; a closed or silent port is known after one TCP connect of at most 2 s); 502 naming the
failure when the cluster answers but cannot be read; the
action log records every fix call. Cost: one DescribeConfigs per broker, one metadata read, one query.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from controlplane.api.deps import Admin, Ctx, Viewer, cluster_or_404
from controlplane.api.errors import ApiError
from controlplane.service.read_local import check_registered
from kafkaio.errors import AdminError
from kafkaio.failures import failure_kind

router = APIRouter(tags=["federation"])
Window = Annotated[float, Query(gt=0, le=31 * 86400, description="audit window, seconds")]


def _check(ctx: Ctx, name: str, window_s: float, fix: bool) -> dict[str, Any]:
    record = cluster_or_404(ctx, name)
    try:
        return check_registered(name, record, ctx.clickhouse, window_s, fix=fix)
    except AdminError as exc:
        if failure_kind(exc) in ("unreachable", "timeout"):
            raise ApiError(503, f"cluster {name!r} is unreachable: {exc}") from None
        raise ApiError(502, f"cluster {name!r} could not be read: {exc}") from None


@router.get("/api/v1/clusters/{name}/read-local")
def read_local(ctx: Ctx, name: str, _: Viewer, window_s: Window = 3600.0) -> dict[str, Any]:
    """KIP-392 readiness, cross-IDC readers and read demand of cluster ``name``."""
    return _check(ctx, name, window_s, fix=False)


@router.post("/api/v1/clusters/{name}/read-local/fix")
def read_local_fix(ctx: Ctx, name: str, request: Request, who: Admin, window_s: Window = 3600.0) -> dict[str, Any]:
    """Apply the dynamic fixes; the answer lists them and the read-only ones left to a rolling restart."""
    return _check(ctx, name, window_s, fix=True)
