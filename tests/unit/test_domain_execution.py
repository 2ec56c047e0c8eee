"""Typed execution records: the transition table, the named transitions and the store-boundary JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from controlplane.state.commands import validate_command
from controlplane.state.store import LocalStateStore
from domain.execution import (
    OPEN_STATES,
    RUNNING_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    Execution,
    ExecutionStatus,
    IllegalTransition,
    Task,
    TaskState,
    can_transition,
)
from raft.protocol import CommandRejected

AT = "2026-11-22T01:00:00Z"
STORED_TASK_KEYS = ["key", "topic", "partition", "action", "source_replicas", "source_log_dirs", "target_replicas",
                    "target_log_dirs", "size_bytes", "leader", "batch", "after", "state", "reason", "bytes_done",
                    "bytes_total", "rate_bytes_per_s", "attempts", "reader", "leader_attempts", "updated_at"]
STORED_EXECUTION_KEYS = ["id", "plan_id", "cluster", "status", "rollback", "caps", "started_by", "started_at",
                         "finished_at", "reason", "partition_counts", "options", "progress", "tasks"]


def task(state: TaskState = TaskState.PENDING, reason: str = "") -> Task:
    return Task(key="t:0", topic="t", partition=0, action="reassign", source_replicas=(1, 2),
                target_replicas=(3, 2), source_log_dirs=("/d1", "/d2"), target_log_dirs=(None, None),
                size_bytes=100, bytes_total=100, state=state, reason=reason)


def cmd(command_type: str, /, **payload: Any) -> dict[str, Any]:
    return validate_command({"type": command_type, "meta": {"who": "t", "why": "test", "at": AT}, **payload})


def stored_execution() -> tuple[LocalStateStore, int]:
    store = LocalStateStore()
    store.propose(cmd("cluster.register", name="c1", bootstrap_servers=["127.0.0.1:9092"]))
    plan_id = store.propose(cmd("plan.propose", cluster="c1", kind="rebalance", plan={}))["plan_id"]
    store.propose(cmd("plan.approve", plan_id=plan_id))
    specs = [{"key": "t:0", "topic": "t", "partition": 0, "action": "reassign", "source_replicas": [1, 2],
              "source_log_dirs": ["/d1", "/d2"], "target_replicas": [3, 2], "target_log_dirs": [None, "/d2"],
              "size_bytes": 100},
             {"key": "t:0:leader", "topic": "t", "partition": 0, "action": "elect_leader", "source_replicas": [1, 2],
              "target_replicas": [], "leader": 2, "batch": 1, "after": ["t:0"]}]
    eid = store.propose(cmd("execution.start", plan_id=plan_id, tasks=specs, partition_counts={"t": 1}))
    return store, int(eid["execution_id"])


def test_the_table_has_terminal_states_without_exits_and_every_state_reachable() -> None:
    assert set(TRANSITIONS) == set(TaskState)
    assert {TaskState.COMPLETED, TaskState.ABORTED, TaskState.DEAD} == TERMINAL_STATES
    assert {TaskState.PENDING, TaskState.IN_PROGRESS, TaskState.ABORTING} == OPEN_STATES
    assert RUNNING_STATES < OPEN_STATES
    reached, frontier = {TaskState.PENDING}, [TaskState.PENDING]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert reached == set(TaskState)
    assert not any(can_transition(s, s) for s in TaskState)  # a transition always changes the state
    assert not can_transition(TaskState.PENDING, TaskState.COMPLETED)  # a task is submitted before it completes


def test_named_transitions_follow_the_table() -> None:
    t = task()
    assert t.start().state == TaskState.IN_PROGRESS
    assert t.start().complete("done").state == TaskState.COMPLETED
    assert t.start().abort("broker 3 died").state == TaskState.ABORTING
    assert t.start().abort("broker 3 died").aborted().state == TaskState.ABORTED
    assert t.aborted("stopped").state == TaskState.ABORTED  # never started: aborted at once
    assert t.kill("gone").state == TaskState.DEAD
    assert t.start().kill("gave up").state == TaskState.DEAD
    assert t.start().abort("x").kill("gone").state == TaskState.DEAD


@pytest.mark.parametrize("illegal", [
    lambda t: t.complete("done"),                      # PENDING -> COMPLETED
    lambda t: t.abort("x"),                            # PENDING -> ABORTING
    lambda t: t.start().start(),                       # IN_PROGRESS -> IN_PROGRESS
    lambda t: t.start().aborted("x"),                  # IN_PROGRESS -> ABORTED (must cancel first)
    lambda t: t.start().complete().kill("late"),       # COMPLETED is final
    lambda t: t.aborted("x").start(),                  # ABORTED is final
    lambda t: t.kill("x").aborted("x"),                # DEAD is final
])
def test_an_illegal_transition_raises_and_leaves_the_record(illegal: Any) -> None:
    t = task()
    with pytest.raises(IllegalTransition, match="is not allowed"):
        illegal(t)
    assert t == task()


def test_a_transition_keeps_the_old_reason_when_given_none() -> None:
    aborting = task().start().abort("broker 3 died")
    assert aborting.aborted().reason == "broker 3 died"
    assert aborting.aborted("cancel took effect").reason == "cancel took effect"


def test_moved_to_is_the_replicated_update_same_state_keeps_the_record() -> None:
    running = task(TaskState.IN_PROGRESS, "first")
    assert running.moved_to(TaskState.IN_PROGRESS) is running
    assert running.moved_to(TaskState.IN_PROGRESS, "refused") == replace(running, reason="refused")
    assert running.moved_to(TaskState.COMPLETED).reason == "first"
    with pytest.raises(IllegalTransition):
        running.moved_to(TaskState.PENDING)
    assert running.with_progress(bytes_done=40, attempts=2) == replace(running, bytes_done=40, attempts=2)
    assert running.with_progress() is running


def test_stored_task_and_execution_round_trip_exactly_key_order_included() -> None:
    store, eid = stored_execution()
    doc = store.read(lambda s: json.loads(json.dumps(s["executions"][str(eid)])))
    assert list(doc) == STORED_EXECUTION_KEYS
    for stored in doc["tasks"].values():
        assert list(stored) == STORED_TASK_KEYS
        assert Task.from_json(stored).to_json() == stored
        assert json.dumps(Task.from_json(stored).to_json()) == json.dumps(stored)
    assert json.dumps(Execution.from_json(doc).to_json()) == json.dumps(doc)
    t = Task.from_json(doc["tasks"]["t:0"])
    assert t.state == TaskState.PENDING and t.bytes_total == 100 and t.target_log_dirs == (None, "/d2")
    assert doc["tasks"]["t:0"]["rate_bytes_per_s"] == 0.0 and doc["tasks"]["t:0"]["state"] == "PENDING"
    leader = Task.from_json(doc["tasks"]["t:0:leader"])
    assert leader.leader == 2 and leader.after == ("t:0",) and leader.batch == 1


def test_the_state_machine_enforces_the_table_and_stores_the_same_shape() -> None:
    store, eid = stored_execution()
    with pytest.raises(CommandRejected, match=r"'t:0': PENDING -> COMPLETED is not allowed"):
        store.propose(cmd("execution.tasks", execution_id=eid, updates=[{"key": "t:0", "state": "COMPLETED"}]))
    store.propose(cmd("execution.tasks", execution_id=eid, updates=[
        {"key": "t:0", "state": "IN_PROGRESS", "attempts": 1, "bytes_done": 40}]))
    stored = store.read(lambda s: json.loads(json.dumps(s["executions"][str(eid)]["tasks"]["t:0"])))
    assert list(stored) == STORED_TASK_KEYS
    assert stored["state"] == "IN_PROGRESS" and stored["attempts"] == 1 and stored["bytes_done"] == 40
    assert Task.from_json(stored).to_json() == stored


def test_execution_views_and_final_status() -> None:
    base = Execution(id=1, plan_id=1, cluster="c1", tasks={
        "a": replace(task(TaskState.COMPLETED), key="a"), "b": replace(task(TaskState.ABORTED), key="b")})
    assert base.active and not base.open_tasks()
    assert base.counts() == {"COMPLETED": 1, "ABORTED": 1}
    assert base.final_status() == (ExecutionStatus.COMPLETED, "completed: 1 completed, 1 aborted, 0 dead")
    dead = replace(base, tasks={**base.tasks, "c": replace(task(TaskState.DEAD), key="c")})
    assert dead.final_status()[0] == ExecutionStatus.FAILED
    assert replace(dead, status=ExecutionStatus.STOPPING).final_status() == (
        ExecutionStatus.STOPPED, "stopped: 1 completed, 1 aborted, 1 dead")
    running = replace(base, tasks={"x": replace(task(TaskState.IN_PROGRESS), key="x")})
    assert [t.key for t in running.open_tasks()] == ["x"]
    assert [t.key for t in running.in_states(RUNNING_STATES)] == ["x"]
