"""Test doubles for the service's ports (what the service calls, not what it is)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controlplane.executor.service import ExecutorService
from controlplane.service.context import ClusterConnection, ServiceContext
from controlplane.state.commands import meta
from controlplane.state.store import StateStore


class NoConnectionExecutor:
    """The parts of the executor port (:class:`controlplane.service.context.PlanExecutor`) these doubles do not
    play: no cluster connection, no pass."""

    def executor(self, cluster: str) -> ClusterConnection:
        raise NotImplementedError(f"a test double has no connection to {cluster}")

    def run_once(self) -> object:
        raise NotImplementedError("a test double runs no executor pass")


class RecordingExecutor(NoConnectionExecutor):
    """The executor port: records the plans auto-rebalance started, starts nothing."""

    def __init__(self) -> None:
        self.started: list[int] = []

    def start_approved(self, plan_id: int, caps: Mapping[str, int] | None = None, why: str = "",
                       by: str | None = None, options: Mapping[str, Any] | None = None) -> int:
        self.started.append(plan_id)
        return len(self.started)


class StoreExecutor(NoConnectionExecutor):
    """The executor port over a state store: an approved plan becomes a running execution record (no tasks,
    nothing moves); the test ends it with :meth:`finish` — what a job reading executions sees of a real one."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.started: list[int] = []
        """Plan ids, in the order they were started."""

    def start_approved(self, plan_id: int, caps: Mapping[str, int] | None = None, why: str = "",
                       by: str | None = None, options: Mapping[str, Any] | None = None) -> int:
        res = self.store.propose({"type": "execution.start", "meta": meta(by or "executor", why),
                                  "plan_id": plan_id, "tasks": []})
        self.started.append(plan_id)
        return int(res["execution_id"])

    def finish(self, execution_id: int, status: str = "completed", at: datetime | None = None) -> float:
        """End ``execution_id`` (at ``at``, default now); returns its ``finished_at`` as a UNIX timestamp."""
        self.store.propose({"type": "execution.finish", "meta": meta("executor", "test", at=at),
                            "execution_id": execution_id, "status": status})
        return float(self.store.read(lambda s: datetime.fromisoformat(
            s["executions"][str(execution_id)]["finished_at"]).timestamp()))


def executor_of(ctx: ServiceContext) -> ExecutorService:
    """The served context's real executor (what a test drives directly: a pass, a start, its last results)."""
    assert isinstance(ctx.executor, ExecutorService), f"the context's executor is {ctx.executor!r}"
    return ctx.executor
