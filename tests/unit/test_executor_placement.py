"""New replicas' disks (:mod:`controlplane.executor.placement`): a full best disk makes the task wait rather
than write to a disk that would become the execution's bound."""

from __future__ import annotations

from collections.abc import Mapping

from collectors.disk_rates import DiskRate
from controlplane.executor.copy_meter import CopyMeter
from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.placement import Placement, pending_work
from domain.execution import Task
from kafkaio.types import LiveCluster, PartitionMeta, ReplicaDir

GB = 1_000_000_000
DISKS = {(b, d): DiskRate(util=0.4, bytes_per_s=80e6, max_bytes_per_s=200e6)
         for b in (1, 2, 3) for d in ("/d1", "/d2")}


class FakeAdmin:
    def disk_capacity(self, brokers: object) -> Mapping[tuple[int, str], tuple[int, int]]:
        return {d: (1000 * GB, 900 * GB) for d in DISKS}


def task(key: str, src: int, src_dir: str, dst: int, size: int, state: str = "PENDING") -> Task:
    topic, part = key.split(":")
    return Task.from_json({"key": key, "topic": topic, "partition": int(part), "action": "reassign", "state": state,
                           "batch": 0, "after": [], "source_replicas": [src], "source_log_dirs": [src_dir],
                           "target_replicas": [dst], "target_log_dirs": [None], "size_bytes": size, "leader": None})


def placement(tasks: list[Task]) -> Placement:
    """A placement whose backlog counts ``tasks`` (each reads its source disk)."""
    p = Placement(FakeAdmin(), MigrationRatePolicy(mode="adaptive", util_threshold=0.75), CopyMeter(),  # type: ignore[arg-type]
                  lambda: {})
    p.begin_pass(DISKS)
    live = LiveCluster(frozenset({1, 2, 3}), {t.tp: PartitionMeta(t.topic, t.partition, t.source_replicas,
                                                                   t.source_replicas[0], t.source_replicas)
                                              for t in tasks}, {}, {})
    dirs = {(t.topic, t.partition, t.source_replicas[0]):
            [ReplicaDir(str(t.source_log_dirs[0]), t.size_bytes, 0, False)] for t in tasks}
    p.measure_backlog({t.key: t for t in tasks}, live, dirs)
    return p


def test_a_full_best_disk_makes_the_task_wait_instead_of_loading_the_critical_disk() -> None:
    # broker 2's /d2 must still read 20 GB (the execution's bound); its /d1 nothing. A copy to broker 2 belongs
    # on /d1: with /d1 at the per-disk cap it waits, it is not written to /d2 (which would lengthen the run)
    heavy = [task(f"h:{i}", 2, "/d2", 3, 5 * GB) for i in range(4)]
    new = task("n:0", 1, "/d1", 2, 2 * GB)
    p = placement([*heavy, new])
    assert p.place(new, lambda d: d == (2, "/d1")) is None
    assert p.place(new, lambda d: False) == {(2, "/d1")}


def test_a_full_best_disk_lets_the_task_use_a_quiet_neighbour() -> None:
    # broker 3's /d1 is busier than its /d2 but neither is near the bound (broker 2's /d2): when /d2 is full,
    # /d1 takes the copy at once
    heavy = [task(f"h:{i}", 2, "/d2", 1, 5 * GB) for i in range(4)]
    some = task("s:0", 3, "/d1", 1, 1 * GB)
    new = task("n:0", 1, "/d1", 3, 1 * GB)
    p = placement([*heavy, some, new])
    assert p.place(new, lambda d: d == (3, "/d2")) == {(3, "/d1")}


def test_pending_new_replicas_left_to_the_executor_count_per_broker_and_fill_its_quietest_disks() -> None:
    # two pending 6 GB copies to broker 2, whose dirs the executor places; broker 2's /d2 must still read 20 GB.
    # The placement would send both to /d1 (it finishes first), so the throttle's criticality counts them there,
    # not half on the busy /d2 (spread evenly, /d1 looked quieter than it would be)
    heavy = [task(f"h:{i}", 2, "/d2", 3, 5 * GB) for i in range(4)]
    new = [task(f"n:{i}", 1, "/d1", 2, 6 * GB) for i in range(2)]
    tasks = [*heavy, *new]
    live = LiveCluster(frozenset({1, 2, 3}), {t.tp: PartitionMeta(t.topic, t.partition, t.source_replicas,
                                                                   t.source_replicas[0], t.source_replicas)
                                              for t in tasks}, {}, {})
    dirs = {(t.topic, t.partition, t.source_replicas[0]):
            [ReplicaDir(str(t.source_log_dirs[0]), t.size_bytes, 0, False)] for t in tasks}
    pending = pending_work({t.key: t for t in tasks}, live, dirs)
    assert pending.brokers == {3: 20 * GB, 2: 12 * GB}
    assert pending.disks == {(2, "/d2"): 20 * GB, (1, "/d1"): 12 * GB}
    budgets = {d: 60e6 for d in DISKS}
    work = pending.expected({}, budgets)
    assert work[(2, "/d1")] == 12 * GB and (2, "/d2") in work and work[(2, "/d2")] == 20 * GB
    assert work[(3, "/d1")] == work[(3, "/d2")] == 10 * GB  # equal disks share a broker's bytes equally
