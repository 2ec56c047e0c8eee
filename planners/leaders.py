"""Goal: leader balance — leader bytes-in and leader count per broker, within each resource pool.

Only preferred-leader order and elections are used (no data moves): a leadership change is a
reassignment entry with the same replicas and log dirs, reordered so the new leader comes first, plus
a :class:`LeaderChange` (preferred election). The new leader must be an alive, in-sync replica of the
topic's pool.

Two greedy phases per pool, each never worse on what the other optimises:

1. bytes: take the broker with the most leader bytes-in; make the hand-over (one of its leaderships to
   an in-sync replica's broker) that leaves the pair's maximum lowest, when that lowers it (and no
   broker's leader count rises above the pool's current maximum);
2. count: take the broker with the most leaderships; hand its smallest leadership to the replica
   broker with the fewest, when that lowers the pair's maximum (and no broker's leader bytes-in rises
   above the pool's current maximum).

A change that would move disk reads onto a disk and lift it above the pool's peak utilisation is
skipped, so disk balance never gets worse either. Deterministic.
O(changes x leaderships of the busiest broker x RF).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field

from controlplane.domain import ClusterSnapshot, Partition, PartitionId, Plan
from planners.workspace import Bounds, Workspace

KIND = "leaders"


@dataclass(frozen=True, slots=True)
class LeaderOptions:
    """``tolerance``: stop when a pool's maximum is within this factor of its mean."""

    bounds: Bounds = field(default_factory=Bounds)
    tolerance: float = 1.05
    max_changes: int = 100_000


def plan_leaders(snapshot: ClusterSnapshot, options: LeaderOptions | None = None) -> Plan:
    """A leader-balancing plan for every pool of ``snapshot`` (checked by :func:`check_plan`)."""
    options = options or LeaderOptions()
    ws = Workspace(snapshot, options.bounds)
    budget = [options.max_changes]
    for pool in sorted({b.pool for b in snapshot.brokers}):
        balance_leaders(ws, pool, options, budget)
    return ws.to_plan(KIND)


class _Pool:
    """Leader bytes-in / count per alive broker of one pool and the partitions each leads."""

    def __init__(self, ws: Workspace, pool: str) -> None:
        self.brokers = sorted(b.id for b in ws.snapshot.brokers if b.pool == pool and b.is_alive)
        members = set(self.brokers)
        self.bytes: dict[int, float] = dict.fromkeys(self.brokers, 0.0)
        self.count: dict[int, int] = dict.fromkeys(self.brokers, 0)
        self.led: dict[int, list[PartitionId]] = defaultdict(list)
        for p in ws.index.partitions:  # the measure counts every leadership of a member broker
            leader = ws.leader(p)
            if leader not in members:
                continue
            self.bytes[leader] += p.bytes_in_per_s
            self.count[leader] += 1
            replicas, _ = ws.replicas(p)
            if ws.index.topic_by_name[p.topic].pool == pool and all(b in members for b in replicas):
                self.led[leader].append(p.id)  # movable: every replica alive in the pool
        disks = ws.group(pool)
        self.disk_peak = float(ws.util_arr[disks].max()) if len(disks) else 0.0


def balance_leaders(ws: Workspace, pool: str, options: LeaderOptions, budget: list[int]) -> None:
    """Run both phases on ``pool``, editing ``ws``; ``budget[0]`` counts down the changes allowed."""
    state = _Pool(ws, pool)
    n = len(state.brokers)
    if n < 2:
        return
    mean_bytes = sum(state.bytes.values()) / n
    mean_count = sum(state.count.values()) / n
    if mean_bytes > 0:
        _phase(ws, state, options, budget, by_bytes=True, goal=options.tolerance * mean_bytes)
    _phase(ws, state, options, budget, by_bytes=False,
           goal=max(math.ceil(mean_count), options.tolerance * mean_count))


def _phase(ws: Workspace, state: _Pool, options: LeaderOptions, budget: list[int], *, by_bytes: bool,
           goal: float) -> None:
    def key(b: int) -> float:
        return state.bytes[b] if by_bytes else float(state.count[b])

    heap = [(-key(b), b) for b in state.brokers]
    heapq.heapify(heap)
    while heap and budget[0] > 0:
        neg, src = heapq.heappop(heap)
        if -neg != key(src):
            continue
        if key(src) <= goal:
            break
        cap_bytes = max(state.bytes.values())
        cap_count = max(state.count.values())
        change = _best_change(ws, state, src, by_bytes, cap_bytes, cap_count)
        if change is None:
            continue  # nothing helps this broker; leave it out
        p, dst = change
        _hand_over(ws, state, p, src, dst)
        budget[0] -= 1
        heapq.heappush(heap, (-key(src), src))
        heapq.heappush(heap, (-key(dst), dst))


def _best_change(ws: Workspace, state: _Pool, src: int, by_bytes: bool, cap_bytes: float,
                 cap_count: int) -> tuple[Partition, int] | None:
    """The hand-over from ``src`` that leaves the lowest maximum of the pair (ties: partition id, broker)."""
    best: tuple[float, tuple[str, int], int] | None = None
    best_p: Partition | None = None
    for pid in state.led[src]:
        p = ws.partition(pid)
        replicas, _ = ws.replicas(p)
        x = p.bytes_in_per_s
        for dst in replicas:
            if dst == src or dst not in state.bytes or dst not in p.isr:
                continue
            if by_bytes:
                pair = max(state.bytes[src] - x, state.bytes[dst] + x)
                ok = pair < state.bytes[src] and state.count[dst] + 1 <= cap_count
            else:
                pair = float(max(state.count[src] - 1, state.count[dst] + 1))
                ok = pair < state.count[src] and state.bytes[dst] + x <= cap_bytes
                pair += x / (cap_bytes + 1.0)  # among equal counts, hand over the smallest partition
            if ok and _disk_ok(ws, p, dst, state.disk_peak):
                key = (pair, p.id, dst)
                if best is None or key < best:
                    best, best_p = key, p
    return (best_p, best[2]) if best is not None and best_p is not None else None


def _disk_ok(ws: Workspace, p: Partition, dst: int, peak: float) -> bool:
    if p.disk_read_bytes_per_s <= 0:
        return True
    replicas, dirs = ws.replicas(p)
    i = ws.pos[(dst, dirs[replicas.index(dst)])]
    return ws.util(i) + p.disk_read_bytes_per_s * float(ws.inv_max[i]) <= peak


def _hand_over(ws: Workspace, state: _Pool, p: Partition, src: int, dst: int) -> None:
    replicas, dirs = ws.replicas(p)
    k = replicas.index(dst)
    order = [k] + [j for j in range(len(replicas)) if j != k]
    ws.assign(p, tuple(replicas[j] for j in order), tuple(dirs[j] for j in order))
    ws.set_leader(p, dst)
    x = p.bytes_in_per_s
    state.bytes[src] -= x
    state.bytes[dst] += x
    state.count[src] -= 1
    state.count[dst] += 1
    state.led[src].remove(p.id)
    state.led[dst].append(p.id)


def leader_stats(snapshot: ClusterSnapshot, pool: str) -> tuple[float, int]:
    """(max leader bytes-in, max leader count) over the alive brokers of ``pool``; the goal's measure."""
    state = _Pool(Workspace(snapshot), pool)
    if not state.brokers:
        return 0.0, 0
    return max(state.bytes.values()), max(state.count.values())
