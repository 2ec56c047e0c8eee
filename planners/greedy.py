"""A simple, correct greedy disk-load balancer (the foundation's planner).

Per resource pool, repeatedly take the disk with the highest estimated utilisation (disk load / max
throughput) and move one replica from it — the heaviest that helps — to the lowest-utilised valid
disk, as long as the move lowers the peak of every disk it touches. Moves stay in the replica's
IDC (so IDC placement is kept), never add a rack duplicate within an IDC, never fill a disk past its
capacity headroom, and only target alive brokers of the topic's pool. Within one broker the move is a
log-dir (intra-broker) move.

Deterministic: ties break on disk id and partition id. Cost per move: O(disks in pool) to pick
targets plus O(replicas on the source disk) to rank candidates.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.domain import (
    ClusterSnapshot,
    DiskId,
    Partition,
    PartitionId,
    PartitionMove,
    Plan,
    apply_plan,
    balance_disks,
    summarize_plan,
)

KIND = "rebalance"


@dataclass(frozen=True, slots=True)
class GreedyOptions:
    """Bounds of one plan. ``tolerance``: stop when the peak is within this factor of the pool mean."""

    max_moves: int = 2000
    max_bytes: int | None = None
    capacity_headroom: float = 0.10
    tolerance: float = 1.05
    candidates_per_disk: int = 64
    targets_per_move: int = 64


@dataclass(slots=True)
class _Assignment:
    replicas: list[int]
    dirs: list[str]
    leader: int | None


class _State:
    """Mutable working copy of the assignment and per-disk load/usage."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        index = snapshot.index
        self.snapshot = snapshot
        self.load: dict[DiskId, float] = dict(index.disk_load)
        self.used: dict[DiskId, int] = {d: index.disk_by_id[d].used_bytes for d in index.disk_ids}
        self.on_disk: dict[DiskId, set[PartitionId]] = {d: set(v) for d, v in index.replicas_on_disk.items()}
        self.assign: dict[PartitionId, _Assignment] = {}

    def current(self, p: Partition) -> _Assignment:
        a = self.assign.get(p.id)
        if a is None:
            a = _Assignment(list(p.replicas), list(p.log_dirs), p.leader)
            self.assign[p.id] = a
        return a

    def util(self, d: DiskId) -> float:
        return self.load[d] / self.snapshot.index.disk_by_id[d].max_bytes_per_s


def _contributions(p: Partition, a: _Assignment) -> dict[DiskId, float]:
    out: dict[DiskId, float] = {}
    for b, d in zip(a.replicas, a.dirs, strict=True):
        load = p.bytes_in_per_s + (p.disk_read_bytes_per_s if b == a.leader else 0.0)
        out[(b, d)] = out.get((b, d), 0.0) + load
    return out


def plan_greedy_rebalance(snapshot: ClusterSnapshot, options: GreedyOptions | None = None) -> Plan:
    """A rebalance plan for every pool of ``snapshot``; the same snapshot always gives the same plan."""
    options = options or GreedyOptions()
    state = _State(snapshot)
    moved_bytes = 0
    moves_done = 0
    for pool in sorted({b.pool for b in snapshot.brokers}):
        disks = balance_disks(snapshot, pool)
        if not disks:
            continue
        total_max = sum(snapshot.index.disk_by_id[d].max_bytes_per_s for d in disks)
        mean = sum(state.load[d] for d in disks) / total_max
        heap = [(-state.util(d), d) for d in disks]
        heapq.heapify(heap)
        while heap and moves_done < options.max_moves:
            neg_util, src = heapq.heappop(heap)
            if -neg_util != state.util(src):
                continue  # stale entry; a fresh one is in the heap
            if -neg_util <= mean * options.tolerance:
                break
            move = _best_move(state, src, disks, pool, options, moved_bytes)
            if move is None:
                continue  # nothing helps this disk; leave it out of further rounds
            p, new = move
            touched = _apply_move(state, p, new)
            moved_bytes += p.size_bytes
            moves_done += 1
            for d in touched:
                if d in state.load and snapshot.index.broker_by_id[d[0]].pool == pool:
                    heapq.heappush(heap, (-state.util(d), d))
    return _to_plan(snapshot, state)


def _best_move(state: _State, src: DiskId, disks: tuple[DiskId, ...], pool: str, options: GreedyOptions,
               moved_bytes: int) -> tuple[Partition, _Assignment] | None:
    index = state.snapshot.index
    src_util = state.util(src)
    candidates = []
    for pid in state.on_disk[src]:
        p = index.partition_by_id[pid]
        if index.topic_by_name[p.topic].pool != pool:
            continue
        if options.max_bytes is not None and moved_bytes + p.size_bytes > options.max_bytes:
            continue
        a = state.current(p)
        load = _contributions(p, a).get(src, 0.0)
        if load > 0:
            candidates.append((-load, pid, p))
    candidates.sort(key=lambda c: (c[0], c[1]))
    targets = heapq.nsmallest(options.targets_per_move, disks, key=lambda d: (state.util(d), d))
    for _, _, p in candidates[: options.candidates_per_disk]:
        a = state.current(p)
        position = next(i for i, (b, d) in enumerate(zip(a.replicas, a.dirs, strict=True)) if (b, d) == src)
        old = _contributions(p, a)
        for dst in targets:
            if state.util(dst) >= src_util:
                break
            if not _valid_target(state, p, a, position, dst, options.capacity_headroom):
                continue
            new = _moved(a, position, dst)
            after = _contributions(p, new)
            peak = max((state.load.get(d, 0.0) - old.get(d, 0.0) + after.get(d, 0.0))
                       / index.disk_by_id[d].max_bytes_per_s for d in set(old) | set(after))
            if peak < src_util - 1e-12:
                return p, new
    return None


def _valid_target(state: _State, p: Partition, a: _Assignment, position: int, dst: DiskId,
                  headroom: float) -> bool:
    index = state.snapshot.index
    src_broker = a.replicas[position]
    dst_broker, _ = dst
    disk = index.disk_by_id[dst]
    if state.used[dst] + p.size_bytes > disk.capacity_bytes * (1.0 - headroom):
        return False
    if not index.broker_by_id[dst_broker].is_alive:
        return False
    if dst_broker == src_broker:
        return True  # intra-broker move to another log dir
    if dst_broker in a.replicas:
        return False
    src_b, dst_b = index.broker_by_id[src_broker], index.broker_by_id[dst_broker]
    if src_b.idc != dst_b.idc:
        return False
    other_racks = {index.broker_by_id[b].rack for i, b in enumerate(a.replicas)
                   if i != position and index.broker_by_id[b].idc == dst_b.idc}
    return dst_b.rack not in other_racks or src_b.rack in other_racks


def _moved(a: _Assignment, position: int, dst: DiskId) -> _Assignment:
    replicas, dirs = list(a.replicas), list(a.dirs)
    old_broker = replicas[position]
    replicas[position], dirs[position] = dst
    leader = a.leader
    if leader == old_broker and dst[0] != old_broker:
        leader = replicas[0]  # Kafka: a removed leader hands over to the first target replica
    return _Assignment(replicas, dirs, leader)


def _apply_move(state: _State, p: Partition, new: _Assignment) -> set[DiskId]:
    old = state.current(p)
    old_c, new_c = _contributions(p, old), _contributions(p, new)
    for d, v in old_c.items():
        state.load[d] -= v
    for d, v in new_c.items():
        state.load[d] += v
    for pair in zip(old.replicas, old.dirs, strict=True):
        state.on_disk[pair].discard(p.id)
        state.used[pair] -= p.size_bytes
    for pair in zip(new.replicas, new.dirs, strict=True):
        state.on_disk[pair].add(p.id)
        state.used[pair] += p.size_bytes
    state.assign[p.id] = new
    return set(old_c) | set(new_c)


def _to_plan(snapshot: ClusterSnapshot, state: _State) -> Plan:
    index = snapshot.index
    moves = []
    for pid in sorted(state.assign):
        a = state.assign[pid]
        p = index.partition_by_id[pid]
        if tuple(a.replicas) != p.replicas or tuple(a.dirs) != p.log_dirs:
            moves.append(PartitionMove(topic=p.topic, partition=p.partition, replicas=tuple(a.replicas),
                                       log_dirs=tuple(a.dirs)))
    draft = Plan(cluster=snapshot.cluster, kind=KIND, moves=tuple(moves))
    after = apply_plan(snapshot, draft)
    return Plan(cluster=draft.cluster, kind=KIND, moves=draft.moves, summary=summarize_plan(snapshot, after, draft),
                notes=_notes(after))


def _notes(after: ClusterSnapshot) -> tuple[str, ...]:
    """Say where a single replica alone keeps the peak above the pool mean: no move can fix that."""
    return tuple(
        f"pool {pool}: one replica alone loads even the fastest disk to {floor:.2f} (pool mean {mean:.2f})"
        for pool, (mean, floor) in replica_floors(after).items() if floor > mean
    )


def replica_floors(snapshot: ClusterSnapshot) -> Mapping[str, tuple[float, float]]:
    """Per pool: (mean utilisation, the lowest peak the heaviest single replica allows).

    The floor is the heaviest replica's load over the fastest disk of the pool. O(replicas).
    """
    index = snapshot.index
    out: dict[str, tuple[float, float]] = {}
    for pool in sorted({b.pool for b in snapshot.brokers}):
        disks = balance_disks(snapshot, pool)
        if not disks:
            continue
        total_max = sum(index.disk_by_id[d].max_bytes_per_s for d in disks)
        fastest = max(index.disk_by_id[d].max_bytes_per_s for d in disks)
        heaviest = max((index.partition_by_id[pid].replica_load(d[0])
                        for d in disks for pid in index.replicas_on_disk[d]), default=0.0)
        out[pool] = (sum(index.disk_load[d] for d in disks) / total_max, heaviest / fastest)
    return out
