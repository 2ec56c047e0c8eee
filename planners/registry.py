"""Every planner behind one signature: ``(snapshot, params) -> Plan`` (``PLANNERS``), and the kinds that
need metadata changes or several plans behind ``(snapshot, params) -> Proposal`` (``PROPOSERS``: every
kind of ``PLANNERS`` too), for the service layer.

``params`` is a plain JSON-like mapping (what an API request carries). Common bounds: ``max_bytes``,
``max_partitions`` (alias ``max_moves``), ``capacity_headroom``. Unknown or ill-typed parameters raise
:class:`TypeError`; impossible requests raise :class:`planners.PlannerError` (a ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from domain import ClusterSnapshot, Plan
from planners.disk_balance import BalanceOptions, plan_rebalance
from planners.drain import DrainOptions, plan_drain
from planners.idc_migration import MigrationOptions, plan_idc_migration, select_topics, with_placement
from planners.leaders import LeaderOptions, plan_leaders
from planners.pool_resize import ResizeOptions, plan_pool_grow, plan_pool_shrink
from planners.preallocate import NewTopic, PreallocateOptions, plan_preallocation
from planners.read_local import ReadLocalOptions, plan_read_local
from planners.workspace import Bounds

Planner = Callable[[ClusterSnapshot, Mapping[str, Any]], Plan]


def _take(params: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    value = params.pop(name, default)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise TypeError(f"parameter {name!r} must be {kind}, got {value!r}")
    return value


def _bounds(params: dict[str, Any]) -> Bounds:
    max_partitions = _take(params, "max_partitions", int)
    moves = _take(params, "max_moves", int)
    headroom = _take(params, "capacity_headroom", (int, float), 0.10)
    if not 0 <= headroom < 1:
        raise TypeError(f"parameter 'capacity_headroom' must be in [0, 1), got {headroom!r}")
    return Bounds(max_bytes=_take(params, "max_bytes", int),
                  max_partitions=max_partitions if max_partitions is not None else moves,
                  capacity_headroom=float(headroom))


def _done(params: dict[str, Any]) -> None:
    if params:
        raise TypeError(f"unexpected parameter(s) {sorted(params)}")


def _ids(params: dict[str, Any], name: str, required: bool) -> list[int]:
    value = params.pop(name, None)
    if value is None and not required:
        return []
    if not isinstance(value, list | tuple) or not value or not all(isinstance(b, int) for b in value):
        raise TypeError(f"parameter {name!r} must be a non-empty list of broker ids")
    return list(value)


def rebalance(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Disk-load rebalance; extra parameters ``target`` (aliases ``threshold``, ``tolerance``; default 1.10: the
    peak/mean every pool ends at or under, and the plan stops there), ``floor`` (default 0.30: no rebalance while
    a pool's hottest disk is at or under this utilisation) and
    ``evacuate_dead`` (bool, default false: replicas on dead brokers stay, and the notes say so)."""
    p = dict(params)
    bounds = _bounds(p)
    evacuate = p.pop("evacuate_dead", False)
    if not isinstance(evacuate, bool):
        raise TypeError(f"parameter 'evacuate_dead' must be a bool, got {evacuate!r}")
    tolerance = _take(p, "tolerance", (int, float))
    target = _take(p, "target", (int, float))
    threshold = float(_take(p, "threshold", (int, float), target if target is not None else
                            tolerance if tolerance is not None else 1.10))
    if threshold < 1.0:
        raise TypeError(f"parameter 'threshold' must be >= 1.0, got {threshold!r}")
    floor = float(_take(p, "floor", (int, float), 0.30))
    if not 0.0 <= floor <= 1.0:
        raise TypeError(f"parameter 'floor' must be in 0..1, got {floor!r}")
    _done(p)
    return plan_rebalance(snapshot, BalanceOptions(bounds=bounds, threshold=threshold, evacuate_dead=evacuate,
                                                   floor=floor))


def leaders(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Leader balancing; extra parameter ``tolerance`` (default 1.05)."""
    p = dict(params)
    bounds = _bounds(p)
    tolerance = float(_take(p, "tolerance", (int, float), 1.05))
    _done(p)
    return plan_leaders(snapshot, LeaderOptions(bounds=bounds, tolerance=tolerance))


def drain(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Decommission ``brokers`` (a list of ids)."""
    p = dict(params)
    bounds = _bounds(p)
    ids = _ids(p, "brokers", required=True)
    _done(p)
    return plan_drain(snapshot, ids, DrainOptions(bounds=bounds))


def pool_shrink(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Shrink ``pool`` by draining ``brokers`` or the ``count`` cheapest."""
    p = dict(params)
    bounds = _bounds(p)
    pool = _take(p, "pool", str)
    ids = _ids(p, "brokers", required=False)
    count = _take(p, "count", int, 0)
    free_pool = _take(p, "free_pool", str, "free")
    _done(p)
    if pool is None:
        raise TypeError("parameter 'pool' is required")
    return plan_pool_shrink(snapshot, pool, ids, count, ResizeOptions(bounds=bounds, free_pool=free_pool))


def preallocate(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Pre-allocate topic ``topic`` with ``partitions``, ``replication_factor``, ``bytes_in_per_s``, ``pool``,
    ``placement``; ``traffic_model`` (topic -> bytes/s) when no rate is given."""
    p = dict(params)
    bounds = _bounds(p)
    name = _take(p, "topic", str)
    partitions = _take(p, "partitions", int)
    if name is None or partitions is None:
        raise TypeError("parameters 'topic' and 'partitions' are required")
    rate = _take(p, "bytes_in_per_s", (int, float))
    request = NewTopic(name=name, partitions=partitions, replication_factor=_take(p, "replication_factor", int, 3),
                       bytes_in_per_s=float(rate) if rate is not None else None, pool=_take(p, "pool", str, "shared"),
                       placement=_take(p, "placement", dict))
    model = _take(p, "traffic_model", dict, {})
    _done(p)
    return plan_preallocation(snapshot, request, PreallocateOptions(bounds=bounds, traffic_model=model)).plan


def read_local(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Read-local placement (KIP-392): ``demand`` (topic -> {IDC: fetch bytes/s}, as
    ``GET /clusters/{name}/read-local`` reports it) and ``threshold`` (bytes/s, default 1 MiB/s)."""
    p = dict(params)
    bounds = _bounds(p)
    demand = _take(p, "demand", dict)
    threshold = float(_take(p, "threshold", (int, float), 1_048_576.0))
    _done(p)
    if demand is None or not all(isinstance(t, str) and isinstance(d, dict)
                                 and all(isinstance(i, str) and isinstance(r, int | float) and not isinstance(r, bool)
                                         for i, r in d.items()) for t, d in demand.items()):
        raise TypeError("parameter 'demand' must map topic -> {IDC: bytes/s}")
    return plan_read_local(snapshot, demand, ReadLocalOptions(bounds=bounds, threshold=threshold))


@dataclass(frozen=True)
class Proposal:
    """What a planner kind proposes: ``plans`` to run in order (each valid against the snapshot the previous
    ones leave, the first against ``snapshot``) and the metadata changes that must be in force before the
    first runs: ``pools`` (pool -> brokers moved into it) and ``placements`` (topic -> IDC policy).
    ``snapshot`` is the input with those changes applied."""

    plans: tuple[Plan, ...]
    snapshot: ClusterSnapshot
    pools: dict[str, list[int]] = field(default_factory=dict)
    placements: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def prerequisites(self) -> dict[str, Any]:
        """The metadata changes as recorded with a plan (empty members left out)."""
        return {k: v for k, v in (("pools", self.pools), ("placements", self.placements)) if v}


def pool_grow(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Proposal:
    """Grow ``pool`` by ``count`` brokers of ``free_pool`` (default ``free``) and fill them; the brokers move
    into the pool before the plan runs."""
    p = dict(params)
    bounds = _bounds(p)
    pool = _take(p, "pool", str)
    count = _take(p, "count", int)
    free_pool = _take(p, "free_pool", str, "free")
    _done(p)
    if pool is None or count is None:
        raise TypeError("parameters 'pool' and 'count' are required")
    growth = plan_pool_grow(snapshot, pool, count, ResizeOptions(bounds=bounds, free_pool=free_pool))
    return Proposal(plans=(growth.plan,), snapshot=growth.snapshot, pools={pool: list(growth.brokers)})


def migrate_idc(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Proposal:
    """Move ``topics`` (or every topic of ``pool``) to the IDC ``placement`` (IDC -> replicas) in steps that
    keep ``min_insync`` (default 2) replicas in sync; the policy is set before step 1 runs."""
    p = dict(params)
    bounds = _bounds(p)
    placement = _take(p, "placement", dict)
    topics = _take(p, "topics", list, [])
    pool = _take(p, "pool", str)
    min_insync = _take(p, "min_insync", int, 2)
    _done(p)
    if not placement or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                for k, v in placement.items()):
        raise TypeError("parameter 'placement' must be a non-empty object of IDC -> replica count")
    if not all(isinstance(t, str) for t in topics):
        raise TypeError("parameter 'topics' must be a list of topic names")
    names = select_topics(snapshot, topics, pool)
    steps = plan_idc_migration(snapshot, placement, names, None, MigrationOptions(bounds=bounds,
                                                                                    min_insync=min_insync))
    return Proposal(plans=tuple(steps), snapshot=with_placement(snapshot, names, placement),
                    placements={name: dict(placement) for name in names})


PLANNERS: dict[str, Planner] = {
    "rebalance": rebalance,
    "leaders": leaders,
    "drain": drain,
    "pool-shrink": pool_shrink,
    "preallocate": preallocate,
    "read-local": read_local,
}
"""Planner kind -> planner of one plan valid against the snapshot as it is. (Restore needs the drain's
recorded placement: the service builds it from the drain's execution record,
:func:`controlplane.service.planning.make_restore`.)"""


def _single(planner: Planner) -> Callable[[ClusterSnapshot, Mapping[str, Any]], Proposal]:
    return lambda snapshot, params: Proposal(plans=(planner(snapshot, params),), snapshot=snapshot)


PROPOSERS: dict[str, Callable[[ClusterSnapshot, Mapping[str, Any]], Proposal]] = {
    **{kind: _single(planner) for kind, planner in PLANNERS.items()},
    "pool-grow": pool_grow,
    "migrate-idc": migrate_idc,
}
"""Planner kind -> proposer: every kind of :data:`PLANNERS` plus those needing metadata changes first
(``pool-grow``) or several plans (``migrate-idc``, one per step)."""
