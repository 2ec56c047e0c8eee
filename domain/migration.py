"""Typed migration records: a multi-step migration's lifecycle, written once.

Goal: one definition of a chained migration (a parent record whose approved step plans run one after
another, each as an ordinary execution), shared by the state machine, the migration driver and the API.

Method: :class:`MigrationStatus` and the one transition table :data:`MIGRATION_TRANSITIONS` (running ->
completed | failed | stopped; the end statuses are final); :class:`MigrationRecord` is a frozen record with
``from_json`` / ``to_json`` for the store boundary (unknown members kept in ``extra``).

Guarantee: records are immutable and detached (deep copies of the opaque members). Cost: O(steps) per
translation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

JsonDict = dict[str, Any]


class MigrationStatus(StrEnum):
    """Where a migration stands."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"


MIGRATION_TRANSITIONS: Mapping[MigrationStatus, frozenset[MigrationStatus]] = {
    MigrationStatus.RUNNING: frozenset({MigrationStatus.COMPLETED, MigrationStatus.FAILED, MigrationStatus.STOPPED}),
    MigrationStatus.COMPLETED: frozenset(),
    MigrationStatus.FAILED: frozenset(),
    MigrationStatus.STOPPED: frozenset(),
}
"""The one transition table: status -> the statuses a migration may move to in one step."""

_KNOWN = ("id", "cluster", "kind", "topics", "placement", "previous_placement", "steps", "step", "executions",
          "status", "started_by", "started_at", "finished_at", "reason", "caps", "options")


@dataclass(frozen=True, slots=True)
class MigrationRecord:
    """One migration: the topics it moves to ``placement``, its step plans, the step under way and the
    execution of each step started so far."""

    id: int
    cluster: str
    status: MigrationStatus
    steps: tuple[int, ...]
    step: int = 0
    executions: tuple[int | None, ...] = ()
    kind: str = "migrate-idc"
    topics: tuple[str, ...] = ()
    placement: Mapping[str, int] = field(default_factory=dict)
    previous_placement: Mapping[str, Any] = field(default_factory=dict)
    started_by: str = ""
    started_at: str = ""
    finished_at: str | None = None
    reason: str = ""
    caps: Mapping[str, int] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        """True until the migration ends."""
        return self.status == MigrationStatus.RUNNING

    @property
    def current_step_plan(self) -> int:
        """The plan id of the step under way."""
        return self.steps[self.step]

    def execution_of(self, step: int) -> int | None:
        """The execution recorded for ``step`` (None: not started yet)."""
        return self.executions[step] if step < len(self.executions) else None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> MigrationRecord:
        """The record of a stored migration (a detached copy)."""
        return cls(id=int(doc["id"]), cluster=str(doc["cluster"]), status=MigrationStatus(doc["status"]),
                   steps=tuple(int(p) for p in doc.get("steps", ())), step=int(doc.get("step") or 0),
                   executions=tuple(None if e is None else int(e) for e in doc.get("executions", ())),
                   kind=str(doc.get("kind") or "migrate-idc"), topics=tuple(doc.get("topics", ())),
                   placement=dict(doc.get("placement") or {}),
                   previous_placement=copy.deepcopy(doc.get("previous_placement") or {}),
                   started_by=str(doc.get("started_by") or ""), started_at=str(doc.get("started_at") or ""),
                   finished_at=doc.get("finished_at"), reason=str(doc.get("reason") or ""),
                   caps=dict(doc.get("caps") or {}), options=copy.deepcopy(doc.get("options") or {}),
                   extra={k: copy.deepcopy(v) for k, v in doc.items() if k not in _KNOWN})

    def to_json(self) -> JsonDict:
        """The stored form (a fresh copy)."""
        return {"id": self.id, "cluster": self.cluster, "kind": self.kind, "topics": list(self.topics),
                "placement": dict(self.placement), "previous_placement": copy.deepcopy(dict(self.previous_placement)),
                "steps": list(self.steps), "step": self.step, "executions": list(self.executions),
                "status": self.status.value, "started_by": self.started_by, "started_at": self.started_at,
                "finished_at": self.finished_at, "reason": self.reason, "caps": dict(self.caps),
                "options": copy.deepcopy(dict(self.options)), **copy.deepcopy(dict(self.extra))}
