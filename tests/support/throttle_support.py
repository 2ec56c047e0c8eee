"""Small hand-built snapshots for the throttle planner tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from domain import Broker, ClusterSnapshot, Disk, DiskKind, Partition, Topic

MB = 1e6


def disk(path: str, util: float = 0.3, await_ms: float = 5.0, kind: DiskKind = DiskKind.HDD,
         max_bps: float = 200 * MB) -> Disk:
    return Disk(path=path, kind=kind, capacity_bytes=4_000_000_000_000, max_bytes_per_s=max_bps, util=util,
                await_ms=await_ms)


def part(topic: str, index: int, replicas: Sequence[int], dirs: Sequence[str], bytes_in: float = 1 * MB,
         bytes_out: float = 2 * MB, disk_read: float = 0.0, isr: Sequence[int] | None = None) -> Partition:
    return Partition(topic=topic, partition=index, replicas=tuple(replicas), leader=replicas[0],
                     isr=tuple(isr if isr is not None else replicas), log_dirs=tuple(dirs), size_bytes=10**10,
                     bytes_in_per_s=bytes_in, bytes_out_per_s=bytes_out, disk_read_bytes_per_s=disk_read)


def snapshot(disks: dict[int, Sequence[Disk]], partitions: Sequence[Partition],
             taken_at: datetime | None = None) -> ClusterSnapshot:
    brokers = tuple(Broker(id=b, host="127.0.0.1", port=9000 + b, idc="idc-a", rack=f"r{b}", disks=tuple(ds))
                    for b, ds in sorted(disks.items()))
    topics: dict[str, list[Partition]] = {}
    for p in partitions:
        topics.setdefault(p.topic, []).append(p)
    return ClusterSnapshot(cluster="c1", taken_at=taken_at or datetime.now(UTC), brokers=brokers,
                           topics=tuple(Topic(name=n, partitions=tuple(ps)) for n, ps in sorted(topics.items())))


def hot_snapshot(util: float = 0.95, read: float = 120 * MB, await_ms: float = 80.0) -> ClusterSnapshot:
    """Broker 1's /d1 is hot: orders-0 has a lagging reader (``read`` B/s from disk); others are calm."""
    return snapshot(
        {1: [disk("/d1", util, await_ms), disk("/d2")], 2: [disk("/d1"), disk("/d2")], 3: [disk("/d1")]},
        [part("orders", 0, [1, 2], ["/d1", "/d1"], bytes_in=20 * MB, bytes_out=40 * MB + read, disk_read=read),
         part("orders", 1, [2, 1], ["/d2", "/d2"], bytes_in=5 * MB, bytes_out=10 * MB),
         part("events", 0, [1, 3], ["/d1", "/d1"], bytes_in=8 * MB, bytes_out=8 * MB, disk_read=2 * MB),
         part("events", 1, [3, 2], ["/d1", "/d2"], bytes_in=3 * MB, bytes_out=3 * MB)])
