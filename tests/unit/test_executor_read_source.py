"""Read source of a copy (:mod:`controlplane.executor.read_source`): which replica a pending copy reads from."""

from __future__ import annotations

from dataclasses import replace

from controlplane.executor.changes import TaskChanges
from controlplane.executor.copy_meter import CopyMeter
from controlplane.executor.drive import TaskDriver
from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.placement import Placement
from controlplane.executor.read_source import (
    copy_source,
    lead_order,
    lead_step,
    old_order,
    plan_readers,
    reader_lost,
    restore_order,
    settle_order,
    submit_order,
)
from controlplane.executor.submit import Submission
from domain.execution import Task, TaskState
from kafkaio.fake import FakeKafkaCluster
from kafkaio.types import LiveCluster, PartitionMeta, ReplicaDir

GB = 10**9


def task(key: str, src: list[int], dirs: list[str], dst: list[int], size: int) -> Task:
    topic, part = key.split(":")
    return Task.from_json({"key": key, "topic": topic, "partition": int(part), "action": "reassign",
                           "state": "PENDING", "batch": 0, "after": [], "source_replicas": src,
                           "source_log_dirs": dirs, "target_replicas": dst, "target_log_dirs": [None] * len(dst),
                           "size_bytes": size, "leader": None})


def cluster(tasks: list[Task], isr: dict[str, tuple[int, ...]] | None = None) -> LiveCluster:
    return LiveCluster(frozenset({1, 2, 3, 4}),
                       {t.tp: PartitionMeta(t.topic, t.partition, t.source_replicas, t.source_replicas[0],
                                            (isr or {}).get(t.key, t.source_replicas)) for t in tasks}, {}, {})


def dir_map(tasks: list[Task]) -> dict[tuple[str, int, int], list[ReplicaDir]]:
    return {(t.topic, t.partition, b): [ReplicaDir(d or "", t.size_bytes, 0, False)]
            for t in tasks for b, d in zip(t.source_replicas, t.source_log_dirs, strict=True)}


BUDGETS = {(1, "/d1"): 60e6, (2, "/d1"): 60e6, (3, "/d1"): 60e6, (4, "/d1"): 60e6}


def test_copies_off_a_busy_leader_disk_read_from_the_kept_follower() -> None:
    # broker 1 leads three partitions that all leave it; broker 2 keeps each in sync on a quiet disk
    tasks = [task(f"t:{i}", [1, 2], ["/d1", "/d1"], [3, 2], 3 * GB) for i in range(3)]
    readers = plan_readers({t.key: t for t in tasks}, cluster(tasks), dir_map(tasks), BUDGETS, lambda _k, d: d)
    assert 0 < len(readers) < 3 and set(readers.values()) == {2}  # some move, not all (broker 2 then the bound)
    t = tasks[0]
    assert submit_order(t, 2) == [2, 3] and submit_order(t, None) == [3, 2]


def test_no_follower_read_when_the_follower_is_out_of_sync_or_the_old_leader_stays_but_not_first() -> None:
    out_of_sync = task("a:0", [1, 2], ["/d1", "/d1"], [3, 2], 3 * GB)
    keeps_leader = task("b:0", [1, 2], ["/d1", "/d1"], [2, 1, 3], 3 * GB)  # 1 stays, 2 first: no
    tasks = [out_of_sync, keeps_leader, task("c:0", [1, 2], ["/d1", "/d1"], [3, 2], 3 * GB)]
    live = cluster(tasks, {"a:0": (1,)})
    readers = plan_readers({t.key: t for t in tasks}, live, dir_map(tasks), BUDGETS, lambda _k, d: d)
    assert ("a", 0) not in readers and ("b", 0) not in readers


def test_settle_sends_the_plan_order_back_once_the_copy_is_done() -> None:
    t = task("t:0", [1, 2], ["/d1", "/d1"], [3, 2], GB)
    done = LiveCluster(frozenset({1, 2, 3}), {t.tp: PartitionMeta("t", 0, (2, 3), 2, (2, 3))}, {}, {})
    assert settle_order(t, done.partitions[t.tp], done)
    plain = LiveCluster(frozenset({1, 2, 3}), {t.tp: PartitionMeta("t", 0, (3, 2), 3, (3, 2))}, {}, {})
    assert not settle_order(t, plain.partitions[t.tp], plain)
    not_started = LiveCluster(frozenset({1, 2, 3}), {t.tp: PartitionMeta("t", 0, (1, 2), 1, (1, 2))}, {}, {})
    assert not settle_order(t, not_started.partitions[t.tp], not_started)


def test_a_refused_reorder_is_sent_at_most_max_attempts_times_then_the_task_is_given_up() -> None:
    # the copy read from follower 2 and is done ([2, 3]); the cluster refuses the plan's order [3, 2] each time
    t = replace(task("t:0", [1, 2], ["/d1", "/d1"], [3, 2], GB).start(), attempts=1, reader=2)
    done = LiveCluster(frozenset({1, 2, 3}), {t.tp: PartitionMeta("t", 0, (2, 3), 2, (2, 3))}, {}, {})
    copies = CopyMeter()
    driver = TaskDriver(copies, Placement(FakeKafkaCluster({}), MigrationRatePolicy(), copies, dict), None,
                        max_attempts=3)
    sent = 0
    for _ in range(10):
        update, submit = TaskChanges({t.key: t}), Submission()
        driver.drive(t, done, {}, 1.0, update, submit, resubmit=True)
        if submit.reassign:
            assert submit.reassign == {t.tp: [3, 2]} and submit.elect == []  # the election waits for the order
            sent += 1
            row = update.updates()[0]
            t = t.with_progress(leader_attempts=row["leader_attempts"])  # what the store records (write-ahead)
        else:
            assert update.now[t.key].state == TaskState.DEAD
            assert "gave up after 3 submissions (making broker 3 leader" in update.now[t.key].reason
            break
    else:
        raise AssertionError("the refused reorder was sent every pass")
    assert sent == 3


def test_leader_changes_are_one_step_a_pass_from_the_metadata() -> None:
    t = replace(task("t:0", [1, 2], ["/d1", "/d1"], [3, 2], GB).start(), reader=2)

    def meta(replicas: tuple[int, ...], leader: int) -> PartitionMeta:
        return PartitionMeta("t", 0, replicas, leader, replicas)

    def step(t: Task, p: PartitionMeta) -> tuple[str, list[int]] | None:
        order = lead_order(t, p, t.reader)
        return None if order is None or (s := lead_step(p, order)) is None else (s, order)

    assert step(t, meta((1, 2), 1)) == ("reorder", [2, 1])  # lead-in: the reader first, copying nothing
    assert step(t, meta((2, 1), 1)) == ("elect", [2, 1])  # the order seen: then the election
    assert step(t, meta((2, 1), 2)) is None  # the reader leads: the copy may start
    copying = replace(t, attempts=1)
    assert step(copying, meta((2, 1), 2)) is None  # the copy was sent: no lead-in again (a resubmission)
    assert step(copying, meta((2, 3), 2)) == ("reorder", [3, 2])  # lead-out: the plan's order
    assert step(copying, meta((3, 2), 2)) == ("elect", [3, 2])
    assert step(copying, meta((3, 2), 3)) is None  # the plan's leader: the task may complete
    assert lead_order(replace(t, reader=None), meta((2, 3), 2), None) is None  # no follower read


def test_no_follower_read_when_the_leaders_disk_has_no_live_figures() -> None:
    # the leader's disk cannot be weighed: the followers must not be compared among themselves instead
    t = task("t:0", [1, 2, 3], ["/d1"] * 3, [4, 2, 3], 3 * GB)
    budgets = {(2, "/d1"): 10e6, (3, "/d1"): 60e6, (4, "/d1"): 60e6}
    assert plan_readers({t.key: t}, cluster([t]), dir_map([t]), budgets, lambda _k, d: d) == {}
    assert plan_readers({t.key: t}, cluster([t]), dir_map([t]), {**budgets, (1, "/d1"): 10e6},
                        lambda _k, d: d) == {t.tp: 3}  # with them, the quiet follower reads



def test_reader_lost_old_order_restore_order_and_copy_source() -> None:
    t = replace(task("t:0", [1, 2], ["/d1", "/d1"], [3, 2], GB), state=TaskState.IN_PROGRESS, reader=2)
    live = cluster([t])

    def meta(replicas: tuple[int, ...], leader: int, isr: tuple[int, ...]) -> PartitionMeta:
        return PartitionMeta("t", 0, replicas, leader, isr)

    assert reader_lost(t, meta((2, 1), 2, (2, 1)), live) is None
    assert reader_lost(t, meta((2, 1), 1, (1,)), live) == "broker 2 left the ISR [1]"
    assert reader_lost(t, meta((1, 4), 1, (1, 4)), live) == "broker 2 is no longer a replica"
    assert reader_lost(replace(t, attempts=1), meta((2, 1), 1, (1,)), live) is None  # the copy was sent
    assert reader_lost(t, meta((2, 3), 2, (2, 3)), live) is None  # the target's set: the lead-out
    assert old_order(t, meta((2, 1), 1, (1,))) == [1, 2] and old_order(t, meta((1, 2), 1, (1,))) is None
    assert restore_order(t, meta((2, 1), 2, (2, 1))) == [1, 2]  # the copy cancelled: the order before the task
    assert restore_order(t, meta((2, 3), 2, (2, 3))) == [3, 2]  # the copy was done: the plan's order
    assert restore_order(replace(t, reader=None), meta((2, 1), 2, (2, 1))) is None
    assert copy_source(t, meta((2, 1), 1, (2, 1))) == 2 and copy_source(t, meta((1, 4), 1, (1, 4))) == 1
    pending = replace(t, state=TaskState.PENDING, reader=None)
    assert copy_source(pending, meta((1, 2), 1, (1, 2)), {t.tp: 2}) == 2
    assert copy_source(pending, meta((1, 2), 1, (1, 2))) == 1
