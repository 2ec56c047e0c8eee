"""Contract: KIP-460 preferred-leader elections and their error codes (0 elected, 84 ELECTION_NOT_NEEDED,
3 UNKNOWN_TOPIC_OR_PARTITION; 80 PREFERRED_LEADER_NOT_AVAILABLE is in :mod:`test_dead_broker`)."""

from __future__ import annotations

from tests.contract.backends import Backend, unique


def test_preferred_election(backend: Backend) -> None:
    t = unique("elect")
    backend.create_topic(t, {0: [1, 2, 3], 1: [2, 3, 1]})
    try:
        assert backend.port.elect_preferred([(t, 0), (t, 1)]) == {(t, 0): 84, (t, 1): 84}
        assert backend.port.elect_preferred([(t, 5), (unique("nosuch"), 0)]).values() is not None
        unknown = backend.port.elect_preferred([(t, 5)])
        assert unknown == {(t, 5): 3}
        assert backend.port.elect_preferred([]) == {}
        # leader balancing = reorder the replicas, then elect the new first replica
        assert backend.port.alter_reassignments({(t, 0): [3, 1, 2]}) == {(t, 0): None}
        backend.wait("the reorder", lambda: backend.port.live().partitions[(t, 0)].replicas == (3, 1, 2))
        assert backend.port.live().partitions[(t, 0)].leader == 1
        assert backend.port.elect_preferred([(t, 0), (t, 1)]) == {(t, 0): 0, (t, 1): 84}
        meta = backend.wait("the new leader", lambda: (m := backend.port.live().partitions[(t, 0)]) and m.leader == 3
                            and m)
        assert set(meta.isr) == {1, 2, 3}
        assert backend.port.elect_preferred([(t, 0)]) == {(t, 0): 84}
    finally:
        backend.delete_topic(t)
