"""The next pass comes sooner than the interval when a copy is expected to end or the first rates are a scrape away."""

from __future__ import annotations

from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.reconcile import Executor, ExecutorConfig
from controlplane.state.store import LocalStateStore
from domain import PartitionMove, Plan
from kafkaio.fake import FakeKafkaCluster
from tests.support.follower_read_support import StaticDisks

MB = 1_000_000


def started(size_bytes: int, choice: str = "joint") -> tuple[FakeKafkaCluster, Executor]:
    """Brokers 1-3 (one disk each, util 0.3); ``t-0`` on [1, 2] moved to [3, 2]; adaptive throttle."""
    fake = FakeKafkaCluster({b: ("/d1",) for b in (1, 2, 3)})
    fake.add_topic("t", [[1, 2]], size_bytes=size_bytes)
    policy = MigrationRatePolicy(mode="adaptive", util_threshold=0.75, initial=20e6, choice=choice)
    executor = Executor(LocalStateStore(), fake, ExecutorConfig("c1", throttle=policy, interval_s=5.0,
                                                                min_interval_s=1.0),
                        scraper=StaticDisks([(b, "/d1") for b in (1, 2, 3)], {}))
    executor.ensure_cluster(fake.bootstrap_servers)
    executor.start(Plan("c1", "rebalance", (PartitionMove("t", 0, (3, 2), (None, None)),)))
    return fake, executor


def test_the_first_pass_asks_for_the_second_scrape_at_the_shortest_interval() -> None:
    _, executor = started(1000 * MB)
    first = executor.run_pass()
    assert first.submitted == 0 and first.next_pass_s == 1.0  # no rates yet: nothing starts, scrape again soon


def test_a_copy_expected_to_end_within_the_interval_brings_the_next_pass_forward() -> None:
    _, executor = started(400 * MB)
    executor.run_pass()
    second = executor.run_pass()
    assert second.submitted == 1
    end = executor.throttles.next_end_s
    assert end is not None and 1.0 < end < 5.0  # 400 MB at the planned rate
    assert second.next_pass_s == end


def test_the_wait_is_bounded_by_the_shortest_and_the_longest_interval() -> None:
    _, small = started(5 * MB)
    small.run_pass()
    assert small.run_pass().next_pass_s == 1.0  # ends in well under a second: never sooner than min_interval_s
    _, large = started(50_000 * MB)
    large.run_pass()
    assert large.run_pass().next_pass_s == 5.0  # ends long after the interval: the interval


def test_without_the_joint_choice_the_interval_stands() -> None:
    _, executor = started(120 * MB, choice="fair")
    executor.run_pass()
    assert executor.run_pass().next_pass_s is None


def test_a_pass_without_copies_does_not_reuse_an_earlier_expected_end() -> None:
    fake = FakeKafkaCluster({b: ("/d1",) for b in (1, 2, 3)})
    fake.add_topic("t", [[1, 2]], size_bytes=400 * MB)
    policy = MigrationRatePolicy(mode="adaptive", util_threshold=0.75, initial=20e6)
    executor = Executor(LocalStateStore(), fake, ExecutorConfig("c1", throttle=policy),
                        scraper=StaticDisks([(b, "/d1") for b in (1, 2, 3)], {}))
    executor.ensure_cluster(fake.bootstrap_servers)
    executor.start(Plan("c1", "leaders", (PartitionMove("t", 0, (2, 1), (None, None)),)))  # an election, no copy
    executor.run_pass()
    executor.throttles.next_end_s = 0.5  # what an earlier copy left behind
    report = executor.run_pass()
    assert not report.finished and report.next_pass_s is None
