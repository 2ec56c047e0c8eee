"""The executor's reconcile edge cases against the in-memory cluster (kafkaio.fake): milliseconds each.

Stale metadata, a failed config apply, a partial submission, a broker that times out, a broker that dies
mid-move — each the way Kafka shows it, through the same port the real adapter implements.
"""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.reconcile import Executor, ExecutorConfig, PassReport
from controlplane.state.store import LocalStateStore
from domain import PartitionMove, Plan
from domain.throttles import FOLLOWER_RATE, LEADER_RATE
from kafkaio.errors import AdminError
from kafkaio.fake import FakeKafkaCluster

GB = 1_000_000_000
T0, T1 = ("t", 0), ("t", 1)


def setup(moves: dict[tuple[str, int], tuple[int, ...]], max_attempts: int = 5
          ) -> tuple[FakeKafkaCluster, Executor, int]:
    """Brokers 1-4 (two dirs each); topic ``t``: partition 0 on [1, 2], partition 1 on [2, 1]; the plan
    moves the given partitions to the given replicas; the execution is started (nothing sent yet)."""
    fake = FakeKafkaCluster({b: ("/d1", "/d2") for b in (1, 2, 3, 4)})
    fake.add_topic("t", [[1, 2], [2, 1]], size_bytes=GB)
    executor = Executor(LocalStateStore(), fake, ExecutorConfig(
        "c1", throttle=MigrationRatePolicy(mode="fixed", fixed_rate=10e6), max_attempts=max_attempts))
    executor.ensure_cluster(fake.bootstrap_servers)
    plan = Plan("c1", "rebalance", tuple(PartitionMove(tp[0], tp[1], r, (None,) * len(r)) for tp, r in moves.items()))
    return fake, executor, executor.start(plan)


def tasks(executor: Executor, eid: int) -> dict[str, dict[str, Any]]:
    execution = executor.execution(eid)
    assert execution is not None
    return dict(execution["tasks"])


def throttle_records(executor: Executor) -> dict[str, Any]:
    return dict(executor.store.read(lambda s: dict(s["throttles"].get("c1", {}))))


def recorded_covers_cluster(fake: FakeKafkaCluster, executor: Executor) -> bool:
    """Record before set: every throttle config on the cluster is in the executor's record of its broker."""
    records = throttle_records(executor)
    for b, cfg in fake.broker_cfg.items():
        recorded = records.get(f"mig.b{b}", {}).get("target", {}).get("configs", {})
        if not set(cfg) <= set(recorded):
            return False
    return True


def run_until_done(fake: FakeKafkaCluster, executor: Executor, passes: int = 20) -> PassReport:
    report = PassReport(None, "idle")
    for _ in range(passes):
        fake.finish()
        report = executor.run_pass()
        assert recorded_covers_cluster(fake, executor)
        if report.finished:
            return report
    raise AssertionError(f"not finished after {passes} passes: {report}")


def test_one_stale_metadata_read_never_causes_a_second_submission() -> None:
    fake, executor, eid = setup({T0: (3, 2)})
    executor.run_pass()
    assert fake.submissions[T0] == 1 and tasks(executor, eid)["t:0"]["state"] == "IN_PROGRESS"
    fake.stale_reads = 1  # the next read is the one before the submission: the move looks neither in flight nor done
    executor.run_pass()
    assert fake.submissions[T0] == 1
    executor.run_pass()  # fresh again: in flight
    assert fake.submissions[T0] == 1
    assert run_until_done(fake, executor).status == "completed"
    assert fake.submissions[T0] == 1 and tasks(executor, eid)["t:0"]["state"] == "COMPLETED"


def test_persistently_stale_metadata_resubmits_at_most_max_attempts_then_gives_up() -> None:
    fake, executor, eid = setup({T0: (3, 2)}, max_attempts=3)
    executor.run_pass()
    fake.stale_reads = 1000
    for _ in range(12):
        executor.run_pass()
        assert fake.submissions[T0] <= 3
    task = tasks(executor, eid)["t:0"]
    assert fake.submissions[T0] == 3 and task["attempts"] == 3
    assert task["state"] == "DEAD" and task["reason"].startswith("gave up after 3 submissions")
    assert (executor.execution(eid) or {})["status"] == "failed"


def test_a_failed_config_apply_holds_the_copy_records_first_and_is_retried() -> None:
    fake, executor, eid = setup({T0: (3, 2)})
    fake.fail_next["set_broker_configs"] = 1  # the first broker's throttle change fails (broker 1: the source)
    executor.run_pass()
    assert fake.submissions[T0] == 0  # the copy never starts unthrottled
    assert LEADER_RATE not in fake.broker_cfg[1]
    records = throttle_records(executor)
    assert records["mig.b1"]["why"] == "migration throttle (write-ahead)"  # recorded before it was applied
    assert records["mig.b3"]["target"]["configs"] == {FOLLOWER_RATE: "10000000"} == fake.broker_cfg[3]
    assert tasks(executor, eid)["t:0"]["state"] == "IN_PROGRESS" and tasks(executor, eid)["t:0"]["attempts"] == 1
    assert recorded_covers_cluster(fake, executor)
    for _ in range(3):  # the next passes find nothing in flight twice, then send it with its throttles
        executor.run_pass()
        assert recorded_covers_cluster(fake, executor)
    assert fake.submissions[T0] == 1
    assert fake.broker_cfg[1] == {LEADER_RATE: "10000000"} and fake.broker_cfg[3] == {FOLLOWER_RATE: "10000000"}
    assert run_until_done(fake, executor).status == "completed"
    assert fake.broker_cfg == {b: {} for b in (1, 2, 3, 4)} and throttle_records(executor) == {}


def test_a_partial_submission_starts_the_accepted_tasks_and_records_why_the_others_were_refused() -> None:
    fake, executor, eid = setup({T0: (3, 2), T1: (4, 1)})
    fake.refuse[T1] = "ReassignmentInProgressError"
    executor.run_pass()
    state = tasks(executor, eid)
    assert fake.submissions == {T0: 1} and T0 in fake.live().reassignments
    assert state["t:0"]["state"] == "IN_PROGRESS" and state["t:0"]["reason"] == ""
    assert state["t:1"]["state"] == "IN_PROGRESS"
    assert state["t:1"]["reason"] == "reassignment refused: ReassignmentInProgressError"
    del fake.refuse[T1]  # the cluster accepts it again: a later pass sends it once more
    assert run_until_done(fake, executor).status == "completed"
    assert fake.submissions == {T0: 1, T1: 1}
    assert {k: t["state"] for k, t in tasks(executor, eid).items()} == {"t:0": "COMPLETED", "t:1": "COMPLETED"}


def test_a_refusal_that_lasts_ends_in_a_dead_task_naming_the_last_answer() -> None:
    fake, executor, eid = setup({T0: (3, 2), T1: (4, 1)}, max_attempts=2)
    fake.refuse[T1] = "InvalidReplicationAssignmentError"
    report = run_until_done(fake, executor)
    dead = tasks(executor, eid)["t:1"]
    assert dead["state"] == "DEAD" and fake.submissions[T1] == 0
    assert dead["reason"] == ("gave up after 2 submissions (reassign did not take effect; "
                              "last answer: reassignment refused: InvalidReplicationAssignmentError)")
    assert report.status == "failed" and tasks(executor, eid)["t:0"]["state"] == "COMPLETED"


def test_a_broker_that_times_out_fails_the_pass_before_anything_is_written_and_the_next_pass_resumes() -> None:
    fake, executor, _ = setup({T0: (3, 2), T1: (4, 1)})
    executor.run_pass()
    assert fake.submissions == {T0: 1, T1: 1}
    fake.timeouts.add(4)  # alive in metadata, but its log dirs cannot be read
    before = executor.store.read(lambda s: (s["log_seq"], dict(s["throttles"])))
    with pytest.raises(AdminError, match="did not answer"):
        executor.run_pass()
    assert executor.store.read(lambda s: (s["log_seq"], dict(s["throttles"]))) == before
    fake.timeouts.clear()
    assert run_until_done(fake, executor).status == "completed"
    assert fake.submissions == {T0: 1, T1: 1}


def test_a_broker_timing_out_on_the_throttle_read_holds_every_copy_it_throttles() -> None:
    fake, executor, eid = setup({T0: (3, 2)})
    fake.timeouts.add(3)  # the destination: its throttle config cannot be read, so it cannot be checked
    executor.run_pass()
    assert fake.submissions[T0] == 0 and fake.broker_cfg[3] == {}
    assert tasks(executor, eid)["t:0"]["state"] == "IN_PROGRESS"
    fake.timeouts.clear()
    assert run_until_done(fake, executor).status == "completed"
    assert fake.submissions[T0] == 1


def test_a_broker_dying_mid_move_cancels_only_its_tasks_and_its_throttle_is_cleared_once_it_is_back() -> None:
    fake, executor, eid = setup({T0: (3, 2), T1: (4, 1)})
    executor.run_pass()
    assert set(fake.live().reassignments) == {T0, T1}
    fake.kill(4)
    report = executor.run_pass()
    state = tasks(executor, eid)
    assert report.cancelled == 1 and fake.cancels == {T1: 1}
    assert state["t:1"]["state"] == "ABORTING"
    assert state["t:1"]["reason"] == "broker 4 of the old/new replica set is dead"
    assert state["t:0"]["state"] == "IN_PROGRESS" and T0 in fake.live().reassignments
    report = run_until_done(fake, executor)
    state = tasks(executor, eid)
    assert report.status == "completed"
    assert {k: t["state"] for k, t in state.items()} == {"t:0": "COMPLETED", "t:1": "ABORTED"}
    assert state["t:1"]["reason"] == "broker 4 of the old/new replica set is dead"
    assert fake.live().partitions[T1].replicas == (2, 1) and fake.submissions == {T0: 1, T1: 1}
    assert set(throttle_records(executor)) == {"mig.b4"}  # a dead broker cannot be altered: kept until it is back
    fake.revive(4)
    assert executor.run_pass().status == "idle"
    assert throttle_records(executor) == {} and fake.broker_cfg == {b: {} for b in (1, 2, 3, 4)}


def test_a_move_someone_else_already_made_is_recorded_started_then_completed_without_a_submission() -> None:
    fake, executor, eid = setup({T0: (3, 2)})
    fake.alter_reassignments({T0: [3, 2]})  # another tool moves it after the plan was checked
    fake.finish()
    executor.run_pass()
    assert tasks(executor, eid)["t:0"]["state"] == "IN_PROGRESS"  # PENDING -> COMPLETED is not an edge
    assert executor.run_pass().status == "completed"
    assert tasks(executor, eid)["t:0"]["state"] == "COMPLETED"
    assert fake.submissions[T0] == 1 and [c for c, _ in fake.calls].count("alter_reassignments") == 1
