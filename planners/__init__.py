"""Pure planners: snapshot (+ models) -> Plan; one goal per module, every plan checked by ``check_plan``.

================  ==========================================  ================================
module            goal                                        entry point
================  ==========================================  ================================
disk_balance      disk-load balance across/within brokers     :func:`plan_rebalance`
leaders           leader bytes-in / count per broker          :func:`plan_leaders`
preallocate       assignment of a new topic                   :func:`plan_preallocation`
drain             decommission / recommission brokers         :func:`plan_drain`, :func:`plan_restore`
idc_migration     move topics to a new IDC placement          :func:`plan_idc_migration`
pool_resize       grow / shrink a resource pool               :func:`plan_pool_grow`, :func:`plan_pool_shrink`
read_local        a replica in each heavily reading IDC       :func:`plan_read_local`
constraints       the hard goals (veto only)                  :class:`Topology`
workspace         shared working state, plan building         :class:`Workspace`, :class:`Bounds`
registry          kind -> ``(snapshot, params) -> Plan``      ``registry.PLANNERS``
================  ==========================================  ================================

Every planner is pure and deterministic (byte-identical plans for equal snapshots) and returns only
plans the shared invariant checker (:func:`domain.check_plan`) accepts.
"""

from planners.disk_balance import BalanceOptions, plan_rebalance
from planners.drain import DrainOptions, plan_drain, plan_restore
from planners.idc_migration import MigrationOptions, plan_idc_migration
from planners.leaders import LeaderOptions, plan_leaders
from planners.pool_resize import PoolGrowth, ResizeOptions, plan_pool_grow, plan_pool_shrink
from planners.preallocate import NewTopic, PreallocateOptions, Preallocation, plan_preallocation
from planners.read_local import ReadLocalOptions, plan_read_local
from planners.workspace import Bounds, InvalidPlanError, PlannerError

__all__ = [
    "BalanceOptions",
    "Bounds",
    "DrainOptions",
    "InvalidPlanError",
    "LeaderOptions",
    "MigrationOptions",
    "NewTopic",
    "PlannerError",
    "PoolGrowth",
    "PreallocateOptions",
    "Preallocation",
    "ReadLocalOptions",
    "ResizeOptions",
    "plan_drain",
    "plan_idc_migration",
    "plan_leaders",
    "plan_pool_grow",
    "plan_pool_shrink",
    "plan_preallocation",
    "plan_read_local",
    "plan_rebalance",
    "plan_restore",
]
