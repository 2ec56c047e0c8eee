"""Hard goals: the constraints every planner must hold. They veto a move; they never rank one.

These mirror :func:`domain.check_plan` (the shared checker that every plan passes in
the end) but work on plain broker-id tuples so a planner can test thousands of candidates cheaply:

* replication factor kept and brokers distinct;
* new replicas only on alive brokers of the topic's resource pool;
* the topic's IDC placement policy (topic override, else cluster default) not missed by more than before;
* no more replicas sharing a rack within an IDC than before, unless unavoidable;
* capacity headroom on every disk that gains bytes (checked by the workspace, which tracks usage).

Each check is O(RF).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from domain import Broker, ClusterSnapshot


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
        self.racks_in: dict[tuple[str, str], set[str]] = {}
        for b in snapshot.brokers:
            if b.is_alive:
                self.racks_in.setdefault((b.pool, b.idc), set()).add(b.rack)

    def placement_deficit(self, replicas: Sequence[int], placement: Mapping[str, int] | None) -> int:
        """Replicas missing from the IDCs the policy requires (0: the policy is met)."""
        if not placement:
            return 0
        idc = self.idc
        counts: dict[str, int] = {}
        for b in replicas:
            key = idc[b]
            counts[key] = counts.get(key, 0) + 1
        return sum(max(0, need - counts.get(name, 0)) for name, need in placement.items())

    def rack_duplicates(self, replicas: Sequence[int]) -> int:
        """Replicas that share a rack with another replica of the same IDC."""
        place = self.place
        return len(replicas) - len({place[b] for b in replicas})

    def unavoidable_rack_duplicates(self, replicas: Sequence[int], pool: str) -> int:
        """Rack duplicates forced by an IDC having fewer alive racks (in ``pool``) than replicas."""
        by_idc = Counter(self.idc[b] for b in replicas)
        return sum(max(0, n - len(self.racks_in.get((pool, idc), ()))) for idc, n in by_idc.items())

    def replica_set_ok(self, old: Sequence[int], new: Sequence[int], pool: str,
                       placement: Mapping[str, int] | None) -> bool:
        """True when replacing replica set ``old`` by ``new`` holds every broker-level hard goal.

        New brokers must exist, be alive and belong to ``pool``; brokers are distinct; RF is kept;
        placement and rack spread get no worse (as :func:`check_plan` defines "worse").
        """
        new_set = set(new)
        if len(old) != len(new) or len(new_set) != len(new):
            return False
        old_set = set(old)
        open_pool = self.open_pool
        for b in new:
            if b not in old_set and open_pool.get(b) != pool:  # unknown, not alive or of another pool
                return False
        if tuple(new) != tuple(old):
            pool_of = self.pool
            outside_after = 0
            for b in new:
                if pool_of.get(b) != pool:
                    outside_after += 1
            if outside_after and outside_after >= sum(1 for b in old if pool_of.get(b) != pool):
                return False
        if new_set == old_set:
            return True
        if placement:
            after = self.placement_deficit(new, placement)
            if after and after >= self.placement_deficit(old, placement):
                return False
        dups_after = self.rack_duplicates(new)
        return not (dups_after > self.rack_duplicates(old)
                    and dups_after > self.unavoidable_rack_duplicates(new, pool))


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence (mean of the middle two for even lengths)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
