"""The page-cache read estimate (the seed system's heuristic) and the six-behaviour disk split.

A broker keeps recently written data in the page cache for about

    T = available memory / Σ (disk read + write bytes/s of the broker)      (seconds)

A fetch at offset ``O`` of a partition whose log-end offset is ``LEO`` and whose message rate is
``R`` msg/s reads from disk when the data it asks for is older than ``T``:

    LEO − R · T > O

Consumers that tail the log are served from memory; a consumer (or an out-of-sync follower)
further behind than ``R · T`` messages reads the leader's disk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
