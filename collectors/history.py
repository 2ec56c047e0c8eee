"""Bounded history windows: one numpy ring buffer per family of series (disks, partitions).

Each :class:`RingWindow` holds ``capacity`` samples for every key (a disk or a partition) in a
``(rows, capacity)`` float32 matrix; a round appends one column for all keys at once (missing
keys get NaN).  Memory is ``rows × capacity × 4`` bytes plus the key index, and never grows
with time — only with the number of live keys (rows of keys unseen for a whole window are
recycled).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


class RingWindow:
    """A fixed-length sample window for a changing set of keys.

    ``append`` is O(keys); ``stats`` is O(keys × capacity) (vectorised).
    """

    def __init__(self, capacity: int, initial_rows: int = 64, every: int = 1) -> None:
        if capacity < 1 or every < 1:
            raise ValueError("capacity and every must be >= 1")
        self.capacity = int(capacity)
        self.every = int(every)
        self._pending: dict[Hashable, tuple[float, int]] = {}
        self._pending_rounds = 0
        self._data: F32 = np.full((max(initial_rows, 1), self.capacity), np.nan, dtype=np.float32)
        self._row: dict[Hashable, int] = {}
        self._last_seen: dict[Hashable, int] = {}
        self._free: list[int] = []
        self._n_rows = 0
        self.pos = 0  # next column to write
        self.count = 0  # columns written so far (<= capacity)
        self.rounds = 0

    def __len__(self) -> int:
        return len(self._row)

    @property
    def nbytes(self) -> int:
        """Bytes held by the sample matrix (the dominant cost)."""
        return int(self._data.nbytes)

    def _reserve(self, extra: int) -> None:
        need = self._n_rows + extra
        if need > self._data.shape[0]:
            grown = np.full((max(need, int(self._data.shape[0] * 1.25) + 1), self.capacity), np.nan,
                            dtype=np.float32)
            grown[: self._data.shape[0]] = self._data
            self._data = grown

    def _row_of(self, key: Hashable) -> int:
        r = self._row.get(key)
        if r is not None:
            return r
        if self._free:
            r = self._free.pop()
        else:
            r = self._n_rows
            self._reserve(1)
            self._n_rows += 1
        self._data[r, :] = np.nan
        self._row[key] = r
        return r

    def append(self, values: Mapping[Hashable, float | None]) -> None:
        """Add one round: ``values[key]`` for present keys (None/NaN = no sample).

        With ``every > 1`` rounds are averaged and one column is written every ``every`` rounds.
        """
        if self.every > 1:
            pend = self._pending
            for key, v in values.items():
                if v is not None and v == v:
                    s, n = pend.get(key, (0.0, 0))
                    pend[key] = (s + v, n + 1)
                elif key not in pend:
                    pend[key] = (0.0, 0)
            self._pending_rounds += 1
            if self._pending_rounds < self.every:
                return
            values = {k: (s / n if n else None) for k, (s, n) in pend.items()}
            self._pending = {}
            self._pending_rounds = 0
        self._reserve(sum(1 for k in values if k not in self._row) - len(self._free))
        col = self.pos
        self._data[: self._n_rows, col] = np.nan
        rows: list[int] = []
        vals: list[float] = []
        for key, v in values.items():
            r = self._row_of(key)
            self._last_seen[key] = self.rounds
            if v is not None:
                rows.append(r)
                vals.append(v)
        if rows:
            self._data[np.asarray(rows, dtype=np.int64), col] = np.asarray(vals, dtype=np.float32)
        self.pos = (self.pos + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)
        self.rounds += 1
        cutoff = self.rounds - self.capacity
        if self.rounds % self.capacity == 0:
            for key in [k for k, seen in self._last_seen.items() if seen < cutoff]:
                self._free.append(self._row.pop(key))
                del self._last_seen[key]

    def series(self, key: Hashable) -> list[float]:
        """The key's samples, oldest first, without gaps (NaN samples are left out)."""
        r = self._row.get(key)
        if r is None:
            return []
        if self.count < self.capacity:
            raw = self._data[r, : self.count]
        else:
            raw = np.concatenate([self._data[r, self.pos:], self._data[r, : self.pos]])
        return [float(x) for x in raw if not np.isnan(x)]

    def downsampled(self, key: Hashable, points: int) -> list[float]:
        """At most ``points`` values, oldest first: means of equal consecutive chunks of the series."""
        s = self.series(key)
        if len(s) <= points or points <= 0:
            return s
        chunks = np.array_split(np.asarray(s, dtype=np.float64), points)
        return [float(c.mean()) for c in chunks if len(c)]

    def stats(self, keys: Sequence[Hashable] | None = None) -> dict[Hashable, tuple[float, float, int]]:
        """``key -> (median, p95, samples)`` over the window (NaN median when no samples)."""
        keys = list(self._row) if keys is None else [k for k in keys if k in self._row]
        if not keys:
            return {}
        rows = np.asarray([self._row[k] for k in keys], dtype=np.int64)
        block = self._data[rows][:, : self.count] if self.count < self.capacity else self._data[rows]
        n = np.sum(~np.isnan(block), axis=1)
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                med = np.nanmedian(block, axis=1)
                p95 = np.nanpercentile(block, 95, axis=1)
        return {k: (float(med[i]), float(p95[i]), int(n[i])) for i, k in enumerate(keys)}


def window_bytes(keys: int, capacity: int, series_per_key: int = 1) -> int:
    """Matrix bytes a window of ``keys × capacity`` float32 samples needs (per series)."""
    return keys * capacity * 4 * series_per_key
