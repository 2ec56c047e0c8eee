"""Turn one live read of a cluster into the domain's snapshot (for ``check_plan``) and current assignments."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from collectors.rates import counter_rate
from controlplane.executor.tasks import CurrentPartition
from domain import Broker, BrokerState, ClusterSnapshot, Disk, DiskKind, Partition, Topic
from kafkaio.endpoints import ClusterEndpoints
from kafkaio.types import LiveCluster, ReplicaDir

DirMap = Mapping[tuple[str, int, int], list[ReplicaDir]]
DEFAULT_DISK_BPS = 200e6


def main_dir(dirs: DirMap, topic: str, partition: int, broker: int) -> ReplicaDir | None:
    """The replica's current (non-future) log dir entry, if the broker reported one."""
    for entry in dirs.get((topic, partition, broker), ()):
        if not entry.is_future:
            return entry
    return None


def future_dir(dirs: DirMap, topic: str, partition: int, broker: int) -> ReplicaDir | None:
    """The replica's future (intra-broker move in progress) entry, if any."""
    for entry in dirs.get((topic, partition, broker), ()):
        if entry.is_future:
            return entry
    return None


def partition_size(dirs: DirMap, live: LiveCluster, topic: str, partition: int) -> int:
    """Bytes of the partition: its leader's replica size (else the largest replica reported)."""
    p = live.partitions[(topic, partition)]
    lead = main_dir(dirs, topic, partition, p.leader) if p.leader >= 0 else None
    if lead is not None:
        return lead.size
    sizes = [e.size for b in p.replicas for e in dirs.get((topic, partition, b), ()) if not e.is_future]
    return max(sizes, default=0)


def current_partitions(live: LiveCluster, dirs: DirMap) -> dict[tuple[str, int], CurrentPartition]:
    """``(topic, partition) -> CurrentPartition`` for every partition of the live cluster."""
    out = {}
    for tp, p in live.partitions.items():
        log_dirs = tuple((d.log_dir if (d := main_dir(dirs, p.topic, p.partition, b)) else None) for b in p.replicas)
        out[tp] = CurrentPartition(p.replicas, log_dirs, p.leader, partition_size(dirs, live, *tp),
                                   len(set(p.isr)) < len(set(p.replicas)))
    return out


def live_snapshot(cluster: str, live: LiveCluster, dirs: DirMap, capacity: Mapping[tuple[int, str], tuple[int, int]],
                  endpoints: ClusterEndpoints | None = None,
                  disk_max_bps: Mapping[tuple[int, str], float] | None = None) -> ClusterSnapshot:
    """A ``ClusterSnapshot`` of the live cluster, good enough for the shared invariant checker.

    Brokers missing from metadata are ``dead``; IDC and pool come from the endpoints file (rack as
    fallback IDC); a replica on a broker that reported no log dir gets that broker's first dir.
    """
    known = {b.id: b for b in (endpoints.brokers if endpoints else ())}
    ids = set(live.alive) | set(known) | {b for p in live.partitions.values() for b in p.replicas}
    disk_paths: dict[int, list[str]] = {}
    for (b, path) in sorted(capacity):
        disk_paths.setdefault(b, []).append(path)
    brokers = []
    for bid in sorted(ids):
        ep = known.get(bid)
        rack = live.racks.get(bid) or (ep.rack if ep else "") or "rack-unknown"
        idc = (ep.idc if ep and ep.idc else rack.rsplit("-r", 1)[0]) or "idc-unknown"
        disks = []
        for path in disk_paths.get(bid, []) or (["/unknown"] if bid not in live.alive else []):
            total, usable = capacity.get((bid, path), (1, 1))
            total = max(total, 1)
            disks.append(Disk(path=path, kind=DiskKind.HDD, capacity_bytes=total,
                              max_bytes_per_s=(disk_max_bps or {}).get((bid, path), DEFAULT_DISK_BPS),
                              used_bytes=max(total - max(usable, 0), 0)))
        brokers.append(Broker(id=bid, host=ep.host if ep and ep.host else "127.0.0.1",
                              port=ep.port if ep and ep.port else 9092, idc=idc, rack=rack,
                              pool=(ep.pool if ep else None) or "shared",
                              state=BrokerState.ALIVE if bid in live.alive else BrokerState.DEAD,
                              disks=tuple(disks)))
    first_dir = {b.id: b.disks[0].path for b in brokers if b.disks}
    topics: dict[str, list[Partition]] = {}
    for (topic, index), p in sorted(live.partitions.items()):
        log_dirs = tuple((d.log_dir if (d := main_dir(dirs, topic, index, b)) else first_dir.get(b, "/unknown"))
                         for b in p.replicas)
        topics.setdefault(topic, []).append(Partition(
            topic=topic, partition=index, replicas=p.replicas, leader=p.leader if p.leader >= 0 else None,
            isr=p.isr, log_dirs=log_dirs, size_bytes=partition_size(dirs, live, topic, index)))
    return ClusterSnapshot(cluster=cluster, taken_at=datetime.now(UTC), brokers=tuple(brokers),
                           topics=tuple(Topic(name=n, partitions=tuple(ps)) for n, ps in sorted(topics.items())))


class IngressMeter:
    """Producers' bytes/s into each partition, measured from the live cluster between passes.

    The leader replica's log size is sampled every pass (from the log-dir read the pass makes anyway)
    and turned into a rate by the collectors' :func:`~collectors.rates.counter_rate` (measured elapsed
    time; a log that shrank — retention deleted a segment — or a clock that did not move gives no
    rate, and the last good one stays), smoothed over passes. What the executor uses when no snapshot
    tells it (``guardian exec run``): a copy throttled below this never catches up.
    """

    def __init__(self, smoothing: float = 0.5) -> None:
        self.smoothing = smoothing
        self._last: dict[tuple[str, int], tuple[float, float]] = {}
        self.rates: dict[tuple[str, int], float] = {}

    def observe(self, live: LiveCluster, dirs: DirMap, now: float, partitions: Iterable[tuple[str, int]]) -> None:
        """Take one size sample of each of ``partitions`` whose leader reported its log dir at time ``now``."""
        for tp in partitions:
            p = live.partitions.get(tp)
            lead = main_dir(dirs, tp[0], tp[1], p.leader) if p is not None and p.leader >= 0 else None
            if lead is None:
                continue
            prev = self._last.get(tp)
            self._last[tp] = (now, float(lead.size))
            rate = counter_rate(prev[0] if prev else None, prev[1] if prev else None, now, float(lead.size))
            if rate.value is not None:
                old = self.rates.get(tp)
                self.rates[tp] = rate.value if old is None else old + self.smoothing * (rate.value - old)

    def forget(self) -> None:
        """Drop every sample (an execution ended)."""
        self._last.clear()
        self.rates.clear()

    def __call__(self, topic: str, partition: int) -> float:
        """Last measured bytes/s into ``topic``-``partition`` (0 before two samples)."""
        return self.rates.get((topic, partition), 0.0)
