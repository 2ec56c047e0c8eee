"""Maintenance flags: brokers that self-healing and the planners leave alone (e.g. while restarting).

Goal: let an operator take a broker out of Guardian's hands and give it back. Method: one replicated
``maintenance.set`` command per call; the collection job overlays the flags on every snapshot (the
broker's state becomes ``maintenance``). Guarantee: 404 for an unknown cluster, and for a broker that
the cluster's latest snapshot does not have, before anything is proposed; with no snapshot yet the flag
is accepted and the response says the broker was not checked. Broker ids are int32 (400 beyond).
Taking a flag off is never refused for an unknown broker (a decommissioned broker's flag can be
cleared). Cost: one state read, a set of the snapshot's broker ids and one Raft round trip.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from controlplane.api.deps import Ctx, Operator, cluster_or_404, propose
from controlplane.api.errors import ApiError
from controlplane.api.schemas import INT32_MAX

router = APIRouter(tags=["maintenance"])
BrokerPath = Annotated[int, Path(ge=0, le=INT32_MAX, description="Kafka broker id (int32, >= 0)")]
SHOWN = 20
"""Broker ids listed in a refusal."""


@router.put("/api/v1/clusters/{name}/maintenance/{broker}")
def maintenance_on(ctx: Ctx, name: str, broker: BrokerPath, request: Request, who: Operator) -> Any:
    """Put a broker in maintenance: self-healing leaves it alone (e.g. while it restarts)."""
    cluster_or_404(ctx, name)
    snap = ctx.snapshots.get(name)
    if snap is not None:
        known = sorted(b.id for b in snap.brokers)
        if broker not in known:
            listed = ", ".join(map(str, known[:SHOWN])) + (" ..." if len(known) > SHOWN else "")
            raise ApiError(404, f"cluster {name!r} has no broker {broker} in its latest snapshot (taken "
                                f"{snap.taken_at.isoformat()}; brokers {listed})", broker=broker)
    result = propose(ctx, request, who, {"type": "maintenance.set", "cluster": name, "broker": broker,
                                         "enabled": True})
    if snap is None:
        result = {**result, "note": f"no snapshot of cluster {name!r} yet: broker {broker} was not checked"}
    return result


@router.delete("/api/v1/clusters/{name}/maintenance/{broker}")
def maintenance_off(ctx: Ctx, name: str, broker: BrokerPath, request: Request, who: Operator) -> Any:
    """Take a broker out of maintenance."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "maintenance.set", "cluster": name, "broker": broker,
                                       "enabled": False})
