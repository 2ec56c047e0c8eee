"""Step 1 of throttle protection: each disk's health with hysteresis (util and await against its kind's marks).

Goal: flip a disk unhealthy only on sustained evidence and healthy only on sustained calm, so noise inside the
band never moves a lever. Method: per disk, counters of consecutive samples above the high marks / below the
low marks (:func:`step_health`); a firing on-call alert counts as above at once. Guarantee: a missing or
non-finite sample changes nothing. Cost: O(1) per disk and sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planners.protection.config import HealthThresholds


# --------------------------------------------------------------------------- health with hysteresis
@dataclass(frozen=True, slots=True)
class DiskHealth:
    """Hysteresis state of one disk; ``unhealthy`` flips only after enough consecutive samples."""

    unhealthy: bool = False
    above: int = 0
    below: int = 0
    missing: int = 0
    samples: int = 0
    last_util: float | None = None
    last_await_ms: float | None = None
    reason: str = ""


def finite(x: float | None) -> float | None:
    return x if x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 else None


def step_health(state: DiskHealth, util: float | None, await_ms: float | None, th: HealthThresholds,
                alert: bool = False) -> DiskHealth:
    """Advance the hysteresis by one sample.

    Guarantees: a missing/non-finite sample (both metrics) leaves ``unhealthy``, ``above`` and ``below``
    unchanged; the state turns unhealthy only after ``th.enter_samples`` consecutive samples above a
    high mark (or at once with ``alert``), and healthy only after ``th.leave_samples`` consecutive
    samples with every finite metric below its low mark (and no alert). Values between the marks
    reset both counters, so noise inside the band never flips the state.
    """
    u, a = finite(util), finite(await_ms)
    if u is None and a is None and not alert:
        return replace(state, missing=state.missing + 1, samples=state.samples + 1)
    hot = alert or (u is not None and u > th.util_high) or (a is not None and a > th.await_high_ms)
    cool = not alert and (u is None or u < th.util_low) and (a is None or a < th.await_low_ms)
    above = state.above + 1 if hot else 0
    below = state.below + 1 if cool else 0
    unhealthy = state.unhealthy
    reason = state.reason
    if not unhealthy and (alert or above >= th.enter_samples):
        unhealthy = True
        parts = []
        if alert:
            parts.append("on-call alert firing")
        if u is not None and u > th.util_high:
            parts.append(f"util {u:.2f} > {th.util_high:.2f}")
        if a is not None and a > th.await_high_ms:
            parts.append(f"await {a:.1f} ms > {th.await_high_ms:.1f} ms")
        reason = ", ".join(parts) + f" for {above} sample(s)"
    elif unhealthy and below >= th.leave_samples:
        unhealthy = False
        reason = f"below util {th.util_low:.2f} / await {th.await_low_ms:.1f} ms for {below} sample(s)"
    return DiskHealth(unhealthy=unhealthy, above=above, below=below, missing=state.missing,
                      samples=state.samples + 1, last_util=u if u is not None else state.last_util,
                      last_await_ms=a if a is not None else state.last_await_ms, reason=reason)
