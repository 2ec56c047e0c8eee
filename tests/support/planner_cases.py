"""Hand-built snapshots for the planner tests (numbers easy to check by hand) and shared assertions."""

from __future__ import annotations

from typing import Any

from domain import ClusterSnapshot, Plan, apply_plan, check_plan, parse_snapshot, pool_stats
from tests.support.snapshots import GIB, broker, disk, partition

MB = 1e6


def snapshot_of(brokers: list[dict[str, Any]], topics: list[dict[str, Any]],
                placement: dict[str, int] | None = None) -> ClusterSnapshot:
    """Parse a snapshot document built from the helpers (so it passes the file contract too)."""
    import json

    doc: dict[str, Any] = {"format": "guardian.snapshot/v1", "cluster": "t", "taken_at": "2026-11-21T10:00:00Z",
                           "brokers": brokers, "topics": topics}
    if placement is not None:
        doc["placement"] = placement
    return parse_snapshot(json.dumps(doc))


def topic(name: str, parts: list[dict[str, Any]], *, pool: str = "shared",
          placement: dict[str, int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "pool": pool, "partitions": parts}
    if placement is not None:
        out["placement"] = placement
    return out


def assert_valid(snapshot: ClusterSnapshot, plan: Plan) -> ClusterSnapshot:
    """The plan passes the shared checker; returns the snapshot after it."""
    violations = check_plan(snapshot, plan)
    assert violations == [], [str(v) for v in violations]
    return apply_plan(snapshot, plan)


def peaks(snapshot: ClusterSnapshot) -> dict[str, float]:
    return {pool: s.max_util for pool, s in pool_stats(snapshot).items()}


__all__ = ["GIB", "MB", "assert_valid", "broker", "disk", "partition", "peaks", "snapshot_of", "topic"]
