"""Every planner behind one signature: ``(snapshot, params) -> Plan`` (``PLANNERS``), and the kinds that
need metadata changes or several plans behind ``(snapshot, params) -> Proposal`` (``PROPOSERS``: every
kind of ``PLANNERS`` too), for the service layer.

``params`` is a plain JSON-like mapping (what an API request carries), validated by the kind's model of
:mod:`planners.params` (common bounds: ``max_bytes``, ``max_partitions`` (alias ``max_moves``),
``capacity_headroom``). Unknown or ill-typed parameters raise :class:`planners.params.ParamsError` (a
``TypeError`` naming each field); impossible requests raise :class:`planners.PlannerError` (a ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from domain import ClusterSnapshot, Plan
from planners.disk_balance import plan_rebalance
from planners.drain import plan_drain
from planners.idc_migration import plan_idc_migration, select_topics, with_placement
from planners.leaders import plan_leaders
from planners.params import (
    DrainParams,
    LeadersParams,
    MigrateIdcParams,
    PoolGrowParams,
    PoolShrinkParams,
    PreallocateParams,
    ReadLocalParams,
    RebalanceParams,
    parse_params,
)
from planners.pool_resize import plan_pool_grow, plan_pool_shrink
from planners.preallocate import plan_preallocation
from planners.read_local import plan_read_local

Planner = Callable[[ClusterSnapshot, Mapping[str, Any]], Plan]


def rebalance(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Disk-load rebalance (:class:`~planners.params.RebalanceParams`)."""
    p = parse_params(RebalanceParams, params)
    return plan_rebalance(snapshot, p.options())


def leaders(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Leader balancing (:class:`~planners.params.LeadersParams`)."""
    p = parse_params(LeadersParams, params)
    return plan_leaders(snapshot, p.options())


def drain(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Decommission ``brokers`` (:class:`~planners.params.DrainParams`)."""
    p = parse_params(DrainParams, params)
    return plan_drain(snapshot, p.brokers, p.options())


def pool_shrink(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Shrink ``pool`` by draining ``brokers`` or the ``count`` cheapest
    (:class:`~planners.params.PoolShrinkParams`)."""
    p = parse_params(PoolShrinkParams, params)
    return plan_pool_shrink(snapshot, p.pool, p.brokers, p.count, p.options())


def preallocate(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Pre-allocate a new topic (:class:`~planners.params.PreallocateParams`)."""
    p = parse_params(PreallocateParams, params)
    return plan_preallocation(snapshot, p.request(), p.options()).plan


def read_local(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Plan:
    """Read-local placement, KIP-392 (:class:`~planners.params.ReadLocalParams`)."""
    p = parse_params(ReadLocalParams, params)
    return plan_read_local(snapshot, p.demand, p.options())


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
    """Grow ``pool`` by ``count`` brokers of ``free_pool`` and fill them (:class:`~planners.params.PoolGrowParams`);
    the brokers move into the pool before the plan runs."""
    p = parse_params(PoolGrowParams, params)
    growth = plan_pool_grow(snapshot, p.pool, p.count, p.options())
    return Proposal(plans=(growth.plan,), snapshot=growth.snapshot, pools={p.pool: list(growth.brokers)})


def migrate_idc(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> Proposal:
    """Move ``topics`` (or every topic of ``pool``) to the IDC ``placement`` in steps
    (:class:`~planners.params.MigrateIdcParams`); the policy is set before step 1 runs."""
    p = parse_params(MigrateIdcParams, params)
    names = select_topics(snapshot, p.topics, p.pool)
    steps = plan_idc_migration(snapshot, p.placement, names, None, p.options())
    return Proposal(plans=tuple(steps), snapshot=with_placement(snapshot, names, p.placement),
                    placements={name: dict(p.placement) for name in names})


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
