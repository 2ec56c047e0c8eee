"""Hard goals: the constraints every planner must hold. They veto a move; they never rank one.

These mirror :func:`domain.check_plan` (the shared checker that every plan passes in
the end) but work on plain broker-id tuples so a planner can test thousands of candidates cheaply; the
placement and rack counts are the checker's own (:mod:`domain.spread`), over maps built once per snapshot:

* replication factor kept and brokers distinct;
* new replicas only on alive brokers of the topic's resource pool;
* the topic's IDC placement policy (topic override, else cluster default) not missed by more than before;
* no rack gaining a second replica of a partition unless the pool's racks force it (the checker's rule);
* capacity headroom on every disk that gains bytes (checked by the workspace, which tracks usage).

Each check is O(RF), with early exits for the usual cases (every old broker in the pool, no rack shared
after the move: no count of the old set is needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from domain import Broker, ClusterSnapshot
from domain.spread import placement_deficit, rack_duplicates, rack_spread_broken, racks_by_idc

_NONE: frozenset[int] = frozenset()


class Topology:
    """Broker facts the hard goals need, precomputed once per snapshot. O(brokers)."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.broker: dict[int, Broker] = {b.id: b for b in snapshot.brokers}
        self.idc: dict[int, str] = {b.id: b.idc for b in snapshot.brokers}
        self.rack: dict[int, str] = {b.id: b.rack for b in snapshot.brokers}
        self.pool: dict[int, str] = {b.id: b.pool for b in snapshot.brokers}
        self.alive: dict[int, bool] = {b.id: b.is_alive for b in snapshot.brokers}
        self.place: dict[int, tuple[str, str]] = {b.id: (b.idc, b.rack) for b in snapshot.brokers}
        self.open_pool: dict[int, str] = {b.id: b.pool for b in snapshot.brokers if b.is_alive}  # may take replicas
        members: dict[str, set[int]] = {}
        for b in snapshot.brokers:
            members.setdefault(b.pool, set()).add(b.id)
        self.members: dict[str, frozenset[int]] = {pool: frozenset(m) for pool, m in members.items()}  # any state
        alive_places: dict[str, list[tuple[str, str]]] = {}
        for b in snapshot.brokers:
            if b.is_alive:
                alive_places.setdefault(b.pool, []).append((b.idc, b.rack))
        self.racks_in: dict[str, dict[str, set[str]]] = {  # pool -> IDC -> the racks of its alive brokers
            pool: racks_by_idc(places) for pool, places in alive_places.items()}

    def replica_set_ok(self, old: Sequence[int], new: Sequence[int], pool: str,
                       placement: Mapping[str, int] | None) -> bool:
        """True when replacing replica set ``old`` by ``new`` holds every broker-level hard goal.

        New brokers must exist, be alive and belong to ``pool``; brokers are distinct; RF is kept;
        placement and rack spread get no worse (as :func:`check_plan` defines "worse"). Its compiled port is
        ``planners.shed_jit._set_ok``: change both.
        """
        new_set = set(new)
        if len(old) != len(new) or len(new_set) != len(new):
            return False
        old_set = set(old)
        open_pool = self.open_pool
        for b in new:
            if b not in old_set and open_pool.get(b) != pool:  # unknown, not alive or of another pool
                return False
        if new_set == old_set:  # the same brokers: pool isolation only if the order changed, spread unchanged
            return tuple(new) == tuple(old) or self._pool_ok(old, new, pool)
        # A new broker is of ``pool`` (above), so only old ones can be outside it.
        if not old_set <= self.members.get(pool, _NONE) and not self._pool_ok(old, new, pool):
            return False
        place = self.place
        if placement:
            after = placement_deficit(new, place, placement)
            if after and after >= placement_deficit(old, place, placement):
                return False
        if not rack_duplicates(new, place):  # no replica shares a rack: never a new shared one (the usual case)
            return True
        return not rack_spread_broken(old, new, place, self.racks_in.get(pool, {}), placement)

    def _pool_ok(self, old: Sequence[int], new: Sequence[int], pool: str) -> bool:
        """Pool isolation of a changed replica list: no replica outside ``pool``, or fewer than before."""
        pool_of = self.pool
        outside_after = 0
        for b in new:
            if pool_of.get(b) != pool:
                outside_after += 1
        return not (outside_after and outside_after >= sum(1 for b in old if pool_of.get(b) != pool))


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence (mean of the middle two for even lengths)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
