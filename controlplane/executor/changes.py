"""The write-ahead record of one reconcile pass: the task changes it decided, as one replicated command.

Goal: every state change and attempt count a pass decides is committed to the store *before* the pass
touches the cluster, so a crash or failover never loses (nor repeats) a submission.

Method: :class:`TaskChanges` starts from the tasks as stored and applies the pass's decisions as the
named transitions of :class:`domain.execution.Task` (``start``, ``complete``, ``abort``, ``aborted``,
``kill``) plus measurements and notes (a new reason, same state); :meth:`TaskChanges.updates` turns them
into the ``execution.tasks`` updates: per task, the jump from its stored state to the pass's last one.

Guarantee: every update is an edge of the transition table — except that a PENDING task found already
done when it was started is recorded IN_PROGRESS (the next pass completes it), because PENDING ->
COMPLETED is not an edge. Repeating the state a task already reached in this pass only replaces its
reason (a task given up on for two of its replicas dies once). Measurements given are sent even when
unchanged (they refresh ``updated_at``).

Cost: O(1) per change; O(changed tasks) for the updates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from domain.execution import Task, TaskState
from raft.protocol import JsonDict


class TaskChanges:
    """The task changes one pass decides (see the module docstring)."""

    def __init__(self, tasks: Mapping[str, Task]) -> None:
        self.base = tasks
        self.now: dict[str, Task] = {}
        self.fields: dict[str, dict[str, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self.now)

    def state(self, key: str) -> TaskState:
        """The task's state after this pass's changes so far."""
        return (self.now.get(key) or self.base[key]).state

    def changed(self, key: str) -> bool:
        """True when this pass changed the task's state."""
        return key in self.now and self.now[key].state != self.base[key].state

    def merged(self) -> dict[str, Task]:
        """Every task as stored, with this pass's state."""
        return {k: replace(t, state=self.now[k].state) if k in self.now else t for k, t in self.base.items()}

    def _apply(self, t: Task, target: TaskState | None, reason: str, fields: Mapping[str, Any],
               step: Callable[[Task], Task] | None = None) -> None:
        cur = self.now.get(t.key, t)
        if target is not None and step is not None:
            cur = step(cur) if cur.state != target else replace(cur, reason=reason or cur.reason)
        self.now[t.key] = cur
        self.fields.setdefault(t.key, {}).update(fields)

    def start(self, t: Task, **fields: Any) -> None:
        """PENDING -> IN_PROGRESS (its submission follows in this pass)."""
        self._apply(t, TaskState.IN_PROGRESS, "", fields, lambda x: x.start())

    def complete(self, t: Task, reason: str, **fields: Any) -> None:
        """IN_PROGRESS -> COMPLETED."""
        self._apply(t, TaskState.COMPLETED, reason, fields, lambda x: x.complete(reason))

    def abort(self, t: Task, reason: str) -> None:
        """IN_PROGRESS -> ABORTING (its cancellation follows in this pass)."""
        self._apply(t, TaskState.ABORTING, reason, {}, lambda x: x.abort(reason))

    def aborted(self, t: Task, reason: str) -> None:
        """PENDING or ABORTING -> ABORTED."""
        self._apply(t, TaskState.ABORTED, reason, {}, lambda x: x.aborted(reason))

    def kill(self, t: Task, reason: str) -> None:
        """-> DEAD."""
        self._apply(t, TaskState.DEAD, reason, {}, lambda x: x.kill(reason))

    def progress(self, t: Task, **fields: Any) -> None:
        """Measurements only (no state change)."""
        self._apply(t, None, "", fields)

    def note(self, t: Task, reason: str) -> None:
        """A new reason, no state change (e.g. a step that took replaces the cluster's last refusal)."""
        self.now[t.key] = replace(self.now.get(t.key, t), reason=reason)
        self.fields.setdefault(t.key, {})

    def updates(self) -> list[JsonDict]:
        """The ``execution.tasks`` updates (task-key order of first change)."""
        out = []
        for key, now in self.now.items():
            base = self.base[key]
            state = now.state
            if state == TaskState.COMPLETED and base.state == TaskState.PENDING:
                state = TaskState.IN_PROGRESS  # found already done when started: completed by the next pass
            row: JsonDict = {"key": key, "state": state.value}
            if now.reason and now.reason != base.reason:
                row["reason"] = now.reason
            row.update(self.fields.get(key, {}))
            out.append(row)
        return out
