"""Maintenance flags: brokers that self-healing and the planners leave alone (e.g. while restarting).

Goal: let an operator take a broker out of Guardian's hands and give it back. Method: one replicated
``maintenance.set`` command per call; the collection job overlays the flags on every snapshot (the
broker's state becomes ``maintenance``). Guarantee: 404 for an unknown cluster before anything is
proposed. Cost: one state read and one Raft round trip.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from controlplane.api.deps import Ctx, Operator, cluster_or_404, propose

router = APIRouter(tags=["maintenance"])


@router.put("/api/v1/clusters/{name}/maintenance/{broker}")
def maintenance_on(ctx: Ctx, name: str, broker: int, request: Request, who: Operator) -> Any:
    """Put a broker in maintenance: self-healing leaves it alone (e.g. while it restarts)."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "maintenance.set", "cluster": name, "broker": broker,
                                       "enabled": True})


@router.delete("/api/v1/clusters/{name}/maintenance/{broker}")
def maintenance_off(ctx: Ctx, name: str, broker: int, request: Request, who: Operator) -> Any:
    """Take a broker out of maintenance."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "maintenance.set", "cluster": name, "broker": broker,
                                       "enabled": False})
