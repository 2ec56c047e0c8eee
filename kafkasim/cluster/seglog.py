"""Segment-wise retention for a record-holding partition (untiered, all of its log real Produce batches).

Goal
    A partition whose log holds only what real producers wrote (no simulated traffic: ``base_rate`` 0,
    e.g. ``__guardian_executor_lease`` or ``__guardian_audit``) loses records as a Kafka broker's log
    does: whole segments at a time, so its log start offset stays put between deletions instead of
    creeping forward every tick as the engine's continuous retention model does for simulated traffic.

Method
    Kafka's ``LogSegment.shouldRoll`` and ``UnifiedLog.deleteOldSegments`` on offsets and byte counts
    (no bytes are kept here; the batches live on the partition).  An append rolls the active segment
    first when it is not empty and the batch would take it past ``segment.bytes``, or when its first
    append is more than ``segment.ms`` old (simulated broker clock).  Retention deletes the oldest
    segments while the newest record of each is more than ``retention.ms`` old (when that holds for the
    non-empty active segment too, Kafka rolls an empty one first and deletes the old one), then while
    the log less the oldest closed segment still holds at least ``retention.bytes``.  The log start
    offset moves to the base offset of the first segment kept.  Record times are the broker's
    (simulated) clock at append: wire clients stamp CreateTime from their own wall clock, which is not
    the simulation's.

Guarantee
    Only whole segments are deleted; size retention never deletes the active segment; the log start
    offset only moves forward and never past the log end offset.

Cost
    O(1) per append; O(segments deleted + 1) per retention check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class LogSegment:
    """Offsets from ``base`` on, ``size`` bytes, the newest append at ``newest_t`` (simulated s)."""

    base: int
    size: float
    first_t: float
    newest_t: float


class SegmentedLog:
    """The segments of one record-holding partition, oldest first; the last one is the active segment."""

    def __init__(self, start: int, end: int, size: float, t: float) -> None:
        self.closed: list[LogSegment] = []
        if end > start:  # what the log held before it became record-holding: one closed segment
            self.closed.append(LogSegment(start, size, t, t))
        self.active = LogSegment(end, 0.0, t, t)

    @property
    def log_start(self) -> int:
        return self.closed[0].base if self.closed else self.active.base

    @property
    def size(self) -> float:
        return sum(s.size for s in self.closed) + self.active.size

    def roll(self, end: int, t: float) -> None:
        """Close the active segment; a new empty one starts at ``end``."""
        self.closed.append(self.active)
        self.active = LogSegment(end, 0.0, t, t)

    def append(self, base: int, nbytes: float, t: float, segment_bytes: float, segment_s: float) -> None:
        """A batch at offset ``base`` (the log end offset) of ``nbytes`` bytes appended at ``t``."""
        a = self.active
        if a.size > 0 and (a.size + nbytes > segment_bytes or t - a.first_t > segment_s):
            self.roll(base, t)
            a = self.active
        if a.size == 0:
            a.base, a.first_t = base, t
        a.size += nbytes
        a.newest_t = t

    def expire(self, t: float, end: int, retention_s: float, retention_bytes: float) -> float:
        """Delete segments as ``retention.ms`` then ``retention.bytes`` say (inf = unlimited); returns the
        bytes deleted.  ``end`` is the log end offset (the base of a segment rolled for deletion)."""
        removed = 0.0
        if math.isfinite(retention_s):
            if self.active.size > 0 and t - self.active.newest_t > retention_s \
                    and all(t - s.newest_t > retention_s for s in self.closed):
                self.roll(end, t)
            while self.closed and t - self.closed[0].newest_t > retention_s:
                removed += self.closed.pop(0).size
        if math.isfinite(retention_bytes):
            total = self.size
            while self.closed and total - self.closed[0].size >= retention_bytes:
                seg = self.closed.pop(0)
                total -= seg.size
                removed += seg.size
        return removed
