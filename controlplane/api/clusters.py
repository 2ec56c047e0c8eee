"""The federation's clusters: register, list, get, forget, their declared topology and their policies
(auto-rebalance window, IDC placement, resource pools).

Goal: the admin's view of which clusters Guardian manages, how it connects to them and under which rules,
with careless input refused when it is written rather than when a loop trips over it. A registration is
what an operator knows about a real deployment: bootstrap servers, the Kafka client ``security`` object
(:class:`kafkaio.security.SecuritySettings`; secrets only as ``*_file`` / ``*_env`` references — a literal
``password`` is a 400 naming it), metrics endpoints per broker (CA, basic or bearer auth by file), the
rack -> IDC rule, IDC overrides, the hardware profile and the consumer-offsets source; ``PUT
/clusters/{name}/topology`` edits the rule, the overrides and the profile alone. Method: each write is
one replicated command (``cluster.register``, ``cluster.topology``, ``cluster.remove``,
``cluster.auto_rebalance``, ``placement.set``, ``pool.assign``); a registration is read by the one
endpoints parser before it is proposed (:func:`controlplane.state.registration.check_registration`:
400 naming the JSON path, e.g. ``$.rack_to_idc.regex: needs a named group (?P<idc>...)``); the state
machine refuses what its preconditions forbid (409: e.g. removing a cluster with approved or executing
plans or a running execution). A registration's bootstrap addresses must read as ``host:port`` (400
``$.bootstrap_servers``), and unless ``?probe=false`` the cluster is probed once before it is proposed
(:mod:`controlplane.service.registration_probe`: a wrong Kafka or metrics password, a closed port, a failing
endpoint is a 400 naming it). Before proposing, the API also checks
what only it can: the cron window parses and fires (400 ``$.window_cron``), and a pool is not given
brokers that hold replicas of topics that would then straddle pools (409 naming brokers and topics;
checked against the latest snapshot, and said so when there is none). Guarantee: a 404 for an unknown
cluster is answered before anything is proposed; a cluster's cached snapshot is dropped only after its
removal committed; responses show security settings as stored — references, never a secret. Cost: one
state read per call plus, for writes, one Raft round trip;
``GET /clusters/{name}`` adds the pool statistics of the latest snapshot and a pool assignment one
pass over its topics' replicas (O(replicas)).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from apscheduler.triggers.cron import CronTrigger
from fastapi import APIRouter, Path, Query, Request
from pydantic import Field, field_validator, model_validator

from controlplane.api.deps import Admin, Ctx, Viewer, cluster_or_404, propose, read
from controlplane.api.errors import ApiError
from controlplane.api.schemas import NAME_PATTERN, BrokerId, Name, StrictIn, int_in
from controlplane.service.registration_probe import probe_registration
from controlplane.state.registration import TOPOLOGY_KEYS, check_registration
from domain import ClusterSnapshot, pool_stats
from kafkaio.endpoints import EndpointsError
from kafkaio.reach import AddressError, parse_address
from kafkaio.security import SecuritySettings

router = APIRouter(tags=["federation"])
SHOWN = 10
"""Topics named per broker in a pool-assignment refusal."""


URL_PATTERN = r"^https?://\S+$"
Url = Annotated[str, Field(min_length=8, max_length=2000, pattern=URL_PATTERN)]
FilePath = Annotated[str, Field(min_length=1, max_length=4096)]
LITERAL_SECRETS = ("password", "bearer_token", "token")


class MetricsEndpointIn(StrictIn):
    """One Prometheus endpoint of a broker (a bare URL string is accepted too); secrets by file only."""

    url: Url
    ca_file: FilePath | None = None
    username: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    password_file: FilePath | None = None
    bearer_token_file: FilePath | None = None
    kind: Annotated[str, Field(min_length=1, max_length=50)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _by_reference(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"url": data}
        if isinstance(data, dict):
            for key in LITERAL_SECRETS:
                if key in data:
                    raise ValueError(f"{key!r} is not accepted: give the secret by reference "
                                     f"({'bearer_token_file' if 'token' in key else 'password_file'})")
        return data


class BrokerIn(StrictIn):
    """A broker's metrics endpoints and declared facts (``idc`` is an IDC override, kept in ``idc_overrides``)."""

    id: BrokerId
    metrics: list[MetricsEndpointIn] = Field(default_factory=list, max_length=32)
    metrics_url: Url | None = None
    idc: Name | None = None
    rack: Name | None = None


class RackToIdcIn(StrictIn):
    """A regex with a named group ``idc`` (first match), or an explicit rack -> IDC table."""

    regex: Annotated[str, Field(min_length=1, max_length=1000)] | None = None
    table: dict[str, Name] | None = None


class DiskIn(StrictIn):
    kind: Literal["hdd", "ssd", "nvme"]
    max_bytes_per_s: Annotated[float, Field(gt=0)] | None = None


class HardwareRuleIn(DiskIn):
    """Disks of ``brokers`` (``"*"`` or omitted: every broker) whose log dir matches the glob ``log_dirs``."""

    brokers: Annotated[list[BrokerId], Field(min_length=1)] | None = None
    log_dirs: Annotated[str, Field(min_length=1, max_length=1000)] = "*"

    @field_validator("brokers", mode="before")
    @classmethod
    def _every(cls, value: Any) -> Any:
        return None if value == "*" else value


class HardwareIn(StrictIn):
    """Rules (first match wins: broker ids and a log-dir glob) and a default; a bare list is the rules."""

    rules: list[HardwareRuleIn] = Field(default_factory=list, max_length=10_000)
    default: DiskIn | None = None

    @model_validator(mode="before")
    @classmethod
    def _rules_only(cls, data: Any) -> Any:
        return {"rules": data} if isinstance(data, list) else data


class TopologyIn(StrictIn):
    """What the operator declares about a cluster's topology: rack -> IDC rule, IDC overrides, hardware."""

    rack_to_idc: RackToIdcIn | None = None
    idc_overrides: dict[Annotated[str, Field(pattern=r"^[0-9]{1,10}$")], Name] = Field(default_factory=dict)
    hardware: HardwareIn | None = None


class ClusterIn(TopologyIn):
    """A cluster as an operator registers it (one cluster of an endpoints document, plus its name)."""

    name: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")]
    bootstrap_servers: Annotated[list[Annotated[str, Field(min_length=1, max_length=300)]], Field(min_length=1)]
    security: SecuritySettings | None = None
    brokers: list[BrokerIn] = Field(default_factory=list, max_length=100_000)
    metrics_urls: dict[str, str] = Field(default_factory=dict)
    consumer_offsets: Annotated[str, Field(pattern=r"^(admin|https?://\S+)$", max_length=2000)] = "admin"
    control_url: str | None = None
    capabilities: dict[str, bool] = Field(default_factory=dict)

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else value

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port(cls, value: list[str]) -> list[str]:
        for i, address in enumerate(value):
            try:
                parse_address(address)
            except AddressError as exc:
                raise ValueError(f"[{i}]: {exc}") from None
        return value


def registration(body: TopologyIn) -> dict[str, Any]:
    """The record to replicate: JSON, no null members, brokers' ``idc`` moved into ``idc_overrides``."""
    record = body.model_dump(mode="json", exclude_none=True)
    overrides = dict(record.get("idc_overrides") or {})
    for b in record.get("brokers") or []:
        idc = b.pop("idc", None)
        if idc is not None:
            overrides.setdefault(str(b["id"]), idc)
    record["idc_overrides"] = overrides
    return record


def checked(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` if the one endpoints parser reads it; a 400 naming the JSON path of the first problem."""
    try:
        check_registration(name, {"bootstrap_servers": ["topology-check:1"], **record})
    except EndpointsError as exc:
        path, _, message = str(exc).partition(": ")
        raise ApiError(400, str(exc), problems=[{"path": path, "message": message}]) from None
    return record


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
def register_cluster(ctx: Ctx, body: ClusterIn, request: Request, who: Admin,
                     probe: Annotated[bool, Query(description="connect once to the bootstrap servers and every "
                                                  "metrics endpoint first (400 naming what failed)")] = True) -> Any:
    """Register (or update) a cluster: bootstrap servers (``host:port``), Kafka client ``security`` (secrets by
    ``*_file`` / ``*_env`` reference only), metrics endpoints per broker, rack -> IDC rule, IDC overrides,
    hardware profile, consumer-offsets source (``admin`` or an exporter URL). Unless ``probe=false``, Guardian
    first connects once to the cluster with its security settings and scrapes every metrics endpoint once: a
    refused login, an unreachable bootstrap or a failing endpoint is a 400 naming it and its JSON path."""
    record = checked(body.name, registration(body))
    if probe:
        problems = probe_registration(body.name, record)
        if problems:
            raise ApiError(400, "registration probe failed (register with ?probe=false to skip it): " + "; ".join(
                f"{p['path']}: {p['message']}" for p in problems), problems=problems)
    return propose(ctx, request, who, {"type": "cluster.register", **record})


@router.get("/api/v1/clusters/{name}/topology")
def get_topology(ctx: Ctx, name: str, _: Viewer) -> dict[str, Any]:
    """The cluster's declared topology: rack -> IDC rule, per-broker IDC overrides, hardware profile."""
    cluster = cluster_or_404(ctx, name)
    return {"cluster": name, **{k: cluster.get(k) for k in TOPOLOGY_KEYS}}


@router.put("/api/v1/clusters/{name}/topology")
def set_topology(ctx: Ctx, name: str, body: TopologyIn, request: Request, who: Admin) -> Any:
    """Replace the cluster's declared topology (rack -> IDC rule, IDC overrides, hardware profile); a member
    left out is cleared."""
    cluster_or_404(ctx, name)
    record = checked(name, registration(body))
    return propose(ctx, request, who, {"type": "cluster.topology", "name": name,
                                       **{k: record.get(k) for k in TOPOLOGY_KEYS}})


class LabelsIn(StrictIn):
    labels: dict[str, str] = Field(description="label -> value (owner, team, tier ...); replaces the cluster's labels; "
                                               "keys: lower-case letters, digits, '.', '_', '-' (at most 63)")


@router.put("/api/v1/clusters/{name}/labels")
def set_labels(ctx: Ctx, name: str, body: LabelsIn, request: Request, who: Admin) -> Any:
    """Replace the cluster's labels (a command form of state version 2: 409 until the group runs it;
    docs/upgrading.md)."""
    cluster_or_404(ctx, name)
    return propose(ctx, request, who, {"type": "cluster.labels", "name": name, "labels": body.labels})


@router.get("/api/v1/clusters/{name}")
def get_cluster(ctx: Ctx, name: str, _: Viewer) -> dict[str, Any]:
    """One cluster, with the figures of its latest snapshot when there is one, ``last_error`` (the latest error
    of a loop on it that has not succeeded since: loop, kind, message, when; null when none) and ``status``
    (per loop: last success, last error, errors in a row, overdue; errors counted by kind)."""
    cluster = cluster_or_404(ctx, name)
    snap = ctx.snapshots.get(name)
    if snap is not None:
        cluster["snapshot"] = {
            "taken_at": snap.taken_at.isoformat(), "brokers": len(snap.brokers),
            "partitions": len(snap.index.partitions),
            "pools": {p: {"max_util": s.max_util, "mean_util": s.mean_util, "peak_to_mean": s.peak_to_mean}
                      for p, s in pool_stats(snap).items()}}
    cluster["maintenance"] = read(ctx, lambda s: dict(s["maintenance"].get(name, {})))
    status = ctx.cluster_status.report(name)
    cluster["last_error"] = status.pop("last_error")
    cluster["status"] = status
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
