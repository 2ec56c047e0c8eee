"""Contract (wire backends): OffsetForLeaderEpoch (API 23), which every Kafka broker since 0.11 answers and
kafka-python's consumer sends after a leader change to validate its position (issue 38): the end offset of the
requested leader epoch from the partition's epoch history, fencing by the current leader epoch, and
NOT_LEADER_OR_FOLLOWER from a follower. The fake has no wire: kafkasim and Kafka only."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.consumer import OffsetForLeaderEpochRequest
from kafka.protocol.metadata import MetadataRequest

from tests.contract.backends import Backend, unique

NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 6, 74, 75
Topic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
Part = Topic.OffsetForLeaderPartition


def leader_and_epoch(backend: Backend, topic: str) -> tuple[int, int]:
    """Partition 0's leader and leader epoch from Metadata (v7+ carries the epoch)."""
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False,
                          include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
                          min_version=7)
    resp = backend.connection.send(req)
    (t,) = [x for x in resp.topics if x.name == topic]
    (p,) = [x for x in t.partitions if x.partition_index == 0]
    return int(p.leader_id), int(p.leader_epoch)


def ask(backend: Backend, node: int, topic: str, epochs: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """``(current leader epoch, epoch asked)`` per entry of partition 0 -> ``(error, leader epoch, end offset)``."""
    req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[Topic(topic=topic, partitions=[
        Part(partition=0, current_leader_epoch=cur, leader_epoch=e) for cur, e in epochs])])
    resp: Any = backend.connection.send(req, node_id=node)
    (t,) = resp.topics
    return [(int(p.error_code), int(p.leader_epoch), int(p.end_offset)) for p in t.partitions]


def test_offset_for_leader_epoch(wire_backend: Backend, request: pytest.FixtureRequest) -> None:
    backend = wire_backend
    t = unique("ofle")
    backend.create_topic(t, {0: [1, 2]})
    try:
        backend.produce(t, 0, 64 * 1024)  # 4 records: offsets 0..3
        leader0, e0 = leader_and_epoch(backend, t)
        assert leader0 == 1
        assert ask(backend, 1, t, [(-1, e0)]) == [(0, e0, 4)]  # the current epoch ends at the log end
        # a leader change: reorder, elect; the new leader starts a new epoch at offset 4
        assert backend.port.alter_reassignments({(t, 0): [2, 1]}) == {(t, 0): None}
        backend.wait("the reorder", lambda: backend.port.live().partitions[(t, 0)].replicas == (2, 1))
        assert backend.port.elect_preferred([(t, 0)]) == {(t, 0): 0}
        _, e1 = backend.wait("broker 2 leading", lambda: (le := leader_and_epoch(backend, t))[0] == 2 and le)
        assert e1 > e0
        backend.produce(t, 0, 32 * 1024)  # offsets 4, 5
        got = backend.wait("the new leader's answer", lambda: (a := ask(backend, 2, t, [(-1, e0), (-1, e1),
                                                                                          (e1, e1 + 10)]))
                           and a[1] == (0, e1, 6) and a)
        # an old epoch ends where the next one starts; an epoch above the latest is unknown (-1, -1)
        assert got == [(0, e0, 4), (0, e1, 6), (0, -1, -1)]
        # fencing by the caller's idea of the current epoch
        assert [r[0] for r in ask(backend, 2, t, [(e1 + 1, e1), (e0, e0)])] == [UNKNOWN_LEADER_EPOCH,
                                                                                 FENCED_LEADER_EPOCH]
        # a consumer's request must reach the leader
        assert ask(backend, 1, t, [(-1, e1)])[0][0] == NOT_LEADER_OR_FOLLOWER
    finally:
        backend.delete_topic(t)
