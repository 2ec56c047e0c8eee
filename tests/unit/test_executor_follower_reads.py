"""Follower reads' leader changes as reconciled steps (:mod:`controlplane.executor.read_source`), against a
cluster whose controller decides elections before the reorder sent just before them lands."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.executor.reconcile import Executor
from tests.follower_read_support import GB, TP0, RacingController, follower_read_executor, follower_read_setup


def task0(executor: Executor, eid: int) -> dict[str, Any]:
    execution = executor.execution(eid)
    assert execution is not None
    return dict(execution["tasks"]["t:0"])


def drive(fake: RacingController, executors: list[Executor], eid: int, passes: int = 40,
          switch: int | None = None) -> tuple[str, list[list[tuple[str, Any]]], list[int]]:
    """Run passes (the first executor's, the second's from pass ``switch`` on), copying a third of the
    partition between passes; returns the final status, the calls of each pass and the leader before each."""
    per_pass: list[list[tuple[str, Any]]] = []
    leaders: list[int] = []
    for i in range(passes):
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
