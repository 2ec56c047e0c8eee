"""Goal: resize a resource pool — grow it from the free pool, shrink it by draining brokers back.

Grow: pick ``count`` alive brokers of the free pool, spreading them over IDCs (the IDC with the least
pool throughput first) and racks, move them into the pool (a metadata change: the returned snapshot)
and fill them (:func:`planners.disk_balance.fill_receivers`): only the pool's own partitions move, only
onto the new brokers, from the pool's disks above its mean, hottest first, until the new disks reach the
pool's mean — nothing else in the cluster is touched. The plan is valid against the grown snapshot.

Shrink: drain the given brokers (or the ``count`` brokers whose data is cheapest to move, keeping
enough brokers in every IDC for the pool's placement policies and replication factors); once the plan
has run, the brokers go back to the free pool. Deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from domain import ClusterSnapshot, Plan
from planners.disk_balance import KIND as REBALANCE
from planners.disk_balance import BalanceOptions, fill_receivers
from planners.drain import DrainOptions, plan_drain
from planners.workspace import Bounds, PlannerError, Workspace

KIND_SHRINK = "pool-shrink"
KIND_GROW = "pool-grow"
FREE_POOL = "free"


@dataclass(frozen=True, slots=True)
class PoolGrowth:
    """The brokers taken from the free pool, the snapshot with them in the pool, and the rebalance plan."""

    brokers: tuple[int, ...]
    snapshot: ClusterSnapshot
    plan: Plan


@dataclass(frozen=True, slots=True)
class ResizeOptions:
    """Bounds of the plan and the name of the free pool."""

    bounds: Bounds = field(default_factory=Bounds)
    free_pool: str = FREE_POOL


def plan_pool_grow(snapshot: ClusterSnapshot, pool: str, count: int,
                   options: ResizeOptions | None = None) -> PoolGrowth:
    """Grow ``pool`` by ``count`` free brokers and plan the rebalance that fills them."""
    options = options or ResizeOptions()
    free = [b for b in snapshot.brokers if b.pool == options.free_pool and b.is_alive]
    if count < 1 or count > len(free):
        raise PlannerError(f"cannot take {count} broker(s): the free pool {options.free_pool!r} has {len(free)} alive")
    capacity: Counter[str] = Counter()
    racks: Counter[tuple[str, str]] = Counter()
    for b in snapshot.brokers:
        if b.pool == pool and b.is_alive:
            capacity[b.idc] += int(sum(d.max_bytes_per_s for d in b.disks))
            racks[(b.idc, b.rack)] += 1
    chosen: list[int] = []
    remaining = sorted(free, key=lambda b: b.id)
    for _ in range(count):
        best = min(remaining, key=lambda b: (capacity[b.idc], racks[(b.idc, b.rack)], b.id))
        remaining.remove(best)
        chosen.append(best.id)
        capacity[best.idc] += int(sum(d.max_bytes_per_s for d in best.disks))
        racks[(best.idc, best.rack)] += 1
    taken = set(chosen)
    grown = replace(snapshot, brokers=tuple(replace(b, pool=pool) if b.id in taken else b for b in snapshot.brokers))
    ws = Workspace(grown, options.bounds)
    receivers = np.array([i for b in sorted(taken) for i in ws.broker_disks[b]], dtype=np.int64)
    filled = fill_receivers(ws, pool, np.sort(receivers), BalanceOptions(bounds=options.bounds))
    plan = ws.to_plan(REBALANCE, filled)
    notes = (f"brokers {sorted(taken)} move from pool {options.free_pool!r} to {pool!r} before this plan runs",
             f"only pool {pool!r}'s partitions move, and only onto the new brokers", *plan.notes)
    plan = replace(plan, kind=KIND_GROW, notes=notes)
    return PoolGrowth(brokers=tuple(sorted(taken)), snapshot=grown, plan=plan)


def choose_shrink(snapshot: ClusterSnapshot, pool: str, count: int) -> list[int]:
    """The ``count`` brokers of ``pool`` cheapest to drain, keeping enough per IDC for the pool's topics."""
    members = [b for b in snapshot.brokers if b.pool == pool]
    index = snapshot.index
    need: Counter[str] = Counter()
    rf = 0
    for t in snapshot.topics:
        if t.pool != pool:
            continue
        for idc, n in (snapshot.placement_of(t) or {}).items():
            need[idc] = max(need[idc], n)
        rf = max([rf, *(len(p.replicas) for p in t.partitions)])
    alive_in: Counter[str] = Counter(b.idc for b in members if b.is_alive)
    alive_total = sum(alive_in.values())
    chosen: list[int] = []
    for b in sorted(members, key=lambda b: (index.broker_load[b.id].size_bytes, b.id)):
        if len(chosen) == count:
            break
        if b.is_alive and (alive_in[b.idc] - 1 < need[b.idc] or alive_total - 1 < rf):
            continue
        chosen.append(b.id)
        if b.is_alive:
            alive_in[b.idc] -= 1
            alive_total -= 1
    if len(chosen) < count:
        raise PlannerError(f"pool {pool!r} cannot lose {count} broker(s) and still hold its topics' "
                           f"replication factor and placement policies")
    return chosen


def plan_pool_shrink(snapshot: ClusterSnapshot, pool: str, brokers: Sequence[int] = (), count: int = 0,
                     options: ResizeOptions | None = None) -> Plan:
    """Drain ``brokers`` (or the ``count`` cheapest) out of ``pool``; they return to the free pool after."""
    options = options or ResizeOptions()
    ids = list(brokers) or choose_shrink(snapshot, pool, count)
    outside = sorted(b for b in ids if snapshot.index.broker_by_id.get(b) is None
                     or snapshot.index.broker_by_id[b].pool != pool)
    if outside:
        raise PlannerError(f"broker(s) {outside} are not in pool {pool!r}")
    plan = plan_drain(snapshot, ids, DrainOptions(bounds=options.bounds), kind=KIND_SHRINK)
    notes = (*plan.notes, f"after this plan, move brokers {sorted(ids)} to pool {options.free_pool!r}")
    return replace(plan, notes=notes)
