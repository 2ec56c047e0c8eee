"""Follower reads' leader changes as reconciled steps (:mod:`controlplane.executor.read_source`), against a
cluster whose controller decides elections before the reorder sent just before them lands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from controlplane.executor.reconcile import Executor
from tests.support.follower_read_support import GB, TP0, RacingController, follower_read_executor, follower_read_setup


def task0(executor: Executor, eid: int) -> dict[str, Any]:
    execution = executor.execution(eid)
    assert execution is not None
    return dict(execution["tasks"]["t:0"])


def drive(fake: RacingController, executors: list[Executor], eid: int, passes: int = 40,
          switch: int | None = None, before: Callable[[int], None] | None = None
          ) -> tuple[str, list[list[tuple[str, Any]]], list[int]]:
    """Run passes (the first executor's, the second's from pass ``switch`` on; ``before(i)`` ahead of pass
    ``i``), copying a third of the partition between passes; returns the final status, the calls of each pass
    and the leader before each."""
    per_pass: list[list[tuple[str, Any]]] = []
    leaders: list[int] = []
    for i in range(passes):
        if before is not None:
            before(i)
        ex = executors[1] if switch is not None and i >= switch else executors[0]
        part = fake._get(TP0)
        assert part is not None
        leaders.append(part.leader)
        seen = len(fake.calls)
        report = ex.run_pass()
        per_pass.append([c for c in fake.calls[seen:] if c[0] in ("alter_reassignments", "elect_preferred")])
        if report.finished:
            return report.status, per_pass, leaders
        fake.copy(GB // 3)
    raise AssertionError(f"not finished after {passes} passes: {task0(executors[-1], eid)}")


def check_steps(per_pass: list[list[tuple[str, Any]]], leaders: list[int]) -> None:
    """Never a reorder and an election in one pass; the copy ([2, 3]) sent once, with its reader leading."""
    copies = 0
    for calls, leader in zip(per_pass, leaders, strict=False):
        kinds = {c[0] for c in calls}
        assert kinds != {"alter_reassignments", "elect_preferred"}, calls
        if ("alter_reassignments", {TP0: [2, 3]}) in calls:
            copies += 1
            assert leader == 2, "the copy was sent before its reader led"
    assert copies == 1


@pytest.mark.parametrize("lag", [1, 2, 3])
def test_an_election_racing_its_reorder_is_retried_and_the_task_completes_with_the_planned_leader(lag: int) -> None:
    fake, executor, eid = follower_read_setup(lag=lag)
    status, per_pass, leaders = drive(fake, [executor], eid)
    part = fake._get(TP0)
    assert part is not None
    assert status == "completed" and task0(executor, eid)["state"] == "COMPLETED"
    assert (part.replicas, part.leader) == ([3, 2], 3)  # the plan's order and its first replica leading
    assert task0(executor, eid)["reader"] == 2
    check_steps(per_pass, leaders)
    not_needed = sum(1 for _tp, code in fake.answers if code == 84)
    assert not_needed == (0 if lag == 1 else 2 * (lag - 1))  # each leader change: retried until it took


@pytest.mark.parametrize("phase", ["lead-in", "lead-out"])
def test_a_leader_that_stays_wrong_fails_the_task_with_the_clusters_answer(phase: str) -> None:
    fake, executor, eid = follower_read_setup(lag=10**6 if phase == "lead-in" else 1, max_attempts=3)
    for _ in range(40):
        part = fake._get(TP0)
        assert part is not None
        if phase == "lead-out" and sorted(part.replicas) == [2, 3]:
            fake.lag = 10**6  # the copy is done: the controller never sees the plan's order for an election
        report = executor.run_pass()
        if report.finished:
            break
        fake.copy(GB // 3)
    else:
        raise AssertionError("the execution did not finish")
    t = task0(executor, eid)
    assert report.status == "failed" and t["state"] == "DEAD" and t["leader_attempts"] == 3
    want = 2 if phase == "lead-in" else 3
    assert t["reason"].startswith(f"gave up after 3 submissions (making broker {want} leader"), t["reason"]
    assert t["reason"].endswith("last answer: preferred election refused: ELECTION_NOT_NEEDED (84))"), t["reason"]
    copies = [c for c in fake.calls if c == ("alter_reassignments", {TP0: [2, 3]})]
    assert len(copies) == (0 if phase == "lead-in" else 1)  # a copy is never sent before its reader leads


@pytest.mark.parametrize("switch", range(1, 12))
def test_a_new_executor_taking_over_after_any_pass_finishes_with_the_planned_leader(switch: int) -> None:
    fake, first, eid = follower_read_setup(lag=2)
    second = follower_read_executor(fake, first.store)  # failover: same replicated state, no process memory
    status, per_pass, leaders = drive(fake, [first, second], eid, switch=switch)
    part = fake._get(TP0)
    assert part is not None
    assert status == "completed" and task0(second, eid)["state"] == "COMPLETED"
    assert (part.replicas, part.leader) == ([3, 2], 3)
    check_steps(per_pass, leaders)


def shows(fake: RacingController) -> tuple[list[int], int]:
    part = fake._get(TP0)
    assert part is not None
    return list(part.replicas), part.leader


def no_step_pairs(per_pass: list[list[tuple[str, Any]]]) -> None:
    for calls in per_pass:
        assert {c[0] for c in calls} != {"alter_reassignments", "elect_preferred"}, calls


# trace with lag 1: pass 1 reorder [2, 1], pass 2 election of 2, pass 3 copy [2, 3], copy done after pass 6,
# pass 7 reorder [3, 2], pass 8 election of 3, pass 9 completes
@pytest.mark.parametrize("lag", [1, 2])
@pytest.mark.parametrize("stop_at", range(1, 10))
def test_a_task_cancelled_after_its_lead_in_gets_its_order_and_leader_back_before_it_is_aborted(
        stop_at: int, lag: int) -> None:
    fake, executor, eid = follower_read_setup(lag=lag)
    copy_done: list[bool] = []

    def stop(i: int) -> None:
        if i == stop_at:
            copy_done.append(sorted(shows(fake)[0]) == [2, 3])
            executor.stop(eid, rollback=True)

    status, per_pass, _ = drive(fake, [executor], eid, before=stop)
    t = task0(executor, eid)
    assert status == "stopped" and t["state"] in ("ABORTED", "COMPLETED"), t
    if t["state"] == "ABORTED":  # the copy cancelled: the order before the task; done: the plan's
        assert shows(fake) == (([3, 2], 3) if copy_done[0] else ([1, 2], 1)), t
        assert t["reason"].startswith("execution stopped with rollback"), t["reason"]
    no_step_pairs(per_pass)
    cancelled = [i for i, calls in enumerate(per_pass) if ("alter_reassignments", {TP0: None}) in calls]
    restores = [i for i, calls in enumerate(per_pass) if ("alter_reassignments", {TP0: [1, 2]}) in calls]
    assert all(c < r for c in cancelled for r in restores)  # the copy's cancel first, then the restore


@pytest.mark.parametrize("switch", range(4, 10))
def test_a_new_executor_taking_over_a_cancel_puts_the_leader_back(switch: int) -> None:
    fake, first, eid = follower_read_setup(lag=2)
    second = follower_read_executor(fake, first.store)

    def stop(i: int) -> None:
        if i == 4:  # the copy in flight, read from broker 2
            first.stop(eid, rollback=True)

    status, per_pass, _ = drive(fake, [first, second], eid, switch=switch, before=stop)
    assert status == "stopped" and task0(second, eid)["state"] == "ABORTED"
    assert shows(fake) == ([1, 2], 1)
    no_step_pairs(per_pass)


def test_a_task_cancelled_by_a_dead_broker_gets_its_leader_back() -> None:
    fake, executor, eid = follower_read_setup(lag=1)
    status, _, _ = drive(fake, [executor], eid, before=lambda i: fake.kill(3) if i == 4 else None)
    t = task0(executor, eid)
    assert t["state"] == "ABORTED" and t["reason"].startswith("broker 3 of the old/new replica set is dead")
    assert status == "completed" and shows(fake) == ([1, 2], 1)


def test_a_cancel_whose_old_leader_left_the_isr_ends_after_max_attempts_naming_both_leaders() -> None:
    fake, executor, eid = follower_read_setup(lag=1, max_attempts=3)

    def stop(i: int) -> None:
        if i == 4:
            executor.stop(eid, rollback=True)
            fake.leave_isr(TP0, 1)

    status, _, _ = drive(fake, [executor], eid, before=stop)
    t = task0(executor, eid)
    assert status == "stopped" and t["state"] == "ABORTED" and t["leader_attempts"] == 3
    assert shows(fake) == ([1, 2], 2)  # the order is back (a reorder needs no ISR); the election cannot take
    assert t["reason"] == ("execution stopped with rollback; leadership not restored after 3 attempts (broker 1 "
                           "is not in the ISR [2]): wanted replicas [1, 2] led by 1, the cluster shows replicas "
                           "[1, 2] led by 2"), t["reason"]
    assert ("elect_preferred", [TP0]) not in fake.calls[-4:]  # no election sent that cannot take


@pytest.mark.parametrize("lost_at", [2, 3])  # before the election (order [2, 1] seen), after it (2 leading)
@pytest.mark.parametrize("how", ["isr", "replica"])
def test_a_reader_lost_during_the_lead_in_falls_back_to_reading_from_the_leader(lost_at: int, how: str) -> None:
    fake, executor, eid = follower_read_setup(lag=1)

    def lose(i: int) -> None:
        if i != lost_at:
            return
        if how == "isr":
            fake.leave_isr(TP0, 2)
        else:  # someone else moved the partition off broker 2 (1 first again)
            fake.alter_reassignments({TP0: [1, 4]})
            fake.finish([TP0])

    status, per_pass, leaders = drive(fake, [executor], eid, before=lose)
    t = task0(executor, eid)
    assert status == "completed" and t["state"] == "COMPLETED" and t["reader"] is None, t
    assert "follower read abandoned: broker 2 " in t["reason"], t["reason"]
    assert shows(fake) == ([3, 2], 3)
    copies = [(i, c) for i, calls in enumerate(per_pass) for c in calls if c[0] == "alter_reassignments"
              and c[1][TP0] is not None and sorted(c[1][TP0]) == [2, 3]]
    assert [c for _, c in copies] == [("alter_reassignments", {TP0: [3, 2]})]  # once, in the plan's order
    assert leaders[copies[0][0]] == 1  # read from the leader
    restored = [i for i, calls in enumerate(per_pass) if ("alter_reassignments", {TP0: [1, 2]}) in calls]
    assert restored == ([lost_at] if how == "isr" else [])  # the lead-in's reorder undone before the copy
    assert restored == [] or restored[0] < copies[0][0]


@pytest.mark.parametrize("lag", [2, 10**6])
def test_a_refused_election_while_a_cancel_restores_the_leader_is_named_in_the_reason_until_it_takes(lag: int) -> None:
    fake, executor, eid = follower_read_setup(lag=1, max_attempts=3)
    refused: list[str] = []

    def stop(i: int) -> None:
        if i == 4:  # the copy in flight, read from broker 2: the restore's elections race its reorder
            fake.lag = lag
            executor.stop(eid, rollback=True)
        t = task0(executor, eid)
        if t["state"] == "ABORTING" and "last refused" in t["reason"]:
            refused.append(t["reason"])

    status, _, _ = drive(fake, [executor], eid, before=stop)
    t = task0(executor, eid)
    assert status == "stopped" and t["state"] == "ABORTED", t
    assert refused and refused[0] == ("execution stopped with rollback; last refused: preferred election refused: "
                                      "ELECTION_NOT_NEEDED (84)"), refused
    if lag == 2:  # the election took at last: the refusal on the way is not the task's outcome
        assert shows(fake) == ([1, 2], 1)
        assert t["reason"] == "execution stopped with rollback; replicas [1, 2] led by 1", t["reason"]
    else:
        assert shows(fake) == ([1, 2], 2) and t["leader_attempts"] == 3
        assert t["reason"] == ("execution stopped with rollback; last refused: preferred election refused: "
                               "ELECTION_NOT_NEEDED (84); leadership not restored after 3 attempts: wanted replicas "
                               "[1, 2] led by 1, the cluster shows replicas [1, 2] led by 2"), t["reason"]
