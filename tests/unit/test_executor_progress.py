"""Execution progress as the service's executor reports it: rate and ETA measured from the observer's
rounds (the executor collects nothing itself), for reassignments and KIP-113 log-dir copies alike."""

from __future__ import annotations

import itertools
from dataclasses import replace

from collectors.builder import Collected
from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.observed import ObservedCluster
from controlplane.executor.reconcile import Executor, ExecutorConfig, PassReport
from controlplane.state.store import LocalStateStore
from domain import PartitionMove, Plan
from kafkaio.fake import FakeKafkaCluster
from tests.unit.test_observation import collected

MB = 1_000_000
GB = 1_000_000_000


class Rounds:
    """The observer's round board as the executor sees it: one round per ``tick`` (clock + 1 s)."""

    def __init__(self) -> None:
        self.clock = 100.0
        self.round: Collected = collected(clock=self.clock)

    def tick(self) -> None:
        self.clock += 1.0
        self.round = replace(self.round, sample_clock=self.clock)


def service_executor(move: PartitionMove) -> tuple[FakeKafkaCluster, Executor, Rounds]:
    fake = FakeKafkaCluster({b: ("/d1", "/d2") for b in (1, 2, 3, 4)})
    fake.add_topic("t", [[1, 2]], size_bytes=GB)
    rounds = Rounds()
    view = ObservedCluster(lambda: rounds.round)  # the service's wiring: the latest published round
    executor = Executor(LocalStateStore(), fake, ExecutorConfig(
        "c1", throttle=MigrationRatePolicy(mode="fixed", fixed_rate=500e6)), scraper=view, endpoints=view)
    executor.ensure_cluster(fake.bootstrap_servers)
    executor.start(Plan("c1", "rebalance", (move,)))
    return fake, executor, rounds


def copy_passes(fake: FakeKafkaCluster, executor: Executor, rounds: Rounds, n: int) -> list[PassReport]:
    """``n`` passes, each after 100 MB more were copied and the observer published a round."""
    reports = [executor.run_pass()]  # submits
    for _ in range(n):
        fake.copy(100 * MB)
        rounds.tick()
        reports.append(executor.run_pass())
    return reports


def assert_rate_and_moving_eta(reports: list[PassReport]) -> None:
    running = reports[2:]  # two samples give the first rate
    assert all(r.status == "running" for r in running), running
    assert all(r.rate_bytes_per_s > 0 for r in running), [r.rate_bytes_per_s for r in running]
    assert all(abs(r.rate_bytes_per_s - 100 * MB) < 1 for r in running)  # 100 MB per 1 s of sample clock
    etas = [r.eta_s or 0.0 for r in running]
    assert all(e > 0 for e in etas), etas
    assert all(a > b for a, b in itertools.pairwise(etas)), etas  # the ETA keeps moving
    assert all(r.bytes_done <= r.bytes_total for r in reports)


def test_a_reassignment_driven_from_the_observers_rounds_reports_its_rate_and_eta() -> None:
    fake, executor, rounds = service_executor(PartitionMove("t", 0, (3, 2), (None, None)))
    assert_rate_and_moving_eta(copy_passes(fake, executor, rounds, 5))


def test_a_log_dir_copy_driven_from_the_observers_rounds_reports_its_rate_and_eta() -> None:
    fake, executor, rounds = service_executor(PartitionMove("t", 0, (1, 2), ("/d2", None)))
    reports = copy_passes(fake, executor, rounds, 5)
    ex = executor.execution(reports[0].execution_id or 0) or {}
    assert {t["action"] for t in ex["tasks"].values()} == {"move_log_dir"}
    assert_rate_and_moving_eta(reports)


def test_passes_between_rounds_keep_the_last_rate() -> None:
    fake, executor, rounds = service_executor(PartitionMove("t", 0, (3, 2), (None, None)))
    copy_passes(fake, executor, rounds, 3)
    fake.copy(50 * MB)
    held = executor.run_pass()  # no new round: no fresh clock, the rate is held and the ETA still moves
    assert abs(held.rate_bytes_per_s - 100 * MB) < 1 and held.eta_s is not None


def test_a_reassignment_finishing_with_a_log_dir_copy_keeps_a_rate_and_a_moving_eta() -> None:
    """The new replica landed in another dir than the plan's (the broker chose): after the reassignment's
    copy, a KIP-113 copy follows in the same task; its bytes count on top of the reassignment's."""
    fake, executor, rounds = service_executor(PartitionMove("t", 0, (3, 2), ("/d1", None)))
    reports = copy_passes(fake, executor, rounds, 1)
    assert ("t", 0) in fake.live().reassignments
    fake.topics["t"][0].dirs[3] = "/d2"  # created on another dir than the plan's
    reports += copy_passes(fake, executor, rounds, 16)[1:]
    eid = reports[0].execution_id or 0
    ex = executor.execution(eid) or {}
    assert ex["tasks"]["t:0"]["state"] == "IN_PROGRESS"
    assert ("t", 0) not in fake.live().reassignments and 3 in fake.topics["t"][0].futures  # the dir copy runs
    dir_phase = [r for r in reports if r.bytes_total > GB]
    assert len(dir_phase) >= 5, reports
    assert all(r.bytes_total == 2 * GB and r.rate_bytes_per_s > 0 for r in dir_phase), dir_phase
    # the pass the KIP-113 copy is sent copies nothing (the rate dips once); from then on the ETA falls
    etas = [r.eta_s or 0.0 for r in dir_phase[1:]]
    assert all(e > 0 for e in etas) and all(a > b for a, b in itertools.pairwise(etas)), etas
    done = [r.bytes_done for r in reports]
    assert done == sorted(done)  # progress never goes back
