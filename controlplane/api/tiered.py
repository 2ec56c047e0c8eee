"""``/api/v1/tiered/...``: operators' reads of the remote-storage (tiered) metadata (viewer).

Goal: what is in remote storage, per partition, without a gRPC client. Method: reads of this node's
tiered store (:mod:`tiered.store`): partitions in key order, one partition's live segments and counters,
its event groups after an id. Guarantee: as fresh as this node's applied index; 404 when the service
is not enabled or the partition is unknown. Cost: LMDB range reads bounded by ``limit``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from controlplane.api.deps import Ctx, Viewer
from controlplane.api.errors import ApiError
from controlplane.service.context import ServiceContext, TieredReads
from tiered.model import PartitionKey, segment_for_offset

router = APIRouter(prefix="/api/v1/tiered", tags=["tiered"])
Limit = Annotated[int, Query(ge=1, le=10000)]


def _node(ctx: ServiceContext) -> TieredReads:
    if ctx.tiered is None:
        raise ApiError(404, "the tiered metadata service is not enabled on this node ([tiered] enabled = true)")
    return ctx.tiered


@router.get("/status")
def status(ctx: Ctx, _: Viewer, digest: bool = False) -> dict[str, Any]:
    """This node's tiered Raft role, indices and store watermark (``digest``: SHA-256 of the store, O(size))."""
    node = _node(ctx)
    body = node.status()
    if digest:
        body["digest"] = node.store.digest()
    return body


@router.get("/partitions")
def partitions(ctx: Ctx, _: Viewer, cluster: str | None = None, limit: Limit = 1000) -> list[dict[str, Any]]:
    """Partitions with tiered metadata (of one cluster when given), with their counters."""
    rows = _node(ctx).store.partitions(cluster, limit)
    return [{**k.to_json(), **m.to_json()} for k, m in rows]


@router.get("/partitions/{cluster}/{topic_id}/{partition}")
def show(ctx: Ctx, _: Viewer, cluster: str, topic_id: str, partition: int) -> dict[str, Any]:
    """One partition's counters, fencing epoch and live segments (the state a new replica starts from)."""
    key = PartitionKey(cluster, topic_id, partition)
    meta, segs = _node(ctx).store.current_state(key)
    if meta is None:
        raise ApiError(404, f"no tiered metadata for {cluster}/{topic_id}/{partition}")
    return {**key.to_json(), **meta.to_json(), "segments": [s.to_json() for s in segs]}


@router.get("/partitions/{cluster}/{topic_id}/{partition}/events")
def events(ctx: Ctx, _: Viewer, cluster: str, topic_id: str, partition: int, after: int = 0,
           limit: Limit = 100) -> dict[str, Any]:
    """The partition's event groups with id > ``after`` (``more``: a next page exists)."""
    groups, more = _node(ctx).store.fetch_groups(PartitionKey(cluster, topic_id, partition), after, limit)
    return {"groups": groups, "more": more}


@router.get("/segment")
def segment(ctx: Ctx, _: Viewer, topic: str, partition: Annotated[int, Query(ge=0)],
            offset: Annotated[int, Query(ge=0)], epoch: Annotated[int | None, Query(ge=0)] = None,
            cluster: str | None = None) -> dict[str, Any]:
    """The copied segment holding ``offset`` of ``topic`` (its id, or the name Kafka gave) partition
    ``partition``, at leader ``epoch`` when given (KIP-405's lookup), in ``cluster`` or any cluster."""
    store = _node(ctx).store
    keys = store.find_topic(cluster, topic, partition)
    if not keys:
        raise ApiError(404, f"no tiered metadata for topic {topic!r} partition {partition}"
                       + (f" in cluster {cluster!r}" if cluster else ""))
    for key in keys:
        segs = store.current_state(key)[1]
        seg = segment_for_offset(segs, offset, epoch)
        if seg is not None:
            return {**key.to_json(), "segment": seg.to_json()}
    where = ", ".join(f"{k.cluster}/{k.topic_id}/{k.partition}" for k in keys)
    raise ApiError(404, f"no copied segment holds offset {offset}" + (f" at leader epoch {epoch}" if epoch is not None
                                                                       else "") + f" ({where})")
