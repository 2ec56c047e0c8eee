"""Step 2 of throttle protection, root cause: a disk's I/O split into six behaviours per partition.

Goal: say which partition and behaviour (user read/write, replication read/write, migration read/write) loads an
overloaded disk. Method (:func:`disk_flows`): ``bytes_in_per_s`` on every in-sync replica's dir, the page-cache-miss
estimate ``disk_read_bytes_per_s`` on the leader's, plus the in-flight :class:`~.inputs.Transfer` s on their source
and destination. Guarantee: non-finite or negative rates count as 0; disks not in the snapshot are ignored.
Cost: O(replicas + transfers).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from domain.model import ClusterSnapshot, DiskId, Partition
from planners.protection.health import finite
from planners.protection.inputs import Transfer

BEHAVIOURS = ("user_read", "user_write", "replication_read", "replication_write", "migration_read",
              "migration_write")
Behaviour = Literal["user_read", "user_write", "replication_read", "replication_write", "migration_read",
                    "migration_write"]


# --------------------------------------------------------------------------- flows (root cause)
@dataclass(frozen=True, slots=True)
class DiskFlow:
    """Bytes/s one behaviour of one partition puts on one disk."""

    disk: DiskId
    behaviour: Behaviour
    topic: str
    partition: int
    bytes_per_s: float
    broker: int
    """The broker the flow is served by (leader for user traffic, the copying replica for transfers)."""
    transfer: Transfer | None = None


def disk_flows(snapshot: ClusterSnapshot, transfers: Sequence[Transfer] = ()) -> dict[DiskId, list[DiskFlow]]:
    """Split every disk's I/O into the six behaviours per partition. O(replicas + transfers).

    User write = ``bytes_in`` on the leader's dir; replication write = ``bytes_in`` on each in-sync
    follower's dir; user read = ``disk_read_bytes_per_s`` (page-cache misses) on the leader's dir;
    transfers add migration (reassign / intra-broker) or replication (catch-up) read on the source
    and write on the destination. Non-finite or negative rates count as 0.
    """
    known = set(snapshot.index.disk_ids)
    flows: dict[DiskId, list[DiskFlow]] = defaultdict(list)

    def add(disk: DiskId | None, behaviour: Behaviour, p: Partition | Transfer, rate: float, broker: int,
            transfer: Transfer | None = None) -> None:
        r = finite(rate)
        if disk is None or disk not in known or not r:
            return
        flows[disk].append(DiskFlow(disk, behaviour, p.topic, p.partition, r, broker, transfer))

    for p in snapshot.iter_partitions():
        for i, broker in enumerate(p.replicas):
            if i >= len(p.log_dirs) or broker not in p.isr:
                continue
            disk = (broker, p.log_dirs[i])
            if broker == p.leader:
                add(disk, "user_write", p, p.bytes_in_per_s, broker)
                add(disk, "user_read", p, p.disk_read_bytes_per_s, broker)
            else:
                add(disk, "replication_write", p, p.bytes_in_per_s, broker)
    for t in transfers:
        if t.kind == "catch_up":
            add(t.source, "replication_read", t, t.bytes_per_s, t.dest[0], t)
            add(t.dest, "replication_write", t, t.bytes_per_s, t.dest[0], t)
        else:
            add(t.source, "migration_read", t, t.bytes_per_s, t.dest[0], t)
            add(t.dest, "migration_write", t, t.bytes_per_s, t.dest[0], t)
    return dict(flows)
