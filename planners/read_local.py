"""Goal: read-local placement — a replica in every IDC whose consumers read a topic heavily (KIP-392).

With nearest-replica reads (``broker.rack`` per IDC, a rack-aware ``replica.selector.class``,
``client.rack`` on the consumer) a consumer reads from a replica in its own IDC — if there is one. For
each topic and each IDC whose consumers read it at or above ``threshold`` bytes/s (the read demand that
:func:`domain.nearest_reads.assess_nearest_reads` derives from the audit lineage), every partition of the
topic without a replica in that IDC gets one, so those reads stop crossing the leased line:

* which replica moves: a follower (the leader stays, so writes keep their IDC), from the IDC holding the
  most replicas of the partition, never the last replica of another IDC the topic's readers need; ties
  on replica position;
* where: the valid disk of the topic's pool in the reading IDC with the lowest median historical load
  (:meth:`Workspace.best_target`: every hard goal of :mod:`planners.constraints` — pool, alive brokers,
  the IDC placement policy not missed by more than before, rack spread, capacity headroom — and the
  plan's byte / partition bounds).

The planner moves replicas, it never adds one: the shared checker keeps every partition's replication
factor. Where no move is possible (the placement policy pins every replica, RF 1, capacity, bounds) the
partition is named in the notes with the reason, and raising RF or the policy is the operator's call.

Never worse: only moves the hard goals allow; a partition that already has a replica in an IDC is never
touched for it. Deterministic: topics, IDCs and partitions in sorted order, ties on snapshot order.
Cost: O(partitions of the demanded topics x (RF + disks of the IDC)); a 100k-partition cluster with a
tenth of its topics demanded plans in well under a second.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from domain import ClusterSnapshot, Partition, Plan
from planners.workspace import Bounds, PlannerError, Workspace

KIND = "read-local"
MAX_NAMED = 12


@dataclass(frozen=True, slots=True)
class ReadLocalOptions:
    """``threshold``: bytes/s an IDC's consumers must read from a topic to get a local replica."""

    bounds: Bounds = field(default_factory=Bounds)
    threshold: float = 1_048_576.0


def wanted_idcs(snapshot: ClusterSnapshot, demand: Mapping[str, Mapping[str, float]],
                threshold: float) -> dict[str, list[str]]:
    """Topic -> the IDCs (sorted) whose read demand reaches ``threshold``; unknown topics and IDCs dropped."""
    topics = {t.name for t in snapshot.topics}
    idcs = {b.idc for b in snapshot.brokers}
    out: dict[str, list[str]] = {}
    for topic in sorted(demand):
        chosen = sorted(i for i, rate in demand[topic].items() if i in idcs and rate >= threshold)
        if topic in topics and chosen:
            out[topic] = chosen
    return out


def plan_read_local(snapshot: ClusterSnapshot, demand: Mapping[str, Mapping[str, float]],
                    options: ReadLocalOptions | None = None) -> Plan:
    """A plan that gives every partition of each demanded topic a replica in each demanding IDC."""
    options = options or ReadLocalOptions()
    if not options.threshold >= 0:
        raise PlannerError(f"threshold must be >= 0, got {options.threshold!r}")
    wanted = wanted_idcs(snapshot, demand, options.threshold)
    ws = Workspace(snapshot, options.bounds)
    stuck: list[str] = []
    placed: Counter[str] = Counter()
    for topic in sorted(wanted):
        t = ws.index.topic_by_name[topic]
        for idc in wanted[topic]:
            for p in sorted(t.partitions, key=lambda x: x.partition):
                reason = _place(ws, p, idc, wanted[topic])
                if reason is None:
                    placed[idc] += 1
                elif reason:
                    stuck.append(f"{p.topic}-{p.partition}->{idc} ({reason})")
    notes = []
    if placed:
        notes.append("replicas moved into reading IDCs: " + ", ".join(f"{i}: {n}" for i, n in sorted(placed.items()))
                     + f"; copies {ws.moved_bytes:,} bytes")
    skipped = sorted(set(demand) - set(wanted))
    if skipped:
        notes.append(f"no IDC reaches {options.threshold:,.0f} bytes/s (or topic unknown): "
                     + ", ".join(skipped[:MAX_NAMED]))
    if stuck:
        notes.append(f"{len(stuck)} partition(s) cannot get a local replica by a move (raise RF or the placement "
                     f"policy): " + "; ".join(stuck[:MAX_NAMED]))
    return ws.to_plan(KIND, notes)


def _place(ws: Workspace, p: Partition, idc: str, needed: list[str]) -> str | None:
    """Move one follower of ``p`` into ``idc``; ``None`` when moved, "" when already local, else the reason."""
    replicas, _ = ws.replicas(p)
    where = [ws.topo.idc[b] for b in replicas]
    if idc in where:
        return ""
    if len(replicas) < 2:
        return "RF 1: moving the only replica moves the writes"
    group = ws.group(ws.index.topic_by_name[p.topic].pool, idc)
    if len(group) == 0:
        return f"no alive broker of the topic's pool in {idc}"
    counts = Counter(where)
    leader = ws.leader(p)
    order = sorted((k for k, b in enumerate(replicas) if b != leader
                    and not (where[k] in needed and counts[where[k]] == 1)),
                   key=lambda k: (-counts[where[k]], k))
    if not order:
        return "every follower is the last replica of an IDC that reads it"
    for k in order:
        target = ws.best_target(p, k, group)
        if target is not None:
            ws.move_replica(p, k, target)
            return None
    return "placement policy, rack spread, capacity or plan bounds"


__all__ = ["KIND", "ReadLocalOptions", "plan_read_local", "wanted_idcs"]
