"""Contract: a dead broker — it leaves the alive set and every ISR, leadership moves to an in-sync replica,
a preferred election naming it answers PREFERRED_LEADER_NOT_AVAILABLE (80), a reassignment onto it is
accepted and waits for it (KRaft), requests that need it fail; once back it rejoins and can lead again.

One test (one kill -9 and one restart of a real broker, ~20-30 s on the lab) so the session pays for it once."""

from __future__ import annotations

import time

import pytest

from kafkaio.errors import AdminError
from kafkaio.types import Reassignment
from tests.contract.backends import Backend, unique


def test_a_broker_dies_and_comes_back(backend: Backend) -> None:
    t = unique("dead")
    backend.create_topic(t, {0: [3, 1], 1: [1, 2]})
    port, dead = backend.port, 3
    try:
        backend.kill(dead)
        live = backend.wait("broker 3 out of the ISR", lambda: (lv := port.live()) and dead not in lv.partitions[
            (t, 0)].isr and lv)
        assert live.alive == frozenset({1, 2}) and dead not in live.racks
        p0 = live.partitions[(t, 0)]
        assert (p0.replicas, p0.leader, p0.isr) == ((3, 1), 1, (1,))
        assert port.elect_preferred([(t, 0), (t, 1)]) == {(t, 0): 80, (t, 1): 84}
        # KRaft accepts any *registered* broker as a target, dead or not: the move waits in flight for it
        # (only an unknown broker id is INVALID_REPLICA_ASSIGNMENT, test_reassignments.test_refusals)
        assert port.alter_reassignments({(t, 1): [1, dead]}) == {(t, 1): None}
        assert backend.wait("the move onto the dead broker in flight", lambda: port.live().reassignments.get(
            (t, 1))) == Reassignment((1, 3, 2), (3,), (2,))
        started = time.monotonic()
        with pytest.raises(AdminError):
            port.log_dirs([dead], [t])
        assert time.monotonic() - started < 20
        assert set(port.log_dirs([1, 2], [t])) == {(t, 0, 1), (t, 1, 1), (t, 1, 2)}
    finally:
        backend.start(dead)
    p0 = backend.wait("broker 3 back in sync", lambda: (m := port.live().partitions[(t, 0)]) and set(m.isr) == {1, 3}
                      and m, timeout_s=60)
    assert p0.leader == 1  # it does not take its leadership back by itself
    backend.proceed([(t, 1)])
    p1 = backend.wait("the move onto broker 3 to complete", lambda: (lv := port.live()) and (t, 1) not in
                      lv.reassignments and lv.partitions[(t, 1)], timeout_s=60)
    assert p1.replicas == (1, 3)
    assert port.elect_preferred([(t, 0)]) == {(t, 0): 0}
    backend.wait("broker 3 leading again", lambda: port.live().partitions[(t, 0)].leader == dead)
    backend.delete_topic(t)
