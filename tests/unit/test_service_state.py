"""The replicated state machine: commands validated, applied deterministically, refusals change nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from controlplane.state.commands import meta, validate_command
from controlplane.state.state import GuardianState
from controlplane.state.store import LocalStateStore
from raft.protocol import CommandRejected, state_hash

AT = "2026-11-21T10:00:00Z"


def cmd(command_type: str, /, **payload: Any) -> dict[str, Any]:
    return validate_command({"type": command_type, "meta": {"who": "alice", "why": "test", "at": AT}, **payload})


def store_with_cluster() -> LocalStateStore:
    store = LocalStateStore()
    store.propose(cmd("cluster.register", name="c1", bootstrap_servers=["127.0.0.1:9092"]))
    return store


def approved_plan(store: LocalStateStore) -> int:
    plan_id = store.propose(cmd("plan.propose", cluster="c1", kind="rebalance", plan={"moves": 1}))["plan_id"]
    store.propose(cmd("plan.approve", plan_id=plan_id))
    return plan_id


TASK = {"key": "t-0", "topic": "t", "partition": 0, "action": "reassign", "source_replicas": [1, 2],
        "target_replicas": [3, 2], "size_bytes": 100}


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ({"type": "nope", "meta": {"who": "a", "at": AT}}, "$.type: unknown command type 'nope'"),
        ({"type": "cluster.register", "meta": {"who": "a", "at": AT}, "name": "c1"}, "$.bootstrap_servers"),
        ({"type": "cluster.register", "meta": {"who": "a", "at": "yesterday"}, "name": "c1",
          "bootstrap_servers": ["h:1"]}, "$.meta.at"),
        ({"type": "ids.allocate", "meta": {"who": "a", "at": AT}, "count": 0}, "$.count"),
        ({"type": "throttle.set", "meta": {"who": "a", "at": AT}, "cluster": "c1", "key": "k", "kind": "x",
          "target": {}, "rate_bytes_per_s": float("nan")}, "$.rate_bytes_per_s"),
        ({"type": "maintenance.set", "meta": {"who": "a", "at": AT}, "cluster": "c1", "broker": 1, "enabled": True,
          "surprise": 1}, "$.surprise"),
    ],
)
def test_malformed_commands_are_rejected_naming_the_field(command: dict[str, Any], fragment: str) -> None:
    with pytest.raises(CommandRejected, match=fragment.replace("$", r"\$").replace("[", r"\[")):
        validate_command(command)


def test_plan_lifecycle_and_idempotent_execution_start() -> None:
    store = store_with_cluster()
    plan_id = approved_plan(store)
    first = store.propose(cmd("execution.start", plan_id=plan_id, tasks=[TASK]))
    again = store.propose(cmd("execution.start", plan_id=plan_id, tasks=[TASK]))  # retried after failover
    assert first["created"] and not again["created"]
    assert again["execution_id"] == first["execution_id"]
    eid = first["execution_id"]
    store.propose(cmd("execution.tasks", execution_id=eid, updates=[{"key": "t-0", "state": "IN_PROGRESS"}]))
    with pytest.raises(CommandRejected, match="still has open tasks"):
        store.propose(cmd("execution.finish", execution_id=eid, status="completed"))
    store.propose(cmd("execution.tasks", execution_id=eid,
                      updates=[{"key": "t-0", "state": "COMPLETED", "bytes_done": 100}]))
    store.propose(cmd("execution.finish", execution_id=eid, status="completed"))
    assert store.read(lambda s: s["plans"][str(plan_id)]["status"]) == "completed"


def test_only_approved_plans_execute_and_one_execution_per_cluster() -> None:
    store = store_with_cluster()
    plan_id = store.propose(cmd("plan.propose", cluster="c1", kind="rebalance", plan={}))["plan_id"]
    with pytest.raises(CommandRejected, match="approve it before executing"):
        store.propose(cmd("execution.start", plan_id=plan_id, tasks=[]))
    store.propose(cmd("execution.start", plan_id=approved_plan(store), tasks=[TASK]))
    with pytest.raises(CommandRejected, match="already runs execution"):
        store.propose(cmd("execution.start", plan_id=approved_plan(store), tasks=[]))


def test_illegal_task_transition_changes_nothing() -> None:
    store = store_with_cluster()
    eid = store.propose(cmd("execution.start", plan_id=approved_plan(store),
                            tasks=[TASK, {**TASK, "key": "t-1", "partition": 1}]))["execution_id"]
    before = store.read(copy.deepcopy)
    with pytest.raises(CommandRejected, match="PENDING -> COMPLETED is not allowed"):
        store.propose(cmd("execution.tasks", execution_id=eid, updates=[
            {"key": "t-0", "state": "IN_PROGRESS"}, {"key": "t-1", "state": "COMPLETED"}]))
    assert store.read(copy.deepcopy) == before


def test_unknown_ids_are_rejected() -> None:
    store = store_with_cluster()
    for command, message in ((cmd("plan.approve", plan_id=99), "unknown plan 99"),
                             (cmd("execution.stop", execution_id=42), "unknown execution 42"),
                             (cmd("maintenance.set", cluster="zz", broker=1, enabled=True), "unknown cluster 'zz'")):
        with pytest.raises(CommandRejected, match=message):
            store.propose(command)


def test_ids_are_unique_and_monotonic() -> None:
    store = store_with_cluster()
    a = store.propose(cmd("ids.allocate", count=10))
    plan_id = store.propose(cmd("plan.propose", cluster="c1", kind="x", plan={}))["plan_id"]
    b = store.propose(cmd("ids.allocate", count=1))
    assert a["last"] - a["first"] == 9
    assert a["last"] < plan_id < b["first"]


def test_every_command_is_in_the_action_log() -> None:
    store = store_with_cluster()
    store.propose(cmd("maintenance.set", cluster="c1", broker=3, enabled=True))
    actions = store.read(lambda s: list(s["actions"]))
    assert [a["type"] for a in actions] == ["cluster.register", "maintenance.set"]
    assert actions[1]["who"] == "alice" and actions[1]["why"] == "test" and actions[1]["subject"]["broker"] == 3


def test_replaying_the_same_log_gives_the_same_state() -> None:
    log = [cmd("cluster.register", name="c1", bootstrap_servers=["h:1"]),
           cmd("pool.assign", cluster="c1", pool="pay", brokers=[4, 5]),
           cmd("pool.assign", cluster="c1", pool="shared", brokers=[1, 5]),
           cmd("placement.set", cluster="c1", topic="orders", placement={"idc-a": 2}),
           cmd("throttle.set", cluster="c1", key="disk:1:/data1", kind="follower", target={"broker": 1},
               rate_bytes_per_s=1e6)]
    a, b = GuardianState(), GuardianState()
    for c in log:
        a.apply(json.loads(json.dumps(c)))
        b.apply(json.loads(json.dumps(c)))
    assert state_hash(a.snapshot()) == state_hash(b.snapshot())
    assert a.state["clusters"]["c1"]["pools"] == {"pay": [4], "shared": [1, 5]}
    restored = GuardianState()
    restored.restore(a.snapshot())
    assert state_hash(restored.snapshot()) == state_hash(a.snapshot())


def test_local_store_file_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = LocalStateStore(path)
    store.propose(cmd("cluster.register", name="c1", bootstrap_servers=["h:1"]))
    again = LocalStateStore(path)
    assert again.read(lambda s: sorted(s["clusters"])) == ["c1"]
    assert again.propose(cmd("ids.allocate", count=1))["first"] == 1


def test_meta_helper_stamps_utc() -> None:
    assert meta("bob")["at"].endswith("Z")


def test_a_cluster_with_live_plans_or_executions_cannot_be_removed() -> None:
    store = store_with_cluster()
    proposed = store.propose(cmd("plan.propose", cluster="c1", kind="rebalance", plan={}))["plan_id"]
    plan_id = approved_plan(store)
    before = store.read(copy.deepcopy)
    with pytest.raises(CommandRejected, match=rf"approved or executing plans \[{plan_id}\]"):
        store.propose(cmd("cluster.remove", name="c1"))
    assert store.read(copy.deepcopy) == before
    eid = store.propose(cmd("execution.start", plan_id=plan_id, tasks=[TASK]))["execution_id"]
    with pytest.raises(CommandRejected, match=rf"running executions \[{eid}\]"):
        store.propose(cmd("cluster.remove", name="c1"))
    store.propose(cmd("execution.finish", execution_id=eid, status="stopped"))
    assert store.propose(cmd("cluster.remove", name="c1"))["removed"]  # a merely proposed plan does not block
    with pytest.raises(CommandRejected, match="no longer registered"):
        store.propose(cmd("plan.approve", plan_id=proposed))


def test_an_approved_plan_of_a_removed_cluster_does_not_start() -> None:
    """A state from before removal was refused: the plan stays approved, its cluster gone."""
    store = store_with_cluster()
    plan_id = approved_plan(store)
    state = store.read(copy.deepcopy)
    del state["clusters"]["c1"]
    sm = GuardianState()
    sm.restore(state)
    with pytest.raises(CommandRejected, match="unknown cluster 'c1'"):
        sm.apply(cmd("execution.start", plan_id=plan_id, tasks=[TASK]))
    assert sm.state["plans"][str(plan_id)]["status"] == "approved" and not sm.state["executions"]
