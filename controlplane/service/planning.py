"""The service-side glue around the pure planners: run a planner kind by name with request parameters."""

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
