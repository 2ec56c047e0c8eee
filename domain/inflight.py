"""Planning input from a cluster caught mid-move: each partition at the replica set its reassignment targets.

Goal: while KIP-455 reassignments run, Kafka reports a moving partition's replica list as target + the
replicas being removed (RF + 1 or more members). A snapshot taken then and handed to a planner made it
plan RF-4 targets for RF-3 partitions (issue 16, item 11); the planner must see the replica set the
cluster is converging to.

Method: :func:`settle_moves` rewrites only the partitions named in ``removing`` (partition -> brokers an
in-flight reassignment removes, as ``ListPartitionReassignments`` reports them): the removed replicas are
dropped from ``replicas`` (order kept), ``log_dirs`` (aligned) and ``isr``; the leader stays when it is a
target replica, else it becomes the first in-sync target (what Kafka's controller elects when the move
completes; the first target if none is in sync yet).

Why target sets rather than refusing to plan: a move of a large partition can run for hours, and a busy
cluster always has one somewhere; the target set is what the cluster will hold, so a plan made from it is
still right once the moves complete (and the executor refuses to start while moves it does not own are in
flight, so it never acts on a partition that is still moving).

Guarantee: partitions not in flight, and the snapshot itself when nothing is, are returned unchanged (the
same objects); the result is a valid snapshot (replication factor as the target, aligned log dirs).
Cost: O(partitions of the topics in flight).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from domain.model import ClusterSnapshot, Partition, PartitionId


def settle_partition(p: Partition, removing: Collection[int]) -> Partition:
    """``p`` at the replica set its in-flight reassignment targets (``removing`` dropped)."""
    gone = set(removing)
    keep = [i for i, b in enumerate(p.replicas) if b not in gone]
    if not gone or len(keep) == len(p.replicas) or not keep:
        return p
    replicas = tuple(p.replicas[i] for i in keep)
    log_dirs = tuple(p.log_dirs[i] for i in keep if i < len(p.log_dirs))
    isr = tuple(b for b in p.isr if b not in gone)
    leader = p.leader
    if leader is None or leader in gone:
        in_sync = [b for b in replicas if b in isr]
        leader = in_sync[0] if in_sync else replicas[0]
    return replace(p, replicas=replicas, log_dirs=log_dirs, isr=isr, leader=leader)


def settle_moves(snapshot: ClusterSnapshot, removing: Mapping[PartitionId, Collection[int]]) -> ClusterSnapshot:
    """``snapshot`` with every partition of ``removing`` at its reassignment's target replica set."""
    moving = {tp: set(r) for tp, r in removing.items() if r}
    if not moving:
        return snapshot
    topics = {t for t, _ in moving}
    new_topics = tuple(
        replace(t, partitions=tuple(settle_partition(p, moving.get(p.id, ())) for p in t.partitions))
        if t.name in topics else t
        for t in snapshot.topics)
    return replace(snapshot, topics=new_topics)
