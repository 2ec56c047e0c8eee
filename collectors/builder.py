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

import math
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from collectors.completeness import Coverage
from collectors.endpoints import BrokerInfo, ClusterEndpoints
from collectors.history import RingWindow
from collectors.kafka_source import KafkaState
from collectors.pagecache import Behaviours, is_disk_read, residence_seconds
from collectors.promtext import Payload
from collectors.rates import CounterTracker, DropLog, DropReason, gauge_value
from collectors.scrape import RoundResult
from controlplane.domain import (
    Broker,
    BrokerState,
    ClusterSnapshot,
    Disk,
    DiskKind,
    Partition,
    Topic,
    snapshot_to_dict,
)

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

WANTED_METRICS = frozenset({
    M_SIM_TIME, M_BROKER_INFO, M_LOG_DIR_INFO, M_DISK_MAX, M_IO_TIME, M_READ_B, M_WRITE_B, M_READS, M_WRITES,
    M_READ_T, M_WRITE_T, M_FS_SIZE, M_FS_AVAIL, M_MEM_TOTAL, M_MEM_AVAIL, M_T_IN, M_T_OUT, M_T_MSGS, M_P_IN,
    M_P_OUT, M_P_MSGS, M_SIZE, M_LEO, M_GROUP_OFFSET,
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
    """Per-partition series kept in the window."""
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


@dataclass
class Collected:
    """One round's result: the snapshot and everything known about how good it is."""

    snapshot: ClusterSnapshot
    coverage: Coverage
    behaviours: dict[tuple[int, str], Behaviours]
    partitions: dict[tuple[str, int], PartitionDetail]
    throttles: dict[str, Any]
    quotas: list[dict[str, Any]]
    round_seconds: dict[str, float] = field(default_factory=dict)

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


class LoadModel:
    """Turns rounds of (admin state, scrapes) into snapshots; keeps rates, holds and windows."""

    def __init__(self, endpoints: ClusterEndpoints, config: ModelConfig | None = None) -> None:
        self.endpoints = endpoints
        self.config = config or ModelConfig()
        self.cfg = self.config
        self.counters = CounterTracker(self.cfg.min_elapsed_s)
        self.held: dict[Hashable, Held] = {}
        self.broker_cache: dict[int, BrokerInfo] = {b.id: b for b in endpoints.brokers}
        self.meta_cache: dict[int, tuple[str, int, str | None]] = {}
        self.disk_cache: dict[int, dict[str, DiskFacts]] = {}
        self.dir_cache: dict[tuple[int, str, int], str] = {}
        self.url_broker: dict[str, int] = endpoints.url_to_broker()
        self.disk_window = RingWindow(self.cfg.history_capacity)
        self.partition_windows = {name: RingWindow(self.cfg.history_capacity, 1024)
                                  for name in self.cfg.partition_history}
        self.rounds = 0

    # ------------------------------------------------------------------ helpers
    def memory_bytes(self) -> dict[str, int]:
        """Bytes held by the history windows and the rate state (approximate)."""
        win = self.disk_window.nbytes + sum(w.nbytes for w in self.partition_windows.values())
        # a dict entry with a small tuple key and a 3-tuple value costs about 250 bytes
        state = 250 * (len(self.counters) + len(self.held) + len(self.dir_cache))
        return {"windows": win, "rate_state": state, "total": win + state}

    def _hold(self, key: Hashable, value: float | None, now: float) -> tuple[float | None, bool]:
        """Store a fresh value, or fall back to the last one if younger than ``hold_s``.

        Returns ``(value, fresh)``.
        """
        if value is not None:
            self.held[key] = Held(value, now)
            return value, True
        h = self.held.get(key)
        if h is not None and now - h.at <= self.cfg.hold_s:
            return h.value, False
        return None, False

    # ------------------------------------------------------------------ per broker metrics
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

    def build(self, state: KafkaState, scrape: RoundResult, now: float | None = None) -> Collected:
        """Build one round's snapshot. Never raises on bad metric values (they are dropped)."""
        t_start = time.perf_counter()
        now = time.time() if now is None else now
        cfg = self.cfg
        drops = DropLog()
        cov = Coverage(cluster=self.endpoints.cluster, taken_at=now)
        cov.kafka_errors = dict(state.errors)

        # ---------------- map payloads to brokers
        payloads: dict[int, tuple[Payload, float, str]] = {}
        exporter_payloads: list[tuple[Payload, float, str]] = []
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
                exporter_payloads.append((p, clock, kind))
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
        for bid in sorted(known):
            facts = self.disk_cache.setdefault(bid, {})
            ld = state.log_dirs.get(bid)
            if ld:
                for path, d in ld.items():
                    f = facts.get(path)
                    if f is None:
                        f = facts[path] = DiskFacts(path, cfg.default_disk_kind, 0,
                                                    cfg.default_max_bytes_per_s.get(cfg.default_disk_kind.value, 200e6))
                    if d.total_bytes:
                        f.capacity_bytes = d.total_bytes
                    for (tn, pn), rdir in d.replicas.items():
                        if not rdir.is_future:
                            self.dir_cache[(bid, tn, pn)] = path
            if bid not in payloads:
                continue
            p, clock, ck = payloads[bid]
            dev_to_dir: dict[str, str] = {}
            for labels, _ in p.get(M_LOG_DIR_INFO):
                dev, lpath = labels.get("device"), labels.get("log_dir")
                if dev and lpath:
                    path = lpath
                    dev_to_dir[dev] = path
                    f = facts.get(path)
                    kind_s = labels.get("kind", "")
                    kind = DiskKind(kind_s) if kind_s in DiskKind._value2member_map_ else cfg.default_disk_kind
                    if f is None:
                        f = facts[path] = DiskFacts(path, kind, 0, cfg.default_max_bytes_per_s.get(kind.value, 200e6))
                    f.kind = kind
                    f.device = dev
            fs_size: dict[str, float] = {}
            fs_avail: dict[str, float] = {}
            for name, target in ((M_FS_SIZE, fs_size), (M_FS_AVAIL, fs_avail)):
                for labels, v in p.get(name):
                    dev = labels.get("device", "").removeprefix("/dev/")
                    mp = labels.get("mountpoint")
                    if dev and dev not in dev_to_dir and mp:
                        # log dir under this mountpoint (longest prefix wins)
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
            counters: dict[str, dict[str, float]] = {}
            for name in (M_IO_TIME, M_READ_B, M_WRITE_B, M_READS, M_WRITES, M_READ_T, M_WRITE_T):
                counters[name] = {labels.get("device", ""): v for labels, v in p.get(name)}
            for dev, path in dev_to_dir.items():
                f = facts[path]
                size = fs_size.get(dev)
                if size is not None and math.isfinite(size) and size > 0:
                    f.capacity_bytes = int(size)
                rates: dict[str, float | None] = {}
                for name, short in ((M_IO_TIME, "util"), (M_READ_B, "read"), (M_WRITE_B, "write"),
                                    (M_READS, "reads"), (M_WRITES, "writes"), (M_READ_T, "read_t"),
                                    (M_WRITE_T, "write_t")):
                    r = self.counters.update((ck, bid, dev, short), clock, counters[name].get(dev))
                    if r.reason is not None and r.reason is not DropReason.FIRST_SAMPLE:
                        drops.add("disk." + short, r.reason, f"broker {bid} {dev}")
                    rates[short] = r.value
                u = rates["util"]
                if u is not None and u > 1.0:
                    if u <= 1.0 + cfg.max_util_overshoot:
                        rates["util"] = 1.0
                    else:
                        drops.add("disk.util", DropReason.IMPLAUSIBLE, f"broker {bid} {dev} util={u:.3f}")
                        rates["util"] = None
                ops = (rates["reads"], rates["writes"])
                tms = (rates["read_t"], rates["write_t"])
                if None in ops or None in tms:
                    rates["await"] = None
                else:
                    n_ops = (ops[0] or 0.0) + (ops[1] or 0.0)
                    rates["await"] = ((tms[0] or 0.0) + (tms[1] or 0.0)) / n_ops * 1000.0 if n_ops > 0 else 0.0
                avail = fs_avail.get(dev)
                if size is not None and avail is not None and math.isfinite(avail) and 0 <= avail <= size:
                    rates["used"] = size - avail
                disk_rates[(bid, path)] = rates
            mt = gauge_value(p.scalar(M_MEM_TOTAL))
            ma = gauge_value(p.scalar(M_MEM_AVAIL))
            for r, what in ((mt, "memory.total"), (ma, "memory.available")):
                if r.reason is not None:
                    drops.add(what, r.reason, f"broker {bid}")
            broker_mem[bid] = (mt.value, ma.value)

        # ---------------- partition metrics from every broker payload
        ext_in: dict[tuple[str, int], tuple[int, float | None]] = {}
        ext_out: dict[tuple[str, int], tuple[int, float | None]] = {}
        leo_rate: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
        leo_val: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
        size_rate: dict[tuple[int, str, int], float] = {}
        size_val: dict[tuple[int, str, int], float] = {}
        topic_in: dict[str, float] = defaultdict(float)
        topic_msgs: dict[str, float] = defaultdict(float)
        broker_topic_out: dict[tuple[int, str], float] = {}
        for bid, (p, clock, ck) in payloads.items():
            for pname, ptarget in ((M_P_IN, ext_in), (M_P_OUT, ext_out)) if cfg.use_partition_counters else ():
                short = "p_in" if pname == M_P_IN else "p_out"
                for labels, v in p.get(pname):
                    key = _tp(labels)
                    if key is None:
                        continue
                    r = self.counters.update((ck, bid, short, key), clock, v)
                    if r.reason is not None and r.reason is not DropReason.FIRST_SAMPLE:
                        drops.add("partition." + short, r.reason, f"broker {bid} {key[0]}-{key[1]}")
                    ptarget[key] = (bid, r.value)
            for labels, v in p.get(M_LEO):
                key = _tp(labels)
                if key is None:
                    continue
                if math.isfinite(v) and v >= 0:
                    leo_val[key][bid] = v
                r = self.counters.update((ck, bid, "leo", key), clock, v)
                if r.value is not None:
                    leo_rate[key][bid] = r.value
                elif r.reason is not DropReason.FIRST_SAMPLE and r.reason is not None:
                    drops.add("partition.leo", r.reason, f"broker {bid} {key[0]}-{key[1]}")
            for labels, v in p.get(M_SIZE):
                key = _tp(labels)
                if key is None:
                    continue
                if math.isfinite(v) and v >= 0:
                    size_val[(bid, *key)] = v
                r = self.counters.update((ck, bid, "size", key), clock, v)
                if r.value is not None:
                    size_rate[(bid, *key)] = r.value
            t_in = {lab.get("topic"): v for lab, v in p.get(M_T_IN) if lab.get("topic")}
            t_msgs = {lab.get("topic"): v for lab, v in p.get(M_T_MSGS) if lab.get("topic")}
            t_out = {lab.get("topic"): v for lab, v in p.get(M_T_OUT) if lab.get("topic")}
            for topic, v in t_in.items():
                r_in = self.counters.update((ck, bid, "t_in", topic), clock, v)
                r_m = self.counters.update((ck, bid, "t_msgs", topic), clock, t_msgs.get(topic))
                if r_in.value is not None and r_m.value is not None:
                    topic_in[str(topic)] += r_in.value
                    topic_msgs[str(topic)] += r_m.value
                elif r_in.reason not in (None, DropReason.FIRST_SAMPLE):
                    drops.add("topic.bytes_in", r_in.reason or DropReason.MISSING, f"broker {bid} {topic}")
            for topic, v in t_out.items():
                r_o = self.counters.update((ck, bid, "t_out", topic), clock, v)
                if r_o.value is not None:
                    broker_topic_out[(bid, str(topic))] = r_o.value
        bytes_per_msg: dict[str, float] = {}
        for topic, m in topic_msgs.items():
            ratio, _ = self._hold(("ratio", topic), topic_in[topic] / m if m > 0 else None, now)
            if ratio is not None:
                bytes_per_msg[topic] = ratio

        # ---------------- consumer positions
        positions: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
        group_rate: dict[tuple[str, int, str], float] = {}
        sources = [*payloads.values(), *exporter_payloads]
        for p, clock, ck in sources:
            for labels, v in p.get(M_GROUP_OFFSET):
                key = _tp(labels)
                group = labels.get("consumergroup") or labels.get("group")
                if key is None or not group or not math.isfinite(v) or v < 0:
                    continue
                positions[key][group] = v
                r = self.counters.update((ck, "group", group, key), clock, v)
                if r.value is not None:
                    group_rate[(*key, group)] = r.value

        # ---------------- broker residence time T
        residence: dict[int, float] = {}
        for bid, (_mem_total, mem_avail) in broker_mem.items():
            io = 0.0
            have = False
            for (b2, _path), rates in disk_rates.items():
                if b2 == bid and rates.get("read") is not None and rates.get("write") is not None:
                    io += (rates["read"] or 0.0) + (rates["write"] or 0.0)
                    have = True
            if mem_avail is not None and have:
                residence[bid] = residence_seconds(mem_avail, io)

        # ---------------- partitions
        details: dict[tuple[str, int], PartitionDetail] = {}
        part_rates: dict[tuple[str, int], dict[str, float]] = {}
        methods_in: Counter[str] = Counter()
        methods_out: Counter[str] = Counter()
        fresh_parts = 0
        held_parts = 0
        no_rate_parts: list[str] = []
        offline: list[str] = []
        # bytes-out weights for the topic-level split: per (leader, topic)
        out_weight: dict[tuple[str, int], float] = {}
        for key, pm in state.partitions.items():
            det = details[key] = PartitionDetail()
            leader = pm.leader
            if leader is None:
                offline.append(f"{key[0]}-{key[1]}")
            # messages-in: LEO delta (leader first)
            rates_by_b = leo_rate.get(key, {})
            msgs: float | None = None
            if leader is not None and leader in rates_by_b:
                msgs = rates_by_b[leader]
            elif rates_by_b:
                msgs = statistics.median(rates_by_b.values())
            vals = leo_val.get(key, {})
            if vals:
                det.leo = vals.get(leader, max(vals.values())) if leader is not None else max(vals.values())
            msgs, _ = self._hold(("msgs", key), msgs, now)
            # bytes-in
            b_in: float | None = None
            e = ext_in.get(key)
            if e is not None and e[0] == leader and e[1] is not None:
                b_in, det.bytes_in_method = e[1], "partition_counter"
            elif msgs is not None and key[0] in bytes_per_msg and rates_by_b:
                b_in, det.bytes_in_method = msgs * bytes_per_msg[key[0]], "leo_x_topic_ratio"
            elif leader is not None and (leader, *key) in size_rate:
                b_in, det.bytes_in_method = size_rate[(leader, *key)], "size_delta"
            b_in, fresh = self._hold(("in", key), b_in, now)
            if b_in is not None and not fresh:
                det.bytes_in_method = "held"
            methods_in[det.bytes_in_method] += 1
            if b_in is None:
                no_rate_parts.append(f"{key[0]}-{key[1]}")
            elif fresh:
                fresh_parts += 1
            else:
                held_parts += 1
            # consumer activity (group offset deltas x bytes/msg)
            bpm = bytes_per_msg.get(key[0])
            if bpm is None and b_in is not None and msgs:
                bpm = b_in / msgs
            g_act = 0.0
            for group in positions.get(key, {}):
                gr = group_rate.get((*key, group))
                if gr is not None and bpm is not None:
                    g_act += gr * bpm
            out_weight[key] = g_act if g_act > 0 else (b_in or 0.0)
            part_rates[key] = {"in": b_in or 0.0, "msgs": msgs or 0.0}
            if b_in is None:
                part_rates[key]["missing"] = 1.0
        # bytes-out
        leader_topic_weight: dict[tuple[int, str], float] = defaultdict(float)
        for key, pm in state.partitions.items():
            if pm.leader is not None:
                leader_topic_weight[(pm.leader, key[0])] += out_weight[key]
        for key, pm in state.partitions.items():
            det = details[key]
            b_out: float | None = None
            e = ext_out.get(key)
            if e is not None and e[0] == pm.leader and e[1] is not None:
                b_out, det.bytes_out_method = e[1], "partition_counter"
            elif pm.leader is not None and (pm.leader, key[0]) in broker_topic_out:
                tot = broker_topic_out[(pm.leader, key[0])]
                wsum = leader_topic_weight[(pm.leader, key[0])]
                b_out = tot * out_weight[key] / wsum if wsum > 0 else 0.0
                det.bytes_out_method = "topic_split"
            b_out, fresh = self._hold(("out", key), b_out, now)
            if b_out is not None and not fresh:
                det.bytes_out_method = "held"
            methods_out[det.bytes_out_method] += 1
            part_rates[key]["out"] = b_out or 0.0

        # ---------------- page cache: which fetches read the disk
        for key, pm in state.partitions.items():
            det = details[key]
            leader = pm.leader
            dr = 0.0
            if leader is not None and det.leo is not None:
                t_res = residence.get(leader)
                if t_res is None:
                    h = self.held.get(("T", leader))
                    t_res = h.value if h is not None and now - h.at <= cfg.hold_s else None
                else:
                    self.held[("T", leader)] = Held(t_res, now)
                det.residence_s = t_res
                r_msgs = part_rates[key]["msgs"]
                bpm = bytes_per_msg.get(key[0])
                if bpm is None and r_msgs > 0:
                    bpm = part_rates[key]["in"] / r_msgs
                groups = positions.get(key, {})
                for group, off in sorted(groups.items()):
                    if t_res is not None and is_disk_read(det.leo, r_msgs, t_res, off):
                        det.disk_readers.append(group)
                        gr = group_rate.get((*key, group))
                        if gr is not None and bpm is not None:
                            dr += gr * bpm
                        else:
                            dr += part_rates[key]["out"] / max(len(groups), 1)
                    else:
                        det.cached_readers.append(group)
            dr_held, _ = self._hold(("dr", key), dr if pm.leader is not None and det.leo is not None else None, now)
            part_rates[key]["dr"] = dr_held or 0.0

        # ---------------- log dirs of every replica
        def dir_of(b: int, t: str, p: int) -> str:
            d = self.dir_cache.get((b, t, p))
            if d is None:
                cov.unknown_log_dirs += 1
                self.disk_cache.setdefault(b, {}).setdefault(
                    PLACEHOLDER_DIR, DiskFacts(PLACEHOLDER_DIR, cfg.default_disk_kind, 1, 1.0))
                return PLACEHOLDER_DIR
            return d

        # ---------------- six behaviours per disk
        beh: dict[tuple[int, str], Behaviours] = defaultdict(Behaviours)
        for key, pm in state.partitions.items():
            det = details[key]
            pr = part_rates[key]
            ra = state.reassignments.get(key)
            adding = set(ra.adding) if ra else set()
            leader = pm.leader
            leader_dir = dir_of(leader, *key) if leader is not None else None
            for b in pm.replicas:
                if b not in alive:
                    continue
                path = dir_of(b, *key)
                if b in adding:
                    cr = size_rate.get((b, *key), 0.0)
                    det.migration_bytes_per_s += cr
                    beh[(b, path)].migration_write += cr
                    if leader is not None and leader_dir is not None:
                        beh[(leader, leader_dir)].migration_read += cr
                    continue
                if b == leader:
                    beh[(b, path)].user_write += pr["in"]
                    beh[(b, path)].user_read += pr["dr"]
                elif b in pm.isr:
                    beh[(b, path)].replication_write += pr["in"]
                else:
                    # out-of-sync follower catching up: its LEO rate is what it copies
                    f_rate = leo_rate.get(key, {}).get(b)
                    f_leo = leo_val.get(key, {}).get(b)
                    bpm = bytes_per_msg.get(key[0], 0.0)
                    if f_rate is not None and bpm:
                        w = f_rate * bpm
                        beh[(b, path)].replication_write += w
                        det.lagging_followers.append(b)
                        t_res = det.residence_s
                        if (leader is not None and leader_dir is not None and det.leo is not None
                                and f_leo is not None and t_res is not None
                                and is_disk_read(det.leo, pr["msgs"], t_res, f_leo)):
                            beh[(leader, leader_dir)].replication_read += w
            # intra-broker future replicas (KIP-113)
            for b in pm.replicas:
                for path, d in state.log_dirs.get(b, {}).items():
                    fdir = d.replicas.get(key)
                    if fdir is not None and fdir.is_future and b in payloads:
                        _, clock, ck = payloads[b]
                        rr = self.counters.update((ck, b, "future", key), clock, float(fdir.size))
                        if rr.value is not None:
                            beh[(b, path)].migration_write += rr.value
                            src = self.dir_cache.get((b, *key))
                            if src is not None:
                                beh[(b, src)].migration_read += rr.value
                            det.migration_bytes_per_s += rr.value

        # ---------------- assemble brokers and disks
        brokers: list[Broker] = []
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
            mem_total = broker_mem.get(bid, (None, None))[0]
            mem, _ = self._hold(("mem", bid), mem_total, now)
            disks: list[Disk] = []
            facts = self.disk_cache.get(bid, {})
            used_by_dir: dict[str, int] = {}
            for path, d in (state.log_dirs.get(bid) or {}).items():
                if d.total_bytes is not None and d.usable_bytes is not None:
                    used_by_dir[path] = max(d.total_bytes - d.usable_bytes, 0)
                else:
                    used_by_dir[path] = sum(r.size for r in d.replicas.values())
            for path in sorted(facts):
                f = facts[path]
                disks_total += 1
                rates = disk_rates.get((bid, path), {}) if is_alive else {}
                dk = (bid, path)
                util, fresh = self._hold(("util", dk), rates.get("util"), now) if is_alive else (None, False)
                if fresh:
                    disks_fresh += 1
                rd, _ = self._hold(("read", dk), rates.get("read"), now) if is_alive else (None, False)
                wr, _ = self._hold(("write", dk), rates.get("write"), now) if is_alive else (None, False)
                aw, _ = self._hold(("await", dk), rates.get("await"), now) if is_alive else (None, False)
                disk_util_round[dk] = util if is_alive else None
                cap = max(int(f.capacity_bytes), 1)
                used_f = rates.get("used")
                used = int(used_f) if used_f is not None else used_by_dir.get(path, 0)
                used = min(max(used, 0), cap)
                bh = beh.get(dk)
                if bh is not None:
                    bh.measured_read = rd
                    bh.measured_write = wr
                elif is_alive and path != PLACEHOLDER_DIR:
                    beh[dk] = Behaviours(measured_read=rd, measured_write=wr)
                disks.append(Disk(path=path, kind=f.kind, capacity_bytes=cap,
                                  max_bytes_per_s=max(float(f.max_bytes_per_s), 1.0), used_bytes=used,
                                  util=min(max(util or 0.0, 0.0), 1.0), await_ms=max(aw or 0.0, 0.0),
                                  read_bytes_per_s=max(rd or 0.0, 0.0), write_bytes_per_s=max(wr or 0.0, 0.0)))
            if is_alive:
                cov.brokers_with_metrics += [bid] if bid in payloads else []
            brokers.append(Broker(id=bid, host=host or "unknown", port=port if port and 0 < port < 65536 else 1,
                                  idc=idc, rack=rack, pool=pool,
                                  state=BrokerState.ALIVE if is_alive else BrokerState.DEAD,
                                  memory_bytes=int(mem or 0), disks=tuple(disks)))
        cov.brokers_dead = sorted(known - alive)
        cov.disks_total = disks_total
        cov.disks_with_metrics = disks_fresh

        # ---------------- history windows
        self.disk_window.append(disk_util_round)
        if "bytes_in" in self.partition_windows:
            self.partition_windows["bytes_in"].append(
                {k: (None if "missing" in v else v["in"]) for k, v in part_rates.items()})
        if "disk_read" in self.partition_windows:
            self.partition_windows["disk_read"].append({k: v["dr"] for k, v in part_rates.items()})
        if "bytes_out" in self.partition_windows:
            self.partition_windows["bytes_out"].append({k: v["out"] for k, v in part_rates.items()})
        final_brokers = []
        for br in brokers:
            final_brokers.append(Broker(
                id=br.id, host=br.host, port=br.port, idc=br.idc, rack=br.rack, pool=br.pool, state=br.state,
                memory_bytes=br.memory_bytes,
                disks=tuple(Disk(path=d.path, kind=d.kind, capacity_bytes=d.capacity_bytes,
                                 max_bytes_per_s=d.max_bytes_per_s, used_bytes=d.used_bytes, util=d.util,
                                 await_ms=d.await_ms, read_bytes_per_s=d.read_bytes_per_s,
                                 write_bytes_per_s=d.write_bytes_per_s,
                                 load_history=tuple(min(max(x, 0.0), 1.0) for x in self.disk_window.downsampled(
                                     (br.id, d.path), cfg.history_points)))
                            for d in br.disks)))

        # ---------------- topics
        by_topic: dict[str, list[Partition]] = defaultdict(list)
        for key in sorted(state.partitions):
            pm = state.partitions[key]
            pr = part_rates[key]
            size = 0
            if pm.leader is not None:
                lv = size_val.get((pm.leader, *key))
                if lv is None:
                    for d in (state.log_dirs.get(pm.leader) or {}).values():
                        ldir = d.replicas.get(key)
                        if ldir is not None and not ldir.is_future:
                            lv = float(ldir.size)
                size = int(lv or 0)
            if size == 0:
                size = int(max((v for (b, t, p), v in size_val.items() if (t, p) == key), default=0)) \
                    if pm.leader is None else size
            by_topic[key[0]].append(Partition(
                topic=key[0], partition=key[1], replicas=pm.replicas, leader=pm.leader,
                isr=tuple(b for b in pm.isr if b in pm.replicas),
                log_dirs=tuple(dir_of(b, *key) for b in pm.replicas), size_bytes=max(size, 0),
                bytes_in_per_s=pr["in"], bytes_out_per_s=pr["out"], messages_in_per_s=pr["msgs"],
                disk_read_bytes_per_s=pr["dr"]))
        topics = tuple(Topic(name=t, partitions=tuple(ps), pool=self._topic_pool(ps, final_brokers))
                       for t, ps in sorted(by_topic.items()))

        # ---------------- coverage
        cov.partitions_total = len(state.partitions)
        cov.partitions_with_rates = fresh_parts
        cov.partitions_held = held_parts
        cov.partitions_without_rates = no_rate_parts
        cov.partitions_offline = offline
        cov.bytes_in_methods = dict(methods_in)
        cov.bytes_out_methods = dict(methods_out)
        cov.drops = drops.as_dict()
        cov.drop_examples = list(drops.examples)
        cov.reassignments_in_flight = len(state.reassignments)
        cov.first_round = self.rounds == 0
        self.counters.end_round()
        self.rounds += 1
        cov.memory = self.memory_bytes()
        snap = ClusterSnapshot(cluster=self.endpoints.cluster, taken_at=datetime.fromtimestamp(now, tz=UTC),
                               brokers=tuple(final_brokers), topics=topics, extra={"coverage": cov})
        return Collected(snapshot=snap, coverage=cov, behaviours=dict(beh), partitions=details,
                         throttles=state.throttles(), quotas=list(state.quotas),
                         round_seconds={"build": time.perf_counter() - t_start})

    @staticmethod
    def _topic_pool(parts: list[Partition], brokers: list[Broker]) -> str:
        """A topic's pool: the pool of its replicas' brokers when they agree, else ``shared``."""
        pool_of = {b.id: b.pool for b in brokers}
        pools = {pool_of.get(r, "shared") for p in parts for r in p.replicas}
        return pools.pop() if len(pools) == 1 else "shared"

    def history_stats(self) -> dict[str, dict[Hashable, tuple[float, float, int]]]:
        """Median/p95/samples per disk (util) and per partition series over the window."""
        out = {"disk_util": self.disk_window.stats()}
        for name, w in self.partition_windows.items():
            out[f"partition_{name}"] = w.stats()
        return out


def _tp(labels: dict[str, str]) -> tuple[str, int] | None:
    t = labels.get("topic")
    p = labels.get("partition")
    if not t or p is None:
        return None
    try:
        return (t, int(p))
    except ValueError:
        return None
