"""Apply a plan to a snapshot: the assignment the cluster will have once the plan is executed."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from domain.model import Broker, ClusterSnapshot, DiskId, Partition
from domain.plan import Plan


def resolve_log_dirs(snapshot: ClusterSnapshot, current: Partition, move_replicas: tuple[int, ...],
                     move_dirs: tuple[str | None, ...]) -> tuple[str, ...]:
    """Concrete log dir of each target replica.

    ``None`` ("any") keeps the replica's current dir when the broker already hosts it, else takes the
    broker's first disk (what a broker does for "any": its own choice; the estimate is conservative).
    Unknown brokers map to ``""``. O(RF).
    """
    index = snapshot.index
    existing = dict(zip(current.replicas, current.log_dirs, strict=True))
    dirs = []
    for broker_id, path in zip(move_replicas, move_dirs, strict=True):
        if path is None:
            broker = index.broker_by_id.get(broker_id)
            path = existing.get(broker_id) or (broker.disks[0].path if broker and broker.disks else "")
        dirs.append(path)
    return tuple(dirs)


def apply_plan(snapshot: ClusterSnapshot, plan: Plan) -> ClusterSnapshot:
    """The snapshot as it will be after ``plan`` completes. Entries naming unknown partitions are ignored
    (the invariant checker reports them).

    Follows Kafka's rules: a leader that stays in the replica set keeps leadership; one that is removed
    hands it to the first target replica; then the plan's leader changes are applied. All target
    replicas are in sync when a reassignment completes. Disk ``used_bytes`` follow the moved sizes.
    O(partitions + disks).
    """
    index = snapshot.index
    changed: dict[tuple[str, int], Partition] = {}
    delta_used: dict[DiskId, int] = defaultdict(int)
    for move in plan.moves:
        current = index.partition_by_id.get(move.id)
        if current is None or len(move.replicas) != len(move.log_dirs):
            continue
        dirs = resolve_log_dirs(snapshot, current, move.replicas, move.log_dirs)
        leader = current.leader if current.leader in move.replicas else move.replicas[0]
        for old in zip(current.replicas, current.log_dirs, strict=True):
            delta_used[old] -= current.size_bytes
        for new in zip(move.replicas, dirs, strict=True):
            delta_used[new] += current.size_bytes
        changed[move.id] = replace(current, replicas=move.replicas, log_dirs=dirs, leader=leader,
                                   isr=move.replicas)
    for change in plan.leaders:
        current = changed.get(change.id) or index.partition_by_id.get(change.id)
        if current is not None and change.leader in current.replicas:
            changed[change.id] = replace(current, leader=change.leader)

    topics = tuple(
        replace(t, partitions=tuple(changed.get(p.id, p) for p in t.partitions))
        if any(p.id in changed for p in t.partitions) else t
        for t in snapshot.topics
    )
    brokers = tuple(_with_used_delta(b, delta_used) for b in snapshot.brokers)
    return replace(snapshot, brokers=brokers, topics=topics)


def _with_used_delta(broker: Broker, delta_used: dict[DiskId, int]) -> Broker:
    if not any(delta_used.get((broker.id, d.path)) for d in broker.disks):
        return broker
    disks = tuple(
        replace(d, used_bytes=max(0, d.used_bytes + delta_used.get((broker.id, d.path), 0)))
        for d in broker.disks
    )
    return replace(broker, disks=disks)


__all__ = ["apply_plan", "resolve_log_dirs"]
