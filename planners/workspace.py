"""The mutable working copy every planner edits, and the one way a planner turns it into a Plan.

A :class:`Workspace` holds the current (planned) assignment of every touched partition, per-disk
load, projected utilisation and used bytes as numpy arrays, and the bytes / partitions the plan moves
so far. Planners ask it for the best valid target disk (:meth:`Workspace.best_target`) and commit
changes (:meth:`Workspace.assign`, :meth:`Workspace.set_leader`); :meth:`Workspace.to_plan` builds
the :class:`Plan`, its summary, and runs the shared invariant checker — a plan that fails it is a
planner bug and raises :class:`PlannerError` instead of reaching a cluster.

Projected utilisation of a disk = the *median* of its ``load_history`` (its current estimated
utilisation when it has no history) + the load the plan adds to or removes from it / its max
throughput. Targets are ranked on it; acceptance tests use the estimated utilisation (disk load /
max throughput), the balancing objective.

Speed (every shortcut gives exactly the general code's answer; tests pin each against it): one broker's
disks are scanned in plain Python floats (:meth:`Workspace.best_own_target`: straight on the broker's disk
span); larger groups by numpy into preallocated scratch; a shedding
run's scans over a group of 1k+ disks walk a lazily kept heap of the disks that can still take a
replica (:class:`_Heap`: O(log n) per change, no pass over the group per move);
:meth:`Workspace.move_replica` touches only the source and target disks when no other replica's
leadership changes, reading the planned leader and the original pairs without building sets; per-disk
constants (``inv_max``, ``base``, ``load0``) are read from Python lists in the per-move arithmetic;
:func:`gc_paused` keeps the cyclic collector from re-walking the snapshot.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from contextlib import contextmanager
from dataclasses import dataclass
from heapq import heapify, heappop, heappush

import numpy as np

from domain import (
    CheckLimits,
    ClusterSnapshot,
    LeaderChange,
    Partition,
    PartitionId,
    PartitionMove,
    Plan,
    check_plan,
    plan_effect,
    summarize_effect,
)
from planners.constraints import Topology, median

EPS = 1e-12
_MAGNITUDE = (1 << 63) - 1  # IEEE bits of a float64 but the sign
_BIG = 1e18  # score of a disk ruled out (projected utilisation is far below)
SMALL_SCAN = 32  # candidate sets up to this size (one broker's disks) are scanned without numpy
HEAP_MIN_DISKS = 1_000  # from this many disks a frequent scan walks a _Heap (measured: -8% CPU at 3.6k, 12k disks)
HEAP_WALK = 48  # live disks a _Heap walk passes over (ruled out) before the full scan decides
HEAP_SLACK = 3  # a _Heap is rebuilt when it holds this many entries per disk
HEAP_QUANTILE = 0.02  # a _Heap keeps the disks that can take the replica load at this quantile (smaller: full scan)
MAX_HEAPS = 8  # a pool, its IDCs, each with and without a speed cap (slower receivers first): no thrash
_NONE: frozenset[int] = frozenset()  # no disk excluded


class PlannerError(ValueError):
    """A planner was asked the impossible (unknown broker or topic, unsatisfiable request)."""


class KernelBail(RuntimeError):
    """The compiled shedding loop (:mod:`planners.shed_kernel`) met a case it does not port: plan in Python."""


class InvalidPlanError(PlannerError):
    """A planner produced a plan the shared invariant checker rejects — a bug; the plan is never returned."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """Limits of one plan: bytes to copy, partitions to move, and free space kept on every disk."""

    max_bytes: int | None = None
    max_partitions: int | None = None
    capacity_headroom: float = 0.10

    def check_limits(self) -> CheckLimits:
        """The same bounds as the invariant checker's :class:`CheckLimits`."""
        return CheckLimits(capacity_headroom=self.capacity_headroom, max_bytes_to_move=self.max_bytes,
                           max_partitions_to_move=self.max_partitions)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a planner's run (restored after, also on error).

    A plan allocates hundreds of thousands of short-lived tuples and records but no reference cycles,
    while the snapshot keeps millions of tracked objects alive: each collection pass re-walks them for
    nothing (~8% of a 1,000-broker rebalance). Reference counting still frees everything as usual.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Workspace:
    """Working copy of one snapshot's assignment. Construction is O(disks + replicas)."""

    def __init__(self, snapshot: ClusterSnapshot, bounds: Bounds | None = None) -> None:
        self.snapshot = snapshot
        self.bounds = bounds or Bounds()
        index = snapshot.index
        self.index = index
        self.topo = Topology(snapshot)
        # Disks ordered by (dead last, pool, IDC, snapshot order): every group is a contiguous slice, so
        # the numpy scans read views instead of gathering.
        order = sorted(range(len(index.disk_ids)), key=lambda k: (
            not self.topo.alive[index.disk_ids[k][0]], self.topo.pool[index.disk_ids[k][0]],
            self.topo.idc[index.disk_ids[k][0]], k))
        self.disk_ids = [index.disk_ids[k] for k in order]
        self.pos = {d: i for i, d in enumerate(self.disk_ids)}
        disks = [index.disk_by_id[d] for d in self.disk_ids]
        self.max_bps = np.array([d.max_bytes_per_s for d in disks], dtype=np.float64)
        self.inv_max = 1.0 / self.max_bps
        self.load0 = np.array([index.disk_load[d] for d in self.disk_ids], dtype=np.float64)
        self.load = self.load0.copy()
        self.util_arr = self.load0 * self.inv_max
        self.base = np.array([median(d.load_history) if d.load_history else float(self.util_arr[i])
                              for i, d in enumerate(disks)], dtype=np.float64)
        self.proj = self.base.copy()
        self._proj_bits = self.proj.view(np.int64)  # the same memory: IEEE bits of each projection (_Heap keys)
        self.used0 = np.array([d.used_bytes for d in disks], dtype=np.float64)
        self.used = self.used0.copy()
        self.limit = np.array([d.capacity_bytes * (1.0 - self.bounds.capacity_headroom) for d in disks],
                              dtype=np.float64)
        self.room = np.maximum(self.limit, self.used0) - self.used  # bytes a disk may still gain
        self.room_floor = float(self.room.min()) if len(self.room) else 0.0  # <= every disk's room (a bound)
        self.disk_broker = np.array([b for b, _ in self.disk_ids], dtype=np.int64)
        self.alive = np.array([self.topo.alive[b] for b, _ in self.disk_ids], dtype=bool)
        self.broker_disks: dict[int, list[int]] = {}
        for i, (b, _) in enumerate(self.disk_ids):
            self.broker_disks.setdefault(b, []).append(i)
        self.current: dict[PartitionId, tuple[tuple[int, ...], tuple[str, ...]]] = {}
        self.leader_override: dict[PartitionId, int] = {}
        self.explicit_leaders: set[PartitionId] = set()
        self.cost: dict[PartitionId, int] = {}
        self.copied: dict[PartitionId, int] = {}  # replicas each planned partition copies
        self.moved_bytes = 0
        self.moved_partitions = 0
        self._groups: dict[tuple[str, str | None], np.ndarray] = {}
        self._faster: dict[tuple[int, int, float], bool] = {}  # (group id, its size, speed) -> mixed_speeds
        self._own: dict[int, np.ndarray] = {}
        n = len(self.disk_ids)  # scratch of the scans: no allocation per scan (above ~128 KiB each one
        self._after = np.empty(n, dtype=np.float64)  # would be a fresh mmap, page faults included)
        self._bad = np.empty(n, dtype=bool)
        self._room_bad = np.empty(n, dtype=bool)
        self._heaps: dict[tuple[int, int, float, float | None], _Heap] = {}
        self._least: float | None = None
        self._topic_facts: dict[str, tuple[str, Mapping[str, int] | None]] = {}  # pool, placement policy
        # Python-float copies of the arrays that never change, for the per-move arithmetic (list reads are
        # cheaper than numpy scalar reads; the values are the same doubles)
        self._inv_max: list[float] = self.inv_max.tolist()
        self._base: list[float] = self.base.tolist()
        self._load0: list[float] = self.load0.tolist()
        # ... and Python-float mirrors of the arrays the plan changes (written beside them by add_load and the
        # moves; read by the per-move scans: a list read is ~4x cheaper than a numpy scalar read)
        self._load: list[float] = self.load.tolist()
        self._util: list[float] = self.util_arr.tolist()
        self._room: list[float] = self.room.tolist()
        self._proj: list[float] = self.proj.tolist()
        self.touched: set[PartitionId] | None = None  # when a set: every partition an assignment change touches
        self.assignments = 0  # assignment changes made by assign / move_replica (the compiled loop's are not counted)
        self.kernel: object | None = None  # the compiled shedding loop's arrays of this workspace, once built
        # (first disk, disk count) of each disk's broker when its disks are contiguous and few (best_own_target)
        self._own_span: list[tuple[int, int] | None] = [None] * n
        for disks_of in self.broker_disks.values():
            if disks_of[-1] - disks_of[0] + 1 == len(disks_of) <= SMALL_SCAN:
                for i in disks_of:
                    self._own_span[i] = (disks_of[0], len(disks_of))

    # ------------------------------------------------------------------ reads
    def partition(self, pid: PartitionId) -> Partition:
        """The partition as in the snapshot."""
        return self.index.partition_by_id[pid]

    def replicas(self, p: Partition) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """Planned replicas and log dirs of ``p``."""
        return self.current.get(p.id, (p.replicas, p.log_dirs))

    def leader(self, p: Partition) -> int | None:
        """Planned leader of ``p`` (Kafka's rule after a reassignment, then any leader change)."""
        override = self.leader_override.get(p.id)
        return override if override is not None else self.default_leader(p)

    def default_leader(self, p: Partition) -> int | None:
        """Leader once the planned move of ``p`` completes, before any leader change (as apply_plan)."""
        replicas, dirs = self.replicas(p)
        if p.leader in replicas or (replicas == p.replicas and dirs == p.log_dirs):
            return p.leader
        return replicas[0]

    def util(self, i: int) -> float:
        """Estimated utilisation of disk ``i`` under the plan so far."""
        return self._util[i]

    def add_load(self, i: int, delta: float) -> None:
        """Add ``delta`` bytes/s to disk ``i`` (its estimated and projected utilisation follow)."""
        inv = self._inv_max[i]  # Python floats: the same IEEE double operations as numpy's scalars
        load = self._load[i] + delta
        self.load[i] = self._load[i] = load
        self.util_arr[i] = self._util[i] = util = load * inv
        self.proj[i] = self._proj[i] = value = self._base[i] + (load - self._load0[i]) * inv
        if self._heaps:
            bits = int(self._proj_bits[i])
            for heap in self._heaps.values():
                if heap.first <= i < heap.end:
                    heap.push(self, i, value, bits, util, inv)

    def own_disks(self, i: int) -> np.ndarray:
        """The disks of disk ``i``'s broker (with ``i``; :meth:`best_target` never picks a replica's own
        disk): the targets of an intra-broker log-dir move. Contiguous, so the scan reads views."""
        b = int(self.disk_broker[i])
        found = self._own.get(b)
        if found is None:
            found = np.array(self.broker_disks[b], dtype=np.int64)
            self._own[b] = found
        return found

    def intra_broker_bytes(self) -> int:
        """Bytes of the planned copies that stay on their broker (another log dir; no network)."""
        total = 0
        by_id = self.index.partition_by_id
        for pid, (replicas, dirs) in self.current.items():
            p = by_id[pid]
            if dirs == p.log_dirs and replicas == p.replicas:
                continue  # moved back: nothing copied
            old = dict(zip(p.replicas, p.log_dirs, strict=True))
            moved = 0
            for b, d in zip(replicas, dirs, strict=True):
                if b in old and old[b] != d:
                    moved += 1
            total += p.size_bytes * moved
        return total

    def group(self, pool: str, idc: str | None = None) -> np.ndarray:
        """Indices of the alive disks of ``pool`` (in ``idc`` when given), in snapshot order."""
        key = (pool, idc)
        found = self._groups.get(key)
        if found is None:
            found = np.array([i for i, (b, _) in enumerate(self.disk_ids)
                              if self.alive[i] and self.topo.pool[b] == pool
                              and (idc is None or self.topo.idc[b] == idc)], dtype=np.int64)
            self._groups[key] = found
        return found

    def mixed_speeds(self, group: np.ndarray, max_bps: float) -> bool:
        """Whether ``group`` (one of :meth:`group`'s arrays, kept alive by its cache) has disks both faster than
        ``max_bps`` and not; cached per group and speed."""
        key = (id(group), len(group), max_bps)
        found = self._faster.get(key)
        if found is None:
            speeds = self.max_bps[group]
            found = self._faster[key] = bool((speeds > max_bps).any() and (speeds <= max_bps).any())
        return found

    def copies(self, p: Partition, replicas: Sequence[int], dirs: Sequence[str]) -> int:
        """Replicas of the target assignment that must be copied (new broker or new log dir)."""
        old = set(zip(p.replicas, p.log_dirs, strict=True))
        return sum(1 for pair in zip(replicas, dirs, strict=True) if pair not in old)

    def within_bounds(self, p: Partition, replicas: Sequence[int], dirs: Sequence[str]) -> bool:
        """True when giving ``p`` this assignment keeps the plan inside its byte / partition bounds."""
        if self.bounds.max_bytes is None and self.bounds.max_partitions is None:
            return True
        new_cost = self.copies(p, replicas, dirs) * p.size_bytes
        old_cost = self.cost.get(p.id, 0)
        b = self.bounds
        if b.max_bytes is not None and self.moved_bytes - old_cost + new_cost > b.max_bytes:
            return False
        parts = self.moved_partitions - int(self._moved(p)) + int(new_cost > 0 or self.copies(p, replicas, dirs) > 0)
        return b.max_partitions is None or parts <= b.max_partitions

    def _moved(self, p: Partition) -> bool:
        return self.copied.get(p.id, 0) > 0

    def fits(self, i: int, size: int) -> bool:
        """True when disk ``i`` may take ``size`` more bytes (capacity headroom, or it ends below its start)."""
        return bool(self.room[i] >= size)

    def contributions(self, p: Partition, replicas: Sequence[int], dirs: Sequence[str],
                      leader: int | None) -> list[tuple[int, float]]:
        """(disk index, load) of every replica of ``p`` for the given assignment."""
        return [(self.pos[(b, d)], p.bytes_in_per_s + (p.disk_read_bytes_per_s if b == leader else 0.0))
                for b, d in zip(replicas, dirs, strict=True) if (b, d) in self.pos]

    # ---------------------------------------------------------------- writes
    def assign(self, p: Partition, replicas: tuple[int, ...], dirs: tuple[str, ...]) -> None:
        """Give ``p`` a new planned assignment; loads, usage and move costs follow. O(RF)."""
        pid = p.id
        self.assignments += 1
        if self.touched is not None:
            self.touched.add(pid)
        pos = self.pos
        size_bytes = p.size_bytes
        write, read = p.bytes_in_per_s, p.disk_read_bytes_per_s
        current = self.current
        old_r, old_d = current.get(pid, (p.replicas, p.log_dirs))
        leader = self.leader(p)
        delta: dict[int, float] = {}
        size: dict[int, int] = {}
        for b, d in zip(old_r, old_d, strict=True):
            i = pos.get((b, d))
            if i is not None:
                delta[i] = delta.get(i, 0.0) - (write + (read if b == leader else 0.0))
                size[i] = size.get(i, 0) - size_bytes
        copied = self.copied
        was_moved = copied.get(pid, 0) > 0
        current[pid] = (replicas, dirs)
        override = self.leader_override.get(pid)
        if override is not None and override not in replicas:
            del self.leader_override[pid]
        leader = self.leader(p)
        old = set(zip(p.replicas, p.log_dirs, strict=True))
        copies = 0
        for b, d in zip(replicas, dirs, strict=True):
            i = pos[(b, d)]
            delta[i] = delta.get(i, 0.0) + (write + (read if b == leader else 0.0))
            size[i] = size.get(i, 0) + size_bytes
            if (b, d) not in old:
                copies += 1
        for i, change in delta.items():  # only disks whose load really changes are touched
            if change:
                self.add_load(i, change)
        for i, bytes_ in size.items():
            if bytes_:
                self.used[i] += bytes_
                self.room[i] = self._room[i] = room = self._room[i] - bytes_
                if bytes_ > 0 and room < self.room_floor:
                    self.room_floor = room
        copied[pid] = copies
        new_cost = copies * size_bytes
        self.moved_bytes += new_cost - self.cost.get(pid, 0)
        self.cost[pid] = new_cost
        self.moved_partitions += int(copies > 0) - int(was_moved)

    def set_leader(self, p: Partition, broker: int, *, explicit: bool = False) -> None:
        """Make ``broker`` (a planned replica of ``p``) its leader; disk loads follow. O(RF).

        ``explicit``: emit the leader change even when the moves alone would give the same leader
        (a drain moves leadership before any data).
        """
        replicas, dirs = self.replicas(p)
        if broker not in replicas:
            raise PlannerError(f"broker {broker} is not a replica of {p.topic}-{p.partition}")
        for i, load in self.contributions(p, replicas, dirs, self.leader(p)):
            self.add_load(i, -load)
        self.leader_override[p.id] = broker
        if explicit:
            self.explicit_leaders.add(p.id)
        for i, load in self.contributions(p, replicas, dirs, broker):
            self.add_load(i, load)

    # ------------------------------------------------------------ targeting
    def best_target(self, p: Partition, position: int, candidates: np.ndarray, *,
                    max_util: float | None = None, exclude: Iterable[int] = (), tries: int = 64,
                    added: tuple[int, float] | None = None, frequent: bool = False,
                    speed_cap: float | None = None) -> int | None:
        """The valid disk with the lowest projected utilisation for replica ``position`` of ``p``.

        Valid: alive, in the candidate set, room within capacity headroom, the move keeps every hard
        goal (:meth:`Topology.replica_set_ok`), the plan stays within its bounds, and (with
        ``max_util``) the disk's estimated utilisation after the move stays ≤ ``max_util``. A disk of
        the replica's own broker is an intra-broker (log dir) move. Ties break on (IDC, snapshot order).
        (A full numpy scan costs ~40 µs at 12k disks; the :class:`_Heap` walk a few µs: -15% CPU at 12k disks,
        -18% at 36k, README's planner rows.) ``added``: :meth:`added_load` of this replica when the caller
        already has it (several scans for one replica). ``frequent``: the same ``candidates`` and ``max_util``
        come back for many replicas (a shedding run's goal): answer from a :class:`_Heap` when it can tell.
        ``speed_cap``: only disks whose max throughput is at most this are candidates.
        """
        if len(candidates) == 0:
            return None
        return self._scan(p, position, candidates, max_util, set(exclude) if exclude else _NONE, tries,
                          added if added is not None else self.added_load(p, position), frequent, speed_cap)

    def best_own_target(self, i: int, p: Partition, position: int, *, max_util: float | None,
                        added: tuple[int, float]) -> int | None:
        """:meth:`best_target` over :meth:`own_disks` of ``i`` (an intra-broker move), its small scan called directly
        on the broker's contiguous disks; the general call when the broker has more than :data:`SMALL_SCAN` disks
        or the small scan cannot tell."""
        span = self._own_span[i]
        if span is not None:
            done, found = self._scan_small(p, position, span[0], span[1], added[0], added[1], max_util, 64)
            if done:
                return found
        return self.best_target(p, position, self.own_disks(i), max_util=max_util, added=added)

    def _valid(self, p: Partition, position: int, i: int) -> bool:
        """Hard goals and plan bounds for putting replica ``position`` of ``p`` on disk ``i``."""
        replicas, dirs = self.current.get(p.id, (p.replicas, p.log_dirs))
        dst_broker, dst_dir = self.disk_ids[i]
        if dst_broker != replicas[position] and dst_broker in replicas:
            return False
        new_r = (*replicas[:position], dst_broker, *replicas[position + 1:])
        facts = self._topic_facts.get(p.topic)
        if facts is None:
            topic = self.index.topic_by_name[p.topic]
            facts = self._topic_facts[p.topic] = (topic.pool, self.snapshot.placement_of(topic))
        if not self.topo.replica_set_ok(p.replicas, new_r, *facts):
            return False
        if self.bounds.max_bytes is None and self.bounds.max_partitions is None:
            return True
        return self.within_bounds(p, new_r, (*dirs[:position], dst_dir, *dirs[position + 1:]))

    def added_load(self, p: Partition, position: int) -> tuple[int, float]:
        """(disk index the replica is on or -1, the load it brings to a disk) of replica ``position`` of ``p``."""
        pid = p.id
        replicas, dirs = self.current.get(pid, (p.replicas, p.log_dirs))
        src = self.pos.get((replicas[position], dirs[position]), -1)
        leader = _planned_leader(p, self.leader_override.get(pid), replicas, dirs)
        add = p.bytes_in_per_s + (p.disk_read_bytes_per_s if leader == replicas[position] else 0.0)
        return src, add

    def _scan(self, p: Partition, position: int, candidates: np.ndarray, max_util: float | None,
              excluded: Set[int], tries: int, added: tuple[int, float], frequent: bool = False,
              speed_cap: float | None = None) -> int | None:
        src, add = added
        n = len(candidates)
        first = int(candidates[0])
        contiguous = int(candidates[-1]) - first + 1 == n
        if contiguous and n <= SMALL_SCAN and not excluded and speed_cap is None:
            done, found = self._scan_small(p, position, first, n, src, add, max_util, tries)
            if done:
                return found
        elif frequent and contiguous and n >= HEAP_MIN_DISKS and max_util is not None and not excluded:
            done, found = self._scan_heap(p, position, first, n, src, add, max_util + EPS, tries, speed_cap)
            if done:
                return found
        view: slice | np.ndarray = slice(first, first + n) if contiguous else candidates
        bad = self._bad[:n]
        if max_util is not None:
            after = self._after[:n]  # util + add x inv_max, the same IEEE operations, into scratch
            np.multiply(self.inv_max[view], add, out=after)
            np.add(after, self.util_arr[view], out=after)
            np.greater(after, max_util + EPS, out=bad)
            if not p.size_bytes <= self.room_floor:  # else every disk has room: no pass needed
                room_bad = self._room_bad[:n]
                np.less(self.room[view], p.size_bytes, out=room_bad)
                bad |= room_bad
        else:
            np.less(self.room[view], p.size_bytes, out=bad)
        if excluded:
            bad |= np.isin(self.disk_broker[view], np.fromiter(excluded, dtype=np.int64))
        if speed_cap is not None:
            bad |= self.max_bps[view] > speed_cap
        score = np.where(bad, _BIG, self.proj[view])  # a ruled-out disk scores _BIG (was proj + _BIG: the same order)
        if first <= src < first + n and contiguous:
            score[src - first] = _BIG
        elif not contiguous:
            score[candidates == src] = _BIG
        for _ in range(tries):
            k = int(score.argmin())
            if score[k] >= _BIG:
                return None
            score[k] = _BIG
            if self._valid(p, position, int(candidates[k])):
                return int(candidates[k])
        return None

    def _scan_heap(self, p: Partition, position: int, first: int, n: int, src: int, add: float, limit: float,
                   tries: int, speed_cap: float | None = None) -> tuple[bool, int | None]:
        """:meth:`_scan` of the contiguous disks ``first .. first + n - 1`` under ``limit`` from their :class:`_Heap`:
        its entries popped in (projection, index) order — the full scan's order — stale ones dropped, each live
        disk tested as the full scan tests it, then the live ones pushed back. After :data:`HEAP_WALK` live
        disks without an answer, or when a projection is NaN or huge: (False, None) and the full scan decides."""
        key = (first, n, limit, speed_cap)
        heap = self._heaps.get(key)
        if heap is None:
            if len(self._heaps) >= MAX_HEAPS:
                del self._heaps[next(iter(self._heaps))]
            if self._least is None:
                loads = self.index.replica_columns.load
                positive = loads[loads > 0]
                self._least = float(np.quantile(positive, HEAP_QUANTILE)) if len(positive) else 0.0
            heap = self._heaps[key] = _Heap(self, first, first + n, limit, self._least, speed_cap)
        if not heap.ok or not add >= heap.least:
            return False, None
        entries, cur, mask = heap.entries, heap.cur, heap.mask
        util, inv, room = self._util, self._inv_max, self._room  # Python floats, the same values
        size = float(p.size_bytes)
        check_room = not p.size_bytes <= self.room_floor
        held: list[int] = []
        last = None
        tried = 0
        found: int | None = None
        done = True
        while entries:
            entry = entries[0]
            i = entry & mask
            if cur[i - first] != entry or entry == last:  # stale (the disk changed since) or a twin
                heappop(entries)
                continue
            if i == src or inv[i] * add + util[i] > limit or (check_room and room[i] < size):
                if len(held) >= HEAP_WALK:
                    done = False
                    break
            else:
                tried += 1
                if self._valid(p, position, i):
                    found = i
                    break
                if tried >= tries:
                    break
            last = heappop(entries)  # looked at: set aside, pushed back below
            held.append(last)
        for entry in held:
            heappush(entries, entry)
        return done, found

    def _scan_small(self, p: Partition, position: int, first: int, n: int, src: int, add: float,
                    max_util: float | None, tries: int) -> tuple[bool, int | None]:
        """:meth:`_scan` over the contiguous disks ``first .. first + n - 1`` in plain Python floats (the same
        IEEE operations in the same order, so the same answer): a few disks (one broker's) cost less so
        than a numpy pass's call overhead. Returns (False, None) when a projection is NaN or huge: the numpy
        scan decides then (its order for those)."""
        end = first + n
        # every disk has room for it when it fits the floor of all rooms (as in _scan): no room test then
        room = self._room[first:end] if not p.size_bytes <= self.room_floor else None
        proj = self._proj[first:end]
        size = float(p.size_bytes)
        good: list[tuple[float, int]] = []
        if max_util is None:
            for k in range(n):
                if not (room is not None and room[k] < size) and first + k != src:
                    good.append((proj[k], k))
        else:
            util = self._util[first:end]
            inv = self._inv_max[first:end]
            limit = max_util + EPS
            for k in range(n):
                if not ((room is not None and room[k] < size) or util[k] + add * inv[k] > limit) and first + k != src:
                    good.append((proj[k], k))
        for score, _ in good:
            if score != score or score >= _BIG:
                return False, None
        good.sort()
        for _, k in good[:tries]:
            if self._valid(p, position, first + k):
                return True, first + k
        return True, None

    def move_replica(self, p: Partition, position: int, target: int) -> None:
        """Put replica ``position`` of ``p`` on disk ``target`` (same position in the replica list).

        The common case — no other replica gains or loses leadership, each stays on a known disk — touches only the
        two disks and counts copies incrementally, with the very float operations :meth:`assign` would
        do (``0.0 - load`` off the source, ``0.0 + load`` onto the target; a staying replica's
        ``-x + x`` is exactly 0 for finite rates, which assign skips); anything else goes to :meth:`assign`.
        """
        pid = p.id
        self.assignments += 1
        if self.touched is not None:
            self.touched.add(pid)
        replicas, dirs = self.current.get(pid, (p.replicas, p.log_dirs))
        b, d = self.disk_ids[target]
        new_r = (*replicas[:position], b, *replicas[position + 1:])
        new_d = (*dirs[:position], d, *dirs[position + 1:])
        old_b, old_d = replicas[position], dirs[position]
        pos = self.pos
        src = pos.get((old_b, old_d))
        override = self.leader_override.get(pid)
        leader = _planned_leader(p, override, replicas, dirs)
        after = _planned_leader(p, override, new_r, new_d)
        staying = (*replicas[:position], *replicas[position + 1:])
        write, read = p.bytes_in_per_s, p.disk_read_bytes_per_s
        size_bytes = p.size_bytes
        if ((after != leader and (leader in staying or after in staying))
                or (override is not None and override not in new_r)
                or src is None or src == target or (b != old_b and b in replicas) or size_bytes < 0
                or not (write - write == 0.0 and read - read == 0.0) or len(set(replicas)) != len(replicas)
                or not all(map(pos.__contains__, zip(replicas, dirs, strict=True)))):  # (the source's is: src)
            self.assign(p, new_r, new_d)  # a staying replica gains or loses leadership, or an unusual case
            return
        out_load = 0.0 - (write + (read if old_b == leader else 0.0))
        in_load = 0.0 + (write + (read if b == after else 0.0))
        if out_load:
            self.add_load(src, out_load)
        if in_load:
            self.add_load(target, in_load)
        if size_bytes:
            self.used[src] -= size_bytes
            self.room[src] = self._room[src] = self._room[src] + size_bytes
            self.used[target] += size_bytes
            self.room[target] = self._room[target] = room = self._room[target] - size_bytes
            if room < self.room_floor:
                self.room_floor = room
        was = self.copied.get(pid, 0)
        copies = was - (not _had(p, old_b, old_d)) + (not _had(p, b, d))
        self.current[pid] = (new_r, new_d)
        self.copied[pid] = copies
        new_cost = copies * size_bytes
        self.moved_bytes += new_cost - self.cost.get(pid, 0)
        self.cost[pid] = new_cost
        self.moved_partitions += int(copies > 0) - int(was > 0)

    def set_counted(self, p: Partition, replicas: tuple[int, ...], dirs: tuple[str, ...], copies: int) -> None:
        """``p``'s planned assignment, its copies counted by the caller, for moves whose loads, usage and room the
        arrays already carry (the compiled shedding loop, :mod:`planners.shed_kernel`; then
        :meth:`refresh_mirrors`)."""
        pid = p.id
        was = self.copied.get(pid, 0)
        self.current[pid] = (replicas, dirs)
        self.copied[pid] = copies
        new_cost = copies * p.size_bytes
        self.moved_bytes += new_cost - self.cost.get(pid, 0)
        self.cost[pid] = new_cost
        self.moved_partitions += int(copies > 0) - int(was > 0)

    def refresh_mirrors(self) -> None:
        """The Python-float mirrors again from the arrays (written in place by the compiled loop); its heaps
        rebuilt on next use; the room floor lowered to the rooms now."""
        self._load = self.load.tolist()
        self._util = self.util_arr.tolist()
        self._room = self.room.tolist()
        self._proj = self.proj.tolist()
        self._heaps.clear()
        if len(self.room):
            self.room_floor = min(self.room_floor, float(self.room.min()))

    # ----------------------------------------------------------------- output
    def moves(self) -> tuple[PartitionMove, ...]:
        """Every partition whose planned assignment differs from the snapshot, sorted by partition id."""
        out = []
        current, by_id = self.current, self.index.partition_by_id
        for pid in sorted(current):
            replicas, dirs = current[pid]
            p = by_id[pid]
            if replicas != p.replicas or dirs != p.log_dirs:
                out.append(PartitionMove(p.topic, p.partition, replicas, dirs))
        return tuple(out)

    def leader_changes(self) -> tuple[LeaderChange, ...]:
        """Leader changes that differ from what the moves alone give, sorted by partition id."""
        out = []
        for pid in sorted(self.leader_override):
            p = self.partition(pid)
            want = self.leader_override[pid]
            if want != self.default_leader(p) or pid in self.explicit_leaders:
                out.append(LeaderChange(topic=p.topic, partition=p.partition, leader=want))
        return tuple(out)

    def to_plan(self, kind: str, notes: Sequence[str] = (),
                recorded: Mapping[tuple[str, int], tuple[int, ...]] | None = None) -> Plan:
        """The plan of everything planned so far, with its summary, checked by :func:`check_plan`.

        ``recorded``: a restore's recorded replica sets (:func:`check_plan`'s ``recorded``).
        Raises :class:`PlannerError` if the checker finds any violation (never returns a bad plan).
        """
        return finish_plan(self.snapshot, Plan(cluster=self.snapshot.cluster, kind=kind, moves=self.moves(),
                                               leaders=self.leader_changes()),
                           notes, self.bounds, recorded)


class _Heap:
    """The disks of ``first .. end - 1`` that can take a replica of load ``least`` under ``limit`` (``util + inv_max
    x least > limit`` rules a disk out, the scan's own test) in a binary heap on (projection, index), kept lazily:
    a changed disk is pushed again when it still passes (:meth:`Workspace.add_load`); an entry is live while it
    equals the disk's current one (``cur``), others are dropped as they surface. Rebuilt once the entries
    outgrow :data:`HEAP_SLACK` x the disks.

    An entry is one int, ``key << shift | index``, ``key`` the projection's IEEE bits made order-preserving
    (:func:`_order_key`; -0.0 and 0.0 alike), so the heap compares ints, not tuples. Rounding is monotone and
    ``inv_max`` ≥ 0, so a disk ruled out for ``least`` is ruled out for any larger load: for a replica of load
    ≥ ``least`` the full scan's candidates, in its order, are among the live entries in heap order. ``ok`` is
    False once a projection is NaN or huge (the full scan's argmin order is not a sort then). Built in O(n),
    O(log n) per change.
    """

    __slots__ = ("cap", "cur", "end", "entries", "first", "least", "limit", "mask", "ok", "shift")

    def __init__(self, ws: Workspace, first: int, end: int, limit: float, least: float,
                 cap: float | None = None) -> None:
        self.first, self.end, self.limit, self.least, self.cap = first, end, limit, least, cap
        self.shift = max(1, end.bit_length())
        self.mask = (1 << self.shift) - 1
        self.entries: list[int] = []
        self.cur: list[int | None] = []
        self.ok = True
        self.rebuild(ws)

    def rebuild(self, ws: Workspace) -> None:
        """One entry per disk that passes."""
        first, n, shift = self.first, self.end - self.first, self.shift
        view = slice(first, self.end)
        after = ws._after[:n]
        np.multiply(ws.inv_max[view], self.least, out=after)
        np.add(after, ws.util_arr[view], out=after)
        keep = ~(after > self.limit)
        if self.cap is not None:  # only disks no faster than the cap
            keep &= ws.max_bps[view] <= self.cap
        passing = np.flatnonzero(keep)
        self.ok = bool((ws.proj[view] < _BIG).all())
        bits = ws.proj[view].view(np.int64)[passing]
        keys = np.where(bits >= 0, bits, -(bits & _MAGNITUDE))
        cur: list[int | None] = [None] * n
        entries: list[int] = []
        for k, j in zip(keys.tolist(), passing.tolist(), strict=True):
            cur[j] = entry = (k << shift) | (j + first)
            entries.append(entry)
        heapify(entries)
        self.cur, self.entries = cur, entries

    def push(self, ws: Workspace, i: int, value: float, bits: int, util: float, inv: float) -> None:
        """Disk ``i`` changed: its projection is now ``value`` (IEEE bits ``bits``), its utilisation ``util``."""
        if not value < _BIG:
            self.ok = False
        if inv * self.least + util > self.limit or (self.cap is not None and ws.max_bps[i] > self.cap):
            self.cur[i - self.first] = None
            return
        entry = (_order_key(bits) << self.shift) | i
        self.cur[i - self.first] = entry
        entries = self.entries
        heappush(entries, entry)
        if len(entries) > HEAP_SLACK * (self.end - self.first):
            self.rebuild(ws)


def _planned_leader(p: Partition, override: int | None, replicas: tuple[int, ...], dirs: tuple[str, ...]) -> int | None:
    """:meth:`Workspace.leader` of ``p`` planned on ``replicas`` / ``dirs`` with leader override ``override``."""
    if override is not None:
        return override
    if p.leader in replicas or (replicas == p.replicas and dirs == p.log_dirs):
        return p.leader
    return replicas[0]


def _had(p: Partition, broker: int, path: str) -> bool:
    """``(broker, path) in zip(p.replicas, p.log_dirs)``: a replica ``p`` has in the snapshot (its first replica on
    ``broker`` looked at first; the full test only when that one is on another log dir)."""
    replicas = p.replicas
    if broker not in replicas:
        return False
    return p.log_dirs[replicas.index(broker)] == path or (broker, path) in zip(replicas, p.log_dirs, strict=True)


def _order_key(bits: int) -> int:
    """An int ordered as the float whose IEEE bits (as int64) are ``bits`` (-0.0 and 0.0 both 0; not NaN)."""
    return bits if bits >= 0 else -(bits & _MAGNITUDE)


def finish_plan(snapshot: ClusterSnapshot, draft: Plan, notes: Sequence[str], bounds: Bounds,
                recorded: Mapping[tuple[str, int], tuple[int, ...]] | None = None) -> Plan:
    """Attach summary and notes to ``draft`` and run the shared invariant checker on it.

    The plan's effect (:func:`domain.plan_effect`) is computed once and read by both the summary and the
    checker; no after-snapshot is built.
    """
    effect = plan_effect(snapshot, draft)
    plan = Plan(cluster=draft.cluster, kind=draft.kind, moves=draft.moves, leaders=draft.leaders,
                summary=summarize_effect(snapshot, draft, effect), notes=tuple(notes))
    violations = check_plan(snapshot, plan, bounds.check_limits(), effect=effect, recorded=recorded)
    if violations:
        shown = "; ".join(str(v) for v in violations[:5])
        raise InvalidPlanError(f"planner produced an invalid {draft.kind} plan ({len(violations)} violations): {shown}")
    return plan
