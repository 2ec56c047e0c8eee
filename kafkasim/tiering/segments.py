"""One tiered partition's log in kafkasim (KIP-405): segments, rolls, local and remote retention, reads.

Goal
    The decisions a leader's ``RemoteLogManager`` and log layer make for a ``remote.storage.enable=true``
    partition, without I/O: when to roll the active segment, which closed segments to copy to remote
    storage, which local segments local retention drops (only copied ones), which remote segments
    retention deletes, and where a fetch offset is served from (local tail or a remote segment).

Method
    The partition's offsets and bytes come from the engine (``leo``, ``bytes_in_total``: simulated traffic
    and real Produce alike); real record batches (what Produce stored) are attached to the segment whose
    offset range holds them, so a segment file is exactly Kafka's log format (v2 batches back to back)
    and a remote read returns the bytes that were produced.  Offsets of simulated traffic have no stored
    bytes: a segment counts them in ``size`` and a read stands in generated records for them (as kafkasim
    does for untiered partitions).  A segment's state is ``local`` (closed, not copied), ``copying`` (a
    copy job owns it), ``copied`` (in remote storage; maybe still local) or ``deleting``; ``local`` says
    whether its bytes are still on the broker's disk.  Rolls: ``segment.bytes`` or ``segment.ms``
    (simulated time).  Local retention (``local.retention.bytes/ms``; ``-2`` = the topic's retention,
    ``-1`` = unlimited) drops the oldest copied local segments while what is left stays at or above the
    limit (Kafka's ``retentionSizeBreach``) or while they are older than the limit.  Remote retention
    (``retention.bytes/ms``) deletes the oldest copied segments while the whole log (remote + local) is
    above ``retention.bytes``, or those older than ``retention.ms``; the log start offset moves first.

Guarantee
    Local bytes are never dropped before the segment is copied (a broker that cannot reach remote storage
    keeps its log); the log start offset only moves forward; ``local_start`` is the first offset still on
    the broker's disk and ``log_start`` the first still readable anywhere.

Cost
    O(segments) per tick for one partition (segments are few: ``size / segment.bytes``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

Batch = tuple[int, int, int, bytes]
"""(base offset, last offset, max timestamp, v2 batch bytes with the base offset written in) as stored."""

LOCAL, COPYING, COPIED, DELETING = "local", "copying", "copied", "deleting"


@dataclass
class Segment:
    """A closed segment: offsets ``[base, end]``, ``size`` bytes, rolled at ``closed_t`` (simulated s)."""

    base: int
    end: int
    size: float
    closed_t: float
    epoch: int
    batches: list[Batch] = field(default_factory=list)
    state: str = LOCAL
    local: bool = True
    segment_id: int = 0
    remote_path: str = ""
    owner: int = 0
    """The copy or delete job that owns the segment now (results of superseded jobs are ignored)."""
    tried: int = 0
    """Copy jobs made for it so far (a retry first reads what Guardian already holds)."""

    def data(self) -> bytes:
        """The segment file: its real batches back to back (Kafka's ``.log`` format)."""
        return b"".join(b[3] for b in self.batches)


def retention_limit(local_value: int, topic_value: int) -> float:
    """A local limit in its unit (inf = unlimited): ``-2`` means the topic's own retention value."""
    v = topic_value if local_value == -2 else local_value
    return math.inf if v < 0 else float(v)


class TieredLog:
    """The segments of one tiered partition (see the module docstring)."""

    def __init__(self, start: int, end: int, bytes_in: float, t: float) -> None:
        self.segments: list[Segment] = []  # closed, oldest first, until deleted from remote
        self.active_base = end
        self.active_bytes = 0.0
        self.active_t0 = t
        self.seen_in = bytes_in  # the engine's bytes_in_total at the last tick
        self.real_pending = 0.0  # real bytes appended since then (already counted in active_bytes)
        self.active_batches: list[Batch] = []
        self.log_start = start
        self.attach_t, self.attach_end = t, end

    @classmethod
    def from_history(cls, start: int, end: int, size: float, batches: list[Batch], bytes_in: float, t: float,
                     segment_bytes: float, rate: float, epoch: int) -> TieredLog:
        """A partition that becomes tiered with ``size`` bytes at ``[start, end)``: closed segments of about
        ``segment.bytes`` each (ages spread by the ingress ``rate``), all to be copied; an empty active one."""
        log = cls(start, end, bytes_in, t)
        count = max(1, math.ceil(size / max(segment_bytes, 1.0))) if end > start else 0
        if count > end - start:
            count = end - start
        for k in range(count):
            base = start + (end - start) * k // count
            last = start + (end - start) * (k + 1) // count - 1
            after = size * (count - k - 1) / count
            seg = Segment(base, last, size / count, t - after / max(rate, 1.0), epoch,
                          [b for b in batches if base <= b[0] <= last])
            log.segments.append(seg)
        log.active_batches = [b for b in batches if b[0] >= end]
        return log

    # ------------------------------------------------------------------ queries
    @property
    def local_start(self) -> int:
        """The first offset on the broker's disk."""
        for s in self.segments:
            if s.local:
                return s.base
        return self.active_base

    def local_bytes(self) -> float:
        """Bytes on the broker's disk: local closed segments + the active one."""
        return sum(s.size for s in self.segments if s.local) + self.active_bytes

    def remote_only_bytes(self) -> float:
        return sum(s.size for s in self.segments if s.state == COPIED and not s.local)

    def bytes_below(self, offset: int) -> float:
        """Local bytes at offsets below ``offset`` (proportional inside a segment)."""
        out = 0.0
        for s in self.segments:
            if not s.local or s.base >= offset:
                continue
            if s.end < offset:
                out += s.size
            else:
                out += s.size * (offset - s.base) / max(s.end - s.base + 1, 1)
        return out

    def ingress(self, end: int, t: float) -> float:
        """Average offsets per second since the log was attached (0 before any time passed)."""
        return (end - self.attach_end) / (t - self.attach_t) if t > self.attach_t else 0.0

    # ------------------------------------------------------------------ changes
    def advance(self, bytes_in: float) -> None:
        """A tick: the simulated traffic since the last one (``bytes_in_total`` less the real bytes) is appended."""
        self.active_bytes += max(bytes_in - self.seen_in - self.real_pending, 0.0)
        self.seen_in, self.real_pending = bytes_in, 0.0

    def add_batch(self, batch: Batch, t: float, segment_bytes: float, epoch: int) -> Segment | None:
        """A real batch: as Kafka's log does, roll first when it would take the active segment past
        ``segment.bytes`` (the batch then starts the new segment); returns the rolled segment."""
        rolled = None
        if self.active_bytes + len(batch[3]) > segment_bytes and batch[0] > self.active_base:
            rolled = self._roll(batch[0], t, epoch)
        self.active_batches.append(batch)
        self.active_bytes += len(batch[3])
        self.real_pending += len(batch[3])
        return rolled

    def maybe_roll(self, end: int, t: float, segment_bytes: float, segment_s: float, epoch: int) -> Segment | None:
        """Close the active segment at ``end`` (exclusive) when it reached ``segment.bytes`` or ``segment.ms``."""
        if end <= self.active_base or (self.active_bytes < segment_bytes and t - self.active_t0 < segment_s):
            return None
        return self._roll(end, t, epoch)

    def _roll(self, end: int, t: float, epoch: int) -> Segment:
        seg = Segment(self.active_base, end - 1, self.active_bytes, t, epoch,
                      [b for b in self.active_batches if b[0] < end])
        self.segments.append(seg)
        self.active_batches = [b for b in self.active_batches if b[0] >= end]
        self.active_base, self.active_bytes, self.active_t0 = end, 0.0, t
        return seg

    def to_copy(self) -> list[Segment]:
        return [s for s in self.segments if s.state == LOCAL]

    def trim_local(self, t: float, limit_bytes: float, limit_s: float) -> list[Segment]:
        """Drop copied local segments as local retention says; returns the dropped ones."""
        dropped: list[Segment] = []
        total = self.local_bytes()
        for s in self.segments:
            if not s.local:
                continue
            if s.state != COPIED:
                break  # never drop what remote storage does not hold; keep the log contiguous
            if total - s.size >= limit_bytes or t - s.closed_t > limit_s:
                s.local = False
                s.batches = []  # served from the remote file from now on
                total -= s.size
                dropped.append(s)
            else:
                break
        return dropped

    def expire_remote(self, t: float, limit_bytes: float, limit_s: float) -> list[Segment]:
        """Mark the oldest copied segments ``deleting`` as retention says; the log start moves past them."""
        out: list[Segment] = []
        total = sum(s.size for s in self.segments if s.state in (COPIED, COPYING, LOCAL)) + self.active_bytes
        for s in self.segments:
            if s.state == DELETING:
                continue
            if s.state != COPIED:
                break
            if total - s.size >= limit_bytes or t - s.closed_t > limit_s:
                s.state, s.local, s.owner = DELETING, False, 0  # owner 0: a delete job is due
                total -= s.size
                out.append(s)
            else:
                break
        live = [s for s in self.segments if s.state != DELETING]
        self.log_start = max(self.log_start, live[0].base if live else self.active_base)
        return out

    def forget(self, segment: Segment) -> None:
        """A segment whose remote delete finished."""
        self.segments = [s for s in self.segments if s is not segment]

    # ------------------------------------------------------------------ reads
    def locate(self, offset: int) -> tuple[Segment | None, list[Batch], int]:
        """Where ``offset`` is: ``(remote segment, [], its end + 1)`` below the local start, else
        ``(None, local batches from there on, the active end marker)``."""
        if offset < self.local_start:
            for s in self.segments:
                if s.state == COPIED and s.base <= offset <= s.end:
                    return s, [], s.end + 1
            return None, [], -1
        out: list[Batch] = []
        for s in self.segments:
            if s.local and s.end >= offset:
                out.extend(s.batches)
        out.extend(self.active_batches)
        return None, out, -1


def slice_batches(batches: list[Batch], offset: int, stop: int, max_bytes: int) -> tuple[list[bytes], int]:
    """The stored batches to return for a fetch at ``offset`` (at least one when one holds it, then up to
    ``max_bytes``), and the first offset of stored data when simulated records come first (else ``stop``)."""
    chunks: list[bytes] = []
    size = 0
    for base, last, _ts, buf in batches:
        if last < offset:
            continue
        if base >= stop:
            break
        if not chunks and base > offset:
            return chunks, base  # a gap of simulated traffic comes first
        if chunks and size + len(buf) > max_bytes:
            break
        chunks.append(buf)
        size += len(buf)
    return chunks, stop
