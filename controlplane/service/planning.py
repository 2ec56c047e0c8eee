"""Planner registry and plan -> executor tasks: the service-side glue around the pure planners."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.domain import ClusterSnapshot, Plan
from planners.registry import PLANNERS


class PlanRequestError(ValueError):
    """Unknown planner kind or parameters it does not take."""


def make_plan(snapshot: ClusterSnapshot, kind: str, params: Mapping[str, Any]) -> Plan:
    """Run planner ``kind`` over ``snapshot``; :class:`PlanRequestError` for an unknown kind, bad params
    or an impossible request (unknown broker or topic, unsatisfiable placement)."""
    planner = PLANNERS.get(kind)
    if planner is None:
        raise PlanRequestError(f"unknown planner kind {kind!r}; known: {', '.join(sorted(PLANNERS))}")
    try:
        return planner(snapshot, params)
    except (TypeError, ValueError) as exc:
        raise PlanRequestError(f"{kind}: {exc}") from None


def plan_tasks(snapshot: ClusterSnapshot, plan: Plan) -> list[dict[str, Any]]:
    """One executor task per partition move and per leader change, in plan order.

    A move that changes the broker set (or only their order) is a ``reassign``; one that changes only
    log dirs on the same brokers is a ``move_log_dir``; a leader change is an ``elect_leader``.
    """
    index = snapshot.index
    tasks: list[dict[str, Any]] = []
    for move in plan.moves:
        current = index.partition_by_id[move.id]
        same_brokers = move.replicas == current.replicas
        action = "move_log_dir" if same_brokers else "reassign"
        tasks.append({"key": f"{move.topic}-{move.partition}:{action}", "topic": move.topic,
                      "partition": move.partition, "action": action,
                      "source_replicas": list(current.replicas), "source_log_dirs": list(current.log_dirs),
                      "target_replicas": list(move.replicas), "target_log_dirs": list(move.log_dirs),
                      "size_bytes": current.size_bytes})
    for change in plan.leaders:
        current = index.partition_by_id[change.id]
        tasks.append({"key": f"{change.topic}-{change.partition}:elect_leader", "topic": change.topic,
                      "partition": change.partition, "action": "elect_leader",
                      "source_replicas": list(current.replicas), "target_replicas": [change.leader],
                      "size_bytes": 0})
    return tasks
