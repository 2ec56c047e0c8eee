"""The load model: admin state + scraped metrics of one round -> a ``guardian.snapshot/v1`` snapshot.

:class:`LoadModel` keeps what must survive between rounds — the last good sample of every
counter (rates need two), last known values (held for at most ``hold_s`` when a source fails),
the history windows and a cache of broker/log-dir facts (so a dead broker can still be described)
— and does no I/O itself.  Each :meth:`LoadModel.build` returns a :class:`Collected`: the frozen
snapshot, its :class:`~collectors.completeness.Coverage`, the six-behaviour split of every disk
and per-partition detail.

Sources of each figure (first that is available wins; the method is counted in the coverage):

* disk util / read / write / await: ``node_disk_*`` counters of the disk's device (device -> log
  dir via ``kafkasim_log_dir_info`` or the filesystem mountpoint).
* partition messages-in: log-end-offset deltas (leader's ``kafka_log_log_logendoffset``, else any
  replica's).
* partition bytes-in: the per-partition counter when the broker exports it (extension reporter),
  else messages-in × the topic's bytes/message ratio (topic-level ``BrokerTopicMetrics``), else
  the size delta of the leader's replica.
* partition bytes-out: the per-partition counter, else the leader's topic-level bytes-out split
  over its partitions of that topic by consumer activity (consumer offset deltas when known,
  bytes-in otherwise).
* disk reads: the page-cache heuristic (:mod:`collectors.pagecache`) over consumer positions read
  from ``kafka_consumergroup_current_offset{consumergroup,topic,partition}`` samples (the
  kafka_exporter convention) of any scraped endpoint.
"""

from __future__ import annotations

import gc
import math
import time
from collections import defaultdict
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.completeness import Coverage
from collectors.history import RingWindow
from collectors.pagecache import BEHAVIOURS, Behaviours, is_disk_read, residence_seconds
from collectors.promtext import Payload, labels_of
from collectors.rates import REASONS, DropLog, DropReason, VectorCounterTracker, gauge_value
from collectors.scrape import RoundResult
from domain import (
    Broker,
    BrokerState,
    ClusterSnapshot,
    Disk,
    DiskKind,
    Partition,
    Topic,
    settle_moves,
    snapshot_to_dict,
)
from kafkaio.endpoints import BrokerInfo, ClusterEndpoints
from kafkaio.source import KafkaState
from kafkaio.types import PartitionMeta

# metric names read from broker payloads (the parser keeps only these)
M_SIM_TIME = "kafkasim_sim_time_seconds"
M_BROKER_INFO = "kafkasim_broker_info"
M_LOG_DIR_INFO = "kafkasim_log_dir_info"
M_DISK_MAX = "kafkasim_disk_max_bytes_per_second"
M_IO_TIME = "node_disk_io_time_seconds_total"
M_READ_B = "node_disk_read_bytes_total"
M_WRITE_B = "node_disk_written_bytes_total"
M_READS = "node_disk_reads_completed_total"
M_WRITES = "node_disk_writes_completed_total"
M_READ_T = "node_disk_read_time_seconds_total"
M_WRITE_T = "node_disk_write_time_seconds_total"
M_FS_SIZE = "node_filesystem_size_bytes"
M_FS_AVAIL = "node_filesystem_avail_bytes"
M_MEM_TOTAL = "node_memory_MemTotal_bytes"
M_MEM_AVAIL = "node_memory_MemAvailable_bytes"
M_T_IN = "kafka_server_brokertopicmetrics_bytesin_total"
M_T_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
M_T_MSGS = "kafka_server_brokertopicmetrics_messagesin_total"
M_P_IN = "kafka_server_brokertopicpartitionmetrics_bytesin_total"
M_P_OUT = "kafka_server_brokertopicpartitionmetrics_bytesout_total"
M_P_MSGS = "kafka_server_brokertopicpartitionmetrics_messagesin_total"
M_SIZE = "kafka_log_log_size"
M_LEO = "kafka_log_log_logendoffset"
M_GROUP_OFFSET = "kafka_consumergroup_current_offset"
M_GROUP_LAG = "kafka_consumergroup_lag"

WANTED_METRICS = frozenset({
    M_SIM_TIME, M_BROKER_INFO, M_LOG_DIR_INFO, M_DISK_MAX, M_IO_TIME, M_READ_B, M_WRITE_B, M_READS, M_WRITES,
    M_READ_T, M_WRITE_T, M_FS_SIZE, M_FS_AVAIL, M_MEM_TOTAL, M_MEM_AVAIL, M_T_IN, M_T_OUT, M_T_MSGS, M_P_IN,
    M_P_OUT, M_SIZE, M_LEO, M_GROUP_OFFSET, M_GROUP_LAG,
})

PLACEHOLDER_DIR = "unknown"


@dataclass
class ModelConfig:
    """Tunables of the load model (defaults suit a 10 s collection interval)."""

    min_elapsed_s: float = 0.5
    """Rates over a shorter measured interval are dropped (``tiny_elapsed``)."""
    hold_s: float = 60.0
    """A figure whose source failed keeps its last good value for at most this long (then 0)."""
    max_util_overshoot: float = 0.05
    """util in (1, 1 + overshoot] is clamped to 1; above it the sample is dropped as implausible."""
    history_capacity: int = 360
    """Samples per disk/partition in the window (360 × 10 s = 1 h)."""
    history_points: int = 60
    """``load_history`` points written per disk (the window downsampled by chunk means)."""
    partition_history: tuple[str, ...] = ("bytes_in", "disk_read")
    """Per-partition series kept in the window (any of bytes_in, disk_read, bytes_out)."""
    partition_history_every: int = 6
    """Rounds averaged into one partition sample (6 × 10 s = 1-minute resolution: a 1 h window at
    100,000 partitions costs 100,000 × 60 × 4 B = 24 MB per series instead of 144 MB)."""
    default_disk_kind: DiskKind = DiskKind.HDD
    default_max_bytes_per_s: Mapping[str, float] = field(default_factory=lambda: {
        "hdd": 200e6, "ssd": 500e6, "nvme": 2000e6})
    default_idc: str = "unknown"
    default_pool: str = "shared"
    use_partition_counters: bool = True
    """Use per-partition byte counters when a broker exports them (else LEO × topic ratio)."""
    use_sim_clock: bool = True
    """Use ``kafkasim_sim_time_seconds`` as the sample clock when exposed (simulated counters)."""


@dataclass
class DiskFacts:
    """Cached static facts about a log dir."""

    path: str
    kind: DiskKind
    capacity_bytes: int
    max_bytes_per_s: float
    device: str | None = None


@dataclass
class Held:
    """A last good value with the time (wall, seconds) it was measured."""

    value: float
    at: float


@dataclass
class PartitionDetail:
    """Per-partition facts beyond the snapshot contract (for tests, the throttle, the API)."""

    bytes_in_method: str = "none"
    bytes_out_method: str = "none"
    leo: float | None = None
    residence_s: float | None = None
    disk_readers: list[str] = field(default_factory=list)
    cached_readers: list[str] = field(default_factory=list)
    lagging_followers: list[int] = field(default_factory=list)
    migration_bytes_per_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"bytes_in_method": self.bytes_in_method, "bytes_out_method": self.bytes_out_method,
                "leo": self.leo, "residence_s": None if self.residence_s is None or math.isinf(self.residence_s)
                else round(self.residence_s, 3),
                "disk_readers": self.disk_readers, "cached_readers": self.cached_readers,
                "lagging_followers": self.lagging_followers,
                "migration_bytes_per_s": round(self.migration_bytes_per_s, 3)}


@dataclass(frozen=True, slots=True)
class CopyInFlight:
    """A replica copy in progress at its measured rate: a reassignment target growing
    (``reassign``; source = the leader's disk) or a KIP-113 future replica (``intra_broker``)."""

    kind: str
    topic: str
    partition: int
    source: tuple[int, str] | None
    dest: tuple[int, str]
    bytes_per_s: float


@dataclass
class Collected:
    """One round's result: the snapshot and everything known about how good it is."""

    snapshot: ClusterSnapshot
    coverage: Coverage
    behaviours: dict[tuple[int, str], Behaviours]
    partitions: Mapping[tuple[str, int], PartitionDetail]
    throttles: dict[str, Any]
    quotas: list[dict[str, Any]]
    round_seconds: dict[str, float] = field(default_factory=dict)
    copies: list[CopyInFlight] = field(default_factory=list)
    broker_configs: dict[int, dict[str, str]] = field(default_factory=dict)
    """Throttle and capability configs per broker as last read (see :mod:`kafkaio.source`)."""
    sample_clock: float | None = None
    """The round's sample clock: the newest broker payload's (``kafkasim_sim_time_seconds`` when exported,
    else the scrape's monotonic receive time) — the time base of the round's rates."""
    removing: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    """Replicas each in-flight reassignment removes (the snapshot shows Kafka's in-flight lists; planners
    read :meth:`planning_snapshot`)."""

    def planning_snapshot(self) -> ClusterSnapshot:
        """The snapshot with every moving partition at its target replica set (:func:`domain.settle_moves`)."""
        return settle_moves(self.snapshot, self.removing)

    def to_dict(self) -> dict[str, Any]:
        """The ``guardian.snapshot/v1`` document plus optional members the v1 parser ignores:
        ``coverage`` (top level), ``behaviours`` (per disk), ``throttles`` and ``quotas``."""
        doc = snapshot_to_dict(self.snapshot)
        for b in doc["brokers"]:
            for d in b["disks"]:
                beh = self.behaviours.get((b["id"], d["path"]))
                if beh is not None:
                    d["behaviours"] = beh.as_dict()
        doc["coverage"] = self.coverage.as_dict()
        doc["throttles"] = self.throttles
        doc["quotas"] = self.quotas
        return doc


M_CODES = {"none": 0, "partition_counter": 1, "leo_x_topic_ratio": 2, "size_delta": 3, "held": 4, "topic_split": 5}
M_NAMES = {v: k for k, v in M_CODES.items()}


class PartitionDetails(Mapping[tuple[str, int], PartitionDetail]):
    """Per-partition detail, built on access from the round's arrays (100,000 objects per round
    would cost more than the rest of the build)."""

    def __init__(self, keys: list[tuple[str, int]], pidx: dict[tuple[str, int], int], arrays: dict[str, Any],
                 readers: dict[int, tuple[list[str], list[str]]], lagging: dict[int, list[int]]) -> None:
        self._keys = keys
        self._pidx = pidx
        self._a = arrays
        self._readers = readers
        self._lagging = lagging

    def __getitem__(self, key: tuple[str, int]) -> PartitionDetail:
        i = self._pidx[key]
        a = self._a
        leo = float(a["leo"][i])
        res = float(a["residence"][i])
        disk, cached = self._readers.get(i, ([], []))
        return PartitionDetail(bytes_in_method=M_NAMES[int(a["m_in"][i])], bytes_out_method=M_NAMES[int(a["m_out"][i])],
                               leo=None if math.isnan(leo) else leo, residence_s=None if math.isnan(res) else res,
                               disk_readers=list(disk), cached_readers=list(cached),
                               lagging_followers=list(self._lagging.get(i, [])),
                               migration_bytes_per_s=float(a["migration"][i]))

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


@dataclass(frozen=True)
class ReplicaLayout:
    """Where every replica lives this round (reused while the topology is unchanged)."""

    disk_ids: dict[tuple[int, str], int]
    log_dirs: list[tuple[str, ...]]
    r_part: npt.NDArray[np.int64]
    r_disk: npt.NDArray[np.int64]
    r_role: npt.NDArray[np.int8]
    lead_disk: npt.NDArray[np.int64]
    unknown: int
    unknown_brokers: frozenset[int] = frozenset()
    isrs: list[tuple[int, ...]] = field(default_factory=list)
    """Each partition's ISR restricted to its replicas (a broker reporting strays is not trusted)."""


@dataclass
class FamilyRates:
    """One metric family of every broker in a round: brokers (segment order), their label strings,
    and the concatenated rates (NaN = dropped) and raw values; broker ``k`` is
    ``[offsets[k], offsets[k + 1])``."""

    bids: list[int]
    bodies: list[list[str]]
    rates: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]
    offsets: npt.NDArray[np.int64]

    def bid_per_sample(self) -> npt.NDArray[np.int64]:
        """The broker of every sample."""
        return np.repeat(np.asarray(self.bids, dtype=np.int64), np.diff(self.offsets))

    def segment(self, k: int) -> tuple[list[str], list[float], list[float]]:
        """(label strings, rates, values) of segment ``k`` as Python lists."""
        lo, hi = int(self.offsets[k]), int(self.offsets[k + 1])
        return self.bodies[k], self.rates[lo:hi].tolist(), self.values[lo:hi].tolist()


class _PartHold:
    """Last good value and its time per partition and figure (arrays indexed by a stable registry)."""

    def __init__(self) -> None:
        self.registry: dict[tuple[str, int], int] = {}
        self.cap = 0
        self.vals: dict[str, npt.NDArray[np.float64]] = {}
        self.at: dict[str, npt.NDArray[np.float64]] = {}

    def ids(self, keys: list[tuple[str, int]]) -> npt.NDArray[np.int64]:
        reg = self.registry
        for k in keys:
            if k not in reg:
                reg[k] = len(reg)
        if len(reg) > self.cap:
            new_cap = max(len(reg), 2 * self.cap, 1024)
            for d in (self.vals, self.at):
                for name, arr in list(d.items()):
                    grown = np.full(new_cap, np.nan)
                    grown[: len(arr)] = arr
                    d[name] = grown
            self.cap = new_cap
        return np.fromiter((reg[k] for k in keys), dtype=np.int64, count=len(keys))

    def id_of(self, key: tuple[str, int]) -> int:
        """The registry id of a partition (registering it, arrays grown on the next :meth:`ids`)."""
        r = self.registry.get(key)
        if r is None:
            r = self.registry[key] = len(self.registry)
        return r

    def hold(self, name: str, g: npt.NDArray[np.int64], fresh: npt.NDArray[np.float64], now: float,
             hold_s: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """Store fresh values; return (fresh or held-if-young values, fresh mask). NaN = none."""
        if name not in self.vals:
            self.vals[name] = np.full(self.cap, np.nan)
            self.at[name] = np.full(self.cap, np.nan)
        hv, ha = self.vals[name], self.at[name]
        ok = ~np.isnan(fresh)
        hv[g[ok]] = fresh[ok]
        ha[g[ok]] = now
        out = hv[g].copy()
        young = (now - ha[g]) <= hold_s
        out[~ok & ~young] = np.nan
        return out, ok


def _nan(n: int) -> npt.NDArray[np.float64]:
    return np.full(n, np.nan)


class LoadModel:
    """Turns rounds of (admin state, scrapes) into snapshots; keeps rates, holds and windows.

    Per round the cost is O(samples + replicas) with the per-sample work in numpy: one dict
    lookup per sample to find its series, vectorised rate math, bincounts for per-disk sums.
    """

    def __init__(self, endpoints: ClusterEndpoints, config: ModelConfig | None = None) -> None:
        self.endpoints = endpoints
        self.config = config or ModelConfig()
        self.cfg = self.config
        self.rates = VectorCounterTracker(self.cfg.min_elapsed_s)
        self.counters = self.rates  # backwards-compatible name
        self.held: dict[Hashable, Held] = {}
        self.phold = _PartHold()
        self.broker_cache: dict[int, BrokerInfo] = {b.id: b for b in endpoints.brokers}
        self.meta_cache: dict[int, tuple[str, int, str | None]] = {}
        self.disk_cache: dict[int, dict[str, DiskFacts]] = {}
        self.dir_cache: dict[tuple[int, str, int], str] = {}
        self.tp_cache: dict[str, tuple[str, int] | None] = {}
        self.body_gid: dict[str, int] = {}
        # (broker, family) -> (label strings as last seen, derived ids): unchanged label lists
        # (the normal case round after round) skip every per-sample lookup
        self.seg_ids: dict[tuple[int, str], tuple[list[str], npt.NDArray[np.int64]]] = {}
        self.topic_reg: dict[str, int] = {}
        self.topic_of_body: dict[str, int] = {}
        self._topic_pool_cache: tuple[Any, dict[str, str]] | None = None
        self.group_cache: dict[str, tuple[str, tuple[str, int]] | None] = {}
        self.url_broker: dict[str, int] = endpoints.url_to_broker()
        self.disk_window = RingWindow(self.cfg.history_capacity)
        p_cap = max(1, self.cfg.history_capacity // self.cfg.partition_history_every)
        self.partition_windows = {name: RingWindow(p_cap, 1024, every=self.cfg.partition_history_every)
                                  for name in self.cfg.partition_history}
        self.rounds = 0
        self.unknown_dirs_last_round = 0
        self.unknown_dir_brokers: set[int] = set()
        self._dir_version = 0
        self._replica_cache: tuple[Any, ReplicaLayout] | None = None

    # ------------------------------------------------------------------ helpers
    def memory_bytes(self) -> dict[str, int]:
        """Bytes held by the history windows and the rate state (approximate)."""
        win = self.disk_window.nbytes + sum(w.nbytes for w in self.partition_windows.values())
        state = self.rates.nbytes() + 16 * self.phold.cap * max(len(self.phold.vals), 1) \
            + 150 * (len(self.dir_cache) + len(self.tp_cache) + len(self.phold.registry))
        return {"windows": win, "rate_state": state, "total": win + state}

    def _hold(self, key: Hashable, value: float | None, now: float) -> tuple[float | None, bool]:
        """Store a fresh value, or fall back to the last one if younger than ``hold_s``."""
        if value is not None:
            self.held[key] = Held(value, now)
            return value, True
        h = self.held.get(key)
        if h is not None and now - h.at <= self.cfg.hold_s:
            return h.value, False
        return None, False

    def _tp(self, body: str) -> tuple[str, int] | None:
        got = self.tp_cache.get(body, False)
        if got is not False:
            return got  # type: ignore[return-value]
        lab = labels_of(body)
        tp: tuple[str, int] | None = None
        if lab is not None and lab.get("topic") and lab.get("partition", "").lstrip("-").isdigit():
            tp = (lab["topic"], int(lab["partition"]))
        if len(self.tp_cache) > 2_000_000:
            self.tp_cache.clear()
        self.tp_cache[body] = tp
        return tp

    def _group_key(self, body: str) -> tuple[str, tuple[str, int]] | None:
        """(group, (topic, partition)) of a consumer-group sample's label string (cached)."""
        got = self.group_cache.get(body, False)
        if got is not False:
            return got  # type: ignore[return-value]
        lab = labels_of(body) or {}
        group = lab.get("consumergroup") or lab.get("group")
        part = lab.get("partition", "")
        gk = (group, (lab["topic"], int(part))) if group and lab.get("topic") and part.isdigit() else None
        if len(self.group_cache) > 2_000_000:
            self.group_cache.clear()
        self.group_cache[body] = gk
        return gk

    def _round_index(self, g: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """registry id -> index in this round's partition list (-1 for partitions not in it)."""
        out = np.full(max(len(self.phold.registry), 1), -1, dtype=np.int64)
        out[g] = np.arange(len(g), dtype=np.int64)
        return out

    def _broker_of(self, url: str, payload: Payload) -> int | None:
        if url in self.url_broker:
            return self.url_broker[url]
        for labels, _ in payload.get(M_BROKER_INFO):
            bid = labels.get("broker_id")
            if bid is not None and bid.isdigit():
                self.url_broker[url] = int(bid)
                info = self.broker_cache.get(int(bid), BrokerInfo(int(bid)))
                self.broker_cache[int(bid)] = BrokerInfo(
                    int(bid), url, info.host, info.port, labels.get("idc") or info.idc,
                    labels.get("rack") or info.rack, labels.get("pool") or info.pool)
                return int(bid)
        return None

    def _family(self, kind: str, name: str, payloads: Mapping[int, tuple[Payload, float, str]],
                drops: DropLog) -> FamilyRates:
        """Rates of family ``name`` of every broker in one vectorised pass; drops recorded under ``kind``."""
        segs: list[tuple[Hashable, list[str], float, list[float]]] = []
        bids: list[int] = []
        for bid, (p, clock, ck) in payloads.items():
            fam = p.raw.get(name)
            if fam is None or not fam[0]:
                continue
            segs.append(((ck, bid), fam[0], clock, fam[1]))
            bids.append(bid)
        rates, codes, vals, offs = self.rates.update_segments(kind, segs)
        if len(codes) and codes.any():
            counts = np.bincount(codes, minlength=len(REASONS))
            for c in np.nonzero(counts)[0].tolist():
                reason = REASONS[c]
                if c == 0 or reason is None or reason is DropReason.FIRST_SAMPLE:
                    continue
                j = int(np.argmax(codes == c))
                k = int(np.searchsorted(offs, j, side="right")) - 1
                drops.add(kind, reason, f"broker {bids[k]} {{{segs[k][1][j - int(offs[k])]}}}", int(counts[c]))
        return FamilyRates(bids, [sg[1] for sg in segs], rates, vals, offs)

    def _seg_ids(self, bid: int, short: str, bodies: list[str], one: Any) -> npt.NDArray[np.int64]:
        """``one(body)`` for every label string of a broker's family, cached while the list is unchanged."""
        got = self.seg_ids.get((bid, short))
        if got is not None and got[0] == bodies:
            return got[1]
        ids = np.fromiter((one(b) for b in bodies), dtype=np.int64, count=len(bodies))
        self.seg_ids[(bid, short)] = (list(bodies), ids)
        return ids

    def _gid_of_body(self, body: str) -> int:
        """Partition registry id of a ``topic,partition`` label string (-1 when it names none)."""
        gid = self.body_gid.get(body)
        if gid is None:
            tp = self._tp(body)
            gid = self.phold.id_of(tp) if tp is not None else -1
            if len(self.body_gid) > 2_000_000:
                self.body_gid.clear()
            self.body_gid[body] = gid
        return gid

    def _tid_of_body(self, body: str) -> int:
        """Topic registry id of a topic-level label string (-1 for the all-topics sample or no topic)."""
        tid = self.topic_of_body.get(body)
        if tid is None:
            lab = labels_of(body) if body else None
            topic = lab.get("topic") if lab else None
            tid = self.topic_reg.setdefault(topic, len(self.topic_reg)) if topic else -1
            if len(self.topic_of_body) > 2_000_000:
                self.topic_of_body.clear()
            self.topic_of_body[body] = tid
        return tid

    # ------------------------------------------------------------------ the round
    def build(self, state: KafkaState, scrape: RoundResult, now: float | None = None) -> Collected:
        """Build one round's snapshot. Never raises on bad metric values (they are dropped)."""
        was = gc.isenabled()
        gc.disable()  # millions of live objects: a cyclic collection mid-build costs more than the build
        try:
            return self._build(state, scrape, now)
        finally:
            if was:
                gc.enable()

    def _build(self, state: KafkaState, scrape: RoundResult, now: float | None) -> Collected:
        t_start = time.perf_counter()
        now = time.time() if now is None else now
        cfg = self.cfg
        drops = DropLog()
        cov = Coverage(cluster=self.endpoints.cluster, taken_at=now)
        cov.kafka_errors = dict(state.errors)

        # ---------------- map payloads to brokers
        payloads: dict[int, tuple[Payload, float, str]] = {}
        exporter_payloads: list[tuple[Payload, float, str, str]] = []
        exporters = set(self.endpoints.exporter_urls)
        for url, res in scrape.results.items():
            if not res.ok or res.payload is None:
                bid = self.url_broker.get(url)
                if bid is not None:
                    cov.metrics_failed[bid] = res.error or "no payload"
                elif url in exporters:
                    cov.exporters_failed[url] = res.error or "no payload"
                else:
                    cov.metrics_failed_urls[url] = res.error or "no payload"
                continue
            p = res.payload
            sim = p.scalar(M_SIM_TIME) if cfg.use_sim_clock else None
            if sim is not None and math.isfinite(sim):
                clock, kind = sim, "sim"
            else:
                clock, kind = res.received, "mono"
            if url in exporters:
                exporter_payloads.append((p, clock, kind, url))
                continue
            bid = self._broker_of(url, p)
            if bid is None:
                cov.metrics_failed_urls[url] = "cannot tell which broker this endpoint belongs to"
                continue
            payloads[bid] = (p, clock, kind)
            cov.parse_seconds += res.parse_s

        # ---------------- brokers known to exist
        alive = set(state.brokers)
        for bm in state.brokers.values():
            self.meta_cache[bm.id] = (bm.host, bm.port, bm.rack)
        known: set[int] = set(alive) | set(self.broker_cache) | set(self.meta_cache)
        for pm in state.partitions.values():
            known.update(pm.replicas)
        cov.brokers_total = sorted(known)
        cov.brokers_alive = sorted(alive)
        cov.controller = state.controller_id

        # ---------------- disks: facts, device map, rates
        disk_rates: dict[tuple[int, str], dict[str, float | None]] = {}
        broker_mem: dict[int, tuple[float | None, float | None]] = {}
        for bid in sorted(state.log_dirs_fresh):  # listings read this round (all brokers' in a full round)
            ld = state.log_dirs.get(bid)
            if ld is not None:
                facts = self.disk_cache.setdefault(bid, {})
                for path, d in ld.items():
                    f = facts.get(path)
                    if f is None:
                        f = facts[path] = DiskFacts(path, cfg.default_disk_kind, 0,
                                                    cfg.default_max_bytes_per_s.get(cfg.default_disk_kind.value, 200e6))
                    if d.total_bytes:
                        f.capacity_bytes = d.total_bytes
                    for (tn, pn), rdir in d.replicas.items():
                        if not rdir.is_future and self.dir_cache.get((bid, tn, pn)) != path:
                            self.dir_cache[(bid, tn, pn)] = path
                            self._dir_version += 1
                if PLACEHOLDER_DIR in facts:
                    del facts[PLACEHOLDER_DIR]
                    self._dir_version += 1
        disk_fams = {short: self._family("disk." + short, name, payloads, drops)
                     for name, short in ((M_IO_TIME, "util"), (M_READ_B, "read"), (M_WRITE_B, "write"),
                                         (M_READS, "reads"), (M_WRITES, "writes"), (M_READ_T, "read_t"),
                                         (M_WRITE_T, "write_t"))}
        disk_seg = {short: {b: k for k, b in enumerate(fr.bids)} for short, fr in disk_fams.items()}
        for bid, (p, _clock, _ck) in payloads.items():
            facts = self.disk_cache.setdefault(bid, {})
            dev_to_dir: dict[str, str] = {}
            for labels, _ in p.get(M_LOG_DIR_INFO):
                dev, lpath = labels.get("device"), labels.get("log_dir")
                if dev and lpath:
                    dev_to_dir[dev] = lpath
                    kind_s = labels.get("kind", "")
                    kind = DiskKind(kind_s) if kind_s in DiskKind._value2member_map_ else cfg.default_disk_kind
                    f = facts.get(lpath)
                    if f is None:
                        f = facts[lpath] = DiskFacts(lpath, kind, 0, cfg.default_max_bytes_per_s.get(kind.value, 200e6))
                    f.kind = kind
                    f.device = dev
            fs_size: dict[str, float] = {}
            fs_avail: dict[str, float] = {}
            for name, target in ((M_FS_SIZE, fs_size), (M_FS_AVAIL, fs_avail)):
                for labels, v in p.get(name):
                    dev = labels.get("device", "").removeprefix("/dev/")
                    mp = labels.get("mountpoint")
                    if dev and dev not in dev_to_dir and mp:
                        cands = [x for x in facts if x == mp or x.startswith(mp.rstrip("/") + "/")]
                        if cands:
                            dev_to_dir[dev] = max(cands, key=len)
                            facts[dev_to_dir[dev]].device = dev
                    if dev:
                        target[dev] = v
            for labels, v in p.get(M_DISK_MAX):
                dev = labels.get("device", "")
                if dev in dev_to_dir and math.isfinite(v) and v > 0:
                    facts[dev_to_dir[dev]].max_bytes_per_s = float(v)
            per_dev: dict[str, dict[str, float | None]] = {dev: {} for dev in dev_to_dir}
            for short, fr in disk_fams.items():
                k_seg = disk_seg[short].get(bid)
                if k_seg is None:
                    continue
                bodies, rates_l, _ = fr.segment(k_seg)
                for body, r in zip(bodies, rates_l, strict=True):
                    lab = labels_of(body)
                    dev = lab.get("device", "") if lab else ""
                    if dev in per_dev:
                        per_dev[dev][short] = None if r != r else r
            for dev, path in dev_to_dir.items():
                f = facts[path]
                fsz = fs_size.get(dev)
                if fsz is not None and math.isfinite(fsz) and fsz > 0:
                    f.capacity_bytes = int(fsz)
                rr = per_dev[dev]
                u = rr.get("util")
                if u is not None and u > 1.0:
                    if u <= 1.0 + cfg.max_util_overshoot:
                        rr["util"] = 1.0
                    else:
                        drops.add("disk.util", DropReason.IMPLAUSIBLE, f"broker {bid} {dev} util={u:.3f}")
                        rr["util"] = None
                ops = (rr.get("reads"), rr.get("writes"))
                tms = (rr.get("read_t"), rr.get("write_t"))
                if None in ops or None in tms:
                    rr["await"] = None
                else:
                    n_ops = (ops[0] or 0.0) + (ops[1] or 0.0)
                    rr["await"] = ((tms[0] or 0.0) + (tms[1] or 0.0)) / n_ops * 1000.0 if n_ops > 0 else 0.0
                avail = fs_avail.get(dev)
                if fsz is not None and avail is not None and math.isfinite(avail) and 0 <= avail <= fsz:
                    rr["used"] = fsz - avail
                disk_rates[(bid, path)] = rr
            mt = gauge_value(p.scalar(M_MEM_TOTAL))
            ma = gauge_value(p.scalar(M_MEM_AVAIL))
            for gv, what in ((mt, "memory.total"), (ma, "memory.available")):
                if gv.reason is not None:
                    drops.add(what, gv.reason, f"broker {bid}")
            broker_mem[bid] = (mt.value, ma.value)

        # ---------------- partition index and special replicas
        keys = sorted(state.partitions)
        n = len(keys)
        pidx = dict(zip(keys, range(n), strict=True))
        pms = [state.partitions[k] for k in keys]
        leader = np.fromiter((pm.leader for pm in pms), dtype=np.int64, count=n)
        # out-of-sync followers and reassignment targets: their own LEO / size rates matter
        special: dict[int, set[tuple[str, int]]] = defaultdict(set)
        for key, ra in state.reassignments.items():
            for b in ra.adding:
                special[b].add(key)
        for key, pm in zip(keys, pms, strict=True):
            if len(pm.isr) < len(pm.replicas):
                for b in pm.replicas:
                    if b not in pm.isr:
                        special[b].add(key)
        sp_leo_rate: dict[tuple[int, str, int], float] = {}
        sp_leo_val: dict[tuple[int, str, int], float] = {}
        sp_size_rate: dict[tuple[int, str, int], float] = {}

        g = self.phold.ids(keys)
        g_round = self._round_index(g)
        leo_lead_rate, leo_lead_val = _nan(n), _nan(n)
        leo_any_rate, leo_any_val = _nan(n), _nan(n)
        size_lead_val, size_lead_rate, size_any_val = _nan(n), _nan(n), _nan(n)
        ext_in, ext_out = _nan(n), _nan(n)
        topic_in: dict[str, float] = defaultdict(float)
        topic_msgs: dict[str, float] = defaultdict(float)
        tp_of = self._tp
        fams: list[tuple[str, str]] = [(M_LEO, "leo"), (M_SIZE, "size")]
        if cfg.use_partition_counters:
            fams += [(M_P_IN, "p_in"), (M_P_OUT, "p_out")]
        for name, short in fams:
            fr = self._family("partition." + short, name, payloads, drops)
            if not fr.bids:
                continue
            garr = np.concatenate([self._seg_ids(bid, short, bodies, self._gid_of_body)
                                   for bid, bodies in zip(fr.bids, fr.bodies, strict=True)])
            if len(garr) and int(garr.max()) >= len(g_round):
                g_round = self._round_index(g)
            rates, vals = fr.rates, fr.values
            ix = np.where(garr >= 0, g_round[np.maximum(garr, 0)], -1)
            known_ix = ix >= 0
            is_lead = np.zeros(len(ix), dtype=bool)
            is_lead[known_ix] = leader[ix[known_ix]] == fr.bid_per_sample()[known_ix]
            lm = known_ix & is_lead
            okv = np.isfinite(vals) & (vals >= 0)
            if short == "leo":
                leo_lead_rate[ix[lm]] = rates[lm]
                leo_lead_val[ix[lm & okv]] = vals[lm & okv]
                np.fmax.at(leo_any_rate, ix[known_ix], rates[known_ix])
                np.fmax.at(leo_any_val, ix[known_ix & okv], vals[known_ix & okv])
            elif short == "size":
                size_lead_rate[ix[lm]] = rates[lm]
                size_lead_val[ix[lm & okv]] = vals[lm & okv]
                np.fmax.at(size_any_val, ix[known_ix & okv], vals[known_ix & okv])
            elif short == "p_in":
                ext_in[ix[lm]] = rates[lm]
            else:
                ext_out[ix[lm]] = rates[lm]
            if short not in ("leo", "size") or not special:
                continue
            for k_seg, bid in enumerate(fr.bids):
                want = special.get(bid)
                if not want:
                    continue
                bodies, rates_l, vals_l = fr.segment(k_seg)
                for body, r, v in zip(bodies, rates_l, vals_l, strict=True):
                    tp = tp_of(body)
                    if tp in want:
                        assert tp is not None
                        if short == "leo":
                            if r == r:
                                sp_leo_rate[(bid, *tp)] = r
                            sp_leo_val[(bid, *tp)] = v
                        elif r == r:
                            sp_size_rate[(bid, *tp)] = r
        # topic-level counters: per topic, Σ over brokers of bytes-in and messages-in where a broker
        # reports both (the bytes/message ratio); bytes-out per (broker, topic)
        t_fams = {short: self._family("topic." + short, name, payloads, drops)
                  for name, short in ((M_T_IN, "t_in"), (M_T_MSGS, "t_msgs"), (M_T_OUT, "t_out"))}
        t_keys: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
        for short, fr in t_fams.items():
            tids = (np.concatenate([self._seg_ids(bid, short, bodies, self._tid_of_body)
                                    for bid, bodies in zip(fr.bids, fr.bodies, strict=True)])
                    if fr.bids else np.zeros(0, dtype=np.int64))
            ok = (tids >= 0) & ~np.isnan(fr.rates)
            t_keys[short] = (fr.bid_per_sample()[ok], tids[ok], fr.rates[ok])
        n_topics = max(len(self.topic_reg), 1)
        topic_names = list(self.topic_reg)
        kb_in, kt_in, r_in = t_keys["t_in"]
        kb_m, kt_m, r_m = t_keys["t_msgs"]
        common, ia, ib = np.intersect1d(kb_in * n_topics + kt_in, kb_m * n_topics + kt_m, return_indices=True)
        t_in_sum = np.bincount(common % n_topics, weights=r_in[ia], minlength=n_topics)
        t_m_sum = np.bincount(common % n_topics, weights=r_m[ib], minlength=n_topics)
        for t_id in np.unique(common % n_topics).tolist():
            topic_in[topic_names[t_id]] = float(t_in_sum[t_id])
            topic_msgs[topic_names[t_id]] = float(t_m_sum[t_id])
        kb_o, kt_o, r_o = t_keys["t_out"]
        out_key = kb_o * n_topics + kt_o
        out_order = np.argsort(out_key, kind="stable")
        out_key_sorted, out_rate_sorted = out_key[out_order], r_o[out_order]
        bytes_per_msg: dict[str, float] = {}
        for topic in set(topic_msgs) | {k[1] for k in self.held if isinstance(k, tuple) and k and k[0] == "ratio"}:
            m = topic_msgs.get(topic, 0.0)
            ratio_v, _ = self._hold(("ratio", topic), topic_in[topic] / m if m > 0 else None, now)
            if ratio_v is not None:
                bytes_per_msg[topic] = ratio_v

        # ---------------- consumer positions (kafka_exporter conventions)
        # current offsets are positions; a lag L reported with the leader's LEO gives LEO - L.
        positions: dict[int, dict[str, float]] = defaultdict(dict)
        group_rate: dict[tuple[int, str], float] = {}
        sources = [(p, c, k, f"broker {b}", b) for b, (p, c, k) in payloads.items()]
        sources += [(p, c, k, u, -1) for p, c, k, u in exporter_payloads]
        for p, clock, ck, who, bid in sources:
            for fam_name in (M_GROUP_OFFSET, M_GROUP_LAG):
                fam = p.raw.get(fam_name)
                if not fam:
                    continue
                bodies, raw_vals = fam
                entries: list[tuple[str, float, int, str]] = []
                for body, v in zip(bodies, raw_vals, strict=True):
                    gk = self._group_key(body)
                    if gk is None or not (v == v and 0 <= v < math.inf):
                        continue
                    i = pidx.get(gk[1])
                    if i is None:
                        continue
                    if fam_name == M_GROUP_LAG:
                        if leader[i] != bid or math.isnan(leo_lead_val[i]):
                            continue  # a lag needs the log-end offset of the same moment
                        v = max(float(leo_lead_val[i]) - v, 0.0)
                    entries.append((body, v, i, gk[0]))
                if not entries:
                    continue
                rates, _codes = self.rates.update((ck, who, fam_name), [e[0] for e in entries], clock,
                                                  [e[1] for e in entries])
                for (_body, v, i, group), r in zip(entries, rates.tolist(), strict=True):
                    positions[i][group] = v
                    if r == r:
                        group_rate[(i, group)] = r

        # ---------------- broker residence time T
        residence_b: dict[int, float] = {}
        io_by_broker: dict[int, float] = defaultdict(float)
        have_io: set[int] = set()
        for (b2, _path), rr in disk_rates.items():
            if rr.get("read") is not None and rr.get("write") is not None:
                io_by_broker[b2] += (rr["read"] or 0.0) + (rr["write"] or 0.0)
                have_io.add(b2)
        for bid, (_mem_total, mem_avail) in broker_mem.items():
            if mem_avail is not None and bid in have_io:
                residence_b[bid] = residence_seconds(mem_avail, io_by_broker[bid])
                self.held[("T", bid)] = Held(residence_b[bid], now)
        for bid in alive - set(residence_b):
            h = self.held.get(("T", bid))
            if h is not None and now - h.at <= cfg.hold_s:
                residence_b[bid] = h.value

        # ---------------- per-partition figures (vectorised)
        topics_of = [k[0] for k in keys]
        topic_ids: dict[str, int] = {}
        tid = np.fromiter((topic_ids.setdefault(t, len(topic_ids)) for t in topics_of), dtype=np.int64, count=n)
        ratio_by_tid = np.array([bytes_per_msg.get(t, np.nan) for t in topic_ids], dtype=np.float64)
        ratio = ratio_by_tid[tid] if n else np.zeros(0)
        has_lead_leo = ~np.isnan(leo_lead_rate)
        msgs_fresh = np.where(has_lead_leo, leo_lead_rate, leo_any_rate)
        msgs, _ = self.phold.hold("msgs", g, msgs_fresh, now, cfg.hold_s)
        leo = np.where(np.isnan(leo_lead_val), leo_any_val, leo_lead_val)
        m_in = np.zeros(n, dtype=np.int8)
        b_in = _nan(n)
        sel = ~np.isnan(ext_in)
        b_in[sel] = ext_in[sel]
        m_in[sel] = M_CODES["partition_counter"]
        sel2 = np.isnan(b_in) & ~np.isnan(msgs_fresh) & ~np.isnan(ratio)
        b_in[sel2] = msgs_fresh[sel2] * ratio[sel2]
        m_in[sel2] = M_CODES["leo_x_topic_ratio"]
        sel3 = np.isnan(b_in) & ~np.isnan(size_lead_rate)
        b_in[sel3] = size_lead_rate[sel3]
        m_in[sel3] = M_CODES["size_delta"]
        b_in, in_fresh = self.phold.hold("in", g, b_in, now, cfg.hold_s)
        m_in[~in_fresh & ~np.isnan(b_in)] = M_CODES["held"]
        # consumer activity per partition (offset deltas x bytes/msg) weights the topic-level bytes-out split
        bpm = np.where(np.isnan(ratio), np.where(msgs > 0, b_in / np.where(msgs > 0, msgs, 1.0), np.nan), ratio)
        act = np.zeros(n)
        for (i, _grp), r in group_rate.items():
            if not math.isnan(bpm[i]):
                act[i] += r * bpm[i]
        weight = np.where(act > 0, act, np.nan_to_num(b_in))
        m_out = np.zeros(n, dtype=np.int8)
        b_out = _nan(n)
        sel = ~np.isnan(ext_out)
        b_out[sel] = ext_out[sel]
        m_out[sel] = M_CODES["partition_counter"]
        if len(out_key_sorted):
            nt = max(len(topic_ids), 1)
            lead_ok = leader >= 0
            gkey = np.where(lead_ok, leader * nt + tid, -1)
            uniq, inv = np.unique(gkey, return_inverse=True)
            wsum = np.bincount(inv, weights=weight, minlength=len(uniq))
            loc2reg = np.fromiter((self.topic_reg.get(t, -1) for t in topic_ids), dtype=np.int64, count=len(topic_ids))
            reg_tid = loc2reg[tid] if n else np.zeros(0, dtype=np.int64)
            want_key = np.where(lead_ok & (reg_tid >= 0), leader * n_topics + reg_tid, -1)
            pos = np.minimum(np.searchsorted(out_key_sorted, want_key), len(out_key_sorted) - 1)
            tot_for = np.where((want_key >= 0) & (out_key_sorted[pos] == want_key), out_rate_sorted[pos], np.nan)
            share = np.where(wsum[inv] > 0, weight / np.where(wsum[inv] > 0, wsum[inv], 1.0), 0.0)
            sel = np.isnan(b_out) & ~np.isnan(tot_for)
            b_out[sel] = tot_for[sel] * share[sel]
            m_out[sel] = M_CODES["topic_split"]
        b_out, out_fresh = self.phold.hold("out", g, b_out, now, cfg.hold_s)
        m_out[~out_fresh & ~np.isnan(b_out)] = M_CODES["held"]

        # ---------------- page cache: which fetches read the disk
        top_id = max([*residence_b, int(leader.max()) if n else 0, 0])
        if top_id < 10_000_000:
            res_by_broker = np.full(top_id + 1, np.nan)
            for b_, t_ in residence_b.items():
                res_by_broker[b_] = t_
            residence = np.where(leader >= 0, res_by_broker[np.maximum(leader, 0)], np.nan) if n else np.zeros(0)
        else:  # huge broker ids: no dense table
            residence = np.fromiter((residence_b.get(int(b_), np.nan) for b_ in leader), dtype=np.float64, count=n)
        dr = np.where(~np.isnan(leo) & (leader >= 0), 0.0, np.nan)
        readers: dict[int, tuple[list[str], list[str]]] = {}
        for i, groups in positions.items():
            if np.isnan(leo[i]) or leader[i] < 0:
                continue
            disk_r: list[str] = []
            cached: list[str] = []
            t_res = float(residence[i])
            r_msgs = 0.0 if np.isnan(msgs[i]) else float(msgs[i])
            total = 0.0
            for group, off in sorted(groups.items()):
                if not math.isnan(t_res) and is_disk_read(float(leo[i]), r_msgs, t_res, off):
                    disk_r.append(group)
                    gr = group_rate.get((i, group))
                    if gr is not None and not np.isnan(bpm[i]):
                        total += gr * float(bpm[i])
                    else:
                        total += (0.0 if np.isnan(b_out[i]) else float(b_out[i])) / max(len(groups), 1)
                else:
                    cached.append(group)
            readers[i] = (disk_r, cached)
            dr[i] = total
        dr, _ = self.phold.hold("dr", g, dr, now, cfg.hold_s)

        # ---------------- replicas: log dirs and the six behaviours per disk
        sig = (pms, frozenset(alive), frozenset((k, v.adding) for k, v in state.reassignments.items()),
               self._dir_version)
        rc = self._replica_cache
        if rc is not None and rc[0][3] == sig[3] and rc[0][1] == sig[1] and rc[0][2] == sig[2] and rc[0][0] == sig[0]:
            lay = rc[1]
        else:
            lay = self._replicas(keys, pms, state, alive)
            self._replica_cache = (sig, lay)
        disk_ids = dict(lay.disk_ids)
        log_dirs, rp, rd_, rr_, lead_disk, unknown = lay.log_dirs, lay.r_part, lay.r_disk, lay.r_role, \
            lay.lead_disk, lay.unknown
        migration = np.zeros(n)
        dir_cache = self.dir_cache
        cov.unknown_log_dirs = unknown
        self.unknown_dirs_last_round = unknown
        self.unknown_dir_brokers = set(lay.unknown_brokers)
        nd = len(disk_ids)
        b_in0 = np.nan_to_num(b_in)
        dr0 = np.nan_to_num(dr)
        beh_a: dict[str, npt.NDArray[np.float64]] = {name: np.zeros(nd) for name in BEHAVIOURS}
        if len(rp):
            m0, m1 = rr_ == 0, rr_ == 1
            beh_a["user_write"] = np.bincount(rd_[m0], weights=b_in0[rp[m0]], minlength=nd).astype(np.float64)
            beh_a["user_read"] = np.bincount(rd_[m0], weights=dr0[rp[m0]], minlength=nd).astype(np.float64)
            beh_a["replication_write"] = np.bincount(rd_[m1], weights=b_in0[rp[m1]],
                                                     minlength=nd).astype(np.float64)
        lagging: dict[int, list[int]] = {}
        copies: list[CopyInFlight] = []
        disk_keys = list(disk_ids)
        for j in np.nonzero(rr_ >= 2)[0].tolist():
            i = int(rp[j])
            key = keys[i]
            did = int(rd_[j])
            b = disk_keys[did][0]
            if rr_[j] == 3:
                cr = sp_size_rate.get((b, *key), 0.0)
                if (b, *key) in sp_size_rate:
                    copies.append(CopyInFlight("reassign", key[0], key[1],
                                               disk_keys[lead_disk[i]] if lead_disk[i] >= 0 else None,
                                               disk_keys[did], cr))
                migration[i] += cr
                beh_a["migration_write"][did] += cr
                if lead_disk[i] >= 0:
                    beh_a["migration_read"][lead_disk[i]] += cr
                continue
            f_rate = sp_leo_rate.get((b, *key))
            f_leo = sp_leo_val.get((b, *key))
            if f_rate is None or np.isnan(bpm[i]):
                continue
            fw = f_rate * float(bpm[i])
            beh_a["replication_write"][did] += fw
            lagging.setdefault(i, []).append(b)
            t_res = float(residence[i])
            if (lead_disk[i] >= 0 and not np.isnan(leo[i]) and f_leo is not None and not math.isnan(t_res)
                    and is_disk_read(float(leo[i]), 0.0 if np.isnan(msgs[i]) else float(msgs[i]), t_res, f_leo)):
                beh_a["replication_read"][lead_disk[i]] += fw
        # intra-broker future replicas (KIP-113): copy rate from the growth of the future's size
        for b, path, key, size in state.futures:
            if b not in payloads or key not in pidx:
                continue
            _, clock, ck = payloads[b]
            fut_r, _codes = self.rates.update((ck, b, "future"), [key], clock, [float(size)])
            rate = float(fut_r[0])
            if rate == rate:
                did = disk_ids.setdefault((b, path), len(disk_ids))
                for name in BEHAVIOURS:
                    if did >= len(beh_a[name]):
                        beh_a[name] = np.concatenate([beh_a[name], np.zeros(did + 1 - len(beh_a[name]))])
                beh_a["migration_write"][did] += rate
                src = dir_cache.get((b, *key))
                if src is not None and (b, src) in disk_ids:
                    beh_a["migration_read"][disk_ids[(b, src)]] += rate
                copies.append(CopyInFlight("intra_broker", key[0], key[1], (b, src) if src is not None else None,
                                           (b, path), rate))
                migration[pidx[key]] += rate
        disk_keys = list(disk_ids)
        beh: dict[tuple[int, str], Behaviours] = {}
        for did, dk in enumerate(disk_keys):
            beh[dk] = Behaviours(**{name: float(beh_a[name][did]) for name in BEHAVIOURS})

        # ---------------- assemble brokers and disks
        brokers: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        disk_util_round: dict[Hashable, float | None] = {}
        disks_total = 0
        disks_fresh = 0
        for bid in sorted(known):
            info = self.broker_cache.get(bid, BrokerInfo(bid))
            meta = state.brokers.get(bid)
            host, port, rack = self.meta_cache.get(bid, (info.host or "unknown", info.port or 1, info.rack))
            if meta is not None:
                host, port, rack = meta.host, meta.port, meta.rack
            rack = rack or info.rack or cfg.default_idc
            idc = info.idc or cfg.default_idc
            pool = info.pool or cfg.default_pool
            is_alive = bid in alive
            mem, _ = self._hold(("mem", bid), broker_mem.get(bid, (None, None))[0], now)
            disks: list[dict[str, Any]] = []
            facts = self.disk_cache.get(bid, {})
            ld = state.log_dirs.get(bid) or {}
            for path in sorted(facts):
                f = facts[path]
                disks_total += 1
                dk = (bid, path)
                rr = disk_rates.get(dk, {}) if is_alive else {}
                if is_alive:
                    util, fresh = self._hold(("util", dk), rr.get("util"), now)
                    rd, _ = self._hold(("read", dk), rr.get("read"), now)
                    wr, _ = self._hold(("write", dk), rr.get("write"), now)
                    aw, _ = self._hold(("await", dk), rr.get("await"), now)
                else:
                    util = rd = wr = aw = None
                    fresh = False
                disks_fresh += fresh
                disk_util_round[dk] = util
                cap = max(int(f.capacity_bytes), 1)
                used_f = rr.get("used")
                if used_f is not None:
                    used = int(used_f)
                elif path in ld and ld[path].total_bytes is not None and ld[path].usable_bytes is not None:
                    used = max(int(ld[path].total_bytes or 0) - int(ld[path].usable_bytes or 0), 0)
                elif path in ld:
                    used = sum(r.size for r in ld[path].replicas.values())
                else:
                    used = 0
                used = min(max(used, 0), cap)
                bh = beh.get(dk)
                if bh is None and is_alive and path != PLACEHOLDER_DIR:
                    bh = beh[dk] = Behaviours()
                if bh is not None:
                    bh.measured_read = rd
                    bh.measured_write = wr
                disks.append({"path": path, "kind": f.kind, "capacity_bytes": cap,
                              "max_bytes_per_s": max(float(f.max_bytes_per_s), 1.0), "used_bytes": used,
                              "util": min(max(util or 0.0, 0.0), 1.0), "await_ms": max(aw or 0.0, 0.0),
                              "read_bytes_per_s": max(rd or 0.0, 0.0), "write_bytes_per_s": max(wr or 0.0, 0.0)})
            if is_alive and bid in payloads:
                cov.brokers_with_metrics.append(bid)
            brokers.append(({"id": bid, "host": host or "unknown", "port": port if port and 0 < port < 65536 else 1,
                             "idc": idc, "rack": rack, "pool": pool,
                             "state": BrokerState.ALIVE if is_alive else BrokerState.DEAD,
                             "memory_bytes": int(mem or 0)}, disks))
        cov.brokers_dead = sorted(known - alive)
        cov.disks_total = disks_total
        cov.disks_with_metrics = disks_fresh

        # ---------------- history windows, then load_history on every disk
        self.disk_window.append(disk_util_round)
        part_vals = {"bytes_in": b_in, "disk_read": dr, "bytes_out": b_out}
        for name, win in self.partition_windows.items():
            win.append_array(keys, part_vals[name])
        final_brokers = []
        all_disks = [(b_args["id"], d["path"]) for b_args, ds in brokers for d in ds]
        hist = iter(self.disk_window.downsampled_many(all_disks, cfg.history_points, 0.0, 1.0))
        for b_args, ds in brokers:
            final_brokers.append(Broker(**b_args, disks=tuple(Disk(**d, load_history=tuple(next(hist))) for d in ds)))

        # ---------------- topics
        sizes = np.where(leader >= 0, size_lead_val, size_any_val)
        if state.log_dirs:
            missing = np.nonzero(np.isnan(sizes) & (leader >= 0))[0].tolist()
            for i in missing:
                key = keys[i]
                for d in (state.log_dirs.get(int(leader[i])) or {}).values():
                    ldir = d.replicas.get(key)
                    if ldir is not None and not ldir.is_future:
                        sizes[i] = float(ldir.size)
        sizes = np.nan_to_num(sizes)
        pool_of = {b.id: b.pool for b in final_brokers}
        b_in_l = np.nan_to_num(b_in).tolist()
        b_out_l = np.nan_to_num(b_out).tolist()
        msgs_l = np.nan_to_num(msgs).tolist()
        dr_l = np.nan_to_num(dr).tolist()
        size_l = sizes.tolist()
        size_l = [max(int(x), 0) for x in size_l]
        topic_pool = self._topic_pools(lay, keys, pms, pool_of)
        by_topic: dict[str, list[Partition]] = defaultdict(list)
        for i, (key, pm) in enumerate(zip(keys, pms, strict=True)):
            by_topic[key[0]].append(Partition(key[0], key[1], pm.replicas, pm.leader if pm.leader >= 0 else None,
                                              lay.isrs[i], log_dirs[i],
                                              size_l[i], b_in_l[i], b_out_l[i], msgs_l[i], dr_l[i]))
        topics = tuple(Topic(name=t, partitions=tuple(ps), pool=topic_pool[t]) for t, ps in by_topic.items())

        # ---------------- coverage
        cov.partitions_total = n
        cov.partitions_with_rates = int(np.count_nonzero(in_fresh))
        cov.partitions_held = int(np.count_nonzero(~in_fresh & ~np.isnan(b_in)))
        cov.partitions_without_rates = [f"{keys[i][0]}-{keys[i][1]}" for i in np.nonzero(np.isnan(b_in))[0][:51]]
        cov.partitions_offline = [f"{keys[i][0]}-{keys[i][1]}" for i in np.nonzero(leader < 0)[0][:51]]
        cov.bytes_in_methods = {M_NAMES[int(c)]: int(k) for c, k in enumerate(np.bincount(m_in, minlength=6)) if k}
        cov.bytes_out_methods = {M_NAMES[int(c)]: int(k) for c, k in enumerate(np.bincount(m_out, minlength=6)) if k}
        cov.drops = drops.as_dict()
        cov.drop_examples = list(drops.examples)
        cov.reassignments_in_flight = len(state.reassignments)
        cov.first_round = self.rounds == 0
        cov.admin_details_age_s = state.details_age_s
        self.rates.end_round()
        self.rounds += 1
        cov.memory = self.memory_bytes()
        snap = ClusterSnapshot(cluster=self.endpoints.cluster, taken_at=datetime.fromtimestamp(now, tz=UTC),
                               brokers=tuple(final_brokers), topics=topics, extra={"coverage": cov})
        details = PartitionDetails(keys, pidx, {"leo": leo, "residence": residence, "m_in": m_in, "m_out": m_out,
                                                "migration": migration}, readers, lagging)
        return Collected(snapshot=snap, coverage=cov, behaviours=beh, partitions=details,
                         throttles=state.throttles(), quotas=list(state.quotas), copies=copies,
                         broker_configs=state.broker_configs,
                         sample_clock=max((c for _, c, _ in payloads.values()), default=None),
                         round_seconds={"build": time.perf_counter() - t_start})

    def _topic_pools(self, lay: ReplicaLayout, keys: list[tuple[str, int]], pms: list[PartitionMeta],
                     pool_of: dict[int, str]) -> dict[str, str]:
        """Each topic's pool: the one pool all its replicas' brokers are in, else ``shared``
        (recomputed only when the replica layout or a broker's pool changed)."""
        sig = (lay, tuple(sorted(pool_of.items())))
        got = self._topic_pool_cache
        if got is not None and got[0][0] is lay and got[0][1] == sig[1]:
            return got[1]
        pools: dict[str, set[str]] = defaultdict(set)
        for key, pm in zip(keys, pms, strict=True):
            tp = pools[key[0]]
            if len(tp) < 2:
                tp.update(pool_of.get(r, "shared") for r in pm.replicas)
        out = {t: next(iter(ps)) if len(ps) == 1 else "shared" for t, ps in pools.items()}
        self._topic_pool_cache = (sig, out)
        return out

    def _replicas(self, keys: list[tuple[str, int]], pms: list[PartitionMeta], state: KafkaState,
                  alive: set[int]) -> ReplicaLayout:
        """Log dir of every replica and the replica arrays (partition, disk id, role) of alive brokers.

        Roles: 0 leader, 1 in-sync follower, 2 out-of-sync follower, 3 reassignment target.
        O(replicas); the result is reused while metadata, liveness, reassignments and log dirs stay equal.
        """
        cfg = self.cfg
        disk_ids: dict[tuple[int, str], int] = {}
        unknown = 0
        unknown_brokers: set[int] = set()
        dir_cache = self.dir_cache
        log_dirs: list[tuple[str, ...]] = []
        r_part: list[int] = []
        r_disk: list[int] = []
        r_role: list[int] = []
        lead_disk = np.full(len(keys), -1, dtype=np.int64)
        reas = state.reassignments
        for i, (key, pm) in enumerate(zip(keys, pms, strict=True)):
            t, pn = key
            dirs = []
            rinfo = reas.get(key)
            for b in pm.replicas:
                rpath = dir_cache.get((b, t, pn))
                if rpath is None:
                    unknown += 1
                    unknown_brokers.add(b)
                    rpath = PLACEHOLDER_DIR
                    self.disk_cache.setdefault(b, {}).setdefault(
                        PLACEHOLDER_DIR, DiskFacts(PLACEHOLDER_DIR, cfg.default_disk_kind, 1, 1.0))
                dirs.append(rpath)
                if b not in alive:
                    continue
                did = disk_ids.get((b, rpath))
                if did is None:
                    did = disk_ids[(b, rpath)] = len(disk_ids)
                r_part.append(i)
                r_disk.append(did)
                if rinfo is not None and b in rinfo.adding:
                    r_role.append(3)
                elif b == pm.leader:
                    r_role.append(0)
                    lead_disk[i] = did
                elif b in pm.isr:
                    r_role.append(1)
                else:
                    r_role.append(2)
            log_dirs.append(tuple(dirs))
        return ReplicaLayout(disk_ids, log_dirs, np.asarray(r_part, dtype=np.int64), np.asarray(r_disk, dtype=np.int64),
                             np.asarray(r_role, dtype=np.int8), lead_disk, unknown, frozenset(unknown_brokers),
                             [pm.isr if all(b in pm.replicas for b in pm.isr)
                              else tuple(b for b in pm.isr if b in pm.replicas) for pm in pms])

    def history_stats(self) -> dict[str, dict[Hashable, tuple[float, float, int]]]:
        """Median/p95/samples per disk (util) and per partition series over the window."""
        out = {"disk_util": self.disk_window.stats()}
        for name, w in self.partition_windows.items():
            out[f"partition_{name}"] = w.stats()
        return out
