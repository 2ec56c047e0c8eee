"""A cluster's latest snapshot and the views of it: brokers, disks, topics; snapshot import.

Goal: what the collector (or an operator's import) last saw of a cluster, as the planners see it.
Method: reads come from the service's snapshot cache; the views need a snapshot fresh enough to act on
(409 when there is none or it is older than ``max_snapshot_age_s``); ``PUT`` parses a
guardian.snapshot/v1 document with the shared contract (400 naming the JSON path). Guarantee: an
imported snapshot must name the cluster of its URL. Cost: O(brokers + disks + topics) per view;
an import parses the whole document once.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from controlplane.api.deps import Ctx, Operator, Viewer, cluster_or_404, snapshot_or_409
from controlplane.api.errors import ApiError
from controlplane.api.guard import MiB, max_body
from controlplane.api.schemas import problem_response
from domain import dump_snapshot, parse_snapshot

router = APIRouter(tags=["federation"])
SNAPSHOT_MAX_BODY = 160 * MiB
"""A 100k-partition snapshot is ~33 MB of JSON, 300k (3,000 brokers) ~98 MB."""
STALE: dict[int | str, dict[str, Any]] = {409: problem_response(409)}


@router.get("/api/v1/clusters/{name}/snapshot")
def get_snapshot(ctx: Ctx, name: str, _: Viewer) -> Response:
    """The latest snapshot (guardian.snapshot/v1)."""
    cluster_or_404(ctx, name)
    snap = ctx.snapshots.get(name)
    if snap is None:
        raise ApiError(404, f"no snapshot of cluster {name!r} yet")
    return Response(dump_snapshot(snap), media_type="application/json")


@router.put("/api/v1/clusters/{name}/snapshot", openapi_extra=max_body(SNAPSHOT_MAX_BODY, raw_json=True))
async def put_snapshot(ctx: Ctx, name: str, request: Request, _: Operator) -> dict[str, Any]:
    """Import a guardian.snapshot/v1 document as the cluster's latest snapshot."""
    cluster_or_404(ctx, name)
    snap = parse_snapshot(await request.body())
    if snap.cluster != name:
        raise ApiError(400, f"$.cluster: snapshot is of cluster {snap.cluster!r}, not {name!r}")
    ctx.snapshots.put(snap)
    return {"cluster": name, "taken_at": snap.taken_at.isoformat(), "brokers": len(snap.brokers)}


@router.get("/api/v1/clusters/{name}/brokers", responses=STALE)
def brokers(ctx: Ctx, name: str, _: Viewer) -> list[dict[str, Any]]:
    """Brokers with live load from the latest snapshot."""
    snap = snapshot_or_409(ctx, name)
    loads = snap.index.broker_load
    return [{"id": b.id, "host": b.host, "port": b.port, "idc": b.idc, "rack": b.rack, "pool": b.pool,
             "state": b.state.value, "replicas": loads[b.id].replicas, "leaders": loads[b.id].leaders,
             "bytes_in_per_s": loads[b.id].bytes_in_per_s, "bytes_out_per_s": loads[b.id].bytes_out_per_s,
             "disk_load_bytes_per_s": loads[b.id].disk_load_bytes_per_s} for b in snap.brokers]


@router.get("/api/v1/clusters/{name}/disks", responses=STALE)
def disks(ctx: Ctx, name: str, _: Viewer) -> list[dict[str, Any]]:
    """Disks with measured util/await and estimated utilisation from the latest snapshot."""
    snap = snapshot_or_409(ctx, name)
    index = snap.index
    return [{"broker": b.id, "path": d.path, "kind": d.kind.value, "util": d.util, "await_ms": d.await_ms,
             "estimated_util": index.disk_util_estimate((b.id, d.path)),
             "used_bytes": d.used_bytes, "capacity_bytes": d.capacity_bytes,
             "replicas": len(index.replicas_on_disk[(b.id, d.path)])} for b in snap.brokers for d in b.disks]


@router.get("/api/v1/clusters/{name}/topics", responses=STALE)
def topics(ctx: Ctx, name: str, _: Viewer) -> list[dict[str, Any]]:
    """Topics with their pool, placement and live load from the latest snapshot."""
    snap = snapshot_or_409(ctx, name)
    return [{"name": t.name, "pool": t.pool, "placement": snap.placement_of(t), "partitions": len(t.partitions),
             "bytes_in_per_s": sum(p.bytes_in_per_s for p in t.partitions),
             "bytes_out_per_s": sum(p.bytes_out_per_s for p in t.partitions),
             "size_bytes": sum(p.size_bytes for p in t.partitions)} for t in snap.topics]
