"""Pure domain kernel: frozen snapshot model, plans, file contracts, invariants. No I/O, no imports of ours."""

from domain.apply import PlanEffect, apply_plan, plan_effect
from domain.errors import ContractError, Problem
from domain.inflight import settle_moves
from domain.invariants import (
    CheckLimits,
    Violation,
    check_any_plan,
    check_new_topic,
    check_plan,
    preallocated_topic,
)
from domain.model import (
    Broker,
    BrokerState,
    ClusterSnapshot,
    Disk,
    DiskId,
    DiskKind,
    Partition,
    PartitionId,
    Topic,
)
from domain.plan import (
    LeaderChange,
    LoadBasis,
    LoadOverride,
    PartitionMove,
    Plan,
    PlanSummary,
    UtilStats,
)
from domain.plan_file import (
    KIND_REASSIGNMENT,
    dump_plan,
    is_bare_reassignment,
    parse_plan,
    parse_reassignment,
    plan_from_dict,
    plan_json_schema,
    plan_to_dict,
)
from domain.policies import apply_policies, has_policies
from domain.snapshot_file import (
    dump_snapshot,
    parse_snapshot,
    snapshot_json_schema,
    snapshot_to_dict,
)
from domain.summary import balance_disks, pool_stats, summarize_effect, summarize_plan, util_stats

__all__ = [
    "KIND_REASSIGNMENT",
    "Broker",
    "BrokerState",
    "CheckLimits",
    "ClusterSnapshot",
    "ContractError",
    "Disk",
    "DiskId",
    "DiskKind",
    "LeaderChange",
    "LoadBasis",
    "LoadOverride",
    "Partition",
    "PartitionId",
    "PartitionMove",
    "Plan",
    "PlanEffect",
    "PlanSummary",
    "Problem",
    "Topic",
    "UtilStats",
    "Violation",
    "apply_plan",
    "apply_policies",
    "balance_disks",
    "check_any_plan",
    "check_new_topic",
    "check_plan",
    "dump_plan",
    "dump_snapshot",
    "has_policies",
    "is_bare_reassignment",
    "parse_plan",
    "parse_reassignment",
    "parse_snapshot",
    "plan_effect",
    "plan_from_dict",
    "plan_json_schema",
    "plan_to_dict",
    "pool_stats",
    "preallocated_topic",
    "settle_moves",
    "snapshot_json_schema",
    "snapshot_to_dict",
    "summarize_effect",
    "summarize_plan",
    "util_stats",
]
