"""Turn one live read of a cluster into the domain's snapshot (for ``check_plan``) and current assignments.

The live snapshot is the observer's round overlaid with live metadata: which brokers are alive, every
partition's replicas, leader, ISR, log dirs and size, and each disk's capacity and free space come from
the cluster now; what metadata does not carry — IDC, pool, disk kind and speed — comes from
:class:`BrokerFacts`: the latest collection round's snapshot (:func:`snapshot_facts`), or what the
endpoints file declares (:func:`declared_facts`) when there is no round. Nothing is guessed: a broker
with no observed or declared IDC is in IDC ``unknown`` (so an IDC placement policy touching it is
refused by the checker, never met by accident), and a disk whose kind and speed nobody observed or
declared is left out (a plan naming it is refused as an unknown log dir).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from collectors.rates import counter_rate
from controlplane.executor.tasks import CurrentPartition, recorded_dir
from domain import Broker, BrokerState, ClusterSnapshot, Disk, DiskKind, Partition, Topic
from domain.execution import Task
from kafkaio.endpoints import ClusterEndpoints
from kafkaio.types import LiveCluster, ReplicaDir

DirMap = Mapping[tuple[str, int, int], list[ReplicaDir]]
UNKNOWN = "unknown"
"""The IDC (and rack) of a broker nobody observed or declared one for."""


def main_dir(dirs: DirMap, topic: str, partition: int, broker: int) -> ReplicaDir | None:
    """The replica's current (non-future) log dir entry, if the broker reported one."""
    for entry in dirs.get((topic, partition, broker), ()):
        if not entry.is_future:
            return entry
    return None


def replica_disk(t: Task, dirs: DirMap, broker: int) -> tuple[int, str] | None:
    """The disk of ``broker``'s replica of the task's partition: its current dir as the broker reported it, else
    the one the task recorded when it was planned (``None``: neither, or no such broker)."""
    cur = main_dir(dirs, t.topic, t.partition, broker)
    return (broker, cur.log_dir) if cur is not None else recorded_dir(t, broker)


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


@dataclass(frozen=True)
class DiskFacts:
    """What metadata does not say about a log dir: its medium and speed (and, observed, its size)."""

    kind: DiskKind
    max_bytes_per_s: float
    capacity_bytes: int = 0
    used_bytes: int = 0


@dataclass(frozen=True)
class BrokerFacts:
    """What metadata does not say about a broker (None: not known)."""

    idc: str | None = None
    rack: str | None = None
    pool: str | None = None
    host: str | None = None
    port: int | None = None
    disks: Mapping[str, DiskFacts] = field(default_factory=dict)


class ClusterFacts(Protocol):
    """Port: the latest known facts per broker (the observer's round, else the declared ones)."""

    def facts(self) -> Mapping[int, BrokerFacts]:
        """broker id -> facts."""
        ...


FactsSource = ClusterEndpoints | ClusterFacts
"""Where a live snapshot's broker facts come from: an endpoints file's declarations or an observer's view."""


def declared_facts(endpoints: ClusterEndpoints) -> dict[int, BrokerFacts]:
    """What an endpoints file declares per broker (empty strings are not declarations)."""
    return {b.id: BrokerFacts(idc=b.idc or None, rack=b.rack or None, pool=b.pool or None, host=b.host or None,
                              port=b.port or None) for b in endpoints.brokers}


def snapshot_facts(snapshot: ClusterSnapshot) -> dict[int, BrokerFacts]:
    """The facts of every broker of an observed snapshot (a collection round's)."""
    return {b.id: BrokerFacts(idc=b.idc or None, rack=b.rack or None, pool=b.pool or None, host=b.host or None,
                              port=b.port or None,
                              disks={d.path: DiskFacts(d.kind, d.max_bytes_per_s, d.capacity_bytes, d.used_bytes)
                                     for d in b.disks})
            for b in snapshot.brokers}


def merged_facts(observed: Mapping[int, BrokerFacts], declared: Mapping[int, BrokerFacts]) -> dict[int, BrokerFacts]:
    """Observed facts, with the declared ones filling what the observation lacks."""
    out = dict(declared)
    for bid, o in observed.items():
        d = declared.get(bid, BrokerFacts())
        out[bid] = BrokerFacts(o.idc or d.idc, o.rack or d.rack, o.pool or d.pool, o.host or d.host, o.port or d.port,
                               {**d.disks, **o.disks})
    return out


def live_snapshot(cluster: str, live: LiveCluster, dirs: DirMap, capacity: Mapping[tuple[int, str], tuple[int, int]],
                  endpoints: FactsSource | None = None,
                  disk_max_bps: Mapping[tuple[int, str], float] | None = None) -> ClusterSnapshot:
    """A ``ClusterSnapshot`` of the live cluster for the shared invariant checker (see the module docstring).

    ``endpoints`` gives the facts (an endpoints file's declarations, or a :class:`ClusterFacts` view of the
    observer); ``disk_max_bps`` are measured speeds that override the facts' ones. Brokers missing from
    metadata are ``dead``; a replica on a broker that reported no log dir gets that broker's first dir.
    """
    if isinstance(endpoints, ClusterEndpoints):
        facts: Mapping[int, BrokerFacts] = declared_facts(endpoints)
    else:
        facts = endpoints.facts() if endpoints is not None else {}
    ids = set(live.alive) | set(facts) | {b for p in live.partitions.values() for b in p.replicas}
    disk_paths: dict[int, set[str]] = {}
    for (b, path) in capacity:
        disk_paths.setdefault(b, set()).add(path)
    brokers = []
    for bid in sorted(ids):
        f = facts.get(bid, BrokerFacts())
        disks = []
        for path in sorted(disk_paths.get(bid, set()) | (set(f.disks) if bid not in live.alive else set())):
            df = f.disks.get(path)
            if df is None:
                continue  # kind and speed unknown: not a disk the checker may place on
            total, usable = capacity.get((bid, path), (df.capacity_bytes, df.capacity_bytes - df.used_bytes))
            total = max(total, 1)
            disks.append(Disk(path=path, kind=df.kind, capacity_bytes=total,
                              max_bytes_per_s=(disk_max_bps or {}).get((bid, path), df.max_bytes_per_s),
                              used_bytes=max(total - max(usable, 0), 0)))
        brokers.append(Broker(id=bid, host=f.host or "", port=f.port or 0, idc=f.idc or UNKNOWN,
                              rack=live.racks.get(bid) or f.rack or UNKNOWN, pool=f.pool or "shared",
                              state=BrokerState.ALIVE if bid in live.alive else BrokerState.DEAD,
                              disks=tuple(disks)))
    first_dir = {b.id: b.disks[0].path for b in brokers if b.disks}
    topics: dict[str, list[Partition]] = {}
    for (topic, index), p in sorted(live.partitions.items()):
        log_dirs = tuple((d.log_dir if (d := main_dir(dirs, topic, index, b)) else first_dir.get(b, UNKNOWN))
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
