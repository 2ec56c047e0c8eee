"""Goal: pre-allocate a new topic — an explicit assignment from its expected traffic.

Each partition's expected bytes-in (the topic's total split evenly, given or taken from a traffic
model) is placed replica by replica by load first: the candidate disks are the alive disks of the
topic's pool whose projected utilisation *after* taking the replica (median historical utilisation +
what this allocation already added + the replica, over the disk's max throughput) is within
``SPREAD_SLACK`` x the pool's mean of the lowest such figure (water-filling: a loaded broker takes
nothing while cooler disks have headroom); among those, the broker holding the fewest of this topic's
replicas (leaders count double), then the lowest projected utilisation, wins. No broker takes more
than ``CONCENTRATION`` x its fair share of the topic's replicas (or of its leaders) while another
broker can (so one broker's loss does not take most of the topic). Honouring the IDC
placement policy (IDC with the most required replicas first, so leaders sit in the main IDC),
distinct brokers, rack spread within an IDC where racks allow, and capacity headroom. The first
replica is the preferred leader.

The result is a :class:`Plan` of kind ``preallocate`` whose entries are the new partitions (create
the topic with ``kafka-topics --create --replica-assignment``, given in the notes) and the
:class:`Topic` to create; it is checked by :func:`check_new_topic`. Deterministic.
O(partitions x RF x disks of the pool).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from domain import (
    ClusterSnapshot,
    Partition,
    PartitionMove,
    Plan,
    Topic,
    check_new_topic,
    summarize_plan,
)
from planners.workspace import Bounds, PlannerError, Workspace

KIND = "preallocate"
SPREAD_SLACK = 0.05  # x pool mean utilisation: disks this close to the coolest count as equally cool
CONCENTRATION = 2.0  # most replicas of the new topic on one broker, as a multiple of the even share


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create: partitions, replication factor and expected traffic (``None``: ask the model)."""

    name: str
    partitions: int
    replication_factor: int = 3
    bytes_in_per_s: float | None = None
    pool: str = "shared"
    placement: Mapping[str, int] | None = None
    disk_read_bytes_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Preallocation:
    """The topic with its assignment and the plan that records it."""

    topic: Topic
    plan: Plan


@dataclass(frozen=True, slots=True)
class PreallocateOptions:
    """``traffic_model``: expected bytes-in per topic name, used when the request gives none."""

    bounds: Bounds = field(default_factory=Bounds)
    traffic_model: Mapping[str, float] = field(default_factory=dict)


def plan_preallocation(snapshot: ClusterSnapshot, request: NewTopic,
                       options: PreallocateOptions | None = None) -> Preallocation:
    """Assign ``request``'s partitions onto the least-loaded valid disks; raises :class:`PlannerError` if impossible."""
    options = options or PreallocateOptions()
    expected = request.bytes_in_per_s
    if expected is None:
        expected = options.traffic_model.get(request.name)
    if expected is None or expected < 0 or not np.isfinite(expected):
        raise PlannerError(f"no valid expected bytes-in for topic {request.name!r} (give it or a traffic model)")
    if request.partitions < 1 or request.replication_factor < 1:
        raise PlannerError("partitions and replication factor must be >= 1")
    if request.name in snapshot.index.topic_by_name:
        raise PlannerError(f"topic {request.name!r} already exists")
    placement = dict(request.placement) if request.placement is not None else (
        dict(snapshot.default_placement) if snapshot.default_placement else None)
    if placement and sum(placement.values()) > request.replication_factor:
        raise PlannerError(f"placement {placement} needs more replicas than RF {request.replication_factor}")
    ws = Workspace(snapshot, options.bounds)
    pool_disks = ws.group(request.pool)
    slack = SPREAD_SLACK * (float(ws.proj[pool_disks].mean()) if len(pool_disks) else 0.0)
    per_partition = expected / request.partitions
    read = request.disk_read_bytes_per_s / request.partitions
    slots: list[str | None] = [idc for idc, n in sorted((placement or {}).items(), key=lambda x: (-x[1], x[0]))
                               for _ in range(n)]
    slots += [None] * (request.replication_factor - len(slots))
    parts = []
    spread = np.zeros(len(ws.disk_ids), dtype=np.float64)  # this topic's replicas (and leaders) per broker
    held = np.zeros(len(ws.disk_ids), dtype=np.int64)  # this topic's replicas per broker
    led = np.zeros(len(ws.disk_ids), dtype=np.int64)  # this topic's leaders per broker
    cap: dict[str | None, int] = {}  # per slot IDC: CONCENTRATION x the even share of its group's brokers
    lead_cap = 0
    for idc in set(slots):
        members = max(1, len({int(b) for b in ws.disk_broker[ws.group(request.pool, idc)]}))
        share = request.partitions * (slots.count(idc) if idc is not None else request.replication_factor)
        cap[idc] = int(np.ceil(CONCENTRATION * share / members))
        if idc == slots[0]:
            lead_cap = int(np.ceil(CONCENTRATION * request.partitions / members))
    for k in range(request.partitions):
        replicas: list[int] = []
        dirs: list[str] = []
        for slot, idc in enumerate(slots):
            add = per_partition + (read if slot == 0 else 0.0)
            i = _pick(ws, request.pool, idc, replicas, spread, add, slack,
                      (held < cap[idc]) & ((led < lead_cap) if slot == 0 else True))
            if i is None:
                raise PlannerError(f"no valid disk for replica {slot + 1} of partition {k} "
                                   f"(pool {request.pool!r}, IDC {idc or 'any'})")
            b, d = ws.disk_ids[i]
            replicas.append(b)
            dirs.append(d)
            ws.add_load(i, add)
            spread[ws.broker_disks[b]] += 2.0 if slot == 0 else 1.0
            held[ws.broker_disks[b]] += 1
            led[ws.broker_disks[b]] += slot == 0
        parts.append(Partition(topic=request.name, partition=k, replicas=tuple(replicas), leader=replicas[0],
                               isr=tuple(replicas), log_dirs=tuple(dirs), bytes_in_per_s=per_partition,
                               disk_read_bytes_per_s=read))
    topic = Topic(name=request.name, partitions=tuple(parts), pool=request.pool, placement=request.placement)
    violations = check_new_topic(snapshot, topic, options.bounds.check_limits())
    if violations:
        raise PlannerError("pre-allocation broke a constraint (bug): " + "; ".join(map(str, violations[:5])))
    moves = tuple(PartitionMove(p.topic, p.partition, p.replicas, p.log_dirs) for p in parts)
    draft = Plan(cluster=snapshot.cluster, kind=KIND, moves=moves)
    after = with_topic(snapshot, topic)
    assignment = ",".join(":".join(str(b) for b in p.replicas) for p in parts)
    notes = (f"create with: kafka-topics --create --topic {request.name} --replica-assignment {assignment}",
             f"expected {expected:.0f} bytes/s in over {request.partitions} partitions")
    plan = Plan(cluster=draft.cluster, kind=KIND, moves=moves, summary=summarize_plan(snapshot, after, draft),
                notes=notes)
    return Preallocation(topic=topic, plan=plan)


def _pick(ws: Workspace, pool: str, idc: str | None, chosen: list[int], spread: np.ndarray, add: float,
          slack: float, under_cap: np.ndarray) -> int | None:
    """The disk of ``pool`` (in ``idc``) on a new broker (new rack in its IDC if possible) for a replica adding
    ``add`` bytes/s: among disks whose projected utilisation after it is within ``slack`` of the lowest, the
    one on the broker holding the fewest of this topic (``spread``), then the lowest; ties on snapshot order.
    Brokers at the concentration cap (``under_cap`` false) are used only when no other broker is valid.
    """
    group = ws.group(pool, idc)
    if len(group) == 0:
        return None
    ok = ws.used[group] <= ws.limit[group]
    if chosen:
        ok &= ~np.isin(ws.disk_broker[group], np.asarray(chosen, dtype=np.int64))
    taken = {(ws.topo.idc[b], ws.topo.rack[b]) for b in chosen}
    rack_ok = np.array([(ws.topo.idc[int(b)], ws.topo.rack[int(b)]) not in taken for b in ws.disk_broker[group]],
                       dtype=bool) if taken else np.ones(len(group), dtype=bool)
    capped = under_cap[group]
    for mask in (ok & rack_ok & capped, ok & capped, ok & rack_ok, ok):
        if mask.any():
            after = np.where(mask, ws.proj[group] + add * ws.inv_max[group], np.inf)
            cool = after <= float(after.min()) + slack + 1e-12
            k = int(np.lexsort((after, np.where(cool, spread[group], np.inf)))[0])
            return int(group[k])
    return None


def with_topic(snapshot: ClusterSnapshot, topic: Topic) -> ClusterSnapshot:
    """``snapshot`` with ``topic`` created (as the pre-allocation assigned it)."""
    return replace(snapshot, topics=(*snapshot.topics, topic))
