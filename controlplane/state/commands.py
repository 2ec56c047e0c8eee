"""Commands of Guardian's replicated state: validated (pydantic) before they are proposed.

Every command is a JSON object ``{"type": ..., "meta": {"who", "why", "at"}, ...payload}``. ``meta.at``
is set by the proposer (the state machine never reads a clock), so every node applies the same
command identically. :func:`validate_command` is the Raft validator: it rejects a malformed command
with a message naming the field, and returns the normalised command.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from controlplane.state.registration import ADMIN_OFFSETS, TOPOLOGY_KEYS, check_registration
from domain.errors import json_path
from domain.execution import NO_READER, Action, TaskState
from domain.plan_record import PlanStatus
from kafkaio.endpoints import EndpointsError
from raft.protocol import CommandRejected, JsonDict

Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/@-]+$")]
BrokerId = Annotated[int, Field(ge=0)]

PLAN_STATES = tuple(s.value for s in PlanStatus)


class _Cmd(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class Meta(_Cmd):
    """Who asked, why, and when (set by the proposer)."""

    who: Annotated[str, Field(min_length=1, max_length=200)]
    why: Annotated[str, Field(max_length=2000)] = ""
    at: AwareDatetime


class ClusterRegister(_Cmd):
    """Register (or re-register) a cluster; the record is checked by :mod:`controlplane.state.registration`."""

    type: Literal["cluster.register"]
    meta: Meta
    name: Name
    bootstrap_servers: Annotated[list[Annotated[str, Field(min_length=3)]], Field(min_length=1)]
    metrics_urls: dict[str, str] = Field(default_factory=dict)
    control_url: str | None = None
    capabilities: dict[str, bool] = Field(default_factory=dict)
    security: dict[str, Any] | None = None
    brokers: list[dict[str, Any]] = Field(default_factory=list)
    rack_to_idc: dict[str, Any] | None = None
    idc_overrides: dict[str, Name] = Field(default_factory=dict)
    hardware: list[dict[str, Any]] | dict[str, Any] | None = None
    consumer_offsets: Annotated[str, Field(min_length=1, max_length=2000)] = ADMIN_OFFSETS

    @model_validator(mode="after")
    def _parses(self) -> ClusterRegister:
        try:
            check_registration(self.name, self.model_dump(mode="json"))
        except EndpointsError as exc:
            raise ValueError(str(exc)) from None
        return self


class ClusterTopology(_Cmd):
    """Replace a cluster's declared topology: rack->IDC rule, per-broker IDC overrides, hardware profile."""

    type: Literal["cluster.topology"]
    meta: Meta
    name: Name
    rack_to_idc: dict[str, Any] | None = None
    idc_overrides: dict[str, Name] = Field(default_factory=dict)
    hardware: list[dict[str, Any]] | dict[str, Any] | None = None

    @model_validator(mode="after")
    def _parses(self) -> ClusterTopology:
        try:
            check_registration(self.name, {"bootstrap_servers": ["topology-check:1"],
                                           **self.model_dump(mode="json", include=set(TOPOLOGY_KEYS))})
        except EndpointsError as exc:
            raise ValueError(str(exc)) from None
        return self


class ClusterRemove(_Cmd):
    type: Literal["cluster.remove"]
    meta: Meta
    name: Name


class AutoRebalance(_Cmd):
    type: Literal["cluster.auto_rebalance"]
    meta: Meta
    name: Name
    enabled: bool
    window_cron: Annotated[str, Field(min_length=9, max_length=100)] = "0 2 * * *"
    window_minutes: Annotated[int, Field(ge=1, le=1440)] = 240
    threshold: Annotated[float, Field(gt=1.0, le=100.0)] = 1.25
    max_partitions: Annotated[int, Field(ge=1, le=100_000)] = 50
    load_basis: Literal["window", "modelled_peak"] = "window"


class PlacementSet(_Cmd):
    type: Literal["placement.set"]
    meta: Meta
    cluster: Name
    topic: Name | None = None
    placement: dict[Name, Annotated[int, Field(ge=1, le=16)]] | None


class PoolAssign(_Cmd):
    type: Literal["pool.assign"]
    meta: Meta
    cluster: Name
    pool: Name
    brokers: Annotated[list[BrokerId], Field(min_length=1)]


class PlanPropose(_Cmd):
    type: Literal["plan.propose"]
    meta: Meta
    cluster: Name
    kind: Name
    plan: dict[str, Any]
    snapshot_taken_at: AwareDatetime | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    """The planner parameters the plan was made with (recorded for audit and for execution: a drain's
    brokers, a restore's drain execution)."""
    prerequisites: dict[str, Any] = Field(default_factory=dict)
    """Metadata changes the plan needs in force before it runs (``pools``: pool -> brokers moved into it,
    ``placements``: topic -> IDC placement policy); applied when it is executed."""


class PlanDecide(_Cmd):
    type: Literal["plan.approve", "plan.reject"]
    meta: Meta
    plan_id: Annotated[int, Field(ge=1)]


class TaskSpec(_Cmd):
    key: Name
    topic: Name
    partition: Annotated[int, Field(ge=0)]
    action: Action
    source_replicas: list[BrokerId]
    source_log_dirs: list[str | None] = Field(default_factory=list)
    target_replicas: list[BrokerId]
    target_log_dirs: list[str | None] = Field(default_factory=list)
    size_bytes: Annotated[int, Field(ge=0)] = 0
    leader: BrokerId | None = None
    batch: Annotated[int, Field(ge=0)] = 0
    after: list[Name] = Field(default_factory=list)


class ExecutionStart(_Cmd):
    type: Literal["execution.start"]
    meta: Meta
    plan_id: Annotated[int, Field(ge=1)]
    tasks: list[TaskSpec]
    caps: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    partition_counts: dict[Name, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)


class TaskUpdate(_Cmd):
    key: Name
    state: TaskState
    reason: str = ""
    bytes_done: Annotated[int, Field(ge=0)] | None = None
    bytes_total: Annotated[int, Field(ge=0)] | None = None
    rate_bytes_per_s: Annotated[float, Field(ge=0)] | None = None
    attempts: Annotated[int, Field(ge=0)] | None = None
    reader: Annotated[int, Field(ge=NO_READER)] | None = None
    """The kept follower a copy reads from; :data:`~domain.execution.NO_READER` clears it; ``None`` keeps it."""
    leader_attempts: Annotated[int, Field(ge=0)] | None = None


class ExecutionTasks(_Cmd):
    type: Literal["execution.tasks"]
    meta: Meta
    execution_id: Annotated[int, Field(ge=1)]
    updates: Annotated[list[TaskUpdate], Field(min_length=1)]


class ExecutionControl(_Cmd):
    type: Literal["execution.stop", "execution.finish", "execution.caps"]
    meta: Meta
    execution_id: Annotated[int, Field(ge=1)]
    rollback: bool = False
    status: Literal["completed", "stopped", "failed"] | None = None
    caps: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)


class ExecutionProgress(_Cmd):
    type: Literal["execution.progress"]
    meta: Meta
    execution_id: Annotated[int, Field(ge=1)]
    progress: dict[str, Any]


class ExecutionRefused(_Cmd):
    """An execution the executor refused to start (another executor's lease, foreign reassignments): nothing
    changes but the action log, which records who asked, for which plan, and why it was refused."""

    type: Literal["execution.refused"]
    meta: Meta
    cluster: Name
    plan_id: Annotated[int, Field(ge=1)] | None = None
    reason: Annotated[str, Field(max_length=4000)]


class MigrationStart(_Cmd):
    """A multi-step migration (a parent record): its step plans (approved) run one after another, each as
    an ordinary execution started by the leader's executor once the previous step completed."""

    type: Literal["migration.start"]
    meta: Meta
    cluster: Name
    kind: Name = "migrate-idc"
    topics: Annotated[list[Name], Field(min_length=1)]
    placement: dict[Name, Annotated[int, Field(ge=1, le=16)]]
    previous_placement: dict[Name, dict[Name, Annotated[int, Field(ge=1, le=16)]] | None] = Field(
        default_factory=dict)
    steps: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)]
    caps: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)


class MigrationUpdate(_Cmd):
    """``migration.step``: the current step (and the execution running it); ``migration.finish``: the end
    (``status``); ``migration.stop``: the operator stops it (no further step starts)."""

    type: Literal["migration.step", "migration.finish", "migration.stop"]
    meta: Meta
    migration_id: Annotated[int, Field(ge=1)]
    step: Annotated[int, Field(ge=0)] | None = None
    execution_id: Annotated[int, Field(ge=1)] | None = None
    status: Literal["completed", "failed", "stopped"] | None = None


class TopicCreated(_Cmd):
    """A topic Guardian created with a pre-allocated assignment: nothing changes but the action log."""

    type: Literal["topic.created"]
    meta: Meta
    cluster: Name
    topic: Name
    partitions: Annotated[int, Field(ge=1)]
    replication_factor: Annotated[int, Field(ge=1)]
    assignment: dict[str, list[BrokerId]]
    summary: dict[str, Any] = Field(default_factory=dict)


class ThrottleSet(_Cmd):
    type: Literal["throttle.set"]
    meta: Meta
    cluster: Name
    key: Name
    kind: Name
    target: dict[str, Any]
    rate_bytes_per_s: Annotated[float, Field(ge=0)]
    evidence: dict[str, Any] = Field(default_factory=dict)


class ThrottleClear(_Cmd):
    type: Literal["throttle.clear"]
    meta: Meta
    cluster: Name
    key: Name


class MaintenanceSet(_Cmd):
    type: Literal["maintenance.set"]
    meta: Meta
    cluster: Name
    broker: BrokerId
    enabled: bool


class AllocateIds(_Cmd):
    type: Literal["ids.allocate"]
    meta: Meta
    count: Annotated[int, Field(ge=1, le=1_000_000)]


class StateVersionSet(_Cmd):
    """Raise the group's state version (:mod:`controlplane.state.versions`); stamped with ``version`` in the log,
    so a node whose code cannot apply it holds instead of diverging."""

    type: Literal["state.version"]
    meta: Meta
    version: Annotated[int, Field(ge=1, le=1000)]


LabelKey = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")]


class ClusterLabels(_Cmd):
    """Replace a cluster's labels (owner, team, tier ...): a command form of state version 2."""

    type: Literal["cluster.labels"]
    meta: Meta
    name: Name
    labels: Annotated[dict[LabelKey, Annotated[str, Field(max_length=200)]], Field(max_length=64)]


UPLOAD_CHUNK_CHARS = 768 * 1024
"""The largest chunk of an upload (characters of base64 text): with its envelope, well inside one Raft command."""
UploadId = Annotated[str, Field(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class UploadChunk(_Cmd):
    """One piece of a command too large for one Raft entry, staged under ``upload_id`` (state version 3;
    :mod:`controlplane.state.chunked`). ``data``: base64 of the zlib-compressed canonical entry, in order."""

    type: Literal["upload.chunk"]
    meta: Meta
    upload_id: UploadId
    term: Annotated[int, Field(ge=0)]
    """The Raft term of the leader that proposes it: a later term's upload drops the earlier terms' staged ones."""
    seq: Annotated[int, Field(ge=0, le=100_000)]
    data: Annotated[str, Field(min_length=1, max_length=UPLOAD_CHUNK_CHARS, pattern=r"^[A-Za-z0-9+/=]+$")]


class UploadCommit(_Cmd):
    """Assemble the staged chunks of ``upload_id`` and apply the command they hold, all or nothing."""

    type: Literal["upload.commit"]
    meta: Meta
    upload_id: UploadId
    term: Annotated[int, Field(ge=0)]
    chunks: Annotated[int, Field(ge=1, le=100_000)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """SHA-256 of the staged base64 text, joined in order."""
    size: Annotated[int, Field(ge=1)]
    """Bytes of the command's canonical JSON once decompressed."""


class UploadAbort(_Cmd):
    """Drop staged uploads: ``upload_id``, or every one staged by a leader of a term below ``before_term``."""

    type: Literal["upload.abort"]
    meta: Meta
    upload_id: UploadId | None = None
    before_term: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _one(self) -> UploadAbort:
        if (self.upload_id is None) == (self.before_term is None):
            raise ValueError("give exactly one of upload_id and before_term")
        return self


COMMANDS: dict[str, type[_Cmd]] = {}
for _model in (StateVersionSet, ClusterLabels, UploadChunk, UploadCommit, UploadAbort,
               ClusterRegister, ClusterRemove, AutoRebalance, PlacementSet, PoolAssign, PlanPropose, PlanDecide,
               ExecutionStart, ExecutionTasks, ExecutionControl, ExecutionProgress, ThrottleSet, ThrottleClear,
               MaintenanceSet, AllocateIds, ExecutionRefused, MigrationStart, MigrationUpdate, TopicCreated):
    for _literal in _model.model_fields["type"].annotation.__args__:  # type: ignore[union-attr]
        COMMANDS[_literal] = _model
COMMANDS["cluster.topology"] = ClusterTopology


# ------------------------------------------------------------------ self-healing (anomalies)
ANOMALY_STATES = ("detected", "confirmed", "fixing", "fixed", "cleared", "ignored", "failed")
OPEN_ANOMALY_STATES = frozenset({"detected", "confirmed", "fixing"})
ANOMALY_TRANSITIONS: dict[str, frozenset[str]] = {
    "detected": frozenset({"confirmed", "fixed", "cleared", "ignored", "failed"}),
    "confirmed": frozenset({"fixing", "fixed", "cleared", "ignored", "failed"}),
    "fixing": frozenset({"confirmed", "fixed", "cleared", "failed"}),
    "fixed": frozenset(), "cleared": frozenset(), "ignored": frozenset(), "failed": frozenset(),
}
"""An anomaly's lifecycle: a fix starts only from ``confirmed`` (so it never starts twice), ends once;
``fixing -> confirmed`` is a retry (the executor refused the fix's plan, its execution did not complete, or
the fault outlived it), backed off. ``fixed``: a fix removed the cause; ``cleared``: the cause went away by
itself (a broker that returned, a disk no longer slow, a passing under-replication)."""


class SelfHealingSet(_Cmd):
    type: Literal["cluster.self_healing"]
    meta: Meta
    name: Name
    enabled: bool
    grace_s: Annotated[float, Field(ge=0, le=86_400)] = 300.0
    max_concurrent_fixes: Annotated[int, Field(ge=1, le=100)] = 1
    mass_failure_share: Annotated[float, Field(gt=0, lt=1)] = 0.34
    evacuate_slow_after_s: Annotated[float, Field(ge=0, le=86_400)] = 1800.0
    heal_bound_s: Annotated[float, Field(gt=0, le=7 * 86_400)] = 3600.0
    """A heal's copies never run slower than the rate that restores its bytes within this bound."""
    heal_rate_bytes_per_s: Annotated[float, Field(gt=0, le=100e9)] = 50e6
    """... nor slower than this rate (bytes/s): the allowed heal rate is max(this, bytes / heal_bound_s)."""


class AnomalyRaise(_Cmd):
    type: Literal["anomaly.raise"]
    meta: Meta
    cluster: Name
    key: Annotated[str, Field(min_length=1, max_length=400)]
    kind: Name
    subject: dict[str, Any] = Field(default_factory=dict)
    evidence: dict[str, Any] = Field(default_factory=dict)
    summary: Annotated[str, Field(max_length=2000)] = ""
    confirmed: bool = False


class AnomalyUpdate(_Cmd):
    type: Literal["anomaly.update"]
    meta: Meta
    anomaly_id: Annotated[int, Field(ge=1)]
    status: Literal["detected", "confirmed", "fixing", "fixed", "cleared", "ignored", "failed"]
    expect: Literal["detected", "confirmed", "fixing", "fixed", "cleared", "ignored", "failed"] | None = None
    """Refuse unless the anomaly is in this state now (a second leader's duplicate fix is refused)."""
    reason: Annotated[str, Field(max_length=2000)] = ""
    plan_id: Annotated[int, Field(ge=1)] | None = None
    execution_id: Annotated[int, Field(ge=1)] | None = None


class AnomalyNote(_Cmd):
    """A note on an open anomaly's history (e.g. throttle protection sparing a fail-slow disk's clients)."""

    type: Literal["anomaly.note"]
    meta: Meta
    anomaly_id: Annotated[int, Field(ge=1)]
    reason: Annotated[str, Field(min_length=1, max_length=2000)]


class PlanExpire(_Cmd):
    type: Literal["plan.expire"]
    meta: Meta
    plan_id: Annotated[int, Field(ge=1)]


_healing_model: type[_Cmd]
for _healing_model in (SelfHealingSet, AnomalyRaise, AnomalyUpdate, AnomalyNote, PlanExpire):
    for _literal in _healing_model.model_fields["type"].annotation.__args__:  # type: ignore[union-attr]
        COMMANDS[_literal] = _healing_model


def parse_command(command: JsonDict) -> _Cmd:
    """The typed command; :class:`CommandRejected` names every bad field (``$.meta.who: ...``)."""
    kind = command.get("type")
    model = COMMANDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise CommandRejected(f"$.type: unknown command type {kind!r}; known: {', '.join(sorted(COMMANDS))}")
    try:
        return model.model_validate(command)
    except ValidationError as exc:
        problems = "; ".join(f"{json_path(e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False))
        raise CommandRejected(problems) from None


def validate_command(command: JsonDict) -> JsonDict:
    """Raft validator: parse, then return the canonical JSON form (dates as ISO strings)."""
    return parse_command(command).model_dump(mode="json", exclude_none=False)


def meta(who: str, why: str = "", at: datetime | None = None) -> JsonDict:
    """A ``meta`` member stamped now (UTC) unless ``at`` is given."""
    moment = (at or datetime.now(UTC)).astimezone(UTC)
    return {"who": who, "why": why, "at": moment.isoformat().replace("+00:00", "Z")}
