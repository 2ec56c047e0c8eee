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
        rows = max(initial_rows, 1)
        self._data: F32 = np.full((rows, self.capacity), np.nan, dtype=np.float32)
        self._row: dict[Hashable, int] = {}
        self._key_at: list[Hashable | None] = []  # row -> key (None: free)
        self._seen = np.zeros(rows, dtype=np.int64)  # row -> last column round its key was present
        # rounds averaged into the next column (every > 1): per row sum, count, present
        self._psum = np.zeros(rows)
        self._pn = np.zeros(rows, dtype=np.int32)
        self._pseen = np.zeros(rows, dtype=bool)
        self._pending_rounds = 0
        self._free: list[int] = []
        self._n_rows = 0
        self._last_keys: list[Hashable] | None = None
        self._last_rows = np.zeros(0, dtype=np.int64)
        self.pos = 0  # next column to write
        self.count = 0  # columns written so far (<= capacity)
        self.rounds = 0

    def __len__(self) -> int:
        return len(self._row)

    @property
    def nbytes(self) -> int:
        """Bytes held by the sample matrix (the dominant cost) and the per-row bookkeeping."""
        return int(self._data.nbytes + self._seen.nbytes + self._psum.nbytes + self._pn.nbytes + self._pseen.nbytes)

    def _reserve(self, extra: int) -> None:
        need = self._n_rows + extra
        if need > self._data.shape[0]:
            size = max(need, int(self._data.shape[0] * 1.25) + 1)
            grown = np.full((size, self.capacity), np.nan, dtype=np.float32)
            grown[: self._data.shape[0]] = self._data
            self._data = grown
            for name in ("_seen", "_psum", "_pn", "_pseen"):
                old = getattr(self, name)
                arr = np.zeros(size, dtype=old.dtype)
                arr[: len(old)] = old
                setattr(self, name, arr)

    def _row_of(self, key: Hashable) -> int:
        r = self._row.get(key)
        if r is not None:
            return r
        if self._free:
            r = self._free.pop()
            self._key_at[r] = key
            self._data[r, :] = np.nan  # a recycled row (rows past _n_rows are NaN since allocation)
        else:
            r = self._n_rows
            self._reserve(1)
            self._n_rows += 1
            self._key_at.append(key)
        self._psum[r] = 0.0
        self._pn[r] = 0
        self._pseen[r] = False
        self._seen[r] = self.rounds
        self._row[key] = r
        return r

    def _rows(self, keys: Sequence[Hashable]) -> npt.NDArray[np.int64]:
        if self._last_keys is not None and self._last_keys == keys:
            return self._last_rows
        new = sum(1 for k in keys if k not in self._row)
        self._reserve(max(new - len(self._free), 0))
        rows = np.fromiter((self._row_of(k) for k in keys), dtype=np.int64, count=len(keys))
        self._last_keys, self._last_rows = list(keys), rows
        return rows

    def append(self, values: Mapping[Hashable, float | None]) -> None:
        """Add one round: ``values[key]`` for present keys (None/NaN = no sample).

        With ``every > 1`` rounds are averaged and one column is written every ``every`` rounds.
        """
        keys = list(values)
        vals = np.fromiter((np.nan if v is None else v for v in values.values()), dtype=np.float64, count=len(keys))
        self.append_array(keys, vals)

    def append_array(self, keys: Sequence[Hashable], values: npt.NDArray[np.float64]) -> None:
        """:meth:`append` with the values as an array aligned with ``keys`` (NaN = no sample).

        O(keys) in numpy when ``keys`` equals the previous call's (one list comparison); per-key
        Python work only for a changed key list.
        """
        rows = self._rows(keys)
        v = np.asarray(values, dtype=np.float64)
        ok = ~np.isnan(v)
        if self.every > 1:
            self._psum[rows[ok]] += v[ok]
            self._pn[rows[ok]] += 1
            self._pseen[rows] = True
            self._pending_rounds += 1
            if self._pending_rounds < self.every:
                return
            self._pending_rounds = 0
            present = np.nonzero(self._pseen[: self._n_rows])[0]
            n = self._pn[present]
            col_vals = np.where(n > 0, self._psum[present] / np.maximum(n, 1), np.nan)
            self._psum[present] = 0.0
            self._pn[present] = 0
            self._pseen[present] = False
            rows, v, ok = present, col_vals, ~np.isnan(col_vals)
        col = self.pos
        self._data[: self._n_rows, col] = np.nan
        self._data[rows[ok], col] = v[ok].astype(np.float32)
        self._seen[rows] = self.rounds
        self.pos = (self.pos + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)
        self.rounds += 1
        cutoff = self.rounds - self.capacity
        if self.rounds % self.capacity == 0:
            used = np.asarray([r for r, k in enumerate(self._key_at) if k is not None], dtype=np.int64)
            stale = used[self._seen[used] < cutoff] if len(used) else used
            for r in stale.tolist():
                key = self._key_at[r]
                del self._row[key]
                self._key_at[r] = None
                self._free.append(r)
            if len(stale):
                self._last_keys = None

    def series(self, key: Hashable) -> list[float]:
        """The key's samples, oldest first, without gaps (NaN samples are left out)."""
        r = self._row.get(key)
        if r is None:
            return []
        if self.count < self.capacity:
            raw = self._data[r, : self.count]
        else:
            raw = np.concatenate([self._data[r, self.pos:], self._data[r, : self.pos]])
        return [float(x) for x in raw[~np.isnan(raw)].tolist()]

    def _ordered(self, rows: npt.NDArray[np.int64]) -> F32:
        """Samples of ``rows``, oldest first (``rows × count``)."""
        data = self._data if len(rows) == self._n_rows and bool((rows == np.arange(len(rows))).all()) \
            else self._data[rows]
        if self.count < self.capacity:
            return data[: len(rows), : self.count]
        return np.concatenate([data[: len(rows), self.pos:], data[: len(rows), : self.pos]], axis=1)

    def downsampled_many(self, keys: Sequence[Hashable], points: int, lo: float = -np.inf,
                         hi: float = np.inf) -> list[list[float]]:
        """:meth:`downsampled` of every key (clipped to ``[lo, hi]``), vectorised: keys whose window
        has no gap share one ``reduceat`` over the chunk boundaries; only keys with gaps are done
        one by one.  O(keys × capacity) in numpy (12,000 disks × 360 samples: a few ms)."""
        out: list[list[float]] = [[] for _ in keys]
        idx = [(j, self._row[k]) for j, k in enumerate(keys) if k in self._row]
        if not idx or self.count == 0:
            return out
        pos = np.asarray([j for j, _ in idx], dtype=np.int64)
        block = self._ordered(np.asarray([r for _, r in idx], dtype=np.int64))
        gaps = np.isnan(block).any(axis=1)
        full = np.nonzero(~gaps)[0]
        n = block.shape[1]
        if len(full):
            sub = block if len(full) == len(block) else block[full]
            if n > points > 0:
                small, extra = divmod(n, points)
                sizes = np.full(points, small, dtype=np.int64)
                sizes[:extra] += 1
                starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
                means = np.add.reduceat(sub, starts, axis=1, dtype=np.float64) / sizes
            else:
                means = sub.astype(np.float64)
            vals = np.clip(means, lo, hi).tolist()
            for j, v in zip(pos[full].tolist(), vals, strict=True):
                out[j] = v
        gap_rows = np.nonzero(gaps)[0]
        if len(gap_rows) and points <= 0:
            for i in gap_rows.tolist():
                row = block[i].astype(np.float64)
                out[int(pos[i])] = np.clip(row[~np.isnan(row)], lo, hi).tolist()
        elif len(gap_rows):
            # rows with gaps: drop the NaNs, then cut each row's n samples like np.array_split(n, points)
            # (the first n % points chunks one longer), all rows at once through one bincount
            sub = block[gap_rows].astype(np.float64)
            valid = ~np.isnan(sub)
            n_ok = valid.sum(axis=1)
            rank = np.cumsum(valid, axis=1) - 1
            small, extra = n_ok // points, n_ok % points
            big = small + 1
            thr = (extra * big)[:, None]
            chunk = np.where(rank < thr, rank // big[:, None],
                             extra[:, None] + (rank - thr) // np.maximum(small, 1)[:, None])
            chunk = np.where((n_ok <= points)[:, None], rank, chunk)
            size = len(gap_rows) * points  # bin ``size`` takes the NaNs
            flat = np.where(valid, np.arange(len(gap_rows))[:, None] * points + chunk, size).ravel()
            sums = np.bincount(flat, weights=np.where(valid, sub, 0.0).ravel(), minlength=size + 1)[:size]
            cnts = np.bincount(flat, minlength=size + 1)[:size]
            with np.errstate(all="ignore"):
                gap_means = np.clip(sums / cnts, lo, hi).reshape(len(gap_rows), points).tolist()
            for i, row_vals, k in zip(gap_rows.tolist(), gap_means, np.minimum(n_ok, points).tolist(), strict=True):
                out[int(pos[i])] = row_vals[:k]
        return out

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
        if self.count == 0:  # keys seen, no column written yet (``every > 1``: still averaging)
            return {k: (float("nan"), float("nan"), 0) for k in keys}
        rows = np.asarray([self._row[k] for k in keys], dtype=np.int64)
        block = self._data[rows][:, : self.count] if self.count < self.capacity else self._data[rows]
        srt = np.sort(block.astype(np.float64), axis=1)  # NaNs sort last
        n = np.sum(~np.isnan(block), axis=1)
        med = _sorted_percentile(srt, n, 50.0)
        p95 = _sorted_percentile(srt, n, 95.0)
        return {k: (float(med[i]), float(p95[i]), int(n[i])) for i, k in enumerate(keys)}


def _sorted_percentile(srt: npt.NDArray[np.float64], n: npt.NDArray[np.int64], q: float) -> npt.NDArray[np.float64]:
    """Per row, the ``q``-th percentile (linear interpolation, as ``np.nanpercentile``) of the first
    ``n`` values of an ascending row; NaN where ``n == 0``.  One sort for every row instead of
    ``nanpercentile``'s slow path for rows with gaps."""
    pos = q / 100.0 * np.maximum(n - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    r = np.arange(len(n))
    a, b = srt[r, lo], srt[r, hi]
    out = a + (b - a) * (pos - lo)
    out[n == 0] = np.nan
    return out


def window_bytes(keys: int, capacity: int, series_per_key: int = 1) -> int:
    """Matrix bytes a window of ``keys × capacity`` float32 samples needs (per series)."""
    return keys * capacity * 4 * series_per_key
