"""kafkasim's remote log manager tasks (KIP-405): one schedule per tiered partition, on its leader.

Copies happen only when the partition's task runs (every ``remote.log.manager.task.interval.ms``), a partition's
segments become remote only after its task is due, partitions run at seeded phases of their own, a leader change
moves the task to the new leader (it runs at once, on the new leader's interval, reading Guardian's state
first), and KIP-956's copy quota spaces copies the way Kafka's quota manager does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkasim.cluster.configs import REMOTE_COPY_QUOTA, REMOTE_LOG_TASK, RETENTION_CHECK
from kafkasim.cluster.model import Cluster
from kafkasim.cluster.records import store_batches
from kafkasim.scenarios.scenario import Federation
from kafkasim.tiering.remote_store import LocalDirStore
from kafkasim.tiering.rlm_tasks import CopyQuota, TaskSchedule
from kafkasim.tiering.segments import LOCAL
from kafkasim.tiering.tiered import TieredManager, TieredSettings
from tests.unit.test_kafkasim_tiered import FakeMetadata, batch, federation, wait_idle
from tiered.model import EventKind


class CountingMetadata(FakeMetadata):
    """Counts state reads (what a new leader's first run does before copying)."""

    def __init__(self) -> None:
        super().__init__()
        self.state_reads = 0

    def copied(self, cluster: str, topic_id: str, partition: int) -> dict[tuple[int, int], tuple[int, str]]:
        self.state_reads += 1
        return super().copied(cluster, topic_id, partition)


def manager(tmp_path: Path, broker_configs: dict[str, str]) -> tuple[Federation, TieredManager, CountingMetadata]:
    fed = federation({RETENTION_CHECK: "3600000", **broker_configs})
    md = CountingMetadata()
    mgr = TieredManager(fed, TieredSettings((), "", tmp_path / "remote"), metadata=md,
                        store=LocalDirStore(tmp_path / "remote"))
    mgr.start()
    return fed, mgr, md


@pytest.fixture()
def every_5s(tmp_path: Path) -> Iterator[tuple[Federation, TieredManager, CountingMetadata]]:
    fed, mgr, md = manager(tmp_path, {REMOTE_LOG_TASK: "5000"})
    try:
        yield fed, mgr, md
    finally:
        mgr.stop()


def not_local(mgr: TieredManager, cl: Cluster, topic: str, index: int) -> int:
    lg = mgr.log_of(cl, topic, index)
    return 0 if lg is None else sum(s.state != LOCAL for s in lg.segments)


def tick(fed: Federation, mgr: TieredManager) -> None:
    fed.engine.step(1.0)
    wait_idle(mgr)


def test_copies_happen_only_when_the_partitions_task_runs(every_5s: Any) -> None:
    fed, mgr, _ = every_5s
    cl = fed.clusters["c"]
    cl.create_topic("t", 1, 1, configs={"remote.storage.enable": "true", "segment.bytes": "1000"})
    p = cl.partition("t", 0)
    t0 = fed.engine.t
    copy_ticks: list[float] = []
    waiting: list[int] = []
    for k in range(31):
        store_batches(cl, p, batch(0, [b"c%02d" % k * 400]))  # 1,200 bytes: a segment rolls every tick
        before = not_local(mgr, cl, "t", 0)
        tick(fed, mgr)
        lg = mgr.log_of(cl, "t", 0)
        assert lg is not None
        if not_local(mgr, cl, "t", 0) > before:
            copy_ticks.append(fed.engine.t - t0)
        waiting.append(sum(s.state == LOCAL for s in lg.segments))
    first = math.ceil(5.0 * mgr.tasks.phase("c/t/0") - 1e-9)  # the first run: a seeded phase after creation
    assert copy_ticks == [first + 5.0 * k for k in range(len(copy_ticks))] and len(copy_ticks) >= 5, copy_ticks
    assert max(waiting) >= 4  # closed segments wait, local only, for the next run (main: copied every tick)
    assert mgr.stats["task_runs"] == len(copy_ticks)


def test_partitions_run_at_phases_of_their_own(tmp_path: Path) -> None:
    fed, mgr, _ = manager(tmp_path, {REMOTE_LOG_TASK: "10000"})
    try:
        cl = fed.clusters["c"]
        cl.create_topic("p8", 8, 1, configs={"remote.storage.enable": "true", "segment.bytes": "2000"})
        for p in cl.topics["p8"].partitions:
            fed.engine.f["base_rate"][p.slot] = 5000.0  # a segment rolls every tick or so
        t0 = fed.engine.t
        first_copy: dict[int, float] = {}
        for _ in range(12):
            tick(fed, mgr)
            for i in range(8):
                if i not in first_copy and not_local(mgr, cl, "p8", i):
                    first_copy[i] = fed.engine.t - t0
        tid = cl.topics["p8"].topic_id
        runs = [mgr.tasks.next_run(("c", tid, i)) for i in range(8)]
    finally:
        mgr.stop()
    # each partition's segments became remote only when its own task was first due, not when they rolled
    phases = [mgr.tasks.phase(f"c/p8/{i}") for i in range(8)]
    assert first_copy == {i: float(math.ceil(10.0 * ph - 1e-9)) for i, ph in enumerate(phases)}, (first_copy, phases)
    assert len(set(first_copy.values())) >= 4  # not all in the same instant (main: all at the first roll)
    assert len({round(r or 0.0, 6) for r in runs}) == 8
    # deterministic: the same seed gives the same phases, another seed others
    assert [TaskSchedule(fed.engine.seed).phase(f"c/p8/{i}") for i in range(8)] == phases
    assert [TaskSchedule(fed.engine.seed + 1).phase(f"c/p8/{i}") for i in range(8)] != phases


def test_a_leader_change_moves_the_task_to_the_new_leader(every_5s: Any) -> None:
    fed, mgr, md = every_5s
    cl = fed.clusters["c"]
    cl.create_topic("l", 1, 2, configs={"remote.storage.enable": "true", "segment.bytes": "2000"})
    p = cl.partition("l", 0)
    fed.engine.f["base_rate"][p.slot] = 3000.0
    key = ("c", cl.topics["l"].topic_id, 0)
    for _ in range(40):  # past the first run, to the tick after a later run: fresh segments wait
        tick(fed, mgr)
        nxt = mgr.tasks.next_run(key)
        if mgr.stats["task_runs"] >= 2 and nxt is not None and nxt - fed.engine.t > 2.5:
            break
    lg = mgr.log_of(cl, "l", 0)
    assert lg is not None and mgr.stats["task_runs"] >= 2
    for _ in range(2):
        tick(fed, mgr)
    waiting = [s.base for s in lg.segments if s.state == LOCAL]
    copied_before = {e.start_offset for g in md.groups for e in g[3] if e.kind == EventKind.COPY_STARTED}
    assert waiting and copied_before
    old_leader, old_epoch, reads = p.leader, p.leader_epoch, md.state_reads
    new_leader = next(r for r in p.replicas if r != old_leader)
    cl.brokers[new_leader].static_configs[REMOTE_LOG_TASK] = "7000"  # the new leader's own interval
    t_kill = fed.engine.t
    cl.set_broker_alive(old_leader, False)
    assert p.leader == new_leader and p.leader_epoch == old_epoch + 1
    tick(fed, mgr)
    # the new leader's task ran at once: it read Guardian's state (the highest copied offset) and copied the
    # segments that were waiting, under its epoch, none of them twice
    assert md.state_reads > reads
    assert all(s.state != LOCAL for s in lg.segments if s.base in waiting)
    started = [(e.start_offset, g[2]) for g in md.groups for e in g[3] if e.kind == EventKind.COPY_STARTED]
    assert len({o for o, _ in started}) == len(started)
    assert {ep for o, ep in started if o in waiting} == {old_epoch + 1}
    assert not copied_before & set(waiting)
    # ... and runs on from there on the new leader's interval (7 s), not on the deposed leader's schedule
    assert mgr.tasks.next_run(key) == pytest.approx(t_kill + 7.0)


def test_the_copy_quota_spaces_copies_as_kafkas_quota_manager_does(tmp_path: Path) -> None:
    fed, mgr, _ = manager(tmp_path, {REMOTE_LOG_TASK: "5000"})
    try:
        cl = fed.clusters["c"]
        cl.create_topic("q", 1, 1, {0: [1]}, configs={"remote.storage.enable": "true", "segment.bytes": "10000"})
        cl.create_topic("u", 1, 1, {0: [2]}, configs={"remote.storage.enable": "true", "segment.bytes": "10000"})
        cl.alter_broker_configs("1", [(REMOTE_COPY_QUOTA, 0, "2000")])  # 2 kB/s: 20 kB per 10 s window
        for name in ("q", "u"):
            fed.engine.f["base_rate"][cl.partition(name, 0).slot] = 10_000.0  # a 10 kB segment a second
        copied: dict[str, list[tuple[float, float]]] = {"q": [], "u": []}
        seen: dict[str, set[int]] = {"q": set(), "u": set()}
        for _ in range(60):
            tick(fed, mgr)
            for name in ("q", "u"):
                lg = mgr.log_of(cl, name, 0)
                assert lg is not None
                for s in lg.segments:
                    if s.state != LOCAL and s.base not in seen[name]:
                        seen[name].add(s.base)
                        copied[name].append((fed.engine.t, s.size))
    finally:
        mgr.stop()
    total_q, total_u = sum(b for _, b in copied["q"]), sum(b for _, b in copied["u"])
    assert total_u > 400_000  # unlimited: every closed segment at each run
    assert 0 < total_q < 0.3 * total_u  # the quota holds broker 1 back
    for t, _ in copied["q"]:  # in any 11 s: at most the 10 s budget (20 kB) plus the segment that crossed it
        assert sum(b for u, b in copied["q"] if t - 11.0 < u <= t) <= 20_000 + 10_500
    assert mgr.stats["copy_quota_waits"] > 0


def test_schedule_and_quota_rules() -> None:
    sch: TaskSchedule[str] = TaskSchedule(7)
    for i in range(100_000):
        sch.start(f"p{i}", 10.0 + i)
    assert [k for k, _ in sch.due(12.0)] == ["p0", "p1", "p2"]  # only the due ones are touched
    sch.again("p0", 10.0, 30.0, 12.0)
    sch.start("p1", 12.5)  # a new leader: the old task's entries never run
    sch.cancel("p2")
    assert sch.next_run("p0") == 40.0 and sch.next_run("p2") is None
    assert [k for k, _ in sch.due(13.0)] == ["p1", "p3"]  # earliest first
    sch.again("p3", 13.0, 0.25, 14.0)  # an interval shorter than the tick: once per tick
    assert sch.next_run("p3") == pytest.approx(14.25)
    q = CopyQuota()
    assert q.start_time(0.0, math.inf) == 0.0
    for _ in range(5):  # 5 x 4 kB at 2 kB/s: the 10 s window's budget (20 kB) is reached, not exceeded
        assert q.start_time(0.0, 2000.0) == 0.0
        q.record(0.0, 4000.0)
    assert q.start_time(0.0, 2000.0) == 0.0  # 20 kB / 10 s = the quota: not above it
    q.record(0.0, 4000.0)
    assert q.start_time(1.0, 2000.0) == pytest.approx(11.0)  # above: wait until those copies leave the samples
    big = CopyQuota()
    big.record(0.0, 1e9)  # a segment larger than the budget goes whole; the next waits for it to expire
    assert big.start_time(0.5, 2000.0) == pytest.approx(11.0)
