"""Rates from monotonic counters over *measured* elapsed time, with every bad case named.

A rate is ``(v1 - v0) / (t1 - t0)`` where ``t`` is the time each sample was taken (the scrape's
clock, never a nominal interval).  It is dropped — returned as ``None`` with a
:class:`DropReason` — when:

* either value is NaN or ±Inf (``non_finite``) or negative (``negative``);
* there is no previous sample (``first_sample``) or the current one is missing (``missing``);
* the clock went backwards or did not move (``clock_backwards``), or the elapsed time is below
  ``min_elapsed_s`` (``tiny_elapsed``: a near-zero interval would turn any delta into an
  enormous rate);
* the counter decreased (``counter_reset``: the process restarted; the new value becomes the
  base for the next round);
* the rate exceeds ``max_rate`` (``implausible``).

So a returned rate is always finite, ``>= 0`` and ``<= max_rate``.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field


class DropReason(enum.StrEnum):
    """Why a rate (or a gauge) was not produced."""

    FIRST_SAMPLE = "first_sample"
    MISSING = "missing"
    NON_FINITE = "non_finite"
    NEGATIVE = "negative"
    COUNTER_RESET = "counter_reset"
    TINY_ELAPSED = "tiny_elapsed"
    CLOCK_BACKWARDS = "clock_backwards"
    IMPLAUSIBLE = "implausible"


@dataclass(frozen=True, slots=True)
class Rate:
    """A rate (finite, >= 0) or the reason there is none."""

    value: float | None
    reason: DropReason | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when :attr:`value` is usable."""
        return self.value is not None


def counter_rate(t0: float | None, v0: float | None, t1: float | None, v1: float | None,
                 min_elapsed_s: float = 0.5, max_rate: float = math.inf) -> Rate:
    """Rate of a monotonic counter between two samples ``(t0, v0)`` and ``(t1, v1)``.

    Guarantees: the result's ``value`` is None or a finite float in ``[0, max_rate]``.
    """
    if v1 is None or t1 is None:
        return Rate(None, DropReason.MISSING)
    if not (math.isfinite(v1) and math.isfinite(t1)):
        return Rate(None, DropReason.NON_FINITE)
    if v1 < 0:
        return Rate(None, DropReason.NEGATIVE)
    if v0 is None or t0 is None:
        return Rate(None, DropReason.FIRST_SAMPLE)
    if not (math.isfinite(v0) and math.isfinite(t0)):
        return Rate(None, DropReason.NON_FINITE)
    if v0 < 0:
        return Rate(None, DropReason.NEGATIVE)
    elapsed = t1 - t0
    if elapsed <= 0:
        return Rate(None, DropReason.CLOCK_BACKWARDS, elapsed)
    if elapsed < min_elapsed_s:
        return Rate(None, DropReason.TINY_ELAPSED, elapsed)
    delta = v1 - v0
    if delta < 0:
        return Rate(None, DropReason.COUNTER_RESET, elapsed)
    rate = delta / elapsed
    if not math.isfinite(rate):
        return Rate(None, DropReason.NON_FINITE, elapsed)
    if rate > max_rate:
        return Rate(None, DropReason.IMPLAUSIBLE, elapsed)
    return Rate(rate, None, elapsed)


def gauge_value(v: float | None, lo: float = 0.0, hi: float = math.inf) -> Rate:
    """A gauge checked like a rate: None/NaN/Inf/out-of-range values are dropped with a reason."""
    if v is None:
        return Rate(None, DropReason.MISSING)
    if not math.isfinite(v):
        return Rate(None, DropReason.NON_FINITE)
    if v < lo:
        return Rate(None, DropReason.NEGATIVE)
    if v > hi:
        return Rate(None, DropReason.IMPLAUSIBLE)
    return Rate(v)


@dataclass
class DropLog:
    """Counts of dropped values per (series kind, reason) plus a few examples, per round."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    max_examples: int = 20

    def add(self, kind: str, reason: DropReason, example: str = "") -> None:
        """Record one dropped value."""
        self.counts[(kind, reason.value)] += 1
        if example and len(self.examples) < self.max_examples:
            self.examples.append(f"{kind} {example}: {reason.value}")

    def as_dict(self) -> dict[str, dict[str, int]]:
        """``{kind: {reason: count}}`` (JSON-able)."""
        out: dict[str, dict[str, int]] = {}
        for (kind, reason), n in sorted(self.counts.items()):
            out.setdefault(kind, {})[reason] = n
        return out

    @property
    def total(self) -> int:
        """All dropped values."""
        return sum(self.counts.values())


class CounterTracker:
    """Remembers the last good sample of each counter series and turns new samples into rates.

    ``update`` is O(1) per series.  A sample that is itself bad (NaN, negative) does not replace
    the remembered one; a reset does (the new value is the next base).  Series not updated for
    ``forget_after`` rounds are evicted by :meth:`end_round`, so memory tracks live series.
    """

    def __init__(self, min_elapsed_s: float = 0.5, max_rate: float = math.inf, forget_after: int = 6) -> None:
        self.min_elapsed_s = min_elapsed_s
        self.max_rate = max_rate
        self.forget_after = forget_after
        self._last: dict[Hashable, tuple[float, float, int]] = {}
        self._round = 0

    def __len__(self) -> int:
        return len(self._last)

    def update(self, key: Hashable, t: float | None, v: float | None) -> Rate:
        """Feed the current sample of ``key`` and return its rate since the previous one."""
        prev = self._last.get(key)
        if prev is None:
            r = counter_rate(None, None, t, v, self.min_elapsed_s, self.max_rate)
        else:
            r = counter_rate(prev[0], prev[1], t, v, self.min_elapsed_s, self.max_rate)
        if t is not None and v is not None and math.isfinite(t) and math.isfinite(v) and v >= 0:
            if r.reason in (DropReason.TINY_ELAPSED, DropReason.CLOCK_BACKWARDS) and prev is not None:
                # keep the older base: the next round measures over a longer, honest interval
                self._last[key] = (prev[0], prev[1], self._round)
            else:
                self._last[key] = (t, v, self._round)
        return r

    def end_round(self) -> int:
        """Close a round; forget series not seen for ``forget_after`` rounds. Returns how many."""
        self._round += 1
        cutoff = self._round - self.forget_after
        stale = [k for k, (_, _, r) in self._last.items() if r < cutoff]
        for k in stale:
            del self._last[k]
        return len(stale)
