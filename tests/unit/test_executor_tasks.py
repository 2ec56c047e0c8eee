"""Pure task logic: plan -> tasks, ordering, readiness (batches, dependencies, leadership first), caps."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from controlplane.executor.tasks import (
    CurrentPartition,
    order_tasks,
    ready_tasks,
    select_batch,
    tasks_from_plan,
)
from domain import LeaderChange, PartitionMove, Plan
from domain.execution import Task, TaskState

CUR = {
    ("a", 0): CurrentPartition((1, 2), ("/d1", "/d1"), 1, 100),
    ("a", 1): CurrentPartition((2, 3), ("/d1", "/d2"), 2, 300),
    ("b", 0): CurrentPartition((3, 1), ("/d2", "/d1"), 3, 50, under_replicated=True),
}


def task(key: str, state: str = "PENDING", action: str = "reassign", batch: int = 0, after: list[str] | None = None,
         src: tuple[int, ...] = (1, 2), dst: tuple[int, ...] = (3, 2), size: int = 10) -> Task:
    topic, part = key.split(":")[:2]
    return Task.from_json({"key": key, "topic": topic, "partition": int(part), "action": action, "state": state,
                           "batch": batch, "after": after or [], "source_replicas": list(src),
                           "source_log_dirs": ["/d1"] * len(src), "target_replicas": list(dst),
                           "target_log_dirs": [None] * len(dst), "size_bytes": size, "leader": None})


def test_plan_becomes_reassign_log_dir_and_leader_tasks_with_dependencies() -> None:
    plan = Plan("c", "drain", moves=(
        PartitionMove("a", 0, (3, 2), (None, None)),          # replica set changes
        PartitionMove("a", 1, (2, 3), ("/d2", "/d2")),        # only a log dir changes
        PartitionMove("b", 0, (3, 1), (None, None)),          # already satisfied: no task
    ), leaders=(LeaderChange("a", 0, 2), LeaderChange("b", 0, 3)))
    tasks = {t.key: t for t in tasks_from_plan(plan, CUR, {("a", 0): 1})}
    assert set(tasks) == {"a:0", "a:1", "a:0:leader"}
    assert tasks["a:0"].action == "reassign" and tasks["a:0"].size_bytes == 100
    assert tasks["a:0"].batch == 1
    assert tasks["a:1"].action == "move_log_dir" and tasks["a:1"].size_bytes == 300
    # broker 2 already holds a:0, so leadership moves first and the move waits for it
    assert tasks["a:0:leader"].after == () and tasks["a:0"].after == ("a:0:leader",)
    assert all(t.state == TaskState.PENDING for t in tasks.values())


def test_leader_change_to_a_new_replica_follows_the_move() -> None:
    plan = Plan("c", "rebalance", moves=(PartitionMove("a", 0, (3, 2), (None, None)),),
                leaders=(LeaderChange("a", 0, 3),))
    tasks = {t.key: t for t in tasks_from_plan(plan, CUR)}
    assert tasks["a:0:leader"].after == ("a:0",) and tasks["a:0"].after == ()


def test_unknown_partition_raises_key_error() -> None:
    with pytest.raises(KeyError):
        tasks_from_plan(Plan("c", "x", moves=(PartitionMove("zz", 0, (1,), (None,)),)), CUR)


def test_orderings() -> None:
    ts = [task("a:0", size=30), task("a:1", size=10), task("b:0", size=20)]
    assert [t.key for t in order_tasks(ts, "small_first")] == ["a:1", "b:0", "a:0"]
    assert [t.key for t in order_tasks(ts, "large_first")] == ["a:0", "b:0", "a:1"]
    assert [t.key for t in order_tasks(ts, "urp_first", {("a", 0)})] == ["a:0", "a:1", "b:0"]
    assert [t.key for t in order_tasks(ts, "plan")] == ["a:0", "a:1", "b:0"]
    with pytest.raises(ValueError, match="unknown ordering"):
        order_tasks(ts, "random")


def test_bottleneck_first_starts_with_the_disk_that_has_the_most_left_to_copy() -> None:
    # broker 1 (leader of a:*) must still read 10 + 10 + 25 bytes, broker 4 only 30: broker 1's tasks go
    # first, largest first; a started task counts only what it has left
    ts = [task("a:0", size=10), task("a:1", size=10), task("b:0", src=(4, 2), dst=(5, 2), size=30)]
    started = replace(task("a:2", "IN_PROGRESS", size=40), bytes_done=15)
    order = order_tasks(ts, "bottleneck_first", open_tasks=[*ts, started])
    assert [t.key for t in order] == ["a:0", "a:1", "b:0"]
    done_more = replace(started, bytes_done=35)  # broker 1 now has 25 left, broker 4 still 30
    assert order_tasks(ts, "bottleneck_first", open_tasks=[*ts, done_more])[0].key == "b:0"


def test_bottleneck_first_starts_a_large_task_on_a_quiet_disk_before_it_becomes_the_tail() -> None:
    # broker 1's disk has 20 bytes to read, broker 4's only the one 15-byte task; with two copies per disk
    # each copy gets about half a disk, so that task alone takes as long as 30 bytes of a queue: it goes first
    ts = [task("a:0", size=10), task("a:1", size=10), task("b:0", src=(4, 2), dst=(5, 2), size=15)]
    assert [t.key for t in order_tasks(ts, "bottleneck_first", open_tasks=ts)] == ["a:0", "a:1", "b:0"]
    assert [t.key for t in order_tasks(ts, "bottleneck_first", open_tasks=ts, per_disk=2)] == ["b:0", "a:0", "a:1"]


def test_batches_wait_for_earlier_batches_and_zero_urp() -> None:
    tasks = {"a:0": task("a:0", "COMPLETED", batch=0), "a:1": task("a:1", batch=1), "b:0": task("b:0", batch=2)}
    assert ready_tasks(tasks, urp_zero=False) == []
    assert [t.key for t in ready_tasks(tasks, urp_zero=True)] == ["a:1"]
    tasks["a:0"] = replace(tasks["a:0"], state=TaskState.IN_PROGRESS)
    assert ready_tasks(tasks, urp_zero=True) == []


def test_dependencies_and_leadership_first() -> None:
    tasks = {"a:0:leader": task("a:0:leader", action="elect_leader"),
             "a:0": task("a:0", after=["a:0:leader"]),
             "b:0": task("b:0")}
    assert [t.key for t in ready_tasks(tasks, True)] == ["a:0:leader", "b:0"]
    assert [t.key for t in ready_tasks(tasks, True, leadership_first=True)] == ["a:0:leader"]
    tasks["a:0:leader"] = replace(tasks["a:0:leader"], state=TaskState.COMPLETED)
    assert [t.key for t in ready_tasks(tasks, True, leadership_first=True)] == ["a:0", "b:0"]


def test_select_batch_keeps_every_cap_and_skips_instead_of_blocking() -> None:
    running = [task("r:0", "IN_PROGRESS", src=(1, 2), dst=(3, 2))]  # loads broker 1 (source) and 3 (dest)
    cands = [task("a:0", src=(1, 2), dst=(3, 2)),   # broker 3 already at cap 1 -> skipped
             task("a:1", src=(4, 5), dst=(6, 5)),   # fits
             task("b:0", src=(4, 7), dst=(8, 7)),   # broker 4 now at cap -> skipped
             task("b:1", src=(9, 5), dst=(10, 5))]  # fits
    chosen = select_batch(cands, running, {"per_broker": 1, "per_disk": 9, "per_cluster": 9})
    assert [t.key for t in chosen] == ["a:1", "b:1"]
    chosen = select_batch(cands, running, {"per_broker": 9, "per_disk": 9, "per_cluster": 2})
    assert [t.key for t in chosen] == ["a:0"]
    elections = [task(f"e:{i}", action="elect_leader") for i in range(5)]
    assert len(select_batch(elections, running, {"per_cluster": 1, "leaders_per_pass": 3})) == 3


def test_select_batch_respects_the_per_disk_cap() -> None:
    a = replace(task("a:0", src=(1, 2), dst=(3, 2)), target_log_dirs=("/x", None))
    b = replace(task("a:1", src=(4, 5), dst=(3, 5)), target_log_dirs=("/x", None))
    c = replace(task("a:2", src=(6, 5), dst=(3, 5)), target_log_dirs=("/y", None))
    chosen = select_batch([a, b, c], [], {"per_broker": 9, "per_disk": 1, "per_cluster": 9})
    assert [t.key for t in chosen] == ["a:0", "a:2"]


def test_select_batch_counts_destination_disks_the_executor_places() -> None:
    """Destinations the plan leaves open count against the per-disk cap once placed: a running copy's
    placed dir fills its slot, and a candidate goes to a destination disk with a free slot or waits."""
    running = [task("r:0", "IN_PROGRESS", src=(1, 2), dst=(3, 2))]
    placed = {"r:0": [(3, "/d1")]}
    calls: list[str] = []

    def place(t: Task, full: Any) -> set[tuple[int, str]] | None:
        calls.append(t.key)
        free = [d for d in ("/d1", "/d2") if not full((3, d))]
        return {(3, free[0])} if free else None

    cands = [replace(task(f"a:{i}", src=(10 + i, 2), dst=(3, 2)), source_log_dirs=(f"/s{i}", "/d1"))
             for i in range(3)]
    chosen = select_batch(cands, running, {"per_broker": 9, "per_disk": 1, "per_cluster": 9},
                          placed=placed, place=place)
    assert [t.key for t in chosen] == ["a:0"]  # (3, /d1) taken by r:0, a:0 gets /d2, a:1 and a:2 wait
    assert calls == ["a:0", "a:1", "a:2"]
    # without placement knowledge every candidate fits (the old behaviour the cap did not see)
    assert len(select_batch(cands, running, {"per_broker": 9, "per_disk": 1, "per_cluster": 9})) == 3
