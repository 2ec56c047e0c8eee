"""kafkasim's leader-epoch history and OffsetForLeaderEpoch (API 23), against Kafka's semantics.

The history cases restate the behaviour Kafka's ``LeaderEpochFileCache`` documents and tests (assign,
truncateFromStart, endOffsetFor); the handler cases follow ``ReplicaManager.lastOffsetForLeaderEpoch`` and
``Partition.lastOffsetForLeaderEpoch`` (hosting, offline dirs, current-epoch fencing, leader only).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from kafkasim.broker.protocol import Handler
from kafkasim.broker.wire import REGISTRY, ReqContext, api_versions_list, encode_response
from kafkasim.cluster import model as m
from kafkasim.cluster.epochs import assign, end_offset_for, epoch_at, truncate_from_start
from kafkasim.cluster.model import Cluster
from kafkasim.cluster.records import split_batches, store_batches, synthetic_batch
from kafkasim.physics.engine import Engine
from tests.support.records import record_batch

UNDEF = (-1, -1)


def history(*entries: tuple[int, int]) -> list[tuple[int, int]]:
    h: list[tuple[int, int]] = []
    for epoch, start in entries:
        assign(h, epoch, start)
    return h


# ---------------------------------------------------------------- the history (LeaderEpochFileCache)

def test_an_assigned_epoch_keeps_its_first_start_offset() -> None:
    h = history((2, 9))
    assert not assign(h, 2, 10)
    assert h == [(2, 9)]


def test_an_epoch_in_which_nothing_was_written_is_replaced_by_the_next() -> None:
    assert history((2, 9), (3, 9)) == [(3, 9)]
    assert history((0, 0), (1, 0)) == [(1, 0)]


def test_offsets_and_epochs_stay_monotonic_the_last_assignment_wins() -> None:
    assert history((2, 6), (3, 5)) == [(3, 5)]
    h = history((1, 5), (2, 6), (1, 7))  # an older epoch at a later offset: later epochs are dropped
    assert h == [(1, 7)]
    assert end_offset_for(h, 1, 8) == (1, 8)
    assert end_offset_for(h, 2, 8) == UNDEF
    h = history((5, 11), (6, 12), (7, 13), (7, 12))  # the latest epoch from an earlier offset
    assert h == [(5, 11), (7, 12)]
    assert end_offset_for(h, 5, 0) == (5, 12) and end_offset_for(h, 6, 0) == (5, 12)


def test_negative_entries_are_refused() -> None:
    with pytest.raises(ValueError):
        assign([], -1, 0)
    with pytest.raises(ValueError):
        assign([], 0, -1)


def test_end_offset_of_each_epoch_as_leaders_change() -> None:
    h = history((0, 0))
    assert end_offset_for(h, 0, 0) == (0, 0)
    assign(h, 1, 0)
    assert end_offset_for(h, 1, 5) == (1, 5)  # the latest epoch ends at the log end offset
    assert end_offset_for(h, 0, 5) == (0, 0)  # epoch 0 is gone: the requested epoch, start of the next
    assign(h, 2, 5)
    assert end_offset_for(h, 2, 10) == (2, 10)
    assert end_offset_for(h, 1, 10) == (1, 5)
    assert end_offset_for(h, 0, 10) == (0, 0)


def test_an_epoch_not_in_the_history_ends_where_the_next_known_epoch_starts() -> None:
    h = history((0, 10), (2, 13), (4, 17))
    assert end_offset_for(h, 1, 0) == (0, 13)
    assert end_offset_for(h, 2, 0) == (2, 17)
    assert end_offset_for(h, 3, 0) == (2, 17)
    assert end_offset_for(h, 4, 30) == (4, 30)
    assert end_offset_for(history((5, 11), (6, 12), (7, 13)), 4, 0) == (4, 11)  # before the first epoch


def test_undefined_requests_and_unknown_epochs() -> None:
    assert end_offset_for([], 0, 0) == UNDEF
    assert end_offset_for([], -1, 73) == UNDEF
    assert end_offset_for(history((2, 6)), -1, 73) == UNDEF
    assert end_offset_for(history((2, 100)), 3, 100) == UNDEF  # newer than any epoch known


def test_truncating_from_the_log_start() -> None:
    h = history((2, 6), (3, 8), (4, 11))
    assert truncate_from_start(h, 1) == h
    assert truncate_from_start(h, 6) == h
    assert truncate_from_start(h, 8) == [(3, 8), (4, 11)]
    assert truncate_from_start(h, 9) == [(3, 9), (4, 11)]
    assert truncate_from_start(h, 11) == [(4, 11)]
    assert truncate_from_start(h, 15) == [(4, 15)]
    assert truncate_from_start(history((0, 0), (1, 7), (2, 10)), 5) == [(0, 5), (1, 7), (2, 10)]
    assert truncate_from_start([], 5) == []
    assert h == [(2, 6), (3, 8), (4, 11)]  # pure


# ---------------------------------------------------------------- the cluster keeps the history

def cluster() -> Cluster:
    e = Engine(seed=0)
    c = Cluster("c")
    e.add_cluster(c)
    for i in (1, 2, 3):
        e.add_broker(c, i, "idc-a", f"r{i}", "shared", 8e9,
                     [{"path": f"/d{k}", "kind": "ssd", "capacity_bytes": 1e12, "max_bytes_per_s": 5e8,
                       "base_latency_ms": 0.5} for k in (1, 2)])
    e.rebuild()
    c.create_topic("t", -1, -1, {0: [1, 2, 3]})
    e.rebuild()
    return c


def set_offsets(c: Cluster, start: int, end: int) -> None:
    p = c.partition("t", 0)
    c.engine.f["lso"][p.slot] = start
    c.engine.f["leo"][p.slot] = end


def test_every_leader_change_starts_an_epoch_at_the_log_end_offset() -> None:
    c = cluster()
    p = c.partition("t", 0)
    assert (p.leader, p.leader_epoch, p.epochs) == (1, 0, [(0, 0)])
    set_offsets(c, 0, 100)
    c.set_broker_alive(1, False)  # broker 2 takes over at offset 100
    assert (p.leader, p.leader_epoch, p.epochs) == (2, 1, [(0, 0), (1, 100)])
    set_offsets(c, 0, 250)
    c.set_broker_alive(1, True)
    p.isr = [1, 2, 3]
    assert c.elect_preferred(p) == m.NONE  # back to broker 1 at 250
    assert p.epochs == [(0, 0), (1, 100), (2, 250)]
    c.set_broker_alive(1, False)
    c.set_broker_alive(2, False)
    c.set_broker_alive(3, False)  # 2 then 3 led (epochs 3, 4) and wrote nothing; then no leader (epoch 5)
    assert (p.leader, p.leader_epoch) == (-1, 5)
    assert p.epochs == [(0, 0), (1, 100), (4, 250)]
    c.set_broker_alive(3, True)
    assert (p.leader, p.leader_epoch) == (3, 6)
    assert p.epochs == [(0, 0), (1, 100), (6, 250)]


# ---------------------------------------------------------------- the handler (ReplicaManager semantics)

Answer = list[tuple[int, int, int]]


def ask(c: Cluster, broker: int, *parts: tuple[int, int, int], topic: str = "t", v: int = 4) -> Answer:
    """OffsetForLeaderEpoch to ``broker`` for ``(partition, current_leader_epoch, leader_epoch)``s; returns
    ``(error, leader_epoch, end_offset)`` per partition, after a wire round trip of the response."""
    Q = REGISTRY[23]["request"]
    req = Q(version=v, replica_id=-1, topics=[Q.OffsetForLeaderTopic(topic=topic, partitions=[
        Q.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=pi, current_leader_epoch=cur, leader_epoch=le)
        for pi, cur, le in parts])])
    resp = Handler().handle(ReqContext("x", "127.0.0.1", c, c.brokers[broker]), 23, v, req)
    frame = encode_response(resp, v, 7)
    back: Any = REGISTRY[23]["response"].decode(frame, version=v, header=True, framed=True)
    (t,) = back.topics
    assert t.topic == topic
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in t.partitions]


def test_the_leader_answers_where_each_epoch_ended() -> None:
    c = cluster()
    set_offsets(c, 0, 100)
    c.set_broker_alive(1, False)
    set_offsets(c, 0, 180)
    assert ask(c, 2, (0, 1, 0), (0, 1, 1), (0, -1, 1), (0, -1, -1), (0, -1, 9)) == [
        (0, 0, 100), (0, 1, 180), (0, 1, 180), (0, -1, -1), (0, -1, -1)]
    for v in (2, 3):
        assert ask(c, 2, (0, 1, 0), v=v) == [(0, 0, 100)]


def test_retention_moves_the_first_epoch_up_to_the_log_start() -> None:
    c = cluster()
    set_offsets(c, 0, 100)
    c.set_broker_alive(1, False)
    c.set_broker_alive(1, True)
    set_offsets(c, 150, 300)
    assert ask(c, 2, (0, 1, 0)) == [(0, 0, 150)]  # epoch 0 is gone from the log: (requested, start of epoch 1)
    set_offsets(c, 50, 300)
    assert ask(c, 2, (0, 1, 0)) == [(0, 0, 100)]


def test_fencing_hosting_and_leadership_errors() -> None:
    c = cluster()
    c.create_topic("solo", -1, -1, {0: [3]})
    c.engine.rebuild()
    set_offsets(c, 0, 100)
    c.set_broker_alive(1, False)  # leader 2, epoch 1
    assert ask(c, 2, (0, 0, 0)) == [(m.FENCED_LEADER_EPOCH, -1, -1)]
    assert ask(c, 2, (0, 2, 0)) == [(m.UNKNOWN_LEADER_EPOCH, -1, -1)]
    assert ask(c, 3, (0, 1, 0)) == [(m.NOT_LEADER_OR_FOLLOWER, -1, -1)]  # a follower
    assert ask(c, 3, (0, 0, 0)) == [(m.FENCED_LEADER_EPOCH, -1, -1)]  # the epoch is checked first
    assert ask(c, 2, (0, -1, 0), topic="solo") == [(m.NOT_LEADER_OR_FOLLOWER, -1, -1)]  # not hosted here
    assert ask(c, 2, (1, -1, 0)) == [(m.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    assert ask(c, 2, (0, -1, 0), topic="nope") == [(m.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    (disk,) = [d for d in c.brokers[3].disks if d.gidx == c.partition("t", 0).log_dirs[3]]
    c.set_log_dir_offline(3, disk.path)
    assert ask(c, 3, (0, -1, 0)) == [(m.KAFKA_STORAGE_ERROR, -1, -1)]


def test_offset_for_leader_epoch_is_advertised_with_kafka_python_versions() -> None:
    assert (23, 2, 4) in api_versions_list()


# ---------------------------------------------------------------- batches carry their epoch

def test_epoch_at_an_offset() -> None:
    h = history((0, 0), (2, 100), (5, 250))
    assert epoch_at(h, 0) == (0, 100) and epoch_at(h, 99) == (0, 100)
    assert epoch_at(h, 100) == (2, 250) and epoch_at(h, 300) == (5, None)
    assert epoch_at(history((3, 10)), 5) == (-1, 10)


def test_batches_are_stamped_with_the_epoch_they_were_written_in() -> None:
    c = cluster()
    p = c.partition("t", 0)
    set_offsets(c, 0, 100)
    c.set_broker_alive(1, False)  # epoch 1 from offset 100
    c.engine.f["msg_size"][p.slot] = 100.0
    first = synthetic_batch(c, p, 90, 120, 1 << 20)
    (batch,) = split_batches(first)
    assert struct.unpack_from(">i", first, 12)[0] == 0  # epoch 0
    assert batch[1] == 10  # offsets 90..99: the batch stops where epoch 1 starts
    later = synthetic_batch(c, p, 100, 120, 1 << 20)
    assert struct.unpack_from(">i", later, 12)[0] == 1
    base, _, _ = store_batches(c, p, record_batch([b"x", b"y"]))
    stored = p.batches[-1][3]
    assert struct.unpack_from(">q", stored, 0)[0] == base and struct.unpack_from(">i", stored, 12)[0] == 1
    assert split_batches(stored)  # still a valid batch (the epoch is outside the CRC)


def test_list_offsets_reports_the_epoch_of_the_offset_found() -> None:
    c = cluster()
    set_offsets(c, 0, 100)
    c.set_broker_alive(1, False)
    set_offsets(c, 0, 150)
    Q = REGISTRY[2]["request"]
    T = Q.ListOffsetsTopic
    req = Q(version=7, replica_id=-1, isolation_level=0, topics=[T(name="t", partitions=[
        T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts) for ts in (-2, -1, -3)])])
    resp = Handler().handle(ReqContext("x", "127.0.0.1", c, c.brokers[2]), 2, 7, req)
    got = [(p.offset, p.leader_epoch) for p in resp.topics[0].partitions]
    assert got == [(0, 0), (150, 1), (149, 1)]
