"""The in-memory Kafka cluster behind the port: Kafka's semantics, and each injected fault."""

from __future__ import annotations

import pytest

from domain.throttles import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE
from kafkaio.errors import AdminError, TopicExists
from kafkaio.fake import ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, FakeKafkaCluster

GB = 1_000_000_000


def cluster(**kw: object) -> FakeKafkaCluster:
    fake = FakeKafkaCluster({b: ("/d1", "/d2") for b in (1, 2, 3, 4)}, **kw)  # type: ignore[arg-type]
    fake.add_topic("t", [[1, 2], [2, 3]], size_bytes=GB)
    return fake


def test_a_reassignment_is_in_flight_with_its_new_replica_until_the_copy_completes() -> None:
    fake = cluster()
    assert fake.alter_reassignments({("t", 0): [3, 2]}) == {("t", 0): None}
    live = fake.live()
    ra = live.reassignments[("t", 0)]
    assert (ra.adding, ra.removing) == ((3,), (1,))
    assert live.partitions[("t", 0)].replicas == (3, 2, 1) and live.partitions[("t", 0)].isr == (1, 2)
    assert fake.log_dirs([3])[("t", 0, 3)][0].size == 0
    fake.copy(GB // 2)
    assert fake.log_dirs([3])[("t", 0, 3)][0].size == GB // 2 and ("t", 0) in fake.live().reassignments
    fake.copy(GB)
    after = fake.live()
    assert after.reassignments == {} and after.partitions[("t", 0)].replicas == (3, 2)
    assert after.partitions[("t", 0)].leader == 3  # the old leader left: the new assignment's first in-sync replica
    assert ("t", 0, 1) not in fake.log_dirs([1, 2, 3])
    assert fake.submissions[("t", 0)] == 1


def test_moves_complete_after_n_reads_or_when_told() -> None:
    fake = cluster(complete_after=2)
    fake.alter_reassignments({("t", 0): [3, 2]})
    assert ("t", 0) in fake.live().reassignments
    assert fake.live().reassignments == {}
    told = cluster()
    told.alter_reassignments({("t", 0): [3, 2], ("t", 1): [2, 4]})
    told.finish([("t", 1)])
    assert set(told.live().reassignments) == {("t", 0)}


def test_cancel_restores_the_original_replicas_and_invalid_targets_are_refused() -> None:
    fake = cluster()
    assert fake.alter_reassignments({("t", 0): None}) == {("t", 0): "NoReassignmentInProgressError"}
    fake.alter_reassignments({("t", 0): [3, 2]})
    assert fake.alter_reassignments({("t", 0): None}) == {("t", 0): None}
    live = fake.live()
    assert live.reassignments == {} and live.partitions[("t", 0)].replicas == (1, 2)
    assert ("t", 0, 3) not in fake.log_dirs([3])
    fake.kill(4)
    # as KRaft: an unknown broker is refused, a registered but dead one is accepted (the move waits for it)
    assert fake.alter_reassignments({("t", 0): [9, 2], ("t", 1): [2, 2], ("u", 0): [1]}) == {
        ("t", 0): "InvalidReplicationAssignmentError", ("t", 1): "InvalidReplicationAssignmentError",
        ("u", 0): "UnknownTopicOrPartitionError"}
    assert fake.alter_reassignments({("t", 0): [4, 2]}) == {("t", 0): None}
    assert fake.live().reassignments[("t", 0)].adding == (4,)


def test_a_dir_named_before_the_replica_exists_is_where_the_reassignment_creates_it() -> None:
    fake = cluster()
    assert fake.alter_log_dirs({("t", 0, 3): "/d2"}) == {("t", 0, 3): "ReplicaNotAvailableError"}
    fake.alter_reassignments({("t", 0): [3, 2]})
    assert fake.log_dirs([3])[("t", 0, 3)][0].log_dir == "/d2"
    assert fake.alter_log_dirs({("t", 0, 2): "/nope"}) == {("t", 0, 2): "LogDirNotFoundError"}


def test_an_intra_broker_move_is_a_future_replica_and_its_current_dir_cancels_it() -> None:
    fake = cluster()
    fake.alter_log_dirs({("t", 0, 1): "/d2"})
    entries = fake.log_dirs([1])[("t", 0, 1)]
    assert [(e.log_dir, e.is_future) for e in entries] == [("/d1", False), ("/d2", True)]
    fake.alter_log_dirs({("t", 0, 1): "/d1"})
    assert len(fake.log_dirs([1])[("t", 0, 1)]) == 1
    fake.alter_log_dirs({("t", 0, 1): "/d2"})
    fake.finish()
    assert [(e.log_dir, e.is_future) for e in fake.log_dirs([1])[("t", 0, 1)]] == [("/d2", False)]
    assert fake.disk_capacity([1])[(1, "/d2")][1] == fake.disk_capacity([1])[(1, "/d1")][1] - GB


def test_configs_and_throttled_replica_lists() -> None:
    fake = cluster()
    fake.set_broker_configs({1: {LEADER_RATE: "100", FOLLOWER_RATE: "200"}})
    fake.set_broker_configs({1: {LEADER_RATE: None}})
    assert fake.broker_configs([1, 2]) == {1: {FOLLOWER_RATE: "200"}, 2: {}}
    fake.alter_topic_lists("t", FOLLOWER_REPLICAS, append={"0:3", "1:4"})
    fake.alter_topic_lists("t", FOLLOWER_REPLICAS, append={"0:3"}, subtract={"1:4"})
    assert fake.topic_configs(["t"]) == {"t": {FOLLOWER_REPLICAS: "0:3"}}
    fake.alter_topic_lists("t", FOLLOWER_REPLICAS, subtract={"0:3"})
    assert fake.topic_configs(["t"]) == {"t": {}}


def test_preferred_elections() -> None:
    fake = cluster()
    fake.alter_reassignments({("t", 0): [2, 1]})
    fake.finish()
    assert fake.elect_preferred([("t", 0)]) == {("t", 0): 0} and fake.live().partitions[("t", 0)].leader == 2
    assert fake.elect_preferred([("t", 0)]) == {("t", 0): ELECTION_NOT_NEEDED}
    fake.kill(2)
    assert fake.live().partitions[("t", 0)].leader == 1
    fake.revive(2)
    assert fake.elect_preferred([("t", 0)]) == {("t", 0): 0} and fake.live().partitions[("t", 0)].leader == 2


def test_a_dead_preferred_leader_is_not_elected() -> None:
    fake = cluster()
    fake.kill(1)
    assert fake.live().partitions[("t", 0)].leader == 2
    assert fake.elect_preferred([("t", 0)]) == {("t", 0): PREFERRED_LEADER_NOT_AVAILABLE}


def test_stale_metadata_returns_the_previous_read() -> None:
    fake = cluster()
    before = fake.live()
    fake.alter_reassignments({("t", 0): [3, 2]})
    fake.stale_reads = 1
    assert fake.live() is before
    assert ("t", 0) in fake.live().reassignments


def test_an_injected_failure_raises_and_changes_nothing() -> None:
    fake = cluster()
    fake.fail_next["set_broker_configs"] = 1
    with pytest.raises(AdminError, match="injected"):
        fake.set_broker_configs({1: {LEADER_RATE: "100"}})
    assert fake.broker_configs([1]) == {1: {}}
    fake.set_broker_configs({1: {LEADER_RATE: "100"}})
    assert fake.broker_configs([1]) == {1: {LEADER_RATE: "100"}}


def test_a_partial_submission_refuses_only_the_chosen_partitions() -> None:
    fake = cluster()
    fake.refuse[("t", 1)] = "ReassignmentInProgressError"
    assert fake.alter_reassignments({("t", 0): [3, 2], ("t", 1): [2, 4]}) == {
        ("t", 0): None, ("t", 1): "ReassignmentInProgressError"}
    assert set(fake.live().reassignments) == {("t", 0)}


def test_a_broker_that_times_out_fails_every_call_that_needs_it() -> None:
    fake = cluster()
    fake.timeouts.add(3)
    assert fake.live().alive == {1, 2, 3, 4}  # metadata comes from the controller
    for call in (lambda: fake.log_dirs([2, 3]), lambda: fake.broker_configs([3]), lambda: fake.disk_capacity([3]),
                 lambda: fake.set_broker_configs({3: {LEADER_RATE: "1"}}),
                 lambda: fake.alter_log_dirs({("t", 1, 3): "/d2"})):
        with pytest.raises(AdminError, match="did not answer"):
            call()
    assert fake.log_dirs([1, 2])  # the others still answer


def test_create_topic_takes_the_assignment_exactly_and_refuses_what_kafka_refuses() -> None:
    fake = FakeKafkaCluster({b: ("/d1",) for b in (1, 2, 3)})
    fake.create_topic("new", {0: [2, 3], 1: [3, 1]}, {"retention.ms": "1000"})
    live = fake.live()
    assert [live.partitions[("new", p)].replicas for p in (0, 1)] == [(2, 3), (3, 1)]
    assert live.partitions[("new", 0)].leader == 2 and fake.topic_cfg["new"] == {"retention.ms": "1000"}
    with pytest.raises(TopicExists):
        fake.create_topic("new", {0: [1]})
    for bad in ({1: [1]}, {0: [1, 9]}, {0: [1, 1]}):
        with pytest.raises(AdminError):
            fake.create_topic("bad", bad)
    assert "bad" not in fake.live().topic_sizes
