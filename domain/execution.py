"""Typed execution records: the task state machine of an execution, written once.

Goal: one definition of what a task of an execution can be and become, shared by the replicated state
machine (which enforces it on every replicated update), the executor (which drives tasks through it) and
the API (which reads the records' JSON).

Method: :class:`TaskState` is the enum of Cruise Control's ``ExecutionTaskState`` (PENDING, IN_PROGRESS,
ABORTING, ABORTED, DEAD, COMPLETED); :data:`TRANSITIONS` is the one transition table; the open / running /
terminal sets are derived from it once. :class:`Task` and :class:`Execution` are frozen records; a task
changes state only through its named transitions (:meth:`Task.start`, :meth:`Task.complete`,
:meth:`Task.abort`, :meth:`Task.aborted`, :meth:`Task.kill`), each a one-line call of the one guard
:func:`check_transition` against the table. ``to_json`` / ``from_json`` translate a record to and from the
JSON the replicated state stores and the API returns; they are used at that boundary only.

Guarantee: no sequence of named transitions leaves the table (a property test drives random sequences);
a refused transition raises :class:`IllegalTransition` and leaves the record as it was (records are
immutable). ``Task.from_json(doc).to_json() == doc`` for every stored task, key order included.

Cost: O(1) per transition; O(fields) per JSON translation (a task has 21).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

JsonDict = dict[str, Any]
Action = Literal["reassign", "move_log_dir", "elect_leader"]
ACTIONS: tuple[Action, ...] = ("reassign", "move_log_dir", "elect_leader")


class TaskState(StrEnum):
    """Where one task of an execution stands (the value is what the store and the API show)."""

    PENDING = "PENDING"
    """Planned, not submitted yet."""
    IN_PROGRESS = "IN_PROGRESS"
    """Submitted (write-ahead: recorded before anything is sent to the cluster)."""
    ABORTING = "ABORTING"
    """Its cancellation was decided; the cluster may still show it in flight."""
    ABORTED = "ABORTED"
    """Cancelled: never started, or its cancellation took effect."""
    DEAD = "DEAD"
    """Gave up: the cluster cannot or will not do it (reason recorded)."""
    COMPLETED = "COMPLETED"
    """The cluster shows the target."""


TRANSITIONS: Mapping[TaskState, frozenset[TaskState]] = {
    TaskState.PENDING: frozenset({TaskState.IN_PROGRESS, TaskState.ABORTED, TaskState.DEAD}),
    TaskState.IN_PROGRESS: frozenset({TaskState.COMPLETED, TaskState.ABORTING, TaskState.DEAD}),
    TaskState.ABORTING: frozenset({TaskState.ABORTED, TaskState.DEAD}),
    TaskState.COMPLETED: frozenset(),
    TaskState.ABORTED: frozenset(),
    TaskState.DEAD: frozenset(),
}
"""The one transition table: state -> the states it may move to in one step."""

TERMINAL_STATES: frozenset[TaskState] = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
"""States a task never leaves (COMPLETED, ABORTED, DEAD)."""
OPEN_STATES: frozenset[TaskState] = frozenset(TaskState) - TERMINAL_STATES
"""States of a task the execution still waits for (PENDING, IN_PROGRESS, ABORTING)."""
RUNNING_STATES: frozenset[TaskState] = frozenset({TaskState.IN_PROGRESS, TaskState.ABORTING})
"""States of a task the cluster may be working on (submitted and not finished)."""


class IllegalTransition(ValueError):
    """A task was asked to move along an edge the transition table does not have."""


def can_transition(current: TaskState, target: TaskState) -> bool:
    """True when ``current -> target`` is one step of :data:`TRANSITIONS`."""
    return target in TRANSITIONS[current]


def check_transition(key: str, current: TaskState, target: TaskState) -> None:
    """The one guard: raise :class:`IllegalTransition` unless ``current -> target`` is in the table."""
    if not can_transition(current, target):
        raise IllegalTransition(f"task {key!r}: {current} -> {target} is not allowed")


SPEC_FIELDS = ("key", "topic", "partition", "action", "source_replicas", "source_log_dirs", "target_replicas",
               "target_log_dirs", "size_bytes", "leader", "batch", "after")
"""The fields a plan gives a task (the ``execution.start`` command's task specification), in stored order."""
NO_READER = -1
"""A task update's ``reader`` that clears it (a follower read abandoned: the copy reads from the leader)."""
PROGRESS_FIELDS = ("bytes_done", "bytes_total", "rate_bytes_per_s", "attempts", "reader", "leader_attempts")
"""The fields a replicated task update may set besides the state."""


@dataclass(frozen=True, slots=True)
class Task:
    """One per-partition task of an execution: what to change, and where it stands.

    ``action`` is ``reassign`` (the replica set changes; log dirs fixed afterwards), ``move_log_dir`` (only
    log dirs change, KIP-113) or ``elect_leader`` (``leader`` becomes the preferred leader). ``batch`` and
    ``after`` order tasks (broker batches of a drain, leadership before data). ``size_bytes`` is what the
    plan expects to copy; ``bytes_done`` / ``bytes_total`` / ``rate_bytes_per_s`` what the executor measured.
    ``attempts`` counts the submissions of its move; ``reader`` is the kept follower a reassignment's copy
    reads from (made leader before the copy, the plan's leader restored after it; ``None``: the leader reads)
    and ``leader_attempts`` the requests (reorders, preferred elections) sent for the leader change under way.
    """

    key: str
    topic: str
    partition: int
    action: Action
    source_replicas: tuple[int, ...]
    target_replicas: tuple[int, ...]
    source_log_dirs: tuple[str | None, ...] = ()
    target_log_dirs: tuple[str | None, ...] = ()
    size_bytes: int = 0
    leader: int | None = None
    batch: int = 0
    after: tuple[str, ...] = ()
    state: TaskState = TaskState.PENDING
    reason: str = ""
    bytes_done: int = 0
    bytes_total: int = 0
    rate_bytes_per_s: float = 0.0
    attempts: int = 0
    reader: int | None = None
    leader_attempts: int = 0
    updated_at: str = ""

    # ------------------------------------------------------------------ views
    @property
    def tp(self) -> tuple[str, int]:
        """``(topic, partition)``."""
        return self.topic, self.partition

    @property
    def is_open(self) -> bool:
        """True while the execution still waits for this task."""
        return self.state in OPEN_STATES

    @property
    def is_data(self) -> bool:
        """True for a task that copies data (not a leader election)."""
        return self.action != "elect_leader"

    @property
    def copied(self) -> tuple[int, int]:
        """``(bytes copied, bytes to copy)`` as every progress view counts it: the measured total (the
        planned size before any measurement), done capped at it; a completed task counts whole, an aborted
        or dead one not at all."""
        if self.state in (TaskState.ABORTED, TaskState.DEAD):
            return 0, 0
        total = self.bytes_total or self.size_bytes
        return (total if self.state == TaskState.COMPLETED else min(max(self.bytes_done, 0), total)), total

    @property
    def adding(self) -> tuple[int, ...]:
        """Brokers of the target replica set that are not in the source one."""
        return tuple(b for b in self.target_replicas if b not in self.source_replicas)

    # ------------------------------------------------------------------ named transitions
    def _to(self, target: TaskState, reason: str) -> Task:
        check_transition(self.key, self.state, target)
        return replace(self, state=target, reason=reason or self.reason)

    def start(self) -> Task:
        """PENDING -> IN_PROGRESS: submitted (recorded before the cluster is asked)."""
        return self._to(TaskState.IN_PROGRESS, "")

    def complete(self, reason: str = "") -> Task:
        """IN_PROGRESS -> COMPLETED: the cluster shows the target."""
        return self._to(TaskState.COMPLETED, reason)

    def abort(self, reason: str) -> Task:
        """IN_PROGRESS -> ABORTING: cancel a submitted task (the cancellation is sent next)."""
        return self._to(TaskState.ABORTING, reason)

    def aborted(self, reason: str = "") -> Task:
        """PENDING or ABORTING -> ABORTED: never started, or its cancellation took effect."""
        return self._to(TaskState.ABORTED, reason)

    def kill(self, reason: str) -> Task:
        """PENDING, IN_PROGRESS or ABORTING -> DEAD: give up (the cluster cannot or will not do it)."""
        return self._to(TaskState.DEAD, reason)

    def moved_to(self, target: TaskState, reason: str = "") -> Task:
        """The record after a replicated update naming ``target``: the guarded transition (the update's
        reason, or the old one when it gives none); when ``target`` is the current state, only the reason
        changes, if the update gives one (e.g. why the cluster refused a submission)."""
        if target == self.state:
            return replace(self, reason=reason) if reason and reason != self.reason else self
        return self._to(target, reason)

    def with_progress(self, *, bytes_done: int | None = None, bytes_total: int | None = None,
                      rate_bytes_per_s: float | None = None, attempts: int | None = None,
                      reader: int | None = None, leader_attempts: int | None = None) -> Task:
        """The record with the given measurements replaced (``None`` keeps a field; ``reader`` :data:`NO_READER`
        clears it)."""
        changes: JsonDict = {k: v for k, v in (("bytes_done", bytes_done), ("bytes_total", bytes_total),
                                               ("rate_bytes_per_s", rate_bytes_per_s), ("attempts", attempts),
                                               ("reader", reader), ("leader_attempts", leader_attempts))
                             if v is not None}
        if reader == NO_READER:
            changes["reader"] = None
        return replace(self, **changes) if changes else self

    # ------------------------------------------------------------------ store boundary
    @classmethod
    def planned(cls, spec: Mapping[str, Any], at: str) -> Task:
        """A new PENDING task from its specification (the ``execution.start`` command's task)."""
        return cls.from_json({**spec, "state": TaskState.PENDING.value, "reason": "", "bytes_done": 0,
                              "bytes_total": spec.get("size_bytes", 0), "rate_bytes_per_s": 0.0, "attempts": 0,
                              "reader": None, "leader_attempts": 0, "updated_at": at})

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Task:
        """The record of a stored task (or of a task specification: the progress fields default)."""
        leader = doc.get("leader")
        return cls(key=str(doc["key"]), topic=str(doc["topic"]), partition=int(doc["partition"]),
                   action=doc["action"], source_replicas=tuple(int(b) for b in doc.get("source_replicas", ())),
                   target_replicas=tuple(int(b) for b in doc.get("target_replicas", ())),
                   source_log_dirs=tuple(doc.get("source_log_dirs") or ()),
                   target_log_dirs=tuple(doc.get("target_log_dirs") or ()),
                   size_bytes=int(doc.get("size_bytes") or 0), leader=None if leader is None else int(leader),
                   batch=int(doc.get("batch") or 0), after=tuple(doc.get("after") or ()),
                   state=TaskState(doc.get("state", TaskState.PENDING)), reason=str(doc.get("reason") or ""),
                   bytes_done=int(doc.get("bytes_done") or 0), bytes_total=int(doc.get("bytes_total") or 0),
                   rate_bytes_per_s=float(doc.get("rate_bytes_per_s") or 0.0), attempts=int(doc.get("attempts") or 0),
                   reader=None if doc.get("reader") is None else int(doc["reader"]),
                   leader_attempts=int(doc.get("leader_attempts") or 0), updated_at=str(doc.get("updated_at") or ""))

    def spec_json(self) -> JsonDict:
        """The task specification (what a plan gives; the ``execution.start`` command's payload)."""
        return {"key": self.key, "topic": self.topic, "partition": self.partition, "action": self.action,
                "source_replicas": list(self.source_replicas), "source_log_dirs": list(self.source_log_dirs),
                "target_replicas": list(self.target_replicas), "target_log_dirs": list(self.target_log_dirs),
                "size_bytes": self.size_bytes, "leader": self.leader, "batch": self.batch, "after": list(self.after)}

    def to_json(self) -> JsonDict:
        """The stored form (the specification, then state and progress; key order as stored)."""
        return {**self.spec_json(), "state": self.state.value, "reason": self.reason, "bytes_done": self.bytes_done,
                "bytes_total": self.bytes_total, "rate_bytes_per_s": self.rate_bytes_per_s,
                "attempts": self.attempts, "reader": self.reader, "leader_attempts": self.leader_attempts,
                "updated_at": self.updated_at}


class ExecutionStatus(StrEnum):
    """Where an execution stands (the plan takes the final status too)."""

    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"


ACTIVE_STATUSES: frozenset[ExecutionStatus] = frozenset({ExecutionStatus.RUNNING, ExecutionStatus.STOPPING})
"""An execution in one of these is driven by the executor; one per cluster at a time."""
EXECUTION_TRANSITIONS: Mapping[ExecutionStatus, frozenset[ExecutionStatus]] = {
    ExecutionStatus.RUNNING: frozenset({ExecutionStatus.STOPPING, ExecutionStatus.COMPLETED, ExecutionStatus.STOPPED,
                                        ExecutionStatus.FAILED}),
    ExecutionStatus.STOPPING: frozenset({ExecutionStatus.COMPLETED, ExecutionStatus.STOPPED, ExecutionStatus.FAILED}),
    ExecutionStatus.COMPLETED: frozenset(),
    ExecutionStatus.STOPPED: frozenset(),
    ExecutionStatus.FAILED: frozenset(),
}
"""The execution statuses' transition table (a stop while stopping changes nothing; the end statuses are
final); the state machine checks ``execution.stop`` / ``execution.finish`` against it."""


def bytes_progress(tasks: Iterable[Task]) -> tuple[int, int]:
    """``(bytes done, bytes to do)`` of an execution: the one computation behind the executor's progress
    record, the API's list and detail and the dashboard (sum of :attr:`Task.copied`; done <= total)."""
    done = total = 0
    for t in tasks:
        d, n = t.copied
        done, total = done + d, total + n
    return done, total


def progress_json(doc: Mapping[str, Any]) -> JsonDict:
    """The progress a stored execution shows in every view: the executor's last record (rate, ETA, URPs,
    worst disk, throttles) with bytes done, bytes to do and their fraction counted from its tasks now by
    :func:`bytes_progress` (an execution with nothing to copy is complete once no task is open)."""
    tasks = [Task.from_json(t) for t in (doc.get("tasks") or {}).values()]
    done, total = bytes_progress(tasks)
    fraction = done / total if total else (0.0 if any(t.is_open for t in tasks) else 1.0)
    return {**(doc.get("progress") or {}), "bytes_done": done, "bytes_total": total, "fraction": fraction}


@dataclass(frozen=True, slots=True)
class Execution:
    """One execution of a plan on a cluster: its status, caps, options and tasks (keyed by task key)."""

    id: int
    plan_id: int
    cluster: str
    status: ExecutionStatus = ExecutionStatus.RUNNING
    rollback: bool = False
    caps: Mapping[str, int] = field(default_factory=dict)
    started_by: str = ""
    started_at: str = ""
    finished_at: str | None = None
    reason: str = ""
    partition_counts: Mapping[str, int] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    progress: Mapping[str, Any] = field(default_factory=dict)
    tasks: Mapping[str, Task] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """True while running or stopping."""
        return self.status in ACTIVE_STATUSES

    @property
    def stopping(self) -> bool:
        """True once a stop was asked (in-flight moves finish, or are cancelled with ``rollback``)."""
        return self.status == ExecutionStatus.STOPPING

    def open_tasks(self) -> list[Task]:
        """Tasks the execution still waits for."""
        return [t for t in self.tasks.values() if t.is_open]

    def in_states(self, states: Iterable[TaskState]) -> list[Task]:
        """Tasks in one of ``states`` (task-key order as stored)."""
        wanted = frozenset(states)
        return [t for t in self.tasks.values() if t.state in wanted]

    def counts(self) -> dict[str, int]:
        """Tasks per state (states with none absent; first-seen order)."""
        out: dict[str, int] = {}
        for t in self.tasks.values():
            out[t.state.value] = out.get(t.state.value, 0) + 1
        return out

    def final_status(self) -> tuple[ExecutionStatus, str]:
        """The status an execution with no open task ends in, and why: stopped when a stop was asked,
        failed when a task is DEAD, completed otherwise."""
        states = [t.state for t in self.tasks.values()]
        aborted, dead = states.count(TaskState.ABORTED), states.count(TaskState.DEAD)
        detail = f"{states.count(TaskState.COMPLETED)} completed, {aborted} aborted, {dead} dead"
        if self.stopping:
            return ExecutionStatus.STOPPED, f"stopped: {detail}"
        if dead:
            return ExecutionStatus.FAILED, f"failed: {detail}"
        return ExecutionStatus.COMPLETED, f"completed: {detail}"

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Execution:
        """The record of a stored execution."""
        return cls(id=int(doc["id"]), plan_id=int(doc["plan_id"]), cluster=str(doc["cluster"]),
                   status=ExecutionStatus(doc["status"]), rollback=bool(doc.get("rollback")),
                   caps=dict(doc.get("caps") or {}), started_by=str(doc.get("started_by") or ""),
                   started_at=str(doc.get("started_at") or ""), finished_at=doc.get("finished_at"),
                   reason=str(doc.get("reason") or ""), partition_counts=dict(doc.get("partition_counts") or {}),
                   options=copy.deepcopy(dict(doc.get("options") or {})),
                   progress=copy.deepcopy(dict(doc.get("progress") or {})),
                   tasks={k: Task.from_json(t) for k, t in (doc.get("tasks") or {}).items()})

    def to_json(self) -> JsonDict:
        """The stored form (key order as stored)."""
        return {"id": self.id, "plan_id": self.plan_id, "cluster": self.cluster, "status": self.status.value,
                "rollback": self.rollback, "caps": dict(self.caps), "started_by": self.started_by,
                "started_at": self.started_at, "finished_at": self.finished_at, "reason": self.reason,
                "partition_counts": dict(self.partition_counts), "options": copy.deepcopy(dict(self.options)),
                "progress": copy.deepcopy(dict(self.progress)),
                "tasks": {k: t.to_json() for k, t in self.tasks.items()}}
