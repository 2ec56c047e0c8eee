"""Which replicas of a disk may shed, best load per byte first: the balancing planners' candidate piles.

Goal: per disk, its movable replicas — those the snapshot put there and those the plan moved onto it — in the
order the shedding loop weighs them: load per byte descending, then partition id. A replica is movable when its
partition has a leader and belongs to the pool, it costs its disk some load, and it is not a leader outside the
first position (moving that one would hand leadership to a third disk).

Method: the replicas of partitions the plan has not touched come from per-disk columns of the snapshot, built once
per workspace (:class:`DiskColumns`: every replica grouped by the workspace's disk order, with its partition,
position, load, size and sort key); one disk's pile is then a slice, a mask and a ``lexsort``. Partitions the plan
has touched (:attr:`Workspace.touched`), partitions with a broker twice, and arrivals go through the general rule
(:func:`general_candidates`, which reads the planned assignment), and both are sorted together.

Guarantee: :func:`disk_candidates` returns the pile :func:`general_candidates` returns over every replica, in the
same order (``tests/unit/test_planner_fast_paths.py`` pins it after random moves). Cost: the columns O(replicas)
once; a pile O(r log r) numpy for a disk of r replicas plus one small record per candidate (the general rule cost
~1.5 µs per replica in plain Python: 11 % of a 1,000-broker rebalance).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from domain import Partition, PartitionId
from planners.workspace import Workspace


@dataclass(slots=True)
class Candidate:
    """One movable replica: its partition, position in the replica list, load on this disk and size."""

    pid: PartitionId
    position: int
    load: float
    size: int
    partition: Partition


class Pile(list[Candidate]):
    """One disk's candidates, best first, with their loads and sizes as arrays (``loads``, ``sizes``; None: to
    build) and their largest load (``top``; None: to recompute), so shedding a disk of many replicas does not
    rescan them all for every move."""

    top: float | None = None
    loads: np.ndarray | None = None
    sizes: np.ndarray | None = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(loads, sizes) of the candidates, in order."""
        if self.loads is None or self.sizes is None:
            n = len(self)
            self.loads = np.fromiter((c.load for c in self), dtype=np.float64, count=n)
            self.sizes = np.fromiter((c.size for c in self), dtype=np.float64, count=n)
        return self.loads, self.sizes

    def drop(self, k: int) -> None:
        """Remove candidate ``k`` (the cached largest load is forgotten when it was that one's). The arrays lose
        it in place: the ``k`` entries before it shift up one and the view starts one later — O(k), and the
        shedding loop drops among the first :data:`planners.disk_balance.COVER_ITEMS` only (``np.delete``
        copied the whole pile: 7 % of a rebalance)."""
        if self[k].load == self.top:
            self.top = None
        del self[k]
        if self.loads is not None and self.sizes is not None:
            if k:
                self.loads[1:k + 1] = self.loads[:k]  # (overlapping: numpy copies through a buffer)
                self.sizes[1:k + 1] = self.sizes[:k]
            self.loads, self.sizes = self.loads[1:], self.sizes[1:]


def _key(load: float, size: int) -> float:
    return -(load / size) if size else float("-inf")


def general_candidates(ws: Workspace, i: int, pool: str, pids: Iterable[PartitionId]) -> list[Candidate]:
    """The movable replicas on disk ``i`` among the partitions ``pids`` (planned assignment), unsorted."""
    here = ws.disk_ids[i]
    broker = here[0]
    out: list[Candidate] = []
    by_id, topics, current = ws.index.partition_by_id, ws.index.topic_by_name, ws.current
    for pid in pids:
        p = by_id[pid]
        leader = p.leader
        if leader is None or topics[p.topic].pool != pool:
            continue
        replicas, dirs = current.get(pid) or (p.replicas, p.log_dirs)
        if broker not in replicas:
            continue
        position = replicas.index(broker)  # its first replica on the broker: the one here, unless a duplicate
        if dirs[position] != here[1]:
            position = next((k for k, pair in enumerate(zip(replicas, dirs, strict=True)) if pair == here), -1)
            if position < 0:
                continue
        load = p.bytes_in_per_s + p.disk_read_bytes_per_s if broker == leader else p.bytes_in_per_s  # replica_load
        if load <= 0 or (broker == leader and position != 0):
            continue  # moving a non-preferred leader would hand leadership to a third disk
        out.append(Candidate(pid, position, load, p.size_bytes, p))
    return out


def sorted_pile(cands: list[Candidate]) -> Pile:
    """``cands`` best load per byte first, then by partition id."""
    cands.sort(key=lambda c: (_key(c.load, c.size), c.pid))
    return Pile(cands)


class DiskColumns:
    """Every replica of the snapshot grouped by the workspace's disk order (a CSR: ``rows[start[i]:start[i + 1]]``
    are disk ``i``'s replica columns), with what a pile needs of each: partition index, position, load, size, the
    sort key and whether it may move at all (``static_ok``: leader known, load > 0, not a non-first leader, no
    broker twice in its partition). ``rank`` orders the partitions by id. Built in O(replicas)."""

    def __init__(self, ws: Workspace) -> None:
        index = ws.index
        parts = index.partitions
        cols = index.replica_columns
        n_parts = len(parts)
        counts = np.diff(cols.start)
        part = np.repeat(np.arange(n_parts, dtype=np.int64), counts)
        offset = np.arange(len(part), dtype=np.int64) - np.repeat(cols.start[:-1], counts)
        to_ws = np.array([ws.pos[d] for d in index.disk_ids] + [-1], dtype=np.int64)  # index order -> workspace
        disk = to_ws[cols.disk]
        leader = np.array([-1 if p.leader is None else p.leader for p in parts], dtype=np.int64)
        brokers = np.fromiter((b for p in parts for b in p.replicas), dtype=np.int64, count=len(part))
        sizes = np.array([p.size_bytes for p in parts], dtype=np.int64)
        twice = np.array([len(set(p.replicas)) != len(p.replicas) for p in parts], dtype=bool)
        pools = sorted({t.pool for t in ws.snapshot.topics})
        self.pool_code = {name: k for k, name in enumerate(pools)}
        topic_pool = {t.name: self.pool_code[t.pool] for t in ws.snapshot.topics}
        self.pool = np.array([topic_pool[p.topic] for p in parts], dtype=np.int64)
        is_leader = brokers == leader[part]
        size = sizes[part].astype(np.float64)
        load = cols.load
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where(size != 0, -(load / np.where(size != 0, size, 1.0)), -np.inf)
        self.static_ok = ((leader[part] >= 0) & (load > 0) & ~(is_leader & (offset != 0)) & ~twice[part]
                          & (disk >= 0))
        self.twice = twice
        order = np.argsort(disk, kind="stable")
        order = order[disk[order] >= 0]
        self.rows = order
        self.start = np.searchsorted(disk[order], np.arange(len(ws.disk_ids) + 1, dtype=np.int64))
        self.part, self.offset, self.load, self.size, self.key = part, offset, load, size, key
        self.pids = pids = [p.id for p in parts]
        self.rank = np.arange(n_parts, dtype=np.int64)
        if any(a >= b for a, b in pairwise(pids)):  # (snapshot order is usually id order)
            self.rank[np.array(sorted(range(n_parts), key=pids.__getitem__), dtype=np.int64)] = self.rank.copy()


def disk_candidates(ws: Workspace, i: int, pool: str, arrived: Iterable[PartitionId] = ()) -> Pile:
    """Movable replicas on disk ``i`` (there from the start or moved in: ``arrived``, partitions the plan touched),
    best load-per-byte first."""
    cols = ws.derived.get(DiskColumns)
    if not isinstance(cols, DiskColumns):
        cols = ws.derived[DiskColumns] = DiskColumns(ws)
    rows = cols.rows[cols.start[i]:cols.start[i + 1]]
    parts = cols.part[rows]
    touched = ws.touched[parts] | cols.twice[parts]
    fast = rows[cols.static_ok[rows] & (cols.pool[parts] == cols.pool_code.get(pool, -1)) & ~touched]
    slow = general_candidates(ws, i, pool, dict.fromkeys((*(cols.pids[k] for k in parts[touched].tolist()),
                                                          *arrived)))
    fast_parts = cols.part[fast]
    keys, ranks, loads = cols.key[fast], cols.rank[fast_parts], cols.load[fast]
    if slow:
        rank_of = ws.index.replica_columns.position
        keys = np.concatenate([keys, np.array([_key(c.load, c.size) for c in slow], dtype=np.float64)])
        ranks = np.concatenate([ranks, cols.rank[np.array([rank_of[c.pid] for c in slow], dtype=np.int64)]])
        loads = np.concatenate([loads, np.array([c.load for c in slow], dtype=np.float64)])
    if np.isnan(keys).any():  # not a sort order: the general rule's sort decides
        return sorted_pile(general_candidates(ws, i, pool, dict.fromkeys(
            (*ws.index.replicas_on_disk[ws.disk_ids[i]], *arrived))))
    order = np.lexsort((ranks, keys))
    n_fast = len(fast)
    fast_parts_l, offsets, fast_loads = fast_parts.tolist(), cols.offset[fast].tolist(), cols.load[fast].tolist()
    partitions, pids = ws.index.partitions, cols.pids
    pile = Pile()
    append = pile.append
    for k in order.tolist():
        if k < n_fast:
            j = fast_parts_l[k]
            p = partitions[j]
            append(Candidate(pids[j], offsets[k], fast_loads[k], p.size_bytes, p))
        else:
            append(slow[k - n_fast])
    pile.loads = loads[order]
    pile.sizes = np.fromiter((c.size for c in pile), dtype=np.float64, count=len(pile))
    return pile
