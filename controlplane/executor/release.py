"""Smooth release: leadership-first drain of brokers in batches, and restore of what a drain moved.

Both build an ordinary :class:`Plan` plus a broker-batch number per partition, so they run through the
same executor (batches wait for zero under-replicated partitions; a drain moves leadership before any
replica). The drain here is a simple live-state builder — each drained replica goes to the alive,
non-drained broker of the same IDC holding the fewest replicas — used when no planner plan is given. The
IDC of a broker is what the observer's round (or the endpoints file) says; a broker of unknown IDC has
no "same IDC" and takes the least loaded target.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from controlplane.executor.live import ClusterFacts, declared_facts
from controlplane.executor.tasks import task_key
from domain import LeaderChange, PartitionMove, Plan
from kafkaio.endpoints import ClusterEndpoints
from kafkaio.types import LiveCluster

KIND_DRAIN = "drain"
KIND_RESTORE = "restore"


class ReleaseError(ValueError):
    """A drain or restore cannot be built (unknown broker, nothing to restore, no room)."""


def broker_batches(brokers: Sequence[int], batch_size: int) -> list[list[int]]:
    """Split brokers into consecutive batches of ``batch_size``."""
    if batch_size < 1:
        raise ReleaseError("batch size must be >= 1")
    return [list(brokers[i:i + batch_size]) for i in range(0, len(brokers), batch_size)]


def drain_plan(cluster: str, live: LiveCluster, brokers: Sequence[int], batch_size: int = 1,
               endpoints: ClusterEndpoints | ClusterFacts | None = None
               ) -> tuple[Plan, dict[tuple[str, int], int], dict[str, Any]]:
    """(plan, batch per partition, options to record) draining ``brokers`` leadership-first."""
    drained = list(dict.fromkeys(brokers))
    unknown = sorted(set(drained) - set(live.alive))
    if unknown:
        raise ReleaseError(f"broker(s) {unknown} are not alive members of cluster {cluster}")
    batches = broker_batches(drained, batch_size)
    batch_of = {b: i for i, bs in enumerate(batches) for b in bs}
    facts = (declared_facts(endpoints) if isinstance(endpoints, ClusterEndpoints)
             else endpoints.facts() if endpoints is not None else {})
    idc = {b: f.idc for b, f in facts.items() if f.idc}  # observed or declared; never read from a rack name
    targets = sorted(b for b in live.alive if b not in batch_of)
    load: Counter[int] = Counter(r for p in live.partitions.values() for r in p.replicas)
    moves: list[PartitionMove] = []
    leaders: list[LeaderChange] = []
    part_batch: dict[tuple[str, int], int] = {}
    original_leaders: dict[str, int] = {}
    for tp, p in sorted(live.partitions.items()):
        hit = [b for b in p.replicas if b in batch_of]
        if not hit:
            continue
        part_batch[tp] = min(batch_of[b] for b in hit)
        original_leaders[task_key(*tp)] = p.leader
        new = list(p.replicas)
        for i, b in enumerate(new):
            if b not in batch_of:
                continue
            options = [c for c in targets if c not in new]
            if not options:
                raise ReleaseError(f"no broker left to take the replica of {tp[0]}-{tp[1]} on broker {b}")
            old_idc = idc.get(b)
            pick = min(options, key=lambda c: (old_idc is None or idc.get(c) != old_idc, load[c], c))
            load[pick] += 1
            load[b] -= 1
            new[i] = pick
        if p.leader in batch_of:
            stay = [b for b in p.replicas if b not in batch_of and b in p.isr]
            lead = stay[0] if stay else new[0]
            if stay:
                leaders.append(LeaderChange(tp[0], tp[1], lead))
            new = [lead, *[b for b in new if b != lead]]
        moves.append(PartitionMove(tp[0], tp[1], tuple(new), (None,) * len(new)))
    plan = Plan(cluster=cluster, kind=KIND_DRAIN, moves=tuple(moves), leaders=tuple(leaders),
                notes=(f"drain brokers {drained} in {len(batches)} batch(es), leadership first",))
    return plan, part_batch, {"release": KIND_DRAIN, "brokers": drained, "broker_batches": batches,
                              "leadership_first": True, "original_leaders": original_leaders}


def recorded_replicas(drain_execution: Mapping[str, Any]) -> dict[tuple[str, int], tuple[int, ...]]:
    """Partition -> the replica set a drain recorded before it moved it (its completed reassignments): what a
    restore brings back, and what the invariant checker judges a restore move against (``check_plan``'s
    ``recorded``), so a partition whose original placement already broke a rule may still go back."""
    return {(t["topic"], int(t["partition"])): tuple(int(b) for b in t["source_replicas"])
            for t in drain_execution.get("tasks", {}).values()
            if t["action"] == "reassign" and t["state"] == "COMPLETED"}


def drained_brokers(drain_execution: Mapping[str, Any]) -> list[int]:
    """The brokers a drain emptied: recorded by ``exec drain``, else every broker its reassignments removed."""
    recorded = drain_execution.get("options", {}).get("brokers")
    if recorded:
        return [int(b) for b in recorded]
    removed: set[int] = set()
    for t in drain_execution.get("tasks", {}).values():
        if t["action"] == "reassign":
            removed |= set(t["source_replicas"]) - set(t["target_replicas"])
    return sorted(removed)


def restore_plan(cluster: str, drain_execution: Mapping[str, Any],
                 live: LiveCluster | Collection[tuple[str, int]]
                 ) -> tuple[Plan, dict[tuple[str, int], int], dict[str, Any]]:
    """(plan, batch per partition, options) putting back replicas, log dirs and leaders a drain moved.

    ``live``: the live cluster, or the partitions it has now (from a snapshot). A drain is an execution
    ``exec drain`` started (``options.release``) or the execution of a ``drain`` plan (``options.kind``,
    recorded by the service); without recorded leaders, the first recorded replica (the preferred
    leader) leads again."""
    opts = drain_execution.get("options", {})
    if opts.get("release") != KIND_DRAIN and opts.get("kind") != KIND_DRAIN:
        raise ReleaseError(f"execution {drain_execution.get('id')} is not a drain")
    existing = live.partitions if isinstance(live, LiveCluster) else live
    original_leaders: Mapping[str, int] = opts.get("original_leaders", {})
    moves: list[PartitionMove] = []
    leaders: list[LeaderChange] = []
    batches: dict[tuple[str, int], int] = {}
    for t in sorted(drain_execution["tasks"].values(), key=lambda x: x["key"]):
        if t["action"] != "reassign" or t["state"] != "COMPLETED":
            continue
        tp = (t["topic"], t["partition"])
        if tp not in existing:
            continue
        dirs = tuple(t["source_log_dirs"]) if t["source_log_dirs"] else (None,) * len(t["source_replicas"])
        moves.append(PartitionMove(tp[0], tp[1], tuple(t["source_replicas"]), dirs))
        batches[tp] = int(t["batch"])
        lead = original_leaders.get(t["key"], None if original_leaders else t["source_replicas"][0])
        if lead is not None and lead >= 0:
            leaders.append(LeaderChange(tp[0], tp[1], int(lead)))
    if not moves:
        raise ReleaseError(f"drain execution {drain_execution.get('id')} moved nothing that can be restored")
    brokers = drained_brokers(drain_execution)
    plan = Plan(cluster=cluster, kind=KIND_RESTORE, moves=tuple(moves), leaders=tuple(leaders),
                notes=(f"restore brokers {brokers} drained by execution {drain_execution.get('id')}",))
    return plan, batches, {"release": KIND_RESTORE, "brokers": brokers, "drain_execution": drain_execution.get("id")}
