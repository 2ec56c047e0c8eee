"""Typed plan records: a recorded plan's lifecycle, written once.

Goal: one definition of what a recorded plan can be and become, shared by the replicated state machine
(which enforces it on every command), the executor and the API (which read the records).

Method: :class:`PlanStatus` is the enum of a plan's statuses (the values are what the store and the API
show); :data:`PLAN_TRANSITIONS` is the one transition table (proposed -> approved | rejected | failed by
expiry; approved -> executing | failed by expiry; executing -> the execution's final status) and
:func:`check_plan_transition` its one guard. :class:`PlanRecord` is a frozen record of a stored plan;
``from_json`` / ``to_json`` translate it at the store boundary (optional members absent stay absent, members
this code does not know are kept in ``extra``, so ``PlanRecord.from_json(doc).to_json() == doc``).

Guarantee: records are immutable and detached: the plan body and parameters are deep copies, so a holder
never reaches the replicated state. Cost: O(1) per transition; O(size of the plan body) per translation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

JsonDict = dict[str, Any]


class PlanStatus(StrEnum):
    """Where a recorded plan stands."""

    PROPOSED = "proposed"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXECUTING = "executing"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"


PLAN_TRANSITIONS: Mapping[PlanStatus, frozenset[PlanStatus]] = {
    PlanStatus.PROPOSED: frozenset({PlanStatus.APPROVED, PlanStatus.REJECTED, PlanStatus.FAILED}),
    PlanStatus.APPROVED: frozenset({PlanStatus.EXECUTING, PlanStatus.FAILED}),
    PlanStatus.EXECUTING: frozenset({PlanStatus.COMPLETED, PlanStatus.STOPPED, PlanStatus.FAILED}),
    PlanStatus.REJECTED: frozenset(),
    PlanStatus.COMPLETED: frozenset(),
    PlanStatus.STOPPED: frozenset(),
    PlanStatus.FAILED: frozenset(),
}
"""The one transition table: status -> the statuses a plan may move to in one step."""
FINAL_PLAN_STATUSES: frozenset[PlanStatus] = frozenset(s for s, nxt in PLAN_TRANSITIONS.items() if not nxt)
"""Statuses a plan never leaves."""
LIVE_PLAN_STATUSES: frozenset[PlanStatus] = frozenset({PlanStatus.APPROVED, PlanStatus.EXECUTING})
"""A plan in one of these may still change its cluster (the cluster cannot be removed under it)."""


class IllegalPlanTransition(ValueError):
    """A plan was asked to move along an edge :data:`PLAN_TRANSITIONS` does not have."""


def check_plan_transition(plan_id: int, current: PlanStatus, target: PlanStatus) -> None:
    """The one guard: raise :class:`IllegalPlanTransition` unless ``current -> target`` is in the table."""
    if target not in PLAN_TRANSITIONS[current]:
        raise IllegalPlanTransition(f"plan {plan_id} is {current}; it cannot become {target}")


_OPTIONAL = ("params", "prerequisites", "decided_at", "reason", "expired_at")
_KNOWN = ("id", "cluster", "kind", "status", "plan", "proposed_by", "proposed_at", "why", "snapshot_taken_at",
          "decided_by", "execution_id", *_OPTIONAL)


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """One recorded plan: the plan document (``plan``: guardian.plan/v1 JSON), who proposed and decided it,
    its status, the execution running it, and the planner ``params`` / metadata ``prerequisites`` it needs."""

    id: int
    cluster: str
    kind: str
    status: PlanStatus
    plan: Mapping[str, Any]
    proposed_by: str = ""
    proposed_at: str = ""
    why: str = ""
    snapshot_taken_at: str | None = None
    decided_by: str | None = None
    execution_id: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    prerequisites: Mapping[str, Any] = field(default_factory=dict)
    decided_at: str | None = None
    reason: str | None = None
    expired_at: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Stored members this code does not know (kept, so a round trip loses nothing)."""

    @property
    def live(self) -> bool:
        """True while approved or executing."""
        return self.status in LIVE_PLAN_STATUSES

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PlanRecord:
        """The record of a stored plan (a detached copy)."""
        execution_id = doc.get("execution_id")
        return cls(id=int(doc["id"]), cluster=str(doc["cluster"]), kind=str(doc.get("kind", "")),
                   status=PlanStatus(doc["status"]), plan=copy.deepcopy(doc.get("plan") or {}),
                   proposed_by=str(doc.get("proposed_by") or ""), proposed_at=str(doc.get("proposed_at") or ""),
                   why=str(doc.get("why") or ""), snapshot_taken_at=doc.get("snapshot_taken_at"),
                   decided_by=doc.get("decided_by"),
                   execution_id=None if execution_id is None else int(execution_id),
                   params=copy.deepcopy(doc.get("params") or {}),
                   prerequisites=copy.deepcopy(doc.get("prerequisites") or {}),
                   decided_at=doc.get("decided_at"), reason=doc.get("reason"), expired_at=doc.get("expired_at"),
                   extra={k: copy.deepcopy(v) for k, v in doc.items() if k not in _KNOWN})

    def to_json(self) -> JsonDict:
        """The stored form (a fresh copy; optional members only when set)."""
        out: JsonDict = {"id": self.id, "cluster": self.cluster, "kind": self.kind, "status": self.status.value,
                         "plan": copy.deepcopy(dict(self.plan)), "proposed_by": self.proposed_by,
                         "proposed_at": self.proposed_at, "why": self.why, "snapshot_taken_at": self.snapshot_taken_at,
                         "decided_by": self.decided_by, "execution_id": self.execution_id}
        if self.params:
            out["params"] = copy.deepcopy(dict(self.params))
        if self.prerequisites:
            out["prerequisites"] = copy.deepcopy(dict(self.prerequisites))
        for name in ("decided_at", "reason", "expired_at"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        out.update(copy.deepcopy(dict(self.extra)))
        return out
