"""Builders for leased-line tests: a two-IDC snapshot (brokers 1, 2 in idc-a; 3, 4 in idc-b)."""

from __future__ import annotations

from datetime import UTC, datetime

from domain import Broker, ClusterSnapshot, Disk, DiskKind, Partition, Topic

MB = 1e6
IDC = {1: "idc-a", 2: "idc-a", 3: "idc-b", 4: "idc-b"}


def two_idc(partitions: list[Partition], idc: dict[int, str] | None = None) -> ClusterSnapshot:
    """A snapshot of ``partitions`` on brokers placed by ``idc`` (default :data:`IDC`)."""
    idc = idc or IDC
    brokers = tuple(Broker(id=b, host="h", port=9000 + b, idc=i, rack=f"{i}-r1",
                           disks=(Disk(path="/d", kind=DiskKind.SSD, capacity_bytes=10**12, max_bytes_per_s=500e6),))
                    for b, i in sorted(idc.items()))
    topics: dict[str, list[Partition]] = {}
    for p in partitions:
        topics.setdefault(p.topic, []).append(p)
    return ClusterSnapshot(cluster="c", taken_at=datetime(2026, 11, 23, tzinfo=UTC), brokers=brokers,
                           topics=tuple(Topic(name=n, partitions=tuple(ps)) for n, ps in sorted(topics.items())))


def part(topic: str, index: int, replicas: tuple[int, ...], bytes_in: float, bytes_out: float = 0.0,
         isr: tuple[int, ...] | None = None) -> Partition:
    """A partition led by its first replica."""
    return Partition(topic=topic, partition=index, replicas=replicas, leader=replicas[0],
                     isr=replicas if isr is None else isr, log_dirs=tuple("/d" for _ in replicas),
                     bytes_in_per_s=bytes_in, bytes_out_per_s=bytes_out)
