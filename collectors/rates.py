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
* the rate exceeds ``max_rate`` (``implausible``);
* the rate exceeds what the hardware behind the series can move (``exceeds_hardware``): a byte
  counter of a broker above its NIC's line rate (:class:`PhysicalLimits`, 10 Gbit/s per direction
  unless declared), a disk byte counter above the fastest single device (16 GB/s, PCIe 5.0 x4,
  unless declared).  One glitched sample (a +1e15 jump) thus never becomes a 65 TB/s partition;
  it is refused and counted like every other drop (the round's coverage ``drops``), and its value
  becomes the next base, as after a reset.

So a returned rate is always finite, ``>= 0``, ``<= max_rate`` and ``<=`` its series' ceiling.
Cost: O(1) per series (``counter_rate``, :class:`CounterTracker`); one dict lookup per sample plus
vectorised arithmetic (:class:`VectorCounterTracker`), the ceilings one array per segment.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt


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
    EXCEEDS_HARDWARE = "exceeds_hardware"


GBIT_BYTES = 1e9 / 8
DEFAULT_NIC_BYTES_PER_S = 10 * GBIT_BYTES
"""A broker's network interface per direction unless declared: 10 Gbit/s."""
DEFAULT_DISK_BYTES_PER_S = 16e9
"""The fastest single block device's transfer rate unless declared: PCIe 5.0 x4, ~16 GB/s."""
Limit = Literal["nic", "disk"]


@dataclass(frozen=True)
class PhysicalLimits:
    """What the hardware can move, per direction: a broker's NIC (bytes/s; per broker when declared) and one
    disk device (bytes/s). A counter rate above its ceiling is refused (``exceeds_hardware``).

    Record counters (messages in, log-end offsets, consumer positions) are held to the NIC's figure as
    records/s too: no broker handles over a billion records a second, compressed or not."""

    nic_bytes_per_s: float = DEFAULT_NIC_BYTES_PER_S
    disk_bytes_per_s: float = DEFAULT_DISK_BYTES_PER_S
    nic_by_broker: Mapping[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for what, value in (("nic_bytes_per_s", self.nic_bytes_per_s), ("disk_bytes_per_s", self.disk_bytes_per_s),
                            *((f"nic_by_broker[{b}]", v) for b, v in self.nic_by_broker.items())):
            if not value > 0:
                raise ValueError(f"{what} must be > 0, not {value!r}")

    def ceiling(self, limit: Limit, broker: int | None = None) -> float:
        """The ceiling of a series of ``broker`` (None: a cluster-level exporter) under ``limit``."""
        if limit == "disk":
            return self.disk_bytes_per_s
        return self.nic_by_broker.get(broker, self.nic_bytes_per_s) if broker is not None else self.nic_bytes_per_s

    def ceilings(self, limit: Limit, brokers: Sequence[int]) -> list[float]:
        """:meth:`ceiling` of each of ``brokers`` (one per segment of :meth:`VectorCounterTracker.update_segments`)."""
        return [self.ceiling(limit, b) for b in brokers]


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
                 min_elapsed_s: float = 0.5, max_rate: float = math.inf, ceiling: float = math.inf) -> Rate:
    """Rate of a monotonic counter between two samples ``(t0, v0)`` and ``(t1, v1)``.

    Guarantees: the result's ``value`` is None or a finite float in ``[0, min(max_rate, ceiling)]``.
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
    if rate > ceiling:
        return Rate(None, DropReason.EXCEEDS_HARDWARE, elapsed)
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

    def add(self, kind: str, reason: DropReason, example: str = "", count: int = 1) -> None:
        """Record ``count`` dropped values."""
        self.counts[(kind, reason.value)] += count
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

    def update(self, key: Hashable, t: float | None, v: float | None, ceiling: float = math.inf) -> Rate:
        """Feed the current sample of ``key`` and return its rate since the previous one (refused above
        ``ceiling``, the series' hardware limit)."""
        prev = self._last.get(key)
        if prev is None:
            r = counter_rate(None, None, t, v, self.min_elapsed_s, self.max_rate, ceiling)
        else:
            r = counter_rate(prev[0], prev[1], t, v, self.min_elapsed_s, self.max_rate, ceiling)
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


REASONS: tuple[DropReason | None, ...] = (
    None, DropReason.FIRST_SAMPLE, DropReason.MISSING, DropReason.NON_FINITE, DropReason.NEGATIVE,
    DropReason.COUNTER_RESET, DropReason.TINY_ELAPSED, DropReason.CLOCK_BACKWARDS, DropReason.IMPLAUSIBLE,
    DropReason.EXCEEDS_HARDWARE)
_C = {r: i for i, r in enumerate(REASONS)}


class _Block:
    """Rate state of one group of series sharing a clock (one family of one endpoint)."""

    __slots__ = ("has", "index", "keys", "last_t", "last_v", "seen", "segs")

    def __init__(self) -> None:
        self.index: dict[Hashable, int] = {}
        self.keys: list[Hashable] = []
        self.last_t = np.zeros(8)
        self.last_v = np.zeros(8)
        self.has = np.zeros(8, dtype=bool)
        self.seen = np.zeros(8, dtype=np.int64)
        # segment key -> (its keys as last seen, their rows): a segment (one endpoint's samples of
        # one family) whose keys equal last round's reuses the rows without a lookup per key
        self.segs: dict[Hashable, tuple[list[Hashable], npt.NDArray[np.int64]]] = {}

    def rows(self, keys: Sequence[Hashable], rnd: int) -> npt.NDArray[np.int64]:
        get = self.index.get
        idx = [get(k, -1) for k in keys]
        if idx and min(idx) < 0:
            for j, k in enumerate(keys):
                if idx[j] < 0:
                    r = self.index.get(k)
                    if r is None:
                        r = len(self.keys)
                        self.index[k] = r
                        self.keys.append(k)
                    idx[j] = r
            n = len(self.keys)
            if n > len(self.last_t):
                size = max(n, 2 * len(self.last_t))
                for name in ("last_t", "last_v", "has", "seen"):
                    old = getattr(self, name)
                    new = np.zeros(size, dtype=old.dtype)
                    new[: len(old)] = old
                    setattr(self, name, new)
        return np.asarray(idx, dtype=np.int64)

    def seg_rows(self, seg: Hashable, keys: Sequence[Hashable], rnd: int) -> npt.NDArray[np.int64]:
        """Rows of ``keys`` of segment ``seg`` (series key ``(seg, key)``); O(1) lookups when the
        segment's keys equal the previous call's (one C-level list comparison)."""
        got = self.segs.get(seg)
        if got is not None and got[0] == keys:
            return got[1]
        rows = self.rows([(seg, k) for k in keys], rnd)
        self.segs[seg] = (list(keys), rows)
        return rows


class VectorCounterTracker:
    """:class:`CounterTracker` for many series at once (numpy): same rules, same reasons.

    ``update(block, keys, t, values)`` handles every sample of one family of one endpoint (one
    clock ``t``) in O(len(keys)) dict lookups plus vectorised arithmetic, returning the rates
    (NaN where dropped) and the reason codes (indexes into :data:`REASONS`; 0 = ok).
    """

    def __init__(self, min_elapsed_s: float = 0.5, max_rate: float = math.inf, forget_after: int = 6) -> None:
        self.min_elapsed_s = min_elapsed_s
        self.max_rate = max_rate
        self.forget_after = forget_after
        self.blocks: dict[Hashable, _Block] = {}
        self.round = 0

    def __len__(self) -> int:
        return sum(len(b.index) for b in self.blocks.values())

    def update(self, block: Hashable, keys: Sequence[Hashable], t: float,
               values: Sequence[float] | npt.NDArray[np.float64],
               ceiling: float = math.inf) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]]:
        """Rates of ``keys`` (samples ``values`` at clock ``t``) since their previous samples; a rate above
        ``ceiling`` (the series' hardware limit, :class:`PhysicalLimits`) is refused (``exceeds_hardware``)."""
        b = self.blocks.get(block)
        if b is None:
            b = self.blocks[block] = _Block()
        v = np.asarray(values, dtype=np.float64)
        idx = b.rows(keys, self.round)
        if not math.isfinite(t):
            return np.full(len(v), np.nan), np.full(len(v), _C[DropReason.NON_FINITE], dtype=np.int8)
        return self._compute(b, idx, np.float64(t), v, None if ceiling == math.inf else np.float64(ceiling))

    def update_segments(self, block: Hashable,
                        segments: Sequence[tuple[Hashable, Sequence[Hashable], float,
                                                 Sequence[float] | npt.NDArray[np.float64]]],
                        ceilings: Sequence[float] | None = None,
                        ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int8], npt.NDArray[np.float64],
                                   npt.NDArray[np.int64]]:
        """:meth:`update` for many segments ``(segment key, keys, clock, values)`` in one vectorised
        pass — e.g. one metric family of every endpoint of a cluster, each with its own clock.
        ``ceilings`` (one per segment, e.g. each broker's NIC) bound the rates as :meth:`update`'s
        ``ceiling`` does.

        Series are keyed ``(segment key, key)``; the result is the same as one :meth:`update` per
        segment (same rates, same reasons).  Returns ``(rates, codes, values, offsets)``
        concatenated in segment order; segment ``k`` is ``[offsets[k], offsets[k + 1])``.
        Per-key Python work happens only for segments whose keys changed since the last round.
        """
        b = self.blocks.get(block)
        if b is None:
            b = self.blocks[block] = _Block()
        counts = [len(keys) for _, keys, _, _ in segments]
        offsets = np.zeros(len(segments) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        total = int(offsets[-1])
        if total == 0:
            return np.zeros(0), np.zeros(0, dtype=np.int8), np.zeros(0), offsets
        rnd = self.round
        idx = np.concatenate([b.seg_rows(seg, keys, rnd) for seg, keys, _, _ in segments])
        v = np.concatenate([np.asarray(vals, dtype=np.float64) for _, _, _, vals in segments])
        t = np.repeat(np.asarray([clock for _, _, clock, _ in segments], dtype=np.float64), counts)
        cap = None
        if ceilings is not None:
            if len(ceilings) != len(segments):
                raise ValueError(f"{len(ceilings)} ceilings for {len(segments)} segments")
            cap = np.repeat(np.asarray(ceilings, dtype=np.float64), counts)
        rates, code = self._compute(b, idx, t, v, cap)
        return rates, code, v, offsets

    def _compute(self, b: _Block, idx: npt.NDArray[np.int64], t: np.float64 | npt.NDArray[np.float64],
                 v: npt.NDArray[np.float64], cap: np.float64 | npt.NDArray[np.float64] | None = None,
                 ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]]:
        """The rate rules over rows ``idx`` at clock(s) ``t`` with values ``v`` (rates above ``cap``
        refused); stores new bases."""
        n = len(v)
        code = np.zeros(n, dtype=np.int8)
        if n == 0:
            return np.zeros(0), code
        pt = b.last_t[idx]
        pv = b.last_v[idx]
        prev = b.has[idx]
        with np.errstate(all="ignore"):
            el = t - pt
            d = v - pv
            rate = d / el
        if (prev.all() and bool(np.isfinite(v).all()) and bool((v >= 0).all()) and bool(np.isfinite(t).all())
                and float(el.min()) >= self.min_elapsed_s and float(d.min()) >= 0
                and bool(np.isfinite(rate).all()) and float(rate.max()) <= self.max_rate
                and (cap is None or bool((rate <= cap).all()))):
            # the common case (every series has a base, every sample good): store and return
            b.last_t[idx] = t
            b.last_v[idx] = v
            b.seen[idx] = self.round
            return rate, code
        fin = np.isfinite(v)
        code[~fin] = _C[DropReason.NON_FINITE]
        code[(code == 0) & ~np.isfinite(t)] = _C[DropReason.NON_FINITE]
        code[(code == 0) & (v < 0)] = _C[DropReason.NEGATIVE]
        code[(code == 0) & ~prev] = _C[DropReason.FIRST_SAMPLE]
        code[(code == 0) & (el <= 0)] = _C[DropReason.CLOCK_BACKWARDS]
        code[(code == 0) & (el < self.min_elapsed_s)] = _C[DropReason.TINY_ELAPSED]
        code[(code == 0) & (d < 0)] = _C[DropReason.COUNTER_RESET]
        code[(code == 0) & ~np.isfinite(rate)] = _C[DropReason.NON_FINITE]
        code[(code == 0) & (rate > self.max_rate)] = _C[DropReason.IMPLAUSIBLE]
        if cap is not None:
            code[(code == 0) & (rate > cap)] = _C[DropReason.EXCEEDS_HARDWARE]
        rate[code != 0] = np.nan
        good = fin & (v >= 0) & np.isfinite(t)
        keep_old = good & prev & ((code == _C[DropReason.TINY_ELAPSED]) | (code == _C[DropReason.CLOCK_BACKWARDS]))
        store = good & ~keep_old
        si = idx[store]
        b.last_t[si] = t[store] if isinstance(t, np.ndarray) else t
        b.last_v[si] = v[store]
        b.has[si] = True
        b.seen[idx[good]] = self.round  # a series sending only bad samples is forgotten like a silent one
        return rate, code

    def end_round(self) -> int:
        """Close a round; forget series not seen for ``forget_after`` rounds (compacting blocks)."""
        self.round += 1
        cutoff = self.round - self.forget_after
        dropped = 0
        for name in list(self.blocks):
            b = self.blocks[name]
            n = len(b.keys)
            stale = b.seen[:n] < cutoff
            if not stale.any():
                continue
            if stale.all():
                del self.blocks[name]
                dropped += n
                continue
            keep = np.nonzero(~stale)[0]
            nb = _Block()
            nb.keys = [b.keys[i] for i in keep]
            nb.index = {k: i for i, k in enumerate(nb.keys)}
            nb.last_t, nb.last_v = b.last_t[keep].copy(), b.last_v[keep].copy()
            nb.has, nb.seen = b.has[keep].copy(), b.seen[keep].copy()
            remap = np.full(n, -1, dtype=np.int64)
            remap[keep] = np.arange(len(keep), dtype=np.int64)
            for seg, (skeys, srows) in b.segs.items():
                moved = remap[srows]
                if len(moved) == 0 or moved.min() >= 0:
                    nb.segs[seg] = (skeys, moved)
            self.blocks[name] = nb
            dropped += n - len(keep)
        return dropped

    def nbytes(self) -> int:
        """Approximate bytes of rate state (arrays + key index)."""
        total = 0
        for b in self.blocks.values():
            total += b.last_t.nbytes + b.last_v.nbytes + b.has.nbytes + b.seen.nbytes + 120 * len(b.keys)
        return total
