"""Page-cache read estimates — two of them, named apart by what they estimate — and the six-behaviour split.

Goal: tell which part of the traffic a disk serves reads from the disk rather than the page cache.
Two estimators answer it from different evidence, and a collection round carries both under distinct
names (never one field with two meanings):

* **position estimate** (:func:`residence_seconds`, :func:`is_disk_read`; the collectors' snapshot field
  ``Partition.disk_read_bytes_per_s``) — the seed system's heuristic over *consumer positions*. A broker
  keeps recently written data in the page cache for about

      T = available memory / Σ (disk read + write bytes/s of the broker)      (seconds)

  and a fetch at offset ``O`` of a partition whose log-end offset is ``LEO`` and whose message rate is
  ``R`` msg/s reads from disk when ``LEO − R · T > O``: consumers that tail the log are served from
  memory; a consumer (or an out-of-sync follower) further behind than ``R · T`` messages reads the
  leader's disk. Needs consumer offsets (kafka_exporter) and the brokers' memory.
  A position at or below the partition's **log start offset** is not where the consumer reads: the data
  there is gone, the broker answers OFFSET_OUT_OF_RANGE and the consumer resets to the earliest retained
  offset (or is held there) — so it counts as a fetch *at the log start* (:func:`fetch_offset`), the
  oldest data, and its read rate is not its position's (stuck or retention-paced) movement but its share
  of the partition's bytes-out beyond what the other groups' positions account for
  (:func:`position_disk_reads`). Before this rule a consumer lagging beyond the retained log was
  estimated at 0 disk reads while its disk read 30 MB/s.
* **attribution estimate** (:func:`attributed_disk_reads`; what throttle protection weighs) — each disk's
  *measured* read bytes/s, minus what in-flight copies read from it, split over the partitions led on
  that disk in proportion to their fetch traffic beyond the topic's tailing fan-out (median
  bytes_out/bytes_in over the topic's partitions): tailing consumers are served from the page cache,
  what reads beyond them lags and misses it. Needs only the disks' read counters and partition rates.

Guarantee: both are pure and never exceed what they divide (a partition's attributed read is at most its
fetch traffic; a disk's attributed total is at most its measured reads; the reset readers of a partition
together get at most its bytes-out). Cost: the attribution is
O(partitions) per call in Python (about 0.1 s per 100,000 partitions).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from domain import Broker, DiskId, Partition, PartitionId

BEHAVIOURS = ("user_read", "user_write", "replication_read", "replication_write",
              "migration_read", "migration_write")


def residence_seconds(available_memory_bytes: float, disk_io_bytes_per_s: float) -> float:
    """T: how long written data stays in the page cache (inf when the broker does no I/O).

    Returns 0 for no memory or non-finite inputs (then every lagging fetch counts as a disk read).
    """
    if not (math.isfinite(available_memory_bytes) and available_memory_bytes > 0):
        return 0.0
    if not math.isfinite(disk_io_bytes_per_s) or disk_io_bytes_per_s < 0:
        return 0.0
    if disk_io_bytes_per_s == 0:
        return math.inf
    return available_memory_bytes / disk_io_bytes_per_s


def fetch_offset(offset: float, log_start: float | None) -> tuple[float, bool]:
    """Where a fetch from position ``offset`` reads, and whether it was reset: a position at or below
    ``log_start`` (known and finite) reads from the log start; any other reads where it stands."""
    if log_start is not None and math.isfinite(log_start) and offset <= log_start:
        return log_start, True
    return offset, False


@dataclass
class PositionReads:
    """The position estimate of one partition: disk read bytes/s and which groups read disk / cache."""

    bytes_per_s: float
    disk: list[str]
    cached: list[str]
    reset: list[str]


def position_disk_reads(leo: float, log_start: float | None, msgs_per_s: float, residence_s: float,
                        bytes_per_msg: float, bytes_out: float, positions: Mapping[str, float],
                        position_rates: Mapping[str, float]) -> PositionReads:
    """The position estimate of a partition led by a broker whose residence time is ``residence_s``.

    Per consumer group (sorted): its fetch offset (:func:`fetch_offset`: the log start when its position
    is at or below it) reads the disk when :func:`is_disk_read`. A disk reader's bytes/s is its position's
    rate × ``bytes_per_msg`` when both are known and it was not reset; a reset reader gets an equal share of
    what ``bytes_out`` leaves after the groups whose rates are known; any other reader
    ``bytes_out / len(positions)``. NaN inputs count as unknown; a NaN ``residence_s`` makes every group
    cached (no basis to call a read a miss). Pure; O(groups).
    """
    bpm_ok = math.isfinite(bytes_per_msg)
    out = bytes_out if math.isfinite(bytes_out) else 0.0
    r_msgs = msgs_per_s if math.isfinite(msgs_per_s) else 0.0
    where = {group: fetch_offset(off, log_start) for group, off in positions.items()}
    reset = sorted(g for g, (_, was_reset) in where.items() if was_reset)
    known = sum(position_rates[g] * bytes_per_msg for g in positions
                if g not in reset and bpm_ok and g in position_rates and math.isfinite(position_rates[g]))
    reset_share = max(out - known, 0.0) / len(reset) if reset else 0.0
    disk: list[str] = []
    cached: list[str] = []
    total = 0.0
    for group in sorted(positions):
        offset, was_reset = where[group]
        if math.isnan(residence_s) or not is_disk_read(leo, r_msgs, residence_s, offset):
            cached.append(group)
            continue
        disk.append(group)
        rate = position_rates.get(group)
        if was_reset:
            total += reset_share
        elif rate is not None and math.isfinite(rate) and bpm_ok:
            total += rate * bytes_per_msg
        else:
            total += out / max(len(positions), 1)
    return PositionReads(total, disk, cached, reset)


def is_disk_read(leo: float, msgs_per_s: float, residence_s: float, offset: float) -> bool:
    """True when a fetch at ``offset`` misses the page cache: ``LEO − R·T > O``.

    An unknown/negative rate counts as 0 msg/s; ``T = inf`` means everything is cached.
    """
    if math.isinf(residence_s):
        return False
    r = msgs_per_s if (math.isfinite(msgs_per_s) and msgs_per_s > 0) else 0.0
    return leo - r * residence_s > offset


@dataclass
class Behaviours:
    """One disk's I/O attributed to the six behaviours (bytes/s), plus what is left over."""

    user_read: float = 0.0
    user_write: float = 0.0
    replication_read: float = 0.0
    replication_write: float = 0.0
    migration_read: float = 0.0
    migration_write: float = 0.0
    measured_read: float | None = None
    measured_write: float | None = None

    @property
    def estimated_read(self) -> float:
        """Σ of the three read behaviours."""
        return self.user_read + self.replication_read + self.migration_read

    @property
    def estimated_write(self) -> float:
        """Σ of the three write behaviours."""
        return self.user_write + self.replication_write + self.migration_write

    def as_dict(self) -> dict[str, float | None]:
        """JSON-able dict: the six behaviours, the measured totals and the unattributed rest."""
        out: dict[str, float | None] = {b: round(getattr(self, b), 3) for b in BEHAVIOURS}
        out["measured_read"] = None if self.measured_read is None else round(self.measured_read, 3)
        out["measured_write"] = None if self.measured_write is None else round(self.measured_write, 3)
        out["unattributed_read"] = (None if self.measured_read is None
                                    else round(self.measured_read - self.estimated_read, 3))
        out["unattributed_write"] = (None if self.measured_write is None
                                     else round(self.measured_write - self.estimated_write, 3))
        return out


def attributed_disk_reads(partitions: Sequence[Partition], brokers: Sequence[Broker],
                          copy_reads: Mapping[DiskId, float]) -> dict[PartitionId, float]:
    """The attribution estimate (see the module docstring): ``(topic, partition) -> disk read bytes/s``
    for the partitions that get a share (others read nothing from disk by this estimate).

    ``copy_reads`` is the bytes/s in-flight copies read from each source disk (not user reads).
    """
    by_topic: dict[str, list[float]] = defaultdict(list)
    for p in partitions:
        if p.bytes_in_per_s > 1.0:
            by_topic[p.topic].append(p.bytes_out_per_s / p.bytes_in_per_s)
    fanout = {topic: statistics.median(ratios) for topic, ratios in by_topic.items()}
    measured: dict[DiskId, float] = {}
    for b in brokers:
        for d in b.disks:
            if math.isfinite(d.read_bytes_per_s):
                measured[(b.id, d.path)] = d.read_bytes_per_s
    for disk, rate in copy_reads.items():
        if disk in measured:
            measured[disk] = max(measured[disk] - rate, 0.0)
    led: dict[DiskId, list[int]] = defaultdict(list)
    for i, p in enumerate(partitions):
        if p.leader is not None and p.leader in p.replicas:
            led[(p.leader, p.log_dirs[p.replicas.index(p.leader)])].append(i)
    reads: dict[PartitionId, float] = {}
    for disk, idx in led.items():
        total = measured.get(disk, 0.0)
        if total <= 0:
            continue
        excess = {i: max(partitions[i].bytes_out_per_s
                         - fanout.get(partitions[i].topic, 0.0) * partitions[i].bytes_in_per_s, 0.0) for i in idx}
        weights = excess if sum(excess.values()) > 0 else {i: partitions[i].bytes_out_per_s for i in idx}
        wsum = sum(weights.values())
        if wsum <= 0:
            continue
        for i, w in weights.items():
            r = min(total * w / wsum, partitions[i].bytes_out_per_s)
            if r:
                reads[partitions[i].id] = r
    return reads
