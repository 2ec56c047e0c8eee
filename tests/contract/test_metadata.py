"""Contract: metadata (brokers, racks, assignments, leaders, ISR), CreateTopics with an explicit assignment, and
DescribeLogDirs (where each replica lives, its size, each dir's capacity) — as Kafka answers them."""

from __future__ import annotations

import pytest

from kafkaio.errors import AdminError, TopicExists
from tests.contract.backends import Backend, unique


def test_brokers_and_racks(backend: Backend) -> None:
    live = backend.port.live()
    assert live.alive == frozenset(backend.brokers)
    # broker.rack of every broker is in the metadata every client receives (one rack per broker here)
    assert sorted(live.racks) == backend.brokers
    assert all(live.racks.values()) and len(set(live.racks.values())) == len(backend.brokers)


def test_create_topic_with_an_assignment(backend: Backend) -> None:
    t = unique("meta")
    backend.create_topic(t, {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    try:
        live = backend.port.live()
        assert live.topic_sizes[t] == 3
        for (p, replicas) in {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}.items():
            meta = live.partitions[(t, p)]
            # assignment order kept; the first replica (the preferred one) leads; every replica in sync
            assert (meta.replicas, meta.leader, set(meta.isr)) == (replicas, replicas[0], set(replicas))
        assert not any(tp[0] == t for tp in live.reassignments)
        with pytest.raises(TopicExists):
            backend.port.create_topic(t, {0: [1, 2]})
    finally:
        backend.delete_topic(t)


@pytest.mark.parametrize("assignment", [{0: [1, 99]}, {1: [1, 2]}, {0: [1, 1]}, {0: [1, 2], 1: [2, 3, 1]}],
                         ids=["unknown-broker", "partitions-not-from-0", "duplicate-replica", "mixed-rf"])
def test_create_topic_refused(backend: Backend, assignment: dict[int, list[int]]) -> None:
    t = unique("badcreate")
    with pytest.raises(AdminError) as err:
        backend.port.create_topic(t, assignment)
    assert not isinstance(err.value, TopicExists)
    # Kafka answers INVALID_REPLICA_ASSIGNMENT (39) and creates nothing
    assert "InvalidReplicationAssignment" in str(err.value)
    assert t not in backend.port.live().topic_sizes


def test_describe_log_dirs(backend: Backend) -> None:
    t = unique("dirs")
    backend.create_topic(t, {0: [1, 2], 1: [2, 3]})
    try:
        backend.produce(t, 0, 256 * 1024)
        dirs = backend.wait("replicas of partition 0 to hold the records",
                            lambda: (d := backend.port.log_dirs(backend.brokers, [t]))
                            and all(d[(t, 0, b)][0].size >= 256 * 1024 for b in (1, 2)) and d)
        # exactly the replicas of the topic asked for, each in one of its broker's dirs, none a future one
        assert set(dirs) == {(t, 0, 1), (t, 0, 2), (t, 1, 2), (t, 1, 3)}
        for (_, _, b), entries in dirs.items():
            assert len(entries) == 1
            assert entries[0].log_dir in backend.log_dirs[b] and not entries[0].is_future
            assert entries[0].offset_lag == 0
        assert all(dirs[(t, 1, b)][0].size == 0 for b in (2, 3))
        assert backend.port.log_dirs([], [t]) == {}
        assert set(backend.port.log_dirs([3], [t])) == {(t, 1, 3)}
    finally:
        backend.delete_topic(t)


def test_disk_capacity(backend: Backend) -> None:
    cap = backend.port.disk_capacity(backend.brokers)
    # KIP-827: total and usable bytes of every log dir of every broker asked
    assert set(cap) == {(b, d) for b in backend.brokers for d in backend.log_dirs[b]}
    assert all(0 < usable <= total for total, usable in cap.values())
    assert set(backend.port.disk_capacity([2])) == {(2, d) for d in backend.log_dirs[2]}
