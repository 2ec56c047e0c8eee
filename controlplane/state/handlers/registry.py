"""The handler registry of the replicated state machine: one handler per command type, checked against the
command union.

Goal: :meth:`controlplane.state.state.GuardianState.apply` finds the handler of a command by its type, and
a command type without a handler (or a handler registered for a type of another model) is found by a test
and at import, never by a request. Method: each aggregate's module registers its handlers with
:func:`handles`, naming the command model (:data:`controlplane.state.commands.COMMANDS`) and, for a model
with several types, the type; :func:`missing` lists the command types no handler serves. :class:`Ledger` is
the handlers' view of the state: the JSON the store keeps (the store boundary) with the lookups and the id
allocator every aggregate needs. Guarantee: registering a type twice, or a type the model does not declare,
raises at import. Cost: O(1) per dispatch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from controlplane.state.commands import COMMANDS
from domain.execution import ACTIVE_STATUSES
from raft.protocol import CommandRejected, JsonDict

M = TypeVar("M", bound=BaseModel)
Handler = Callable[["Ledger", Any], JsonDict]
HANDLERS: dict[str, Handler] = {}
"""Command type -> its handler (filled by the aggregate modules of this package)."""


def handles(model: type[M], *types: str) -> Callable[[Callable[[Ledger, M], JsonDict]],
                                                     Callable[[Ledger, M], JsonDict]]:
    """Register the decorated function as the handler of ``types`` (default: every type ``model`` declares)."""
    declared = [t for t, m in COMMANDS.items() if m is model]
    wanted = list(types) or declared

    def register(fn: Callable[[Ledger, M], JsonDict]) -> Callable[[Ledger, M], JsonDict]:
        for kind in wanted:
            if kind not in declared:
                raise TypeError(f"{fn.__name__}: {kind!r} is not a command type of {model.__name__}")
            if kind in HANDLERS:
                raise TypeError(f"{fn.__name__}: {kind!r} already has a handler")
            HANDLERS[kind] = fn
        return fn
    return register


def missing() -> list[str]:
    """Command types of the union that no handler serves (a test asserts there are none)."""
    return sorted(set(COMMANDS) - set(HANDLERS))


class Ledger:
    """The state as the handlers change it: the stored JSON and the lookups every aggregate needs. A lookup
    returns a shallow copy of the stored member, which the handler writes back whole once every check passed
    (a refused command changes nothing)."""

    __slots__ = ("apply", "state")

    def __init__(self, state: JsonDict, apply: Callable[[JsonDict], Any] | None = None) -> None:
        self.state = state
        self.apply = apply
        """Apply a whole log entry as the state machine does (what ``upload.commit`` hands its command to)."""

    def allocate(self, count: int = 1) -> int:
        """The first of ``count`` new ids."""
        first = int(self.state["next_id"])
        self.state["next_id"] = first + count
        return first

    def cluster(self, name: str) -> JsonDict:
        """The stored cluster ``name`` (a shallow copy); refused when unknown."""
        cluster = self.state["clusters"].get(name)
        if cluster is None:
            raise CommandRejected(f"unknown cluster {name!r}")
        return dict(cluster)

    def plan(self, plan_id: int) -> JsonDict:
        """The stored plan ``plan_id`` (a shallow copy); refused when unknown."""
        plan = self.state["plans"].get(str(plan_id))
        if plan is None:
            raise CommandRejected(f"unknown plan {plan_id}")
        return dict(plan)

    def execution(self, execution_id: int) -> JsonDict:
        """The stored execution ``execution_id`` (a shallow copy); refused when unknown."""
        execution = self.state["executions"].get(str(execution_id))
        if execution is None:
            raise CommandRejected(f"unknown execution {execution_id}")
        return dict(execution)

    def active_executions(self, cluster: str) -> list[int]:
        """Ids of the running or stopping executions of ``cluster``."""
        return [e["id"] for e in self.state["executions"].values()
                if e["cluster"] == cluster and e["status"] in ACTIVE_STATUSES]

    def migrations(self) -> JsonDict:
        """The migrations member (created on first use: a state from before migrations has none)."""
        found: JsonDict = self.state.setdefault("migrations", {})
        return found

    def anomalies(self) -> JsonDict:
        """The anomalies member (created on first use)."""
        found: JsonDict = self.state.setdefault("anomalies", {})
        return found
