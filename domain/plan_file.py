"""The plan file contract ``guardian.plan/v1``.

``reassignment`` is exactly Kafka's reassignment JSON (``{"version": 1, "partitions": [{"topic",
"partition", "replicas", "log_dirs"}]}``) so ``kafka-reassign-partitions.sh --execute`` can run it;
beside it: ``format``, ``cluster``, ``kind``, ``leaders`` (preferred-leader changes) and ``summary``,
and optionally ``notes`` and ``load_basis`` (which per-partition load the planner weighed: ``window`` or
``modelled_peak`` with the model run and every overridden partition rate, so the plan is reproducible).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from domain.errors import ContractError, Problem
from domain.plan import LeaderChange, LoadBasis, LoadOverride, PartitionMove, Plan, PlanSummary, UtilStats
from domain.snapshot_file import Name, NonNegInt, validation_problems

PLAN_FORMAT = "guardian.plan/v1"
ANY_LOG_DIR = "any"


class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, strict=True, frozen=True)


class ReassignmentEntryDoc(_Doc):
    """One entry of Kafka's reassignment JSON."""

    topic: Name
    partition: NonNegInt
    replicas: Annotated[list[NonNegInt], Field(min_length=1)]
    log_dirs: list[Name] | None = None


class ReassignmentDoc(_Doc):
    """Kafka's reassignment JSON."""

    version: Literal[1]
    partitions: list[ReassignmentEntryDoc]


class LeaderDoc(_Doc):
    """A preferred-leader change."""

    topic: Name
    partition: NonNegInt
    leader: NonNegInt


class UtilStatsDoc(_Doc):
    """Estimated utilisation figures over a set of disks."""

    disks: NonNegInt
    max_util: Annotated[float, Field(ge=0)]
    mean_util: Annotated[float, Field(ge=0)]
    peak_to_mean: Annotated[float, Field(ge=0)] = 0.0


class PoolSummaryDoc(_Doc):
    """Before/after figures of one pool."""

    before: UtilStatsDoc
    after: UtilStatsDoc


class SummaryDoc(_Doc):
    """Before/after disk-load figures and what the plan moves."""

    before: UtilStatsDoc
    after: UtilStatsDoc
    pools: dict[str, PoolSummaryDoc] = Field(default_factory=dict)
    bytes_to_move: NonNegInt = 0
    partitions_moved: NonNegInt = 0
    replicas_moved: NonNegInt = 0
    intra_broker_moves: NonNegInt = 0
    leader_changes: NonNegInt = 0
    intra_broker_bytes: NonNegInt = 0


class LoadOverrideDoc(_Doc):
    """One partition's write rate as the planner weighed it, beside the snapshot's window rate."""

    topic: Name
    partition: NonNegInt
    window_bytes_in_per_s: Annotated[float, Field(ge=0)]
    bytes_in_per_s: Annotated[float, Field(ge=0)]


class LoadBasisDoc(_Doc):
    """Which per-partition load the plan was made on."""

    basis: Literal["window", "modelled_peak"]
    source: str = ""
    overrides: list[LoadOverrideDoc] = Field(default_factory=list)


class PlanDoc(_Doc):
    """The whole ``guardian.plan/v1`` document."""

    format: Literal["guardian.plan/v1"]
    cluster: Name
    kind: Name
    reassignment: ReassignmentDoc
    leaders: list[LeaderDoc] = Field(default_factory=list)
    summary: SummaryDoc | None = None
    notes: list[str] = Field(default_factory=list)
    load_basis: LoadBasisDoc | None = None


def plan_json_schema() -> dict[str, Any]:
    """JSON Schema of the plan file."""
    return PlanDoc.model_json_schema()


KIND_REASSIGNMENT = "reassignment"
"""The kind of a plan read from a bare Kafka reassignment JSON (:func:`parse_reassignment`)."""


def is_bare_reassignment(text: str | bytes) -> bool:
    """True when ``text`` is a JSON object with Kafka's ``version`` + ``partitions`` and no ``format``: what
    ``kafka-reassign-partitions --generate`` or Cruise Control write, not a ``guardian.plan/v1`` document."""
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and "format" not in doc and "version" in doc and "partitions" in doc


def parse_reassignment(text: str | bytes, cluster: str) -> Plan:
    """A bare Kafka reassignment JSON ``{"version": 1, "partitions": [...]}`` as a plan of ``cluster`` (kind
    ``reassignment``, no leaders, no summary). :class:`ContractError` names every problem's JSON path."""
    try:
        doc = ReassignmentDoc.model_validate_json(text)
    except ValidationError as exc:
        raise ContractError("Kafka reassignment JSON", validation_problems(exc)) from None
    problems = [Problem(f"$.partitions[{i}].log_dirs", f"{len(e.log_dirs)} log dirs for {len(e.replicas)} replicas")
                for i, e in enumerate(doc.partitions) if e.log_dirs is not None and len(e.log_dirs) != len(e.replicas)]
    if problems:
        raise ContractError("Kafka reassignment JSON", problems)
    return Plan(cluster=cluster, kind=KIND_REASSIGNMENT, moves=tuple(
        PartitionMove(topic=e.topic, partition=e.partition, replicas=tuple(e.replicas),
                      log_dirs=tuple(None if d == ANY_LOG_DIR else d for d in e.log_dirs)
                      if e.log_dirs is not None else (None,) * len(e.replicas))
        for e in doc.partitions))


def parse_plan(text: str | bytes) -> Plan:
    """Parse a plan document. Raises :class:`ContractError` naming every problem's JSON path.

    Only the document's own structure is checked here; whether the plan fits a cluster is the
    invariant checker's job (:func:`domain.invariants.check_plan`).
    """
    try:
        doc = PlanDoc.model_validate_json(text)
    except ValidationError as exc:
        raise ContractError("plan", validation_problems(exc)) from None
    return _plan_of(doc)


def plan_from_dict(data: Mapping[str, Any]) -> Plan:
    """:func:`parse_plan` of a document already decoded (a recorded plan's ``plan`` member): no JSON text
    round trip. Raises :class:`ContractError` naming every problem's JSON path."""
    try:
        doc = PlanDoc.model_validate(data)
    except ValidationError as exc:
        raise ContractError("plan", validation_problems(exc)) from None
    return _plan_of(doc)


def _plan_of(doc: PlanDoc) -> Plan:
    problems = [
        Problem(f"$.reassignment.partitions[{i}].log_dirs",
                f"{len(e.log_dirs)} log dirs for {len(e.replicas)} replicas")
        for i, e in enumerate(doc.reassignment.partitions)
        if e.log_dirs is not None and len(e.log_dirs) != len(e.replicas)
    ]
    if problems:
        raise ContractError("plan", problems)
    moves = tuple(
        PartitionMove(topic=e.topic, partition=e.partition, replicas=tuple(e.replicas),
                      log_dirs=tuple(None if d == ANY_LOG_DIR else d for d in e.log_dirs)
                      if e.log_dirs is not None else (None,) * len(e.replicas))
        for e in doc.reassignment.partitions
    )
    leaders = tuple(LeaderChange(topic=x.topic, partition=x.partition, leader=x.leader) for x in doc.leaders)
    summary = _summary_from_doc(doc.summary) if doc.summary is not None else None
    basis = None
    if doc.load_basis is not None:
        basis = LoadBasis(basis=doc.load_basis.basis, source=doc.load_basis.source, overrides=tuple(
            LoadOverride(o.topic, o.partition, o.window_bytes_in_per_s, o.bytes_in_per_s)
            for o in doc.load_basis.overrides))
    return Plan(cluster=doc.cluster, kind=doc.kind, moves=moves, leaders=leaders, summary=summary,
                notes=tuple(doc.notes), load_basis=basis)


def _stats_from_doc(doc: UtilStatsDoc) -> UtilStats:
    return UtilStats(disks=doc.disks, max_util=doc.max_util, mean_util=doc.mean_util)


def _summary_from_doc(doc: SummaryDoc) -> PlanSummary:
    return PlanSummary(
        before=_stats_from_doc(doc.before), after=_stats_from_doc(doc.after),
        pools={name: (_stats_from_doc(p.before), _stats_from_doc(p.after)) for name, p in doc.pools.items()},
        bytes_to_move=doc.bytes_to_move, partitions_moved=doc.partitions_moved,
        replicas_moved=doc.replicas_moved, intra_broker_moves=doc.intra_broker_moves,
        leader_changes=doc.leader_changes, intra_broker_bytes=doc.intra_broker_bytes,
    )


def _stats_to_dict(stats: UtilStats) -> dict[str, Any]:
    return {"disks": stats.disks, "max_util": stats.max_util, "mean_util": stats.mean_util,
            "peak_to_mean": stats.peak_to_mean}


def reassignment_to_dict(plan: Plan) -> dict[str, Any]:
    """Kafka's reassignment JSON for the plan's moves (``"any"`` for unspecified log dirs)."""
    return {
        "version": 1,
        "partitions": [
            {"topic": m.topic, "partition": m.partition, "replicas": list(m.replicas),
             "log_dirs": [d if d is not None else ANY_LOG_DIR for d in m.log_dirs]}
            for m in plan.moves
        ],
    }


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The plan as a ``guardian.plan/v1`` JSON-able dict."""
    doc: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "cluster": plan.cluster,
        "kind": plan.kind,
        "reassignment": reassignment_to_dict(plan),
        "leaders": [{"topic": x.topic, "partition": x.partition, "leader": x.leader} for x in plan.leaders],
    }
    if plan.summary is not None:
        s = plan.summary
        doc["summary"] = {
            "before": _stats_to_dict(s.before), "after": _stats_to_dict(s.after),
            "pools": {name: {"before": _stats_to_dict(b), "after": _stats_to_dict(a)}
                      for name, (b, a) in s.pools.items()},
            "bytes_to_move": s.bytes_to_move, "partitions_moved": s.partitions_moved,
            "replicas_moved": s.replicas_moved, "intra_broker_moves": s.intra_broker_moves,
            "leader_changes": s.leader_changes, "intra_broker_bytes": s.intra_broker_bytes,
        }
    if plan.notes:
        doc["notes"] = list(plan.notes)
    if plan.load_basis is not None:
        b = plan.load_basis
        doc["load_basis"] = {"basis": b.basis, "source": b.source, "overrides": [
            {"topic": o.topic, "partition": o.partition, "window_bytes_in_per_s": o.window_bytes_in_per_s,
             "bytes_in_per_s": o.bytes_in_per_s} for o in b.overrides]}
    return doc


def dump_plan(plan: Plan, *, indent: int | None = 2) -> str:
    """Serialise to ``guardian.plan/v1`` JSON (the bytes of ``json.dumps(..., indent=indent)``)."""
    doc = plan_to_dict(plan)
    if indent is None:
        return json.dumps(doc, allow_nan=False)
    return indented_json(doc, " " * indent)


def indented_json(value: Any, indent: str, level: int = 0) -> str:
    """``json.dumps(value, indent=len(indent), allow_nan=False)``, byte for byte, for JSON-able dicts, lists and
    scalars. The standard library writes indented JSON with its pure-Python encoder (its C one only writes
    compact JSON), which keeps every token of the document as its own string until the final join: ~10 million
    strings, ~0.5 GB, for a 3,000-broker rebalance plan of 48 MB. Here each container is joined as soon as it
    is written (about one string per plan entry), and lists of ints or strings in one C-level join."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        if not all(type(k) is str for k in value):  # keys JSON spells its own way: the standard encoder
            return json.dumps(value, indent=indent, allow_nan=False).replace("\n", "\n" + indent * level)
        inner = ",\n" + indent * (level + 1)
        return ("{" + inner[1:] + inner.join([f"{_STR(k)}: {_item(v, indent, level + 1)}" for k, v in value.items()])
                + "\n" + indent * level + "}")
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        inner = ",\n" + indent * (level + 1)
        kinds = set(map(type, value))
        if kinds == {int}:
            body = inner.join(map(int.__repr__, value))
        elif kinds == {str}:
            body = inner.join(map(_STR, value))
        else:
            body = inner.join([indented_json(v, indent, level + 1) for v in value])
        return "[" + inner[1:] + body + "\n" + indent * level + "]"
    return _scalar(value)


_STR: Callable[[str], str] = json.encoder.encode_basestring_ascii


def _item(value: Any, indent: str, level: int) -> str:
    kind = type(value)
    if kind is str:
        return _STR(value)
    if kind is int:
        return int.__repr__(value)
    return indented_json(value, indent, level)


def _scalar(value: Any) -> str:
    """One JSON scalar as ``json.dumps`` writes it (``allow_nan=False``)."""
    if isinstance(value, str):
        return _STR(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return json.dumps(value, allow_nan=False)  # repr, or the standard encoder's error for NaN / infinity
    return json.dumps(value, allow_nan=False)  # anything else: the standard encoder's answer (or its error)
