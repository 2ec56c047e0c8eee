"""State-machine additions for the executor: task batches/dependencies, progress fields, execution.progress."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.executor.service import ExecutorService
from controlplane.state.commands import validate_command
from controlplane.state.store import LocalStateStore
from domain.execution import NO_READER
from raft.protocol import CommandRejected

AT = "2026-11-22T01:00:00Z"


def cmd(command_type: str, /, **payload: Any) -> dict[str, Any]:
    return validate_command({"type": command_type, "meta": {"who": "exec", "why": "test", "at": AT}, **payload})


def started(tasks: list[dict[str, Any]], **extra: Any) -> tuple[LocalStateStore, int]:
    store = LocalStateStore()
    store.propose(cmd("cluster.register", name="c1", bootstrap_servers=["127.0.0.1:9092"]))
    plan_id = store.propose(cmd("plan.propose", cluster="c1", kind="drain", plan={}))["plan_id"]
    store.propose(cmd("plan.approve", plan_id=plan_id))
    eid = store.propose(cmd("execution.start", plan_id=plan_id, tasks=tasks, **extra))["execution_id"]
    return store, eid


def spec(key: str, **kw: Any) -> dict[str, Any]:
    return {"key": key, "topic": "t", "partition": 0, "action": "reassign", "source_replicas": [1, 2],
            "target_replicas": [3, 2], "size_bytes": 100, **kw}


def test_tasks_keep_batch_dependencies_leader_and_partition_counts() -> None:
    store, eid = started([spec("t:0:leader", action="elect_leader", target_replicas=[], leader=2),
                          spec("t:0", batch=1, after=["t:0:leader"])],
                         partition_counts={"t": 4}, options={"leadership_first": True})
    ex = store.read(lambda s: s["executions"][str(eid)])
    assert ex["partition_counts"] == {"t": 4} and ex["options"] == {"leadership_first": True}
    assert ex["tasks"]["t:0"]["after"] == ["t:0:leader"] and ex["tasks"]["t:0"]["batch"] == 1
    assert ex["tasks"]["t:0:leader"]["leader"] == 2
    assert ex["tasks"]["t:0"]["bytes_total"] == 100 and ex["tasks"]["t:0"]["attempts"] == 0


def test_unknown_dependency_is_rejected_and_nothing_starts() -> None:
    store = LocalStateStore()
    store.propose(cmd("cluster.register", name="c1", bootstrap_servers=["127.0.0.1:9092"]))
    plan_id = store.propose(cmd("plan.propose", cluster="c1", kind="x", plan={}))["plan_id"]
    store.propose(cmd("plan.approve", plan_id=plan_id))
    with pytest.raises(CommandRejected, match="unknown task keys"):
        store.propose(cmd("execution.start", plan_id=plan_id, tasks=[spec("t:0", after=["nope"])]))
    assert store.read(lambda s: s["executions"]) == {}


def test_task_updates_carry_progress_fields_and_execution_progress_is_stored() -> None:
    store, eid = started([spec("t:0")])
    store.propose(cmd("execution.tasks", execution_id=eid, updates=[
        {"key": "t:0", "state": "IN_PROGRESS", "attempts": 1, "bytes_done": 40, "bytes_total": 120,
         "rate_bytes_per_s": 10.5}]))
    task = store.read(lambda s: s["executions"][str(eid)]["tasks"]["t:0"])
    assert (task["state"], task["attempts"], task["bytes_done"], task["bytes_total"], task["rate_bytes_per_s"]) == (
        "IN_PROGRESS", 1, 40, 120, 10.5)
    store.propose(cmd("execution.progress", execution_id=eid, progress={"bytes_done": 40, "eta_s": 8.0}))
    progress = store.read(lambda s: s["executions"][str(eid)]["progress"])
    assert progress["bytes_done"] == 40 and progress["updated_at"].startswith("2026-11-22T01:00")
    with pytest.raises(CommandRejected, match="rate_bytes_per_s"):
        validate_command({"type": "execution.tasks", "meta": {"who": "x", "at": AT}, "execution_id": eid,
                          "updates": [{"key": "t:0", "state": "IN_PROGRESS", "rate_bytes_per_s": -1}]})
    with pytest.raises(CommandRejected, match="unknown execution"):
        store.propose(cmd("execution.progress", execution_id=999, progress={}))


def test_a_reader_is_recorded_kept_by_updates_that_do_not_name_it_and_cleared_by_no_reader() -> None:
    store, eid = started([spec("t:0")])

    def update(**fields: Any) -> dict[str, Any]:  # through the canonical (Raft) form: absent fields are null
        store.propose(cmd("execution.tasks", execution_id=eid, updates=[{"key": "t:0", "state": "IN_PROGRESS",
                                                                          **fields}]))
        return dict(store.read(lambda s: s["executions"][str(eid)]["tasks"]["t:0"]))

    assert update(reader=2, leader_attempts=1)["reader"] == 2
    assert update(leader_attempts=2)["reader"] == 2
    assert update(reader=NO_READER, attempts=1)["reader"] is None
    with pytest.raises(CommandRejected, match="reader"):
        update(reader=-2)


class _FlippingStore(LocalStateStore):
    """A store whose leadership the test switches."""

    leader = True

    @property
    def is_leader(self) -> bool:
        return self.leader


class _Remembering:
    def __init__(self) -> None:
        self.forgotten = 0

    def forget(self) -> None:
        self.forgotten += 1


def test_executor_service_forgets_per_task_memory_when_it_regains_leadership() -> None:
    store = _FlippingStore()
    service = ExecutorService(store)
    executor = _Remembering()
    service._executors["c1"] = executor  # type: ignore[assignment]
    service.run_once()
    assert executor.forgotten == 1  # first pass of this node's term
    service.run_once()
    assert executor.forgotten == 1  # same term: memory kept (the two-pass resubmission guard needs it)
    store.leader = False
    assert service.run_once() == {}
    store.leader = True
    service.run_once()
    assert executor.forgotten == 2  # leadership regained: counts from the earlier term are dropped
