"""A broker-level assignment proposed by another tool, as one of our plans, so our metrics can score it.

Goal: Kafka's ``kafka-reassign-partitions --generate`` and external balancers (kafka-utils) propose
replica *brokers* per partition, never log dirs; the benchmark scores their proposals with the same
figures as Guardian's plans, so each must become a :class:`domain.Plan`.

Method: partitions in snapshot order (topics, then partitions). A replica that stays on its broker keeps
its log dir; a new one goes to the broker's log dir holding the fewest partitions at that point (ties by
path) — the broker's own choice when the reassignment says ``"any"``. A partition whose target differs
from its current replicas (set or order) becomes a :class:`domain.PartitionMove`. With
``elect_preferred`` each partition whose target's first replica is not its leader after the move also
gets a :class:`domain.LeaderChange` to that replica (the preferred-replica election that follows a
leader-balancing reassignment).

Guarantee: deterministic for equal inputs; the same log-dir rule for every tool compared. Partitions
absent from ``targets`` are left as they are. Cost: O(replicas + disks).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from domain import ClusterSnapshot, LeaderChange, PartitionId, PartitionMove, Plan


def plan_from_assignment(snapshot: ClusterSnapshot, targets: Mapping[PartitionId, Sequence[int]], kind: str,
                         elect_preferred: bool = False) -> Plan:
    """The plan that reassigns each partition in ``targets`` to its broker list (see the module docstring)."""
    index = snapshot.index
    dir_count: dict[int, Counter[str]] = {b.id: Counter({d.path: 0 for d in b.disks}) for b in snapshot.brokers}
    for p in index.partitions:
        for b, d in zip(p.replicas, p.log_dirs, strict=True):
            dir_count.setdefault(b, Counter())[d] += 1
    moves: list[PartitionMove] = []
    leaders: list[LeaderChange] = []
    for topic in snapshot.topics:
        for p in topic.partitions:
            target = targets.get(p.id)
            if target is None:
                continue
            replicas = tuple(target)
            old = dict(zip(p.replicas, p.log_dirs, strict=True))
            dirs = []
            for b in replicas:
                if b in old:
                    dirs.append(old[b])
                else:
                    counts = dir_count.setdefault(b, Counter())
                    d = min(counts, key=lambda x: (counts[x], x))
                    counts[d] += 1
                    dirs.append(d)
            for b, d in old.items():
                if b not in replicas:
                    dir_count[b][d] -= 1
            if replicas != p.replicas or tuple(dirs) != p.log_dirs:
                moves.append(PartitionMove(p.topic, p.partition, replicas, tuple(dirs)))
            if elect_preferred and replicas:
                after = p.leader if p.leader in replicas else replicas[0]
                if after != replicas[0]:
                    leaders.append(LeaderChange(p.topic, p.partition, replicas[0]))
    return Plan(cluster=snapshot.cluster, kind=kind, moves=tuple(moves), leaders=tuple(leaders))
