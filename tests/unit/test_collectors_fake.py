"""The collectors against the in-memory cluster: the bulk reader's port (:class:`kafkaio.port.BulkReader`) and its
fake (:class:`kafkaio.fake_source.FakeBulkReader`) turn a collection round's edge cases into millisecond tests, as
``test_executor_reconcile_fake.py`` does for the executor — on the same fake, so what the executor writes the next
round reads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collectors.collector import ClusterCollector, CollectionError
from collectors.scraped import RoundResult
from domain.throttles import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE
from kafkaio.endpoints import endpoints_from_options
from kafkaio.errors import KafkaAuthError
from kafkaio.fake import FakeKafkaCluster
from kafkaio.fake_source import FakeBulkReader
from kafkaio.refresh import DetailsPlan
from kafkaio.types import KafkaState

BROKERS = range(1, 7)


class Clock:
    """A wall clock a test steps."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cluster() -> FakeKafkaCluster:
    c = FakeKafkaCluster({b: [f"/k{b}/a", f"/k{b}/b"] for b in BROKERS}, racks={b: f"r{b}" for b in BROKERS})
    c.add_topic("orders", [[1, 2], [2, 3], [3, 4], [4, 5], [5, 6], [6, 1]], size_bytes=1_000)
    c.add_topic("audit", [[1, 3], [2, 4]], size_bytes=500)
    return c


@pytest.fixture
def collector(cluster: FakeKafkaCluster) -> Iterator[ClusterCollector]:
    eps = endpoints_from_options("east", cluster.bootstrap_servers, [f"{b}=http://h{b}:9100/metrics" for b in BROKERS])
    col = ClusterCollector(eps, source=FakeBulkReader(cluster.view()), full_admin_every=3)
    col.scrape = RoundResult  # type: ignore[method-assign]  # no metrics endpoint: the admin side alone
    try:
        yield col
    finally:
        col.close()


def test_a_partial_read_rereads_its_slice_and_what_changed_and_carries_the_rest(cluster: FakeKafkaCluster) -> None:
    clock = Clock()
    reader = FakeBulkReader(cluster.view(), clock=clock)
    first = reader.fetch()
    assert first.full and first.log_dirs_fresh == set(BROKERS) and first.details_age_s == 0.0
    assert first.replica_dir(3, "orders", 1) == "/k3/a"

    clock.now += 30
    second = reader.fetch(full=False, previous=first, refresh_brokers=[1], refresh_topics=["audit"])
    assert not second.full and second.log_dirs_fresh == {1}
    assert second.log_dirs[4] is first.log_dirs[4] and second.log_dirs_at[4] == first.log_dirs_at[4]
    assert second.details_age_s == 30.0
    assert reader.fetches[-1] == DetailsPlan([1], [1], ["audit"], False)

    # the executor moves orders-0 from brokers 1, 2 to 5, 2 and broker 3's replica of orders-1 to its other dir: the
    # next partial read lists every replica of the changed replica set (1, 2, 5) although none is in its slice
    cluster.alter_reassignments({("orders", 0): [5, 2]})
    cluster.alter_log_dirs({("orders", 1, 3): "/k3/b"})
    clock.now += 30
    third = reader.fetch(full=False, previous=second, refresh_brokers=[3])
    assert third.log_dirs_fresh == {1, 2, 3, 5}
    assert third.replica_dir(5, "orders", 0) == "/k5/b"  # the roomiest dir of broker 5
    assert third.futures == [(3, "/k3/b", ("orders", 1), 0)]
    assert third.reassignments[("orders", 0)].adding == (5,)


def test_a_broker_that_times_out_keeps_its_last_listing_and_is_named(cluster: FakeKafkaCluster) -> None:
    clock = Clock()
    reader = FakeBulkReader(cluster.view(), clock=clock)
    first = reader.fetch()
    cluster.timeouts.add(2)
    clock.now += 10
    second = reader.fetch(full=False, previous=first, refresh_brokers=[2, 3])
    assert "broker 2 did not answer" in second.errors["describe_log_dirs broker 2"]
    assert "describe_configs broker 2" in second.errors
    assert second.log_dirs[2] is first.log_dirs[2] and second.log_dirs_fresh == {3}
    assert second.details_age_s == 10.0
    cluster.timeouts.clear()
    third = reader.fetch(full=False, previous=second, refresh_brokers=[2])
    assert not any("broker 2" in k for k in third.errors) and 2 in third.log_dirs_fresh


def test_the_round_reads_the_throttles_and_quotas_the_executor_wrote(cluster: FakeKafkaCluster) -> None:
    executor = cluster.view()
    executor.set_broker_configs({1: {LEADER_RATE: "1000000", FOLLOWER_RATE: "2000000"}})
    executor.alter_topic_lists("orders", FOLLOWER_REPLICAS, append=["0:2"])
    executor.set_client_quotas("replayer", {"consumer_byte_rate": 5e6})
    reader = FakeBulkReader(cluster.view())
    reader.committed("billing", {("orders", 0): 42})
    state = reader.fetch()
    assert state.throttles() == {"brokers": {"1": {LEADER_RATE: "1000000", FOLLOWER_RATE: "2000000"}},
                                 "topics": {"orders": {FOLLOWER_REPLICAS: "0:2"}}}
    assert state.quotas == [{"entity": {"client-id": "replayer"}, "values": {"consumer_byte_rate": 5e6}}]
    assert state.group_offsets.as_dict() == {"billing": {("orders", 0): 42}} and state.group_offsets_fresh


def test_a_collection_round_on_the_fake_gives_the_clusters_topology_and_copies_in_flight(
        cluster: FakeKafkaCluster, collector: ClusterCollector) -> None:
    snap = collector.collect_once().snapshot
    assert [b.id for b in snap.brokers] == list(BROKERS) and all(b.rack == f"r{b.id}" for b in snap.brokers)
    orders = {p.partition: p for t in snap.topics if t.name == "orders" for p in t.partitions}
    assert orders[0].replicas == (1, 2) and orders[0].leader == 1
    used = {(b.id, d.path): d.used_bytes for b in snap.brokers for d in b.disks}
    assert used[(1, "/k1/a")] == 1_000 + 1_000 + 500  # orders-0, orders-5, audit-0

    cluster.alter_reassignments({("orders", 0): [3, 2]})
    moved = collector.collect_once()
    assert moved.adding == {("orders", 0): (3,)} and moved.removing == {("orders", 0): (1,)}
    cluster.finish()
    done = collector.collect_once()
    assert done.adding == {} and done.removing == {}
    assert {p.partition: p.replicas for t in done.snapshot.topics if t.name == "orders"
            for p in t.partitions}[0] == (3, 2)


def test_rounds_rotate_the_detail_reads_over_the_brokers(collector: ClusterCollector) -> None:
    reader = collector.source
    assert isinstance(reader, FakeBulkReader)
    for _ in range(4):
        collector.collect_once()
    first, *partial = reader.fetches
    assert first.full and not any(f.full for f in partial)
    assert {b for f in partial for b in f.dir_brokers} == set(BROKERS)
    assert all(len(f.dir_brokers) == 2 for f in partial)


def test_an_unreadable_cluster_fails_the_round_and_the_next_round_reads_it(
        cluster: FakeKafkaCluster, collector: ClusterCollector) -> None:
    reader = collector.source
    assert isinstance(reader, FakeBulkReader)
    reader.cluster.fail_next["fetch"] = 1
    with pytest.raises(CollectionError, match="injected failure") as failed:
        collector.collect_once()
    assert failed.value.auth is None
    assert collector.collect_once().snapshot.brokers


def test_a_refused_login_fails_the_round_naming_it() -> None:
    class Refused:
        bootstrap_servers = "k:9093"

        def fetch(self, full: bool = True, previous: KafkaState | None = None, refresh_brokers: object = (),
                  refresh_topics: object = ()) -> KafkaState:
            raise KafkaAuthError("cluster east: authentication failed with SASL_SSL/SCRAM-SHA-512 as user 'g'",
                                 "east", "SASL_SSL/SCRAM-SHA-512 as user 'g'")

        def close(self) -> None:
            pass

    col = ClusterCollector(endpoints_from_options("east", "k:9093", []), source=Refused())
    col.scrape = RoundResult  # type: ignore[method-assign]
    try:
        with pytest.raises(CollectionError) as failed:
            col.collect_once()
        assert failed.value.auth is not None and failed.value.auth.cluster == "east"
    finally:
        col.close()
