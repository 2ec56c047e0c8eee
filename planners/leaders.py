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

Cost: O(changes x leaderships of the busiest broker x RF), each step one numpy pass over the busiest
broker's possible hand-overs (kept per broker, updated in place by each change).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

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
    """Leader bytes-in / count per alive broker of one pool (numpy, indexed in broker-id order) and, per
    broker, the hand-overs it could make: rows (partition, in-sync replica broker to lead, bytes-in)."""

    def __init__(self, ws: Workspace, pool: str) -> None:
        self.brokers = sorted(b.id for b in ws.snapshot.brokers if b.pool == pool and b.is_alive)
        self.idx = {b: k for k, b in enumerate(self.brokers)}
        n = len(self.brokers)
        self.bytes = np.zeros(n, dtype=np.float64)
        self.count = np.zeros(n, dtype=np.int64)
        self.pids: list[PartitionId] = []
        self.x: list[float] = []
        self.elig: list[tuple[int, ...]] = []  # broker indices that may lead each movable partition
        rows: list[list[int]] = [[] for _ in range(n)]
        for p in ws.index.partitions:  # the measure counts every leadership of a member broker
            k = self.idx.get(ws.leader(p))  # type: ignore[arg-type]
            if k is None:
                continue
            self.bytes[k] += p.bytes_in_per_s
            self.count[k] += 1
            replicas, _ = ws.replicas(p)
            if ws.index.topic_by_name[p.topic].pool == pool and all(ws.topo.pool.get(b) == pool for b in replicas):
                isr = set(p.isr)  # movable: every replica in the pool (a reorder breaks nothing)
                rows[k].append(len(self.pids))
                self.pids.append(p.id)
                self.x.append(p.bytes_in_per_s)
                self.elig.append(tuple(self.idx[b] for b in replicas if b in self.idx and b in isr))
        order = sorted(range(len(self.pids)), key=lambda j: self.pids[j])
        self.rank = np.empty(len(self.pids), dtype=np.int64)
        self.rank[order] = np.arange(len(self.pids))
        self.xs = np.asarray(self.x, dtype=np.float64)
        self.rows = [self._rows(k, led) for k, led in enumerate(rows)]
        disks = ws.group(pool)
        self.disk_peak = float(ws.util_arr[disks].max()) if len(disks) else 0.0

    def _rows(self, k: int, led: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(partition, new leader) index rows of every hand-over broker ``k`` could make."""
        part = [j for j in led for d in self.elig[j] if d != k]
        dst = [d for j in led for d in self.elig[j] if d != k]
        return np.asarray(part, dtype=np.int64), np.asarray(dst, dtype=np.int64)

    def move(self, j: int, src: int, dst: int) -> None:
        """Leadership of partition ``j`` goes from broker index ``src`` to ``dst``."""
        x = self.x[j]
        self.bytes[src] -= x
        self.bytes[dst] += x
        self.count[src] -= 1
        self.count[dst] += 1
        part, to = self.rows[src]
        keep = part != j
        self.rows[src] = (part[keep], to[keep])
        add = [d for d in self.elig[j] if d != dst]
        part, to = self.rows[dst]
        self.rows[dst] = (np.concatenate((part, np.full(len(add), j, dtype=np.int64))),
                          np.concatenate((to, np.asarray(add, dtype=np.int64))))


def balance_leaders(ws: Workspace, pool: str, options: LeaderOptions, budget: list[int]) -> None:
    """Balance leader bytes-in and count over ``pool``'s alive brokers, editing ``ws``.

    A broker's score is max(leader bytes-in / mean, leader count / mean). The broker with the highest
    score hands one leadership to an in-sync replica's broker — the hand-over leaving the lower
    maximum score of the pair — when that lowers its score and raises neither the pool's maximum
    leader bytes-in nor its maximum leader count. ``budget[0]`` counts down the changes allowed.
    Each step is one vectorised (numpy) pass over the busiest broker's possible hand-overs.
    """
    state = _Pool(ws, pool)
    n = len(state.brokers)
    mean_count = float(state.count.sum()) / n if n else 0.0
    if n < 2 or mean_count <= 0:
        return
    mean_bytes = float(state.bytes.sum()) / n
    inv_b = 1.0 / mean_bytes if mean_bytes > 0 else 0.0
    inv_c = 1.0 / mean_count
    goal_b = options.tolerance * mean_bytes
    goal_c = max(math.ceil(mean_count), options.tolerance * mean_count)

    def score(k: int) -> float:
        return max(float(state.bytes[k]) * inv_b, int(state.count[k]) * inv_c)

    heap = [(-score(k), k) for k in range(n)]
    heapq.heapify(heap)
    while heap and budget[0] > 0:
        neg, src = heapq.heappop(heap)
        current = score(src)
        if -neg != current:
            continue  # stale; a fresh entry is queued
        if state.bytes[src] <= goal_b and state.count[src] <= goal_c:
            continue
        change = _best_change(ws, state, src, current, inv_b, inv_c)
        if change is None:
            continue  # nothing helps this broker; leave it out
        j, dst = change
        _hand_over(ws, state, j, src, dst)
        budget[0] -= 1
        for k in (src, dst):
            heapq.heappush(heap, (-score(k), k))


def _best_change(ws: Workspace, state: _Pool, src: int, current: float, inv_b: float,
                 inv_c: float) -> tuple[int, int] | None:
    """The hand-over from ``src`` leaving the lowest maximum score of the pair (ties: partition id, broker)."""
    part, dst = state.rows[src]
    if len(part) == 0:
        return None
    x = state.xs[part]
    after_src = np.maximum((state.bytes[src] - x) * inv_b, (state.count[src] - 1) * inv_c)
    dst_bytes = state.bytes[dst] + x
    dst_count = state.count[dst] + 1
    pair = np.maximum(after_src, np.maximum(dst_bytes * inv_b, dst_count * inv_c))
    ok = (dst_bytes <= state.bytes.max()) & (dst_count <= state.count.max()) & (pair < current - 1e-12)
    if not ok.any():
        return None
    k = np.flatnonzero(ok)
    for m in np.lexsort((dst[k], state.rank[part[k]], pair[k])):
        j, d = int(part[k[m]]), int(dst[k[m]])
        if _disk_ok(ws, ws.partition(state.pids[j]), state.brokers[d], state.disk_peak):
            return j, d
    return None


def _disk_ok(ws: Workspace, p: Partition, dst: int, peak: float) -> bool:
    if p.disk_read_bytes_per_s <= 0:
        return True
    replicas, dirs = ws.replicas(p)
    i = ws.pos[(dst, dirs[replicas.index(dst)])]
    return ws.util(i) + p.disk_read_bytes_per_s * float(ws.inv_max[i]) <= peak


def _hand_over(ws: Workspace, state: _Pool, j: int, src: int, dst: int) -> None:
    p = ws.partition(state.pids[j])
    broker = state.brokers[dst]
    replicas, dirs = ws.replicas(p)
    k = replicas.index(broker)
    order = [k] + [m for m in range(len(replicas)) if m != k]
    ws.assign(p, tuple(replicas[m] for m in order), tuple(dirs[m] for m in order))
    ws.set_leader(p, broker)
    state.move(j, src, dst)


def leader_stats(snapshot: ClusterSnapshot, pool: str) -> tuple[float, int]:
    """(max leader bytes-in, max leader count) over the alive brokers of ``pool``; the goal's measure."""
    state = _Pool(Workspace(snapshot), pool)
    if not state.brokers:
        return 0.0, 0
    return float(state.bytes.max()), int(state.count.max())
