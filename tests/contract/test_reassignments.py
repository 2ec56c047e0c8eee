"""Contract: KIP-455 reassignments — refusals and their error names, a move in flight (throttled), its cancel
and its completion, and moves that add no replica (a reorder, a shrink), which Kafka completes at once.

Kafka lists reassignments from the controller but answers metadata from a broker's cache, which follows the
controller a moment later: a move just listed (or just ended) can still show the old replica set in the
metadata, so the checks wait for the metadata too (kafkasim answers both from one state).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from domain.throttles import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS
from kafkaio.types import Reassignment
from tests.contract.backends import Backend, unique

SLOW = "10000"
"""A KIP-73 rate (bytes/s) that keeps a few MB in flight for minutes."""


@pytest.fixture
def topic(backend: Backend) -> Iterator[str]:
    t = unique("ra")
    backend.create_topic(t, {0: [1, 2], 1: [2, 3]})
    yield t
    backend.port.set_broker_configs({b: {LEADER_RATE: None, FOLLOWER_RATE: None} for b in backend.brokers})
    backend.delete_topic(t)


def test_refusals(backend: Backend, topic: str) -> None:
    t = topic
    got = backend.port.alter_reassignments({(t, 0): [1, 99], (t, 1): [3, 3], (t, 7): [1, 2],
                                            (unique("nosuch"), 0): [1, 2]})
    assert got[(t, 0)] == "InvalidReplicationAssignmentError"  # 39: broker 99 is not registered
    assert got[(t, 1)] == "InvalidReplicationAssignmentError"  # 39: a broker twice
    assert got[(t, 7)] == "UnknownTopicOrPartitionError"  # 3
    assert [v for k, v in got.items() if k[0] != t] == ["UnknownTopicOrPartitionError"]
    # cancelling what is not moving: NO_REASSIGNMENT_IN_PROGRESS (85)
    assert backend.port.alter_reassignments({(t, 0): None}) == {(t, 0): "NoReassignmentInProgressError"}
    # the current replicas as target: accepted, nothing starts
    assert backend.port.alter_reassignments({(t, 0): [1, 2]}) == {(t, 0): None}
    live = backend.port.live()
    assert live.partitions[(t, 0)].replicas == (1, 2) and (t, 0) not in live.reassignments
    assert backend.port.alter_reassignments({}) == {}


def test_moves_that_add_no_replica_complete_at_once(backend: Backend) -> None:
    t = unique("reorder")
    backend.create_topic(t, {0: [1, 2, 3], 1: [1, 2, 3]})
    try:
        assert backend.port.alter_reassignments({(t, 0): [2, 1, 3], (t, 1): [1, 2]}) == {(t, 0): None, (t, 1): None}
        # every target replica is already in sync: Kafka switches the replica set in the same controller event
        live = backend.wait("the reorder and the shrink to complete",
                            lambda: (lv := backend.port.live()) and not any(tp[0] == t for tp in lv.reassignments)
                            and lv.partitions[(t, 1)].replicas == (1, 2) and lv, timeout_s=10)
        assert live.partitions[(t, 0)].replicas == (2, 1, 3)
        assert live.partitions[(t, 0)].leader == 1  # a reorder moves no leadership by itself
        assert set(live.partitions[(t, 1)].isr) == {1, 2}
    finally:
        backend.delete_topic(t)


def _throttle_everything(backend: Backend, t: str) -> None:
    backend.port.set_broker_configs({b: {LEADER_RATE: SLOW, FOLLOWER_RATE: SLOW} for b in backend.brokers})
    backend.port.alter_topic_lists(t, LEADER_REPLICAS, append=["0:1", "0:2"])
    backend.port.alter_topic_lists(t, FOLLOWER_REPLICAS, append=["0:3"])


def test_in_flight_cancel_and_complete(backend: Backend, topic: str) -> None:
    t, tp = topic, (topic, 0)
    backend.produce(t, 0, 4 << 20)
    _throttle_everything(backend, t)
    backend.wait("throttle rates in force", lambda: all(
        v.get(FOLLOWER_RATE) == SLOW for v in backend.port.broker_configs(backend.brokers).values()))

    assert backend.port.alter_reassignments({tp: [1, 3]}) == {tp: None}
    # the move is listed by the controller at once; a broker's metadata shows the new replica set a moment later
    live = backend.wait("the move in flight", lambda: (lv := backend.port.live()) and tp in lv.reassignments
                        and set(lv.partitions[tp].replicas) == {1, 2, 3} and lv)
    # KIP-455: replicas = target + removing while in flight; adding / removing listed
    assert live.reassignments[tp] == Reassignment((1, 3, 2), (3,), (2,))
    assert live.partitions[tp].replicas == (1, 3, 2)
    assert live.partitions[tp].leader == 1 and 3 not in live.partitions[tp].isr
    dirs = backend.wait("the adding replica on broker 3", lambda: backend.port.log_dirs([3], [t]).get((t, 0, 3)))
    assert dirs[0].log_dir in backend.log_dirs[3] and not dirs[0].is_future
    assert dirs[0].size < 4 << 20  # throttled: not all copied yet
    # the same target again: the move goes on (accepted, still in flight)
    assert backend.port.alter_reassignments({tp: [1, 3]}) == {tp: None}
    assert tp in backend.port.live().reassignments

    # cancel (null target): back to the original replicas, nothing in flight, the new replica removed
    assert backend.port.alter_reassignments({tp: None}) == {tp: None}
    assert tp not in backend.port.live().reassignments
    live = backend.wait("the cancel in the metadata", lambda: (lv := backend.port.live())
                        and len(lv.partitions[tp].replicas) == 2 and lv)
    assert live.partitions[tp].replicas == (1, 2) and set(live.partitions[tp].isr) == {1, 2}
    backend.wait("the cancelled replica deleted", lambda: (t, 0, 3) not in backend.port.log_dirs([3], [t]))

    # again, then unthrottled: it completes on its own
    assert backend.port.alter_reassignments({tp: [1, 3]}) == {tp: None}
    assert tp in backend.port.live().reassignments
    backend.port.set_broker_configs({b: {LEADER_RATE: None, FOLLOWER_RATE: None} for b in backend.brokers})
    backend.proceed([tp])
    live = backend.wait("the move to complete", lambda: (lv := backend.port.live()) and tp not in lv.reassignments
                        and len(lv.partitions[tp].replicas) == 2 and lv, timeout_s=60)
    assert live.partitions[tp].replicas == (1, 3) and set(live.partitions[tp].isr) == {1, 3}
    assert live.partitions[tp].leader == 1
    backend.wait("the removed replica deleted", lambda: (t, 0, 2) not in backend.port.log_dirs([2], [t]))
    assert backend.port.log_dirs([3], [t])[(t, 0, 3)][0].size >= 4 << 20


def test_a_move_can_be_redirected(backend: Backend, topic: str) -> None:
    t, tp = topic, (topic, 0)
    backend.produce(t, 0, 2 << 20)
    _throttle_everything(backend, t)
    backend.wait("throttle rates in force", lambda: all(
        v.get(FOLLOWER_RATE) == SLOW for v in backend.port.broker_configs(backend.brokers).values()))
    assert backend.port.alter_reassignments({tp: [1, 3]}) == {tp: None}
    backend.wait("the move in flight", lambda: tp in backend.port.live().reassignments)
    # a new target while in flight replaces the old one; the original replicas stay the reference
    assert backend.port.alter_reassignments({tp: [3, 2]}) == {tp: None}
    ra = backend.wait("the new target in flight", lambda: (r := backend.port.live().reassignments.get(tp))
                      and r.adding == (3,) and r)
    assert ra == Reassignment((3, 2, 1), (3,), (1,))
    # the original replicas (all in sync) as target: nothing to copy, so the move ends at once (a cancel)
    assert backend.port.alter_reassignments({tp: [1, 2]}) == {tp: None}
    live = backend.wait("the move cancelled", lambda: (lv := backend.port.live()) and tp not in lv.reassignments
                        and lv.partitions[tp].replicas == (1, 2) and lv)
    assert set(live.partitions[tp].isr) == {1, 2}
