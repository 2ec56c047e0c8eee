"""Leased lines: per IDC pair, what one cluster puts on each line by kind, against the configured capacity.

Goal: see cross-IDC traffic in real time and whether line protection holds a line. Method: reads the
throttle service's latest leased-line accounting of the cluster (computed each collection round, see
:mod:`controlplane.service.leased_lines`); the throttles it set are in ``GET /api/v1/throttles`` with
``set_by = line-protection``. Guarantee: 404 for an unknown cluster; ``evaluated: false`` before the
first round. Cost: O(lines).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from controlplane.api.deps import Ctx, Viewer, cluster_or_404

router = APIRouter(tags=["leased-lines"])


@router.get("/api/v1/clusters/{name}/leased-lines")
def leased_lines(ctx: Ctx, name: str, _: Viewer) -> dict[str, Any]:
    """Per line (one direction of an IDC pair): bytes/s by kind (replication, migration, client_produce,
    client_fetch), total, capacity, util, marks, hot and what protection is slowing on it."""
    cluster_or_404(ctx, name)
    service = ctx.throttle.lines if ctx.throttle is not None else None
    if service is None:
        return {"cluster": name, "evaluated": False, "protect": False, "lines": []}
    return service.report(name)
