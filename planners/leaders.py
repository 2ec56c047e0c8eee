"""Goal: leader balance — leader bytes-in and leader count per broker, within each resource pool.

Only preferred-leader order and elections are used (no data moves): a leadership change is a
reassignment entry with the same replicas and log dirs, reordered so the new leader comes first, plus
a :class:`LeaderChange` (preferred election). The new leader must be an alive, in-sync replica of the
topic's pool.

Per pool, a broker's score is max(leader bytes-in / pool mean, leader count / pool mean); the broker
with the highest score hands one leadership to an in-sync replica's broker — the hand-over that leaves
the pair's maximum score lowest — as long as that lowers its score and raises neither the pool's
maximum leader bytes-in nor its maximum leader count (never worse on either measure).

A change that would move disk reads onto a disk and lift it above the pool's peak utilisation is
skipped, so disk balance never gets worse either. Deterministic.
O(changes x leaderships of the busiest broker x RF).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from domain import ClusterSnapshot, Partition, PartitionId, Plan
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
            if ws.index.topic_by_name[p.topic].pool == pool and all(ws.topo.pool.get(b) == pool for b in replicas):
                self.led[leader].append(p.id)  # movable: every replica in the pool (a reorder breaks nothing)
        disks = ws.group(pool)
        self.disk_peak = float(ws.util_arr[disks].max()) if len(disks) else 0.0


def balance_leaders(ws: Workspace, pool: str, options: LeaderOptions, budget: list[int]) -> None:
    """Balance leader bytes-in and count over ``pool``'s alive brokers, editing ``ws``.

    A broker's score is max(leader bytes-in / mean, leader count / mean). The broker with the highest
    score hands one leadership to an in-sync replica's broker — the hand-over leaving the lower
    maximum score of the pair — when that lowers its score and raises neither the pool's maximum
    leader bytes-in nor its maximum leader count. ``budget[0]`` counts down the changes allowed.
    """
    state = _Pool(ws, pool)
    n = len(state.brokers)
    mean_count = sum(state.count.values()) / n if n else 0.0
    if n < 2 or mean_count <= 0:
        return
    mean_bytes = sum(state.bytes.values()) / n
    inv_b = 1.0 / mean_bytes if mean_bytes > 0 else 0.0
    inv_c = 1.0 / mean_count
    goal_b = options.tolerance * mean_bytes
    goal_c = max(math.ceil(mean_count), options.tolerance * mean_count)

    def score(bytes_: float, count: int) -> float:
        return max(bytes_ * inv_b, count * inv_c)

    heap = [(-score(state.bytes[b], state.count[b]), b) for b in state.brokers]
    heapq.heapify(heap)
    while heap and budget[0] > 0:
        neg, src = heapq.heappop(heap)
        current = score(state.bytes[src], state.count[src])
        if -neg != current:
            continue  # stale; a fresh entry is queued
        if state.bytes[src] <= goal_b and state.count[src] <= goal_c:
            continue
        change = _best_change(ws, state, src, current, score)
        if change is None:
            continue  # nothing helps this broker; leave it out
        p, dst = change
        _hand_over(ws, state, p, src, dst)
        budget[0] -= 1
        for b in (src, dst):
            heapq.heappush(heap, (-score(state.bytes[b], state.count[b]), b))


def _best_change(ws: Workspace, state: _Pool, src: int, current: float,
                 score: Callable[[float, int], float]) -> tuple[Partition, int] | None:
    """The hand-over from ``src`` leaving the lowest maximum score of the pair (ties: partition id, broker)."""
    cap_bytes = max(state.bytes.values())
    cap_count = max(state.count.values())
    best: tuple[float, tuple[str, int], int] | None = None
    best_p: Partition | None = None
    src_bytes, src_count = state.bytes[src], state.count[src]
    for pid in state.led[src]:
        p = ws.partition(pid)
        replicas, _ = ws.replicas(p)
        x = p.bytes_in_per_s
        after_src = score(src_bytes - x, src_count - 1)
        for dst in replicas:
            if dst == src or dst not in state.bytes or dst not in p.isr:
                continue
            dst_bytes, dst_count = state.bytes[dst] + x, state.count[dst] + 1
            if dst_bytes > cap_bytes or dst_count > cap_count:
                continue
            pair = max(after_src, score(dst_bytes, dst_count))
            if pair >= current - 1e-12 or (best is not None and (pair, p.id, dst) >= best):
                continue
            if _disk_ok(ws, p, dst, state.disk_peak):
                best, best_p = (pair, p.id, dst), p
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
