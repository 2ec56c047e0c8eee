"""Goal: the balance a byte budget buys — peak/mean per pool against ``max_bytes`` — so an operator chooses.

Method: the unbounded rebalance is planned once (its bytes are the top of the curve); then, for each
fraction of those bytes, the same planner runs with ``max_bytes`` set to it, exactly as ``plan
rebalance --max-bytes`` would (the plans are built in a :class:`Workspace`, without the final invariant
check, which :func:`planners.plan_rebalance` runs on whatever budget is then chosen). Each point reports
the bytes the plan copies, their share of all replica bytes, and the worst pool's peak/mean estimated
utilisation after it.

Guarantee: every point is what the bounded planner really reaches (not an interpolation); the budget
0 point is the snapshot as it is, the 100% point the unbounded plan. Deterministic.
Cost: one rebalance per point (O(points x rebalance)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from domain import ClusterSnapshot
from planners.disk_balance import BalanceOptions, balance_pool, pool_peak_to_mean, total_replica_bytes
from planners.workspace import Workspace

FRACTIONS = (0.0, 0.05, 0.10, 0.20, 0.35, 0.50, 0.75, 1.0)


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One budget: the bytes allowed, the bytes the plan copies (and their share), the worst pool's peak/mean."""

    max_bytes: int
    bytes_moved: int
    share_of_replica_bytes: float
    peak_to_mean: float


def _run(snapshot: ClusterSnapshot, options: BalanceOptions) -> Workspace:
    ws = Workspace(snapshot, options.bounds)
    for pool in sorted({b.pool for b in snapshot.brokers}):
        balance_pool(ws, pool, options)
    return ws


def budget_curve(snapshot: ClusterSnapshot, options: BalanceOptions | None = None,
                 fractions: Sequence[float] = FRACTIONS) -> list[CurvePoint]:
    """Peak/mean reached at each fraction of the unbounded rebalance's bytes (ascending budgets)."""
    options = options or BalanceOptions()
    total = max(1, total_replica_bytes(snapshot))
    unbounded = _run(snapshot, replace(options, bounds=replace(options.bounds, max_bytes=None)))
    full = unbounded.moved_bytes
    points = []
    for f in sorted(set(fractions)):
        budget = int(full * f)
        ws = unbounded if f >= 1.0 else _run(snapshot, replace(options, bounds=replace(options.bounds,
                                                                                          max_bytes=budget)))
        points.append(CurvePoint(budget, ws.moved_bytes, ws.moved_bytes / total, pool_peak_to_mean(ws)))
    return points
