"""The federation's clusters: register, list, get, forget, and their policies (auto-rebalance window,
IDC placement, resource pools).

Goal: the admin's view of which clusters Guardian manages and under which rules, with careless input
refused when it is written rather than when a loop trips over it. Method: each write is one replicated
command (``cluster.register``, ``cluster.remove``, ``cluster.auto_rebalance``, ``placement.set``,
``pool.assign``); the state machine refuses what its preconditions forbid (409: e.g. removing a
cluster with approved or executing plans or a running execution). Before proposing, the API checks
what only it can: the cron window parses and fires (400 ``$.window_cron``), and a pool is not given
brokers that hold replicas of topics that would then straddle pools (409 naming brokers and topics;
checked against the latest snapshot, and said so when there is none). Guarantee: a 404 for an unknown
cluster is answered before anything is proposed; a cluster's cached snapshot is dropped only after its
removal committed. Cost: one state read per call plus, for writes, one Raft round trip;
``GET /clusters/{name}`` adds the pool statistics of the latest snapshot and a pool assignment one
pass over its topics' replicas (O(replicas)).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from apscheduler.triggers.cron import CronTrigger
from fastapi import APIRouter, Path, Request
from pydantic import Field, field_validator

from controlplane.api.deps import Admin, Ctx, Viewer, cluster_or_404, propose, read
from controlplane.api.errors import ApiError
from controlplane.api.schemas import NAME_PATTERN, BrokerId, Name, StrictIn, int_in
from domain import ClusterSnapshot, pool_stats
from kafkaio.endpoints import EndpointsError, parse_hardware, parse_rack_to_idc

router = APIRouter(tags=["federation"])
SHOWN = 10
"""Topics named per broker in a pool-assignment refusal."""


class ClusterIn(StrictIn):
    name: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")]
    bootstrap_servers: Annotated[list[Annotated[str, Field(min_length=3)]], Field(min_length=1)]
    metrics_urls: dict[str, str] = Field(
        default_factory=dict, description='broker id (or "ID/label" for each of several endpoints) -> metrics URL')
    control_url: str | None = None
    capabilities: dict[str, bool] = Field(default_factory=dict)
    rack_to_idc: dict[str, Any] | None = Field(default=None, description='{"regex": "(?P<idc>...)"} or {"table": {}}')
    hardware: list[dict[str, Any]] | dict[str, Any] | None = Field(
        default=None, description="disk kind and ceiling by broker ids and log-dir globs, with a default")

    @field_validator("rack_to_idc")
    @classmethod
    def _rule(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        try:
            parse_rack_to_idc(value)
        except EndpointsError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("hardware")
    @classmethod
    def _profile(cls, value: Any) -> Any:
        try:
            parse_hardware(value)
        except EndpointsError as exc:
            raise ValueError(str(exc)) from None
        return value


class AutoRebalanceIn(StrictIn):
    enabled: bool
    window_cron: str = Field(default="0 2 * * *", pattern=r"^\S+(\s+\S+){4}$", max_length=100,
                             description="5-field crontab, UTC: when the window opens")
    window_minutes: int_in(1, 1440) = 240  # type: ignore[valid-type]
    threshold: Annotated[float, Field(gt=1.0, le=100.0)] = 1.25
    max_partitions: int_in(1, 100_000) = 50  # type: ignore[valid-type]
    load_basis: Literal["window", "modelled_peak"] = "window"

    @field_validator("window_cron")
    @classmethod
    def _fires(cls, value: str) -> str:
        """The window must parse as auto-rebalance parses it (5 fields, UTC) and open at some time."""
        try:
            trigger = CronTrigger.from_crontab(value, timezone="UTC")
        except ValueError as exc:
            raise ValueError(f"not a 5-field crontab: {exc}") from None
        if trigger.get_next_fire_time(None, datetime.now(UTC)) is None:
            raise ValueError(f"{value!r} never fires")
        return value


class PlacementIn(StrictIn):
    topic: Name | None = None
    placement: dict[Name, int_in(1, 16)] | None  # type: ignore[valid-type]


class PoolIn(StrictIn):
    brokers: Annotated[list[BrokerId], Field(min_length=1)]


def pool_conflicts(snapshot: ClusterSnapshot, assigned: Mapping[str, Iterable[int]], pool: str,
                   brokers: Iterable[int]) -> dict[int, list[str]]:
    """Per broker being moved into ``pool``, the topics it holds replicas of that would not lie wholly in
    ``pool`` afterwards (other replicas on brokers of another pool). Broker pools: the snapshot's labels
    overridden by the replicated ``assigned`` pools. O(replicas)."""
    moving = set(brokers)
    pool_of = {b.id: b.pool for b in snapshot.brokers}
    pool_of.update({b: name for name, members in assigned.items() for b in members})
    found: dict[int, list[str]] = {}
    for topic in snapshot.topics:
        holders = {r for p in topic.partitions for r in p.replicas}
        mine = holders & moving
        if mine and any(b not in moving and pool_of.get(b) != pool for b in holders):
            for b in mine:
                found.setdefault(b, []).append(topic.name)
    return {b: sorted(topics) for b, topics in sorted(found.items())}


@router.get("/api/v1/clusters")
def list_clusters(ctx: Ctx, _: Viewer) -> list[dict[str, Any]]:
    """Registered clusters with their connection settings and policies."""
    clusters: list[dict[str, Any]] = read(ctx, lambda s: list(s["clusters"].values()))
    return clusters


@router.post("/api/v1/clusters", status_code=201)
def register_cluster(ctx: Ctx, body: ClusterIn, request: Request, who: Admin) -> Any:
    """Register (or update) a cluster."""
    return propose(ctx, request, who, {"type": "cluster.register", **body.model_dump()})


@router.get("/api/v1/clusters/{name}")
def get_cluster(ctx: Ctx, name: str, _: Viewer) -> dict[str, Any]:
    """One cluster, with the figures of its latest snapshot when there is one."""
    cluster = cluster_or_404(ctx, name)
    snap = ctx.snapshots.get(name)
    if snap is not None:
        cluster["snapshot"] = {
            "taken_at": snap.taken_at.isoformat(), "brokers": len(snap.brokers),
            "partitions": len(snap.index.partitions),
            "pools": {p: {"max_util": s.max_util, "mean_util": s.mean_util, "peak_to_mean": s.peak_to_mean}
                      for p, s in pool_stats(snap).items()}}
    cluster["maintenance"] = read(ctx, lambda s: dict(s["maintenance"].get(name, {})))
    return cluster


@router.delete("/api/v1/clusters/{name}")
def remove_cluster(ctx: Ctx, name: str, request: Request, who: Admin) -> Any:
    """Forget a cluster (refused while it has approved or executing plans or a running execution)."""
    cluster_or_404(ctx, name)
    result = propose(ctx, request, who, {"type": "cluster.remove", "name": name})
    ctx.snapshots.drop(name)
    return result


@router.put("/api/v1/clusters/{name}/auto-rebalance")
def set_auto_rebalance(ctx: Ctx, name: str, body: AutoRebalanceIn, request: Request, who: Admin) -> Any:
    """Opt a cluster in or out of scheduled auto-rebalance (cron window, imbalance threshold)."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "cluster.auto_rebalance", "name": name, **body.model_dump()})


@router.put("/api/v1/clusters/{name}/placement")
def set_placement(ctx: Ctx, name: str, body: PlacementIn, request: Request, who: Admin) -> Any:
    """Set the cluster default (no topic) or a topic's IDC placement policy; null clears it."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "placement.set", "cluster": name, **body.model_dump()})


@router.put("/api/v1/clusters/{name}/pools/{pool}")
def assign_pool(ctx: Ctx, name: str, pool: Annotated[str, Path(min_length=1, max_length=200, pattern=NAME_PATTERN)],
                body: PoolIn, request: Request, who: Admin) -> Any:
    """Move brokers into resource pool ``pool`` (refused while they hold replicas of other pools' topics)."""
    cluster = cluster_or_404(ctx, name)
    snap = ctx.snapshots.get(name)
    if snap is not None:
        conflicts = pool_conflicts(snap, cluster.get("pools") or {}, pool, body.brokers)
        if conflicts:
            named = "; ".join(f"{b}: {', '.join(ts[:SHOWN])}{' ...' if len(ts) > SHOWN else ''}"
                              for b, ts in conflicts.items())
            raise ApiError(409, f"brokers {sorted(conflicts)} hold replicas of topics that would straddle pool "
                                f"{pool!r} and other pools ({named}); move those replicas off them first",
                           brokers={str(b): ts for b, ts in conflicts.items()})
    result = propose(ctx, request, who, {"type": "pool.assign", "cluster": name, "pool": pool,
                                         **body.model_dump()})
    if snap is None:
        result = {**result, "note": f"no snapshot of cluster {name!r} yet: the brokers' replicas were not checked"}
    return result
