"""Topics: create a topic with a pre-allocated replica assignment (placed by expected load).

Goal: pre-allocation that ends in a topic, not a plan nobody can execute. Method: ``POST /api/v1/topics``
runs the ``preallocate`` planner (:func:`planners.plan_preallocation`) over the cluster's latest fresh
snapshot — each replica on the valid disk of the topic's pool with the lowest projected load, the IDC
placement policy (given, set earlier for this topic name, or the cluster's default), rack spread and
capacity held — then creates the topic through the Kafka port with CreateTopics carrying exactly that
assignment (:meth:`kafkaio.port.KafkaCluster.create_topic`), asks each replica's broker to keep it in the
planned log dir (KIP-113; an empty replica moves at once) and records ``topic.created`` in the action log
(a given placement is also set as the topic's policy, so later plans keep it). Guarantee: nothing is
created unless the assignment passes the shared checker (:func:`domain.check_new_topic`); a topic that
exists is 409 before anything is sent (and 409 if another client created it meanwhile). Cost: the
planner's O(partitions x RF x pool disks) + one CreateTopics + one AlterReplicaLogDirs.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import Field

from controlplane.api.deps import Ctx, Operator, propose, read, snapshot_or_409
from controlplane.api.errors import ApiError
from controlplane.api.schemas import Name, StrictIn, int_in
from controlplane.config import ROLE_RANK
from kafkaio.errors import AdminError, KafkaAuthError, TopicExists
from planners import NewTopic, PlannerError, PreallocateOptions, plan_preallocation
from planners.workspace import Bounds

router = APIRouter(tags=["topics"])
TOPIC_NAME = r"^[A-Za-z0-9._-]{1,249}$"
"""What Kafka accepts as a topic name."""


class TopicIn(StrictIn):
    """A topic to create, placed by its expected traffic."""

    cluster: Name
    name: Annotated[str, Field(pattern=TOPIC_NAME, description="Kafka topic name")]
    partitions: int_in(1, 100_000)  # type: ignore[valid-type]
    replication_factor: int_in(1, 16) = 3  # type: ignore[valid-type]
    expected_bytes_in_per_s: Annotated[float, Field(ge=0, description="expected bytes/s produced to the topic")]
    expected_disk_read_bytes_per_s: Annotated[float, Field(ge=0, description="expected reads that miss the page "
                                                                             "cache (bytes/s)")] = 0.0
    pool: Name = "shared"
    placement: dict[Name, int_in(1, 16)] | None = None  # type: ignore[valid-type]
    configs: dict[Annotated[str, Field(min_length=1, max_length=200)], Annotated[str, Field(max_length=4000)]] = \
        Field(default_factory=dict, description="topic configs, e.g. retention.ms")
    capacity_headroom: Annotated[float, Field(ge=0, lt=1)] = 0.10


@router.post("/api/v1/topics", status_code=201)
def create_topic(ctx: Ctx, body: TopicIn, request: Request, who: Operator) -> Any:
    """Plan the topic's assignment with the preallocate planner and create it with exactly that assignment. A
    ``placement`` becomes the topic's placement policy, which needs an admin token (as ``PUT .../placement``)."""
    if body.placement is not None and ROLE_RANK[who.role] < ROLE_RANK["admin"]:
        raise ApiError(403, f"$.placement: {who.name} has role {who.role}; setting a topic's placement policy needs "
                            "admin (create it without placement, or ask an admin)")
    snap = snapshot_or_409(ctx, body.cluster)
    if body.name in snap.index.topic_by_name:
        raise ApiError(409, f"topic {body.name!r} already exists on cluster {body.cluster!r}")
    placement = body.placement if body.placement is not None else read(
        ctx, lambda s: s["clusters"][body.cluster]["placement"]["topics"].get(body.name))
    request_ = NewTopic(name=body.name, partitions=body.partitions, replication_factor=body.replication_factor,
                        bytes_in_per_s=body.expected_bytes_in_per_s, pool=body.pool, placement=placement,
                        disk_read_bytes_per_s=body.expected_disk_read_bytes_per_s)
    try:
        result = plan_preallocation(snap, request_, PreallocateOptions(bounds=Bounds(
            capacity_headroom=body.capacity_headroom)))
    except PlannerError as exc:
        raise ApiError(409, f"cannot place topic {body.name!r}: {exc}") from None
    assignment = {p.partition: list(p.replicas) for p in result.topic.partitions}
    if ctx.executor is None:
        raise ApiError(503, "no executor on this node (it holds the cluster's Kafka client)")
    try:
        admin = ctx.executor.executor(body.cluster).admin
        admin.create_topic(body.name, assignment, body.configs)
    except KeyError as exc:
        raise ApiError(409, str(exc).strip("'\"")) from None
    except TopicExists as exc:
        raise ApiError(409, str(exc)) from None
    except AdminError as exc:
        if isinstance(exc, KafkaAuthError):
            raise
        raise ApiError(503, f"cluster {body.cluster!r} refused or unreachable: {exc}") from None
    dirs = {(body.name, p.partition, b): d for p in result.topic.partitions
            for b, d in zip(p.replicas, p.log_dirs, strict=True) if d}
    try:
        refused = {k: v for k, v in admin.alter_log_dirs(dirs).items() if v} if dirs else {}
    except AdminError as exc:
        refused = {k: str(exc) for k in dirs}
    if body.placement is not None:
        propose(ctx, request, who, {"type": "placement.set", "cluster": body.cluster, "topic": body.name,
                                    "placement": dict(body.placement)})
    propose(ctx, request, who, {"type": "topic.created", "cluster": body.cluster, "topic": body.name,
                                "partitions": body.partitions, "replication_factor": body.replication_factor,
                                "assignment": {str(p): r for p, r in assignment.items()},
                                "summary": {"expected_bytes_in_per_s": body.expected_bytes_in_per_s,
                                            "pool": body.pool, "placement": placement}})
    return {"cluster": body.cluster, "topic": body.name, "assignment": {str(p): r for p, r in assignment.items()},
            "log_dirs": {str(p.partition): list(p.log_dirs) for p in result.topic.partitions},
            "log_dirs_refused": {f"{t}-{p}@{b}": why for (t, p, b), why in sorted(refused.items())},
            "pool": body.pool, "placement": placement, "notes": list(result.plan.notes)}
