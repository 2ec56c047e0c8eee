"""Step 3 of throttle protection: the abnormal behaviours of an unhealthy disk, largest first.

Goal: the order in which the protection cuts flows. Method (:func:`abnormal_queue`): any disk read, a user write
above its expected rate x ``write_tolerance``, every migration and catch-up write (steady state expects none);
sorted by current traffic, ties by a stable key. Guarantee: in-sync replication writes are never queued; flows
under ``min_abnormal_bytes_per_s`` are noise. Cost: O(q log q) for q flows on the disk.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from domain.model import PartitionId
from planners.protection.config import ProtectionConfig
from planners.protection.flows import DiskFlow
from planners.protection.health import finite


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """An abnormal behaviour on an unhealthy disk: its current traffic and why it is abnormal."""

    flow: DiskFlow
    expected_bytes_per_s: float
    why: str

    @property
    def sort_key(self) -> tuple[float, str, str, int, int]:
        """Largest traffic first; ties broken by behaviour, topic, partition, broker (stable)."""
        f = self.flow
        return (-f.bytes_per_s, f.behaviour, f.topic, f.partition, f.broker)


def abnormal_queue(flows: Iterable[DiskFlow], expected_bytes_in: Mapping[PartitionId, float],
                   config: ProtectionConfig) -> list[QueueEntry]:
    """The abnormal behaviours among ``flows``, sorted by current traffic, largest first.

    Abnormal: any disk read; a user write above ``expected x write_tolerance`` (unknown or non-finite
    expectation: not abnormal); every migration write and catch-up replication write (steady state
    expects none). In-sync replication writes are never queued (they follow the leader's writes and
    KIP-73 cannot slow them). Flows below ``min_abnormal_bytes_per_s`` are ignored.
    """
    out: list[QueueEntry] = []
    for f in flows:
        if f.bytes_per_s < config.min_abnormal_bytes_per_s:
            continue
        if f.behaviour.endswith("_read"):
            out.append(QueueEntry(f, 0.0, f"disk read ({f.behaviour.replace('_', ' ')}) is abnormal"))
        elif f.behaviour == "user_write":
            exp = finite(expected_bytes_in.get((f.topic, f.partition)))
            if exp is not None and f.bytes_per_s > exp * config.write_tolerance:
                out.append(QueueEntry(f, exp, f"writes {f.bytes_per_s:.0f} B/s > expected {exp:.0f} B/s "
                                              f"x {config.write_tolerance}"))
        elif f.transfer is not None:
            out.append(QueueEntry(f, 0.0, f"{f.transfer.kind.replace('_', '-')} copy writes this disk"))
    out.sort(key=lambda e: e.sort_key)
    return out
