"""The snapshot file contract ``guardian.snapshot/v1``: parse, validate, convert, dump.

Parsing is pure (text in, :class:`ClusterSnapshot` out). A rejected document raises
:class:`ContractError` naming the JSON path of *every* problem: type and range errors found by
pydantic first, then cross-reference errors (unknown brokers, log dirs not on their broker,
duplicates, impossible placement policies).
"""

from __future__ import annotations

import gc
import json
from collections import Counter
from collections.abc import Container, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from domain.errors import ContractError, Problem, json_path
from domain.model import (
    Broker,
    BrokerState,
    ClusterSnapshot,
    Disk,
    DiskKind,
    Partition,
    Topic,
)

SNAPSHOT_FORMAT = "guardian.snapshot/v1"

NonNegFloat = Annotated[float, Field(ge=0)]
NonNegInt = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Name = Annotated[str, Field(min_length=1)]
Placement = dict[Name, Annotated[int, Field(ge=1)]]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, strict=True, frozen=True)


class DiskDoc(_Doc):
    """A broker's log dir."""

    path: Name
    kind: DiskKind
    capacity_bytes: Annotated[int, Field(gt=0)]
    max_bytes_per_s: Annotated[float, Field(gt=0)]
    used_bytes: NonNegInt = 0
    util: Fraction = 0.0
    await_ms: NonNegFloat = 0.0
    read_bytes_per_s: NonNegFloat = 0.0
    write_bytes_per_s: NonNegFloat = 0.0
    load_history: list[Fraction] = Field(default_factory=list)


class BrokerDoc(_Doc):
    """A broker with its location, pool, state and disks."""

    id: NonNegInt
    host: Name
    port: Annotated[int, Field(ge=1, le=65535)]
    idc: Name
    rack: Name
    pool: Name = "shared"
    state: BrokerState = BrokerState.ALIVE
    memory_bytes: NonNegInt = 0
    disks: list[DiskDoc] = Field(default_factory=list)


class PartitionDoc(_Doc):
    """A partition's assignment and traffic. ``leader`` -1 or null means no leader."""

    partition: NonNegInt
    replicas: Annotated[list[NonNegInt], Field(min_length=1)]
    leader: Annotated[int, Field(ge=-1)] | None = None
    isr: list[NonNegInt] = Field(default_factory=list)
    log_dirs: list[Name]
    size_bytes: NonNegInt = 0
    bytes_in_per_s: NonNegFloat = 0.0
    bytes_out_per_s: NonNegFloat = 0.0
    messages_in_per_s: NonNegFloat = 0.0
    disk_read_bytes_per_s: NonNegFloat = 0.0


class TopicDoc(_Doc):
    """A topic, its pool and IDC placement policy."""

    name: Name
    pool: Name = "shared"
    placement: Placement | None = None
    partitions: list[PartitionDoc] = Field(default_factory=list)


class SnapshotDoc(_Doc):
    """The whole ``guardian.snapshot/v1`` document."""

    format: Literal["guardian.snapshot/v1"]
    cluster: Name
    taken_at: AwareDatetime
    placement: Placement | None = Field(default=None, description="cluster-wide default IDC placement")
    brokers: Annotated[list[BrokerDoc], Field(min_length=1)]
    topics: list[TopicDoc] = Field(default_factory=list)


def snapshot_json_schema() -> dict[str, Any]:
    """JSON Schema of the snapshot file."""
    return SnapshotDoc.model_json_schema()


def parse_snapshot(text: str | bytes) -> ClusterSnapshot:
    """Parse and validate a snapshot document. Raises :class:`ContractError` listing every problem.

    Method: a document the fast path accepts (:func:`_parse_by_topic`) is returned from it; anything else —
    invalid JSON, a wrong type, a broken cross-reference — is parsed again whole by pydantic
    (``SnapshotDoc.model_validate_json``), which names every problem by its JSON path (the same errors as
    ever). The fast path accepts no more than that one: the head (everything but the topics, small) is
    validated from JSON text by the same model, each topic in strict Python mode (its fields are strings,
    numbers and lists of them, which strict Python and strict JSON validation treat alike).

    Cost: O(size of the document), the cyclic garbage collector paused. Peak memory: the document's JSON tree
    (``json.loads``) plus the domain model; each topic's tree and validated doc are freed once it is converted
    (the whole-document path held pydantic-core's own JSON tree, every doc object and the domain model at once:
    1.1 GB at 3,000 brokers x 300k partitions, 0.63 GB this way).
    """
    was_enabled = gc.isenabled()
    gc.disable()  # a JSON tree, docs and domain objects by the million, no reference cycle: each collection
    try:          # pass would re-walk them all for nothing (~25% of the parse at 1,000 brokers); refcounts free them
        fast = _parse_by_topic(text)
    finally:
        if was_enabled:
            gc.enable()
    if fast is not None:
        return fast
    try:
        doc = SnapshotDoc.model_validate_json(text)
    except ValidationError as exc:
        raise ContractError("snapshot", validation_problems(exc)) from None
    problems = _cross_reference_problems(doc)
    if problems:
        raise ContractError("snapshot", problems)
    return _to_domain(doc)


def _parse_by_topic(text: str | bytes) -> ClusterSnapshot | None:
    """The snapshot, validated and converted one topic at a time; None at the first problem of any kind."""
    try:
        tree = json.loads(text)
        if not isinstance(tree, dict):
            return None
        raw_topics = tree.pop("topics", [])
        if not isinstance(raw_topics, list):
            return None
        head = SnapshotDoc.model_validate_json(json.dumps(tree, allow_nan=False))
        del tree
        dirs_of = _dirs_of(head)
        if dirs_of is None or _placement_problems("$.placement", head.placement, set(_idcs(head))):
            return None
        idcs = set(_idcs(head))
        names: set[str] = set()
        topics: list[Topic] = []
        for t in range(len(raw_topics)):
            topic = TopicDoc.model_validate(raw_topics[t])
            raw_topics[t] = None  # its JSON tree is freed as soon as it is validated
            if topic.name in names or _topic_problems(f"$.topics[{t}]", topic, head.placement, dirs_of, idcs):
                return None
            names.add(topic.name)
            topics.append(_topic_to_domain(topic, dirs_of))
    except (ValueError, ValidationError):  # not JSON, NaN/Infinity, a type or range error: the whole path says
        return None
    return ClusterSnapshot(cluster=head.cluster, taken_at=head.taken_at, brokers=_brokers_to_domain(head),
                           topics=tuple(topics),
                           default_placement=dict(head.placement) if head.placement is not None else None)


def _idcs(doc: SnapshotDoc) -> list[str]:
    return [b.idc for b in doc.brokers]


def _dirs_of(doc: SnapshotDoc) -> dict[int, dict[str, str]] | None:
    """Each broker's log dir paths (each path mapped to itself: one string object per path); None when a broker
    id or log dir is duplicated or a disk is over-full (the whole path names those)."""
    dirs_of: dict[int, dict[str, str]] = {}
    for broker in doc.brokers:
        paths = {d.path: d.path for d in broker.disks}
        if broker.id in dirs_of or len(paths) != len(broker.disks) or any(
                d.used_bytes > d.capacity_bytes for d in broker.disks):
            return None
        dirs_of[broker.id] = paths
    return dirs_of


def validation_problems(exc: ValidationError) -> list[Problem]:
    """Turn pydantic's errors into :class:`Problem` s with JSON paths."""
    problems = []
    for err in exc.errors(include_url=False):
        message = err["msg"]
        if err["type"] == "json_invalid":
            message = f"not valid JSON: {err.get('ctx', {}).get('error', message)}"
        elif err["type"] == "missing":
            message = "required field is missing"
        problems.append(Problem(json_path(err["loc"]), message))
    return problems


def _cross_reference_problems(doc: SnapshotDoc) -> list[Problem]:
    problems: list[Problem] = []
    dirs_of: dict[int, set[str]] = {}
    idcs = {b.idc for b in doc.brokers}
    for i, broker in enumerate(doc.brokers):
        if broker.id in dirs_of:
            problems.append(Problem(f"$.brokers[{i}].id", f"duplicate broker id {broker.id}"))
        paths = [d.path for d in broker.disks]
        for j, d in enumerate(broker.disks):
            if paths.index(d.path) != j:
                problems.append(Problem(f"$.brokers[{i}].disks[{j}].path", f"duplicate log dir {d.path!r}"))
            if d.used_bytes > d.capacity_bytes:
                problems.append(Problem(f"$.brokers[{i}].disks[{j}].used_bytes",
                                        f"{d.used_bytes} exceeds capacity_bytes {d.capacity_bytes}"))
        dirs_of.setdefault(broker.id, set(paths))
    problems += _placement_problems("$.placement", doc.placement, idcs)
    names: set[str] = set()
    for t, topic in enumerate(doc.topics):
        at = f"$.topics[{t}]"
        if topic.name in names:
            problems.append(Problem(f"{at}.name", f"duplicate topic {topic.name!r}"))
        names.add(topic.name)
        problems += _topic_problems(at, topic, doc.placement, dirs_of, idcs)
    return problems


def _topic_problems(at: str, topic: TopicDoc, default: Placement | None, dirs_of: Mapping[int, Container[str]],
                    idcs: set[str]) -> list[Problem]:
    problems = _placement_problems(f"{at}.placement", topic.placement, idcs)
    placement = topic.placement if topic.placement is not None else default
    required = sum(placement.values()) if placement else 0
    seen: set[int] = set()
    for q, part in enumerate(topic.partitions):
        problems += _partition_problems(f"{at}.partitions[{q}]", part, dirs_of, seen)
        if required > len(part.replicas):
            problems.append(Problem(f"{at}.partitions[{q}].replicas",
                                    f"placement requires {required} replicas, partition has "
                                    f"{len(part.replicas)}"))
    return problems


def _placement_problems(at: str, placement: Mapping[str, int] | None, idcs: set[str]) -> list[Problem]:
    return [Problem(f"{at}.{idc}", f"no broker is in IDC {idc!r}")
            for idc in (placement or {}) if idc not in idcs]


def _partition_problems(at: str, part: PartitionDoc, dirs_of: Mapping[int, Container[str]],
                        seen: set[int]) -> list[Problem]:
    replicas, log_dirs = part.replicas, part.log_dirs
    if (part.partition not in seen and len(set(replicas)) == len(replicas) == len(log_dirs)
            and (part.leader is None or part.leader == -1 or part.leader in replicas)
            and all(map(replicas.__contains__, part.isr))
            and all(b in dirs_of and d in dirs_of[b] for b, d in zip(replicas, log_dirs))):  # noqa: B905 (equal)
        seen.add(part.partition)  # the usual case: nothing to name (the rules below, in one pass)
        return []
    problems = []
    if part.partition in seen:
        problems.append(Problem(f"{at}.partition", f"duplicate partition {part.partition}"))
    seen.add(part.partition)
    counts = Counter(part.replicas)
    for k, broker_id in enumerate(part.replicas):
        if broker_id not in dirs_of:
            problems.append(Problem(f"{at}.replicas[{k}]", f"unknown broker {broker_id}"))
        elif counts[broker_id] > 1 and part.replicas.index(broker_id) == k:
            problems.append(Problem(f"{at}.replicas", f"broker {broker_id} appears {counts[broker_id]} times"))
    if part.leader is not None and part.leader != -1 and part.leader not in part.replicas:
        problems.append(Problem(f"{at}.leader", f"leader {part.leader} is not a replica"))
    for k, broker_id in enumerate(part.isr):
        if broker_id not in part.replicas:
            problems.append(Problem(f"{at}.isr[{k}]", f"in-sync replica {broker_id} is not a replica"))
    if len(part.log_dirs) != len(part.replicas):
        problems.append(Problem(f"{at}.log_dirs",
                                f"{len(part.log_dirs)} log dirs for {len(part.replicas)} replicas"))
    else:
        for k, (broker_id, path) in enumerate(zip(part.replicas, part.log_dirs, strict=True)):
            if broker_id in dirs_of and path not in dirs_of[broker_id]:
                problems.append(Problem(f"{at}.log_dirs[{k}]", f"broker {broker_id} has no log dir {path!r}"))
    return problems


def _to_domain(doc: SnapshotDoc) -> ClusterSnapshot:
    return ClusterSnapshot(cluster=doc.cluster, taken_at=doc.taken_at, brokers=_brokers_to_domain(doc),
                           topics=tuple(_topic_to_domain(t) for t in doc.topics),
                           default_placement=dict(doc.placement) if doc.placement is not None else None)


def _brokers_to_domain(doc: SnapshotDoc) -> tuple[Broker, ...]:
    return tuple(
        Broker(id=b.id, host=b.host, port=b.port, idc=b.idc, rack=b.rack, pool=b.pool, state=b.state,
               memory_bytes=b.memory_bytes,
               disks=tuple(Disk(path=d.path, kind=d.kind, capacity_bytes=d.capacity_bytes,
                                max_bytes_per_s=d.max_bytes_per_s, used_bytes=d.used_bytes, util=d.util,
                                await_ms=d.await_ms, read_bytes_per_s=d.read_bytes_per_s,
                                write_bytes_per_s=d.write_bytes_per_s,
                                load_history=tuple(d.load_history)) for d in b.disks))
        for b in doc.brokers
    )


def _topic_to_domain(t: TopicDoc, dirs_of: Mapping[int, Mapping[str, str]] | None = None) -> Topic:
    """The domain topic; with ``dirs_of`` (validated: every replica's log dir is on its broker) each log dir
    is its broker's one path string, not one string per replica."""
    return Topic(name=t.name, pool=t.pool, placement=dict(t.placement) if t.placement is not None else None,
                 partitions=tuple(
                     Partition(topic=t.name, partition=p.partition, replicas=tuple(p.replicas),
                               leader=None if p.leader in (None, -1) else p.leader, isr=tuple(p.isr),
                               log_dirs=(tuple(p.log_dirs) if dirs_of is None else
                                         tuple(dirs_of[b][d] for b, d in zip(p.replicas, p.log_dirs, strict=True))),
                               size_bytes=p.size_bytes,
                               bytes_in_per_s=p.bytes_in_per_s, bytes_out_per_s=p.bytes_out_per_s,
                               messages_in_per_s=p.messages_in_per_s,
                               disk_read_bytes_per_s=p.disk_read_bytes_per_s)
                     for p in t.partitions))


def snapshot_to_dict(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """The snapshot as a ``guardian.snapshot/v1`` JSON-able dict (stable key order)."""
    doc: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        "cluster": snapshot.cluster,
        "taken_at": format_time(snapshot.taken_at),
    }
    if snapshot.default_placement is not None:
        doc["placement"] = dict(snapshot.default_placement)
    doc["brokers"] = [
        {"id": b.id, "host": b.host, "port": b.port, "idc": b.idc, "rack": b.rack, "pool": b.pool,
         "state": b.state.value, "memory_bytes": b.memory_bytes,
         "disks": [{"path": d.path, "kind": d.kind.value, "capacity_bytes": d.capacity_bytes,
                    "max_bytes_per_s": d.max_bytes_per_s, "used_bytes": d.used_bytes, "util": d.util,
                    "await_ms": d.await_ms, "read_bytes_per_s": d.read_bytes_per_s,
                    "write_bytes_per_s": d.write_bytes_per_s, "load_history": list(d.load_history)}
                   for d in b.disks]}
        for b in snapshot.brokers
    ]
    doc["topics"] = [
        {"name": t.name, "pool": t.pool,
         **({"placement": dict(t.placement)} if t.placement is not None else {}),
         "partitions": [
             {"partition": p.partition, "replicas": list(p.replicas), "leader": p.leader,
              "isr": list(p.isr), "log_dirs": list(p.log_dirs), "size_bytes": p.size_bytes,
              "bytes_in_per_s": p.bytes_in_per_s, "bytes_out_per_s": p.bytes_out_per_s,
              "messages_in_per_s": p.messages_in_per_s, "disk_read_bytes_per_s": p.disk_read_bytes_per_s}
             for p in t.partitions]}
        for t in snapshot.topics
    ]
    return doc


def dump_snapshot(snapshot: ClusterSnapshot, *, indent: int | None = None) -> str:
    """Serialise to ``guardian.snapshot/v1`` JSON. Never writes NaN or Infinity."""
    return json.dumps(snapshot_to_dict(snapshot), indent=indent, allow_nan=False)


def format_time(moment: datetime) -> str:
    """RFC 3339 UTC with a ``Z`` suffix."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
