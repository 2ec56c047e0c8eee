"""Deterministic scenario generator: builds ``guardian.snapshot/v1`` snapshots of any size.

The same :class:`GeneratorSpec` (seed included) always yields the same snapshot, byte for byte once
dumped. Traffic is heavy-tailed (``skew="zipf"``) or flat (``"uniform"``); with skew the initial
placement also favours some brokers and the first disk of each broker, so the result needs balancing.
Hard constraints hold in the generated assignment: RF distinct brokers, pool isolation, IDC placement
policies, rack spread where racks allow, and disks below capacity.

Cost: O(partitions x RF) Python steps with bulk-drawn random numbers — about 5 s for 100,000
partitions on one core.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import numpy as np

from domain import Broker, BrokerState, ClusterSnapshot, Disk, DiskKind, Partition, Topic
from domain.views import disk_loads

TAKEN_AT = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
PARTITION_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
DISK_SPECS: dict[DiskKind, tuple[int, float, float]] = {
    # kind: (capacity bytes, max bytes/s, base await ms)
    DiskKind.HDD: (4_000_000_000_000, 200_000_000.0, 6.0),
    DiskKind.NVME: (3_200_000_000_000, 2_000_000_000.0, 0.2),
}
MAX_PARTITION_SHARE_OF_HDD = 0.25  # a single partition's writes never exceed 25% of an HDD
MAX_USED_FRACTION = 0.6  # sizes are scaled so no disk starts above 60% full


@dataclass(frozen=True)
class GeneratorSpec:
    """What to generate. ``pools`` maps pool name -> fraction of brokers (``"free"`` hosts no topic)."""

    brokers: int = 12
    disks_per_broker: int = 4
    partitions: int = 600
    replication_factor: int = 3
    skew: Literal["zipf", "uniform"] = "zipf"
    seed: int = 0
    idcs: tuple[str, ...] = ("idc-a", "idc-b")
    racks_per_idc: int = 3
    nvme_fraction: float = 0.25
    pools: Mapping[str, float] = field(default_factory=lambda: {"shared": 1.0})
    placement_fraction: float = 0.5
    target_mean_util: float = 0.15
    lagging_fraction: float = 0.03
    dead_brokers: int = 0
    cluster: str = "sim"

    def __post_init__(self) -> None:
        problems = []
        if self.brokers < 1 or self.brokers > 40_000:
            problems.append("brokers must be in 1..40000")
        if self.disks_per_broker < 1:
            problems.append("disks_per_broker must be >= 1")
        if self.partitions < 0:
            problems.append("partitions must be >= 0")
        if self.replication_factor < 1:
            problems.append("replication_factor must be >= 1")
        if not self.idcs or self.racks_per_idc < 1:
            problems.append("need at least one IDC and one rack per IDC")
        if not self.pools or any(f <= 0 for f in self.pools.values()):
            problems.append("pool fractions must be > 0")
        if not 0 <= self.dead_brokers < self.brokers:
            problems.append("dead_brokers must be in 0..brokers-1")
        if self.skew not in ("zipf", "uniform"):
            problems.append("skew must be 'zipf' or 'uniform'")
        if problems:
            raise ValueError("; ".join(problems))


class _WeightedGroup:
    """Brokers of one (pool, IDC) group with cumulative weights for O(log n) weighted draws."""

    def __init__(self, ids: list[int], weights: list[float]) -> None:
        self.ids = ids
        self.cum = np.cumsum(np.asarray(weights, dtype=np.float64))

    def draw(self, u: float) -> int:
        return self.ids[int(np.searchsorted(self.cum, u * self.cum[-1], side="right").clip(0, len(self.ids) - 1))]


def generate_snapshot(spec: GeneratorSpec) -> ClusterSnapshot:
    """Build the snapshot ``spec`` describes. Deterministic in ``spec``."""
    rng = np.random.default_rng(spec.seed)
    brokers = _brokers(spec, rng)
    broker_by_id = {b.id: b for b in brokers}
    skewed = spec.skew == "zipf"
    broker_weight = rng.lognormal(0.0, 0.25, size=len(brokers)) if skewed else np.ones(len(brokers))
    disk_cum = np.cumsum(1.0 / np.arange(1, spec.disks_per_broker + 1) ** (0.5 if skewed else 0.0))

    groups: dict[tuple[str, str | None], _WeightedGroup] = {}
    for pool in sorted({b.pool for b in brokers}):
        for idc in (None, *spec.idcs):
            members = [b for b in brokers if b.pool == pool and (idc is None or b.idc == idc)]
            if members:
                groups[(pool, idc)] = _WeightedGroup([b.id for b in members],
                                                     [float(broker_weight[b.id - 1]) for b in members])
    topic_pools = sorted(p for p in spec.pools if p != "free" and (p, None) in groups)
    if not topic_pools and spec.partitions:
        raise ValueError("no pool with alive brokers can host topics")
    pool_share = np.asarray([spec.pools[p] for p in topic_pools], dtype=np.float64)

    sizes = _topic_sizes(spec.partitions, rng)
    topic_weight = (rng.pareto(1.5, size=len(sizes)) + 1.0) if skewed else np.asarray(sizes, dtype=np.float64)
    uniforms = _uniform_stream(rng)

    plans: list[tuple[str, str, dict[str, int] | None, list[tuple[list[int], list[str]]]]] = []
    for t, n_parts in enumerate(sizes):
        pool = topic_pools[int(rng.choice(len(topic_pools), p=pool_share / pool_share.sum()))]
        rf = min(spec.replication_factor, len(groups[(pool, None)].ids))
        placement = _placement(spec, pool, rf, t, groups, rng)
        assignments = []
        for _ in range(n_parts):
            replicas = _choose_replicas(pool, rf, placement, groups, broker_by_id, uniforms)
            dirs = [broker_by_id[b].disks[int(np.searchsorted(disk_cum, next(uniforms) * disk_cum[-1],
                                                                side="right").clip(0, spec.disks_per_broker - 1))].path
                    for b in replicas]
            assignments.append((replicas, dirs))
        plans.append((f"topic-{t:05d}", pool, placement, assignments))

    topics = _with_traffic(spec, plans, topic_weight, brokers, rng)
    return _with_disk_metrics(spec, brokers, topics, rng)


def _uniform_stream(rng: np.random.Generator, block: int = 65536) -> Iterator[float]:
    """Endless uniform draws from ``rng``, fetched in blocks (bulk draws are ~50x cheaper than single ones)."""
    while True:
        yield from rng.random(size=block).tolist()


def _brokers(spec: GeneratorSpec, rng: np.random.Generator) -> list[Broker]:
    n_idc = len(spec.idcs)
    blocks = (spec.brokers + n_idc - 1) // n_idc
    pool_names = list(spec.pools)
    bounds = np.cumsum([spec.pools[p] for p in pool_names]) / sum(spec.pools.values())
    nvme = rng.random(size=spec.brokers) < spec.nvme_fraction
    brokers = []
    for i in range(spec.brokers):
        idc = spec.idcs[i % n_idc]
        block = i // n_idc
        pool = pool_names[min(int(np.searchsorted(bounds, (block + 0.5) / blocks)), len(pool_names) - 1)]
        kind = DiskKind.NVME if nvme[i] else DiskKind.HDD
        capacity, max_bps, _ = DISK_SPECS[kind]
        state = BrokerState.DEAD if i >= spec.brokers - spec.dead_brokers else BrokerState.ALIVE
        brokers.append(Broker(
            id=i + 1, host="127.0.0.1", port=19092 + i, idc=idc,
            rack=f"{idc}-r{block % spec.racks_per_idc + 1}", pool=pool, state=state,
            memory_bytes=64 * 2**30,
            disks=tuple(Disk(path=f"/data{d + 1}", kind=kind, capacity_bytes=capacity, max_bytes_per_s=max_bps)
                        for d in range(spec.disks_per_broker)),
        ))
    return brokers


def _topic_sizes(total: int, rng: np.random.Generator) -> list[int]:
    sizes = []
    while total > 0:
        n = min(int(rng.choice(PARTITION_COUNTS)), total)
        sizes.append(n)
        total -= n
    return sizes


def _placement(spec: GeneratorSpec, pool: str, rf: int, t: int,
               groups: Mapping[tuple[str, str | None], _WeightedGroup],
               rng: np.random.Generator) -> dict[str, int] | None:
    if len(spec.idcs) < 2 or rf < 2 or rng.random() >= spec.placement_fraction:
        return None
    major, minor = spec.idcs[t % len(spec.idcs)], spec.idcs[(t + 1) % len(spec.idcs)]
    need = {major: rf - 1, minor: 1}
    if all(len(groups[(pool, idc)].ids) >= n if (pool, idc) in groups else False for idc, n in need.items()):
        return need
    return None


def _choose_replicas(pool: str, rf: int, placement: Mapping[str, int] | None,
                     groups: Mapping[tuple[str, str | None], _WeightedGroup],
                     broker_by_id: Mapping[int, Broker], uniforms: Iterator[float]) -> list[int]:
    """Weighted draw without replacement; distinct racks within an IDC when the IDC has enough racks."""
    chosen: list[int] = []
    wanted: list[str | None] = [idc for idc, n in (placement or {}).items() for _ in range(n)]
    wanted += [None] * (rf - len(wanted))
    for idc in wanted:
        group = groups[(pool, idc)]
        pick = None
        for _ in range(16):
            candidate = group.draw(next(uniforms))
            if candidate not in chosen and not _rack_taken(candidate, chosen, broker_by_id):
                pick = candidate
                break
        if pick is None:  # deterministic fallback: first free broker, racks if possible
            free = [b for b in group.ids if b not in chosen]
            pick = next((b for b in free if not _rack_taken(b, chosen, broker_by_id)), free[0])
        chosen.append(pick)
    return chosen


def _rack_taken(candidate: int, chosen: list[int], broker_by_id: Mapping[int, Broker]) -> bool:
    rack = broker_by_id[candidate].rack
    return any(broker_by_id[b].rack == rack for b in chosen)


def _with_traffic(spec: GeneratorSpec,
                  plans: list[tuple[str, str, dict[str, int] | None, list[tuple[list[int], list[str]]]]],
                  topic_weight: np.ndarray, brokers: list[Broker], rng: np.random.Generator) -> list[Topic]:
    n = sum(len(a) for _, _, _, a in plans)
    if n == 0:
        return [Topic(name=name, pool=pool, placement=placement, partitions=())
                for name, pool, placement, _ in plans]
    per_partition = np.concatenate([
        np.full(len(a), topic_weight[t] / max(len(a), 1)) for t, (_, _, _, a) in enumerate(plans)
    ]) * rng.lognormal(0.0, 0.3, size=n)
    rfs = np.asarray([len(r) for _, _, _, a in plans for r, _ in a], dtype=np.float64)
    alive_capacity = sum(d.max_bytes_per_s for b in brokers if b.is_alive for d in b.disks)
    cap = MAX_PARTITION_SHARE_OF_HDD * DISK_SPECS[DiskKind.HDD][1]
    target = spec.target_mean_util * alive_capacity
    bytes_in = per_partition
    for _ in range(4):  # rescale after clipping so the total stays near the target
        bytes_in = np.minimum(bytes_in * target / float((bytes_in * rfs).sum()), cap)
    fanout = rng.integers(1, 4, size=n).astype(np.float64)
    msg_size = rng.uniform(200.0, 4000.0, size=n)
    lagging = rng.random(size=n) < spec.lagging_fraction
    disk_read = np.where(lagging, bytes_in * fanout * rng.uniform(0.2, 0.8, size=n), 0.0)
    retention_s = rng.uniform(3600.0, 86400.0, size=n)
    size = bytes_in * retention_s

    # Scale sizes so that no disk starts above MAX_USED_FRACTION of its capacity.
    used: dict[tuple[int, str], float] = {}
    k = 0
    for _, _, _, assignments in plans:
        for replicas, dirs in assignments:
            for b, d in zip(replicas, dirs, strict=True):
                used[(b, d)] = used.get((b, d), 0.0) + float(size[k])
            k += 1
    capacity = {(b.id, d.path): d.capacity_bytes for b in brokers for d in b.disks}
    fullest = max(used[key] / capacity[key] for key in used)
    if fullest > MAX_USED_FRACTION:
        size *= MAX_USED_FRACTION / fullest

    alive = {b.id: b.is_alive for b in brokers}
    topics = []
    k = 0
    for name, pool, placement, assignments in plans:
        parts = []
        for p, (replicas, dirs) in enumerate(assignments):
            isr = tuple(b for b in replicas if alive[b])
            parts.append(Partition(
                topic=name, partition=p, replicas=tuple(replicas), leader=isr[0] if isr else None, isr=isr,
                log_dirs=tuple(dirs), size_bytes=int(size[k]), bytes_in_per_s=round(float(bytes_in[k]), 1),
                bytes_out_per_s=round(float(bytes_in[k] * fanout[k]), 1),
                messages_in_per_s=round(float(bytes_in[k] / msg_size[k]), 2),
                disk_read_bytes_per_s=round(float(disk_read[k]), 1),
            ))
            k += 1
        topics.append(Topic(name=name, pool=pool, placement=placement, partitions=tuple(parts)))
    return topics


def _with_disk_metrics(spec: GeneratorSpec, brokers: list[Broker], topics: list[Topic],
                       rng: np.random.Generator) -> ClusterSnapshot:
    partitions = [p for t in topics for p in t.partitions]
    loads = disk_loads(partitions)
    written: dict[tuple[int, str], float] = {}
    read: dict[tuple[int, str], float] = {}
    used: dict[tuple[int, str], int] = {}
    for p in partitions:
        for broker_id, path in zip(p.replicas, p.log_dirs, strict=True):
            key = (broker_id, path)
            written[key] = written.get(key, 0.0) + p.bytes_in_per_s
            used[key] = used.get(key, 0) + p.size_bytes
            if broker_id == p.leader:
                read[key] = read.get(key, 0.0) + p.disk_read_bytes_per_s
    out = []
    for b in brokers:
        disks = []
        for d in b.disks:
            key = (b.id, d.path)
            _, _, base_await = DISK_SPECS[d.kind]
            util = 0.0 if not b.is_alive else min(1.0, loads.get(key, 0.0) / d.max_bytes_per_s)
            noisy = float(np.clip(util * rng.uniform(0.95, 1.05), 0.0, 1.0))
            history = tuple(round(float(x), 4) for x in np.clip(util * (1 + 0.1 * rng.standard_normal(12)), 0, 1))
            disks.append(Disk(
                path=d.path, kind=d.kind, capacity_bytes=d.capacity_bytes, max_bytes_per_s=d.max_bytes_per_s,
                used_bytes=used.get(key, 0), util=round(noisy, 4),
                await_ms=round(base_await * (1.0 + noisy / max(1.0 - noisy, 0.05)), 3),
                read_bytes_per_s=round(read.get(key, 0.0), 1) if b.is_alive else 0.0,
                write_bytes_per_s=round(written.get(key, 0.0), 1) if b.is_alive else 0.0,
                load_history=history,
            ))
        out.append(Broker(id=b.id, host=b.host, port=b.port, idc=b.idc, rack=b.rack, pool=b.pool, state=b.state,
                          memory_bytes=b.memory_bytes, disks=tuple(disks)))
    return ClusterSnapshot(cluster=spec.cluster, taken_at=TAKEN_AT, brokers=tuple(out), topics=tuple(topics))
