"""Vectorised physics for a kafkasim federation.

Time advances in ticks of ``dt`` simulated seconds (:meth:`Engine.step`).  Per tick:

* **Producers** (one synthetic client per partition) write ``base_rate × diurnal × weekly × burst
  × spike`` bytes/s, cut by the partition-level produce throttle (capable clusters only) and by the
  client's ``producer_byte_rate`` quota, enforced per broker (sum of the client's partitions led by
  that broker).  Real Produce requests add their bytes on top.
* **Writes** land on the log dir of every in-sync replica (leader and followers).
* **Page cache** per broker holds ``memory × cache_fraction`` bytes; data stays resident for
  ``cache / write rate`` seconds.  Tailing consumers read from cache; a *lagging* consumer whose
  lag (in seconds of production) exceeds the residence time reads from the leader's disk.
* **Consumers**: ``tail_groups`` tailing groups per partition plus an optional lagging consumer,
  cut by the partition-level fetch throttle and the client's ``consumer_byte_rate`` quota.
* **Catch-up**: a revived follower fetches what it missed before rejoining the ISR (throttled if
  listed; read from the leader's page cache when recent enough, else from its disk).
* **Copies**: reassignment (KIP-455) adding replicas copy ``size`` bytes from the leader's disk
  to their own disk at the rate the KIP-73 throttles allow (``leader/follower.replication.
  throttled.rate`` shared among throttled replicas listed in the topic's
  ``*.replication.throttled.replicas``), then the replica set switches; intra-broker (KIP-113)
  future replicas copy at ``replica.alter.log.dirs.io.max.bytes.per.second`` (:mod:`kafkasim.physics.copies`).
* **Leased lines** (when the federation has a :class:`~kafkasim.physics.network.Network`): produce, consumer
  fetches, in-sync follower fetches and copies that cross IDCs share their line max-min fairly; a cut
  produce lowers the partition's ingress, a cut fetch or copy its rate; the line's latency is added to
  cross-IDC produce (acks=all) and fetch latency; an in-sync follower more than ``REPLICA_LAG_MAX_S`` of
  ingress behind leaves the ISR and catches up (:mod:`kafkasim.physics.line_flows`).
* **Retention**: when the broker leading a partition runs its retention check (every
  ``log.retention.check.interval.ms``, default 300 s: :mod:`kafkasim.cluster.retention`), simulated traffic is
  trimmed by what decays since the partition's last check (about ``rate × retention.ms`` kept, at most
  ``retention.bytes``); a record-holding partition (no simulated traffic, untiered) deletes whole
  segments (:mod:`kafkasim.cluster.seglog`); a tiered topic's local retention runs at the same check (applied by
  :mod:`kafkasim.tiering.tiered` from :attr:`Engine.retention_due`); its copies and remote deletes run at the
  partition's own remote log manager task (``remote.log.manager.task.interval.ms``, default 30 s, scheduled per
  partition by :mod:`kafkasim.tiering.tiered` / :mod:`kafkasim.tiering.rlm_tasks`).
  Real appends count in BytesIn/MessagesIn when appended.
* **Disks**: lagging reads and copies are *elastic* and are scaled down to the headroom the
  writes leave; ``util`` = busy fraction (demand / max throughput, ≤ 1) and
  ``await = base / (1 - util)`` (capped) plus the backlog when writes alone exceed the disk.

Everything is deterministic for a given seed and sequence of calls.  Cost: a tick is O(slots + replicas)
numpy plus Python over copies in flight and record-holding partitions; a topology change costs one
O(partitions) :meth:`Engine.rebuild` before the next tick.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kafkasim.cluster.configs import PT_FETCH, PT_PRODUCE, parse_partition_rates
from kafkasim.cluster.model import Broker, Cluster, Disk, Partition
from kafkasim.cluster.retention import RetentionClock
from kafkasim.cluster.seglog import SegmentedLog
from kafkasim.physics.copies import apply_copies, plan_copies
from kafkasim.physics.line_flows import replication_lag, share_network
from kafkasim.physics.network import Network

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

OP_BYTES = 128 * 1024  # average I/O size used to turn bytes into ops


def _int_or(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


@dataclass(frozen=True)
class Client:
    """A synthetic client (producer or consumer) for quotas and audit."""

    client_id: str
    user: str
    ip: str
    idc: str


def diurnal_factor(t: float, phase: float, amplitude: float = 0.35) -> float:
    """Daily sinusoid (peak mid-afternoon) times a weekend dip; mean about 1."""
    day = (t / 86400.0 + phase) % 1.0
    weekday = int(t // 86400 + 3) % 7  # 1970-01-01 was a Thursday
    weekly = 0.8 if weekday >= 5 else 1.0
    return (1.0 + amplitude * math.sin(2 * math.pi * (day - 0.375))) * weekly


class Engine:
    """Owns every numeric array of the federation and advances them in time."""

    SLOT_FIELDS_F = ("size", "leo", "base_rate", "msg_size", "phase", "spike", "burst_left",
                     "lag", "lag_rate", "in_rate", "out_rate", "repl_rate", "disk_read",
                     "bytes_in_total", "bytes_out_total", "msgs_in_total", "real_in", "real_msgs",
                     "real_out", "tail_groups", "produce_latency_ms", "fetch_latency_ms", "syn_in", "syn_out", "lso",
                     "ret_checked")
    SLOT_FIELDS_I = ("prod_client", "cons_client", "cluster_idx", "topic_idx")
    DISK_FIELDS = ("d_used", "d_util", "d_await", "d_read_rate", "d_write_rate", "d_copy_rate", "d_backlog",
                   "d_read_total", "d_written_total", "d_io_time_total", "d_read_time_total",
                   "d_write_time_total", "d_reads_total", "d_writes_total", "d_slow", "d_cap_bps",
                   "d_base_lat", "d_capacity", "d_parts")
    d_used: F64
    d_util: F64
    d_await: F64
    d_read_rate: F64
    d_write_rate: F64
    d_copy_rate: F64
    """Bytes/s each disk reads or writes for replica copies (reassignments' new replicas, log-dir moves) in the last
    tick: ground truth for benchmarks; no exporter shows it apart from the disk's other I/O."""
    d_backlog: F64
    d_read_total: F64
    d_written_total: F64
    d_io_time_total: F64
    d_read_time_total: F64
    d_write_time_total: F64
    d_reads_total: F64
    d_writes_total: F64
    d_slow: F64
    d_cap_bps: F64
    d_base_lat: F64
    d_capacity: F64
    d_parts: F64
    seg_mask: npt.NDArray[np.bool_]
    """Slots with a :class:`~kafkasim.cluster.seglog.SegmentedLog` (retention by whole segments)."""

    def __init__(self, seed: int = 0, start_time: float = 1_795_000_000.0,
                 cache_fraction: float = 0.6, burst_rate_per_hour: float = 0.5) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.t = float(start_time)
        self.cache_fraction = cache_fraction
        self.burst_rate_per_hour = burst_rate_per_hour
        self.clusters: dict[str, Cluster] = {}
        self.cluster_names: list[str] = []
        self.brokers: list[Broker] = []
        self.disks: list[Disk] = []
        self.clients: list[Client] = [Client("", "", "", "")]
        self._client_idx: dict[Client, int] = {self.clients[0]: 0}
        self.topic_index: dict[tuple[str, str], int] = {}
        self.cap = 0
        self.n_slots = 0
        self.free: list[int] = []
        self.slot_active = np.zeros(0, dtype=bool)
        self.f: dict[str, F64] = {}
        self.i: dict[str, I64] = {}
        self._grow(1024)
        self.dirty = True
        self.generation = 0  # bumped by every mark_dirty: caches of topology-derived views key on it
        self.ticks = 0
        # disk arrays
        self._alloc_disks(0)
        self.b_cached = np.zeros(0)
        self.b_alive = np.zeros(0, dtype=bool)
        # per (broker, topic) counters
        self.bt_in = np.zeros((0, 0))
        self.bt_out = np.zeros((0, 0))
        self.bt_msgs = np.zeros((0, 0))
        self.b_repl_in_total = np.zeros(0)
        self.b_repl_out_total = np.zeros(0)
        self.b_reassign_in_total = np.zeros(0)
        self.b_produce_lat = np.zeros(0)
        self.b_fetch_lat = np.zeros(0)
        self.b_residence = np.zeros(0)
        self.moves: list[tuple[Cluster, Partition]] = []
        self.futures: list[tuple[Cluster, Partition]] = []
        self.catchups: list[tuple[Cluster, Partition]] = []
        self.batch_fifo: deque[Partition] = deque()  # one entry per stored real record batch
        self.batch_bytes = 0
        self.batch_budget = 256 * 1024 * 1024
        self.listeners: list[Any] = []
        self.append_listeners: list[Any] = []  # (cluster, partition, stored batch) after a real Produce batch
        self.broker_replicas: list[list[Partition]] = []
        self._ct_cache: dict[str, tuple[int, list[tuple[int, str]]]] = {}
        self.network: Network | None = None
        """Leased lines between IDCs (:mod:`kafkasim.physics.network`); None: no network model (IDCs are free)."""
        self.net_lag: dict[tuple[int, int], float] = {}
        """(slot, follower broker gidx) -> bytes an in-sync follower is behind because its line is full."""
        self.slot_ref: dict[int, tuple[Cluster, Partition]] = {}
        self.seglogs: dict[int, SegmentedLog] = {}
        """slot -> the segments of a record-holding partition (:mod:`kafkasim.cluster.seglog`): retention deletes
        whole segments there, not a share of the log every tick."""
        self.retention_clock = RetentionClock()
        """When each broker runs its retention check (``log.retention.check.interval.ms``)."""
        self.retention_due: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        """Per broker (gidx): it ran its retention check in the last tick (tiered topics' local retention)."""
        self.seg_bytes = np.zeros(0)
        self.seg_s = np.zeros(0)
        self.tiered_slot = np.zeros(0, dtype=bool)
        self.net_produce_lat = np.zeros(0)
        self.net_fetch_lat = np.zeros(0)
        self._net_rows: tuple[I64, I64, F64, F64] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                                                     np.zeros(0), np.zeros(0))

    # ------------------------------------------------------------------ storage
    def _grow(self, new_cap: int) -> None:
        old = self.cap
        for name in self.SLOT_FIELDS_F:
            arr = np.zeros(new_cap)
            if old:
                arr[:old] = self.f[name]
            self.f[name] = arr
        for name in self.SLOT_FIELDS_I:
            arr_i = np.zeros(new_cap, dtype=np.int64)
            if old:
                arr_i[:old] = self.i[name]
            self.i[name] = arr_i
        act = np.zeros(new_cap, dtype=bool)
        act[:old] = self.slot_active[:old] if old else act[:0]
        self.slot_active = act
        seg = np.zeros(new_cap, dtype=bool)
        seg[:old] = self.seg_mask[:old] if old else seg[:0]
        self.seg_mask = seg
        self.f["msg_size"][old:] = 1024.0
        self.f["spike"][old:] = 1.0
        self.cap = new_cap

    def _alloc_disks(self, n: int) -> None:
        for name in self.DISK_FIELDS:
            old = getattr(self, name, None)
            arr = np.zeros(n)
            if old is not None and len(old):
                arr[: len(old)] = old[:n]
            setattr(self, name, arr)
        self.d_slow[self.d_slow == 0] = 1.0

    def alloc_slot(self, cluster: str) -> int:
        """Reserve an engine slot for a new partition of ``cluster``."""
        if self.free:
            s = self.free.pop()
        else:
            if self.n_slots >= self.cap:
                self._grow(self.cap * 2)
            s = self.n_slots
            self.n_slots += 1
        for name in self.SLOT_FIELDS_F:
            self.f[name][s] = 0.0
        self.f["msg_size"][s] = 1024.0
        self.f["spike"][s] = 1.0
        self.f["ret_checked"][s] = self.t  # a new log: retention counts its age from now
        for name in self.SLOT_FIELDS_I:
            self.i[name][s] = 0
        self.i["cluster_idx"][s] = self.cluster_names.index(cluster)
        self.slot_active[s] = True
        return s

    def free_slot(self, s: int) -> None:
        """Release a deleted partition's slot."""
        self.slot_active[s] = False
        self.f["base_rate"][s] = 0.0
        self.seglogs.pop(s, None)
        self.seg_mask[s] = False
        self.free.append(s)

    def mark_dirty(self) -> None:
        """Topology changed: rebuild replica rows before the next tick."""
        self.dirty = True
        self.generation += 1

    def client(self, c: Client) -> int:
        """Index of a client, registering it on first use."""
        idx = self._client_idx.get(c)
        if idx is None:
            idx = len(self.clients)
            self.clients.append(c)
            self._client_idx[c] = idx
        return idx

    def cluster_topics(self, cluster: str) -> list[tuple[int, str]]:
        """(topic index, escaped name) of every topic ever seen in ``cluster``, sorted by name (cached)."""
        key = len(self.topic_index)
        cached = self._ct_cache.get(cluster)
        if cached is None or cached[0] != key:
            items = sorted(((idx, name.replace("\\", "\\\\").replace('"', '\\"'))
                            for (c, name), idx in self.topic_index.items() if c == cluster), key=lambda x: x[1])
            cached = (key, items)
            self._ct_cache[cluster] = cached
        return cached[1]

    def topic_idx(self, cluster: str, topic: str) -> int:
        """Global index of a topic name (kept across delete/re-create)."""
        key = (cluster, topic)
        idx = self.topic_index.get(key)
        if idx is None:
            idx = len(self.topic_index)
            self.topic_index[key] = idx
        return idx

    # ------------------------------------------------------------------ topology
    def add_cluster(self, cluster: Cluster) -> None:
        """Register a cluster (brokers are added with :meth:`add_broker`)."""
        cluster.engine = self
        self.clusters[cluster.name] = cluster
        self.cluster_names.append(cluster.name)

    def add_broker(self, cluster: Cluster, broker_id: int, idc: str, rack: str, pool: str,
                   memory_bytes: float, disks: list[dict[str, Any]]) -> Broker:
        """Create a broker with its log dirs; disks are dicts of path/kind/capacity/max_bps/latency."""
        gidx = len(self.brokers)
        dl: list[Disk] = []
        n0 = len(self.disks)
        for k, spec in enumerate(disks):
            dl.append(Disk(n0 + k, broker_id, str(spec["path"]), str(spec.get("device", f"sd{chr(97 + k)}")),
                           str(spec["kind"]), float(spec["capacity_bytes"]), float(spec["max_bytes_per_s"]),
                           float(spec["base_latency_ms"])))
        b = Broker(gidx, cluster.name, broker_id, idc, rack, pool, float(memory_bytes), dl)
        b.configs = {}
        cluster.brokers[broker_id] = b
        self.brokers.append(b)
        self.disks.extend(dl)
        self._alloc_disks(len(self.disks))
        for d in dl:
            self.d_cap_bps[d.gidx] = d.max_bytes_per_s
            self.d_base_lat[d.gidx] = d.base_latency_ms
            self.d_capacity[d.gidx] = d.capacity_bytes
            self.d_slow[d.gidx] = 1.0
        nb = len(self.brokers)
        for name in ("b_cached", "b_repl_in_total", "b_repl_out_total", "b_reassign_in_total",
                     "b_produce_lat", "b_fetch_lat", "b_residence"):
            arr = np.zeros(nb)
            old = getattr(self, name)
            arr[: len(old)] = old
            setattr(self, name, arr)
        self.mark_dirty()
        return b

    def disk_used(self, gidx: int) -> float:
        """Bytes used on a disk as of the last tick/rebuild."""
        return float(self.d_used[gidx]) if gidx < len(self.d_used) else 0.0

    def _ensure_bt(self) -> None:
        nb, nt = len(self.brokers), max(1, len(self.topic_index))
        if self.bt_in.shape != (nb, nt):
            for name in ("bt_in", "bt_out", "bt_msgs"):
                old = getattr(self, name)
                arr = np.zeros((nb, max(nt, old.shape[1] if old.size else 0)))
                if old.size:
                    arr[: old.shape[0], : old.shape[1]] = old
                setattr(self, name, arr)

    def rebuild(self) -> None:
        """Recompute replica rows, per-slot caps and quotas from the object model."""
        rs: list[int] = []
        rb: list[int] = []
        rd: list[int] = []
        rl: list[bool] = []
        alld: list[int] = []
        n = self.cap
        leader_b = np.full(n, -1, dtype=np.int64)
        leader_d = np.full(n, -1, dtype=np.int64)
        thr_p = np.full(n, np.inf)
        thr_f = np.full(n, np.inf)
        ret_s = np.full(n, np.inf)
        ret_b = np.full(n, np.inf)
        seg_b = np.full(n, 1073741824.0)
        seg_s = np.full(n, 604800.0)
        tiered = np.zeros(n, dtype=bool)
        q_p = np.full(n, np.inf)
        q_c = np.full(n, np.inf)
        self.moves = []
        self.futures = []
        self.catchups = []
        self.b_alive = np.array([b.alive for b in self.brokers], dtype=bool)
        self.retention_clock.sync(self.brokers, self.t)
        self.broker_replicas = [[] for _ in self.brokers]
        self.slot_ref = {}
        for cl in self.clusters.values():
            bg = {bid: b.gidx for bid, b in cl.brokers.items()}
            for t in cl.topics.values():
                tix = self.topic_idx(cl.name, t.name)
                pt_p = parse_partition_rates(t.configs.get(PT_PRODUCE, "")) if cl.partition_throttle else {}
                pt_f = parse_partition_rates(t.configs.get(PT_FETCH, "")) if cl.partition_throttle else {}
                r_ms = _int_or(t.configs.get("retention.ms"), 604_800_000)
                r_b = _int_or(t.configs.get("retention.bytes"), -1)
                is_tiered = cl.remote_storage and t.configs.get("remote.storage.enable") == "true"
                if is_tiered:
                    r_ms = r_b = -1  # tiered: its remote log manager (kafkasim.tiering.tiered) applies retention
                t_seg_b = float(max(_int_or(t.configs.get("segment.bytes"), 1073741824), 1))
                t_seg_s = _int_or(t.configs.get("segment.ms"), 604_800_000) / 1000.0
                for p in t.partitions:
                    s = p.slot
                    seg_b[s], seg_s[s], tiered[s] = t_seg_b, t_seg_s, is_tiered
                    self.slot_ref[s] = (cl, p)
                    self.i["topic_idx"][s] = tix
                    if r_ms > 0:
                        ret_s[s] = r_ms / 1000.0
                    if r_b > 0:
                        ret_b[s] = float(r_b)
                    adding = set(p.reassignment.adding) if p.reassignment else set()
                    for b, dg in p.log_dirs.items():
                        alld.append(dg)
                        if not self.disks[dg].offline:  # a replica on a failed dir is not hosted (KIP-112)
                            self.broker_replicas[bg[b]].append(p)
                    for b in p.replicas:
                        if b in adding or b not in p.log_dirs:
                            continue
                        in_sync = b in p.isr and cl.brokers[b].alive
                        if not in_sync:
                            continue
                        rs.append(s)
                        rb.append(bg[b])
                        rd.append(p.log_dirs[b])
                        rl.append(b == p.leader)
                    if p.leader >= 0 and cl.brokers[p.leader].alive:
                        leader_b[s] = bg[p.leader]
                        leader_d[s] = p.log_dirs.get(p.leader, -1)
                    if pt_p:
                        thr_p[s] = pt_p.get(p.index, pt_p.get(-1, np.inf))
                    if pt_f:
                        thr_f[s] = pt_f.get(p.index, pt_f.get(-1, np.inf))
                    if p.reassignment is not None:
                        self.moves.append((cl, p))
                    if p.futures:
                        self.futures.append((cl, p))
                    if p.catchup:
                        self.catchups.append((cl, p))
                    if cl.quotas:
                        pc = self.clients[int(self.i["prod_client"][s])]
                        cc = self.clients[int(self.i["cons_client"][s])]
                        q_p[s] = cl.quota_for(pc.user, pc.client_id, "producer_byte_rate")
                        q_c[s] = cl.quota_for(cc.user, cc.client_id, "consumer_byte_rate")
        self.r_slot = np.array(rs, dtype=np.int64)
        self.r_broker = np.array(rb, dtype=np.int64)
        self.r_disk = np.array(rd, dtype=np.int64)
        self.r_leader = np.array(rl, dtype=bool)
        self.leader_b = leader_b
        self.leader_d = leader_d
        self.thr_produce = thr_p
        self.thr_fetch = thr_f
        self.retention_s = ret_s
        self.retention_bytes = ret_b
        self.seg_bytes, self.seg_s, self.tiered_slot = seg_b, seg_s, tiered
        for s in [s for s in self.seglogs if tiered[s]]:
            del self.seglogs[s]
            self.seg_mask[s] = False
        self.q_produce = q_p
        self.q_consume = q_c
        self.d_parts = np.bincount(np.array(alld, dtype=np.int64), minlength=len(self.disks)).astype(np.float64)
        self._ensure_bt()
        self.dirty = False
        self._update_used()

    def _update_used(self) -> None:
        used = np.bincount(self.r_disk, weights=self.f["size"][self.r_slot], minlength=len(self.disks))
        for _, p in self.moves:
            if p.reassignment is None:
                continue
            for b, c in p.reassignment.copied.items():
                d = p.reassignment.dest_disk.get(b)
                if d is not None:
                    used[d] += c
        for _, p in self.futures:
            for fut in p.futures.values():
                used[fut.dest_disk] += fut.copied
        self.d_used = used.astype(np.float64)

    # ------------------------------------------------------------------ real traffic hooks
    def append_real(self, slot: int, nbytes: int, nrecords: int) -> int:
        """Account a real Produce batch; returns its base offset."""
        if self.dirty:
            self.rebuild()  # a topic created since the last tick: its segment configs
        leo = self.f["leo"]
        base = math.ceil(leo[slot])
        if self.f["base_rate"][slot] == 0 and not self.tiered_slot[slot]:
            log = self.seglogs.get(slot)
            if log is None:
                log = self.seglogs[slot] = SegmentedLog(int(self.f["lso"][slot]), base, float(self.f["size"][slot]),
                                                        self.t)
                self.seg_mask[slot] = True
            log.append(base, float(nbytes), self.t, float(self.seg_bytes[slot]), float(self.seg_s[slot]))
        leo[slot] = base + nrecords
        self.f["real_in"][slot] += nbytes
        self.f["real_msgs"][slot] += nrecords
        self.f["size"][slot] += nbytes
        # a broker counts BytesIn/MessagesIn when it appends, with the log end offset: a scrape never sees
        # the log end move without them (the tick's physics still sees the bytes through real_in)
        self.f["bytes_in_total"][slot] += nbytes
        self.f["msgs_in_total"][slot] += nrecords
        g = int(self.leader_b[slot]) if slot < len(self.leader_b) else -1
        if g >= 0:
            self._ensure_bt()
            tix = int(self.i["topic_idx"][slot])
            self.bt_in[g, tix] += nbytes
            self.bt_msgs[g, tix] += nrecords
        return base

    def _segment_retention(self, due: npt.NDArray[np.bool_] | None) -> None:
        """Record-holding partitions: delete whole segments (:mod:`kafkasim.cluster.seglog`) of the slots whose
        leader checks retention this tick (``due``; None: none); a partition that took simulated traffic
        since goes back to the continuous model."""
        f = self.f
        for s in list(self.seglogs):
            if f["base_rate"][s] > 0:
                del self.seglogs[s]
                self.seg_mask[s] = False
                continue
            if due is None or s >= len(due) or not due[s]:
                continue
            log = self.seglogs[s]
            end = math.ceil(f["leo"][s] - 1e-9)
            if log.expire(self.t, end, float(self.retention_s[s]), float(self.retention_bytes[s])) <= 0:
                continue
            f["size"][s] = log.size
            f["lso"][s] = start = min(log.log_start, end)
            ref = self.slot_ref.get(s)
            if ref is None:
                continue
            p = ref[1]
            while p.batches and p.batches[0][1] < start:  # their segment is gone
                old = p.batches.popleft()
                p.batch_bytes -= len(old[-1])
                self.batch_bytes -= len(old[-1])
                p.evicted_early += 1  # its oldest entry in the global FIFO is now stale

    def fetched_real(self, slot: int, nbytes: int) -> None:
        """Account bytes returned to a real Fetch."""
        self.f["real_out"][slot] += nbytes

    # ------------------------------------------------------------------ the tick
    def _group_cap(self, mask: npt.NDArray[np.bool_], clients: I64, brokers: I64, demand: F64,
                   quota: F64) -> F64:
        """Per (client, broker) cap: factor = min(1, quota / Σ demand) for the masked slots."""
        factor = np.ones(len(demand))
        idx = np.nonzero(mask & np.isfinite(quota) & (brokers >= 0))[0]
        if len(idx) == 0:
            return factor
        key = clients[idx] * (len(self.brokers) + 1) + brokers[idx]
        uniq, inv = np.unique(key, return_inverse=True)
        sums = np.bincount(inv, weights=demand[idx], minlength=len(uniq))
        qg = np.zeros(len(uniq))
        qg[inv] = quota[idx]
        fg = np.minimum(1.0, qg / np.maximum(sums, 1e-9))
        factor[idx] = fg[inv]
        return factor

    def step(self, dt: float) -> None:
        """Advance the federation by ``dt`` simulated seconds."""
        if dt <= 0 or not math.isfinite(dt):
            raise ValueError(f"dt must be positive and finite, got {dt}")
        if self.dirty:
            self.rebuild()
        f, ii = self.f, self.i
        n = self.n_slots
        nb, nd = len(self.brokers), len(self.disks)
        active = self.slot_active[:n]
        lb = self.leader_b[:n]
        online = active & (lb >= 0)
        # ---- producers
        day = (self.t / 86400.0 + f["phase"][:n]) % 1.0
        weekday = int(self.t // 86400 + 3) % 7
        diurnal = (1.0 + 0.35 * np.sin(2 * np.pi * (day - 0.375))) * (0.8 if weekday >= 5 else 1.0)
        # bursts: Poisson arrivals, x3 for 60-300 s
        burst_left = f["burst_left"][:n]
        p_new = self.burst_rate_per_hour * dt / 3600.0
        u = self.rng.random(n)
        starts = (u < p_new) & (burst_left <= 0) & (f["base_rate"][:n] > 0)
        if starts.any():
            burst_left[starts] = self.rng.uniform(60.0, 300.0, int(starts.sum()))
        burst = np.where(burst_left > 0, 3.0, 1.0)
        burst_left -= dt
        np.maximum(burst_left, 0.0, out=burst_left)
        demand = f["base_rate"][:n] * diurnal * burst * f["spike"][:n]
        demand = np.where(online, demand, 0.0)
        demand = np.minimum(demand, self.thr_produce[:n])
        demand *= self._group_cap(online, ii["prod_client"][:n], lb, demand, self.q_produce[:n])
        real_in = f["real_in"][:n] / dt
        in_rate = demand + real_in
        f["in_rate"][:n] = in_rate
        msgs = demand / np.maximum(f["msg_size"][:n], 1.0)  # simulated only: real appends count when appended
        # ---- writes on in-sync replicas
        w_rows = in_rate[self.r_slot] if len(self.r_slot) else np.zeros(0)
        d_write = np.bincount(self.r_disk, weights=w_rows, minlength=nd) if nd else np.zeros(0)
        b_write = np.bincount(self.r_broker, weights=w_rows, minlength=nb)
        cache_max = np.array([b.memory_bytes for b in self.brokers]) * self.cache_fraction
        residence = cache_max / np.maximum(b_write, 1.0)
        self.b_residence = residence
        # ---- consumers
        lag = f["lag"][:n]
        # a lagging consumer asks for its catch-up rate, but never more than is there to read this tick
        lag_req = np.where(online & (lag > 0), np.minimum(f["lag_rate"][:n], lag / dt + in_rate), 0.0)
        tail = in_rate * f["tail_groups"][:n]
        fetch_demand = np.where(online, tail + lag_req, 0.0)
        cap_f = np.minimum(1.0, self.thr_fetch[:n] / np.maximum(fetch_demand, 1e-9))
        fetch_demand_c = fetch_demand * cap_f
        qf = self._group_cap(online, ii["cons_client"][:n], lb, fetch_demand_c, self.q_consume[:n])
        scale_f = cap_f * qf
        tail_act = tail * scale_f
        lag_req_act = lag_req * scale_f
        lag_secs = lag / np.maximum(in_rate, 1.0)
        res_leader = np.where(lb >= 0, residence[np.maximum(lb, 0)], np.inf) if nb else np.zeros(n)
        from_disk = (lag_req_act > 0) & (lag_secs > res_leader)
        # ---- elastic flows: (rate requested, read disk, write disk)
        fl_req: list[float] = []
        fl_rd: list[int] = []
        fl_wr: list[int] = []
        fl_ref: list[tuple[str, Cluster, Partition, int]] = []
        lag_idx = np.nonzero(from_disk)[0]
        n_lag = len(lag_idx)
        plan_copies(self, dt, fl_req, fl_rd, fl_wr, fl_ref, residence)
        if self.network is not None:  # leased lines: cross-IDC flows share their line's capacity
            caught_up = np.where((f["lag_rate"][:n] > 0) & (lag <= 0), in_rate * scale_f, 0.0)  # a lagger at the tail
            f_prod, f_fetch, f_copy = share_network(self, dt, n, demand, in_rate, tail_act + lag_req_act + caught_up,
                                                          fl_req, fl_ref)
            if (f_prod < 1.0).any():
                demand = demand * f_prod
                in_rate = demand + real_in
                f["in_rate"][:n] = in_rate
                msgs = demand / np.maximum(f["msg_size"][:n], 1.0)
                w_rows = in_rate[self.r_slot] if len(self.r_slot) else np.zeros(0)
                d_write = np.bincount(self.r_disk, weights=w_rows, minlength=nd) if nd else np.zeros(0)
                b_write = np.bincount(self.r_broker, weights=w_rows, minlength=nb)
                tail = in_rate * f["tail_groups"][:n]
            scale_f = scale_f * f_fetch
            tail_act = tail * scale_f
            lag_req_act = lag_req * scale_f
            fl_req = [r * float(c) for r, c in zip(fl_req, f_copy, strict=True)]
            replication_lag(self, dt, n, in_rate)
        req = np.concatenate([lag_req_act[lag_idx], np.array(fl_req)])
        rdd = np.concatenate([self.leader_d[lag_idx], np.array(fl_rd, dtype=np.int64)])
        wrd = np.concatenate([np.full(n_lag, -1, dtype=np.int64), np.array(fl_wr, dtype=np.int64)])
        cap = self.d_cap_bps / self.d_slow
        headroom = np.maximum(cap - d_write, 0.05 * cap)
        el = np.zeros(nd)
        if len(req):
            m = rdd >= 0
            el += np.bincount(rdd[m], weights=req[m], minlength=nd)
            m = wrd >= 0
            el += np.bincount(wrd[m], weights=req[m], minlength=nd)
        scale_d = np.minimum(1.0, headroom / np.maximum(el, 1e-9))
        act = req.copy()
        if len(req):
            s_r = np.where(rdd >= 0, scale_d[np.maximum(rdd, 0)], 1.0)
            s_w = np.where(wrd >= 0, scale_d[np.maximum(wrd, 0)], 1.0)
            act = req * np.minimum(s_r, s_w)
        d_read = np.zeros(nd)
        d_copy_w = np.zeros(nd)
        if len(act):
            m = rdd >= 0
            d_read = np.bincount(rdd[m], weights=act[m], minlength=nd).astype(np.float64)
            m = wrd >= 0
            d_copy_w = np.bincount(wrd[m], weights=act[m], minlength=nd).astype(np.float64)
        lag_act = lag_req_act.copy()
        lag_act[lag_idx] = act[:n_lag]
        f["disk_read"][:n] = 0.0
        f["disk_read"][lag_idx] = act[:n_lag]
        # lag dynamics: a lagging consumer catches up at lag_act and falls behind at in_rate
        has_lagger = f["lag_rate"][:n] > 0
        new_lag = np.where(has_lagger & online, lag + (in_rate - lag_act) * dt, lag)
        f["lag"][:n] = np.maximum(new_lag, 0.0)
        out_rate = tail_act + np.where(lag > 0, lag_act, np.where(has_lagger, in_rate * scale_f, 0.0))
        f["syn_out"][:n] = out_rate
        f["syn_in"][:n] = demand
        out_rate = out_rate + f["real_out"][:n] / dt
        f["out_rate"][:n] = out_rate
        # ---- apply copies
        apply_copies(self, dt, act[n_lag:], fl_ref)
        # ---- disks
        total_w = d_write + d_copy_w
        demand_d = total_w + d_read
        util_raw = demand_d / np.maximum(cap, 1.0)
        util = np.minimum(util_raw, 1.0)
        self.d_backlog = np.maximum(self.d_backlog + (demand_d - cap) * dt, 0.0)
        await_ms = (self.d_base_lat * self.d_slow / (1.0 - np.minimum(util, 0.98))
                    + self.d_backlog / np.maximum(cap, 1.0) * 1000.0)
        await_ms = np.minimum(await_ms, 60_000.0)
        self.d_util, self.d_await = util, await_ms
        self.d_read_rate, self.d_write_rate = d_read, total_w
        copy_src = rdd[n_lag:]
        self.d_copy_rate = d_copy_w + (np.bincount(copy_src[copy_src >= 0], weights=act[n_lag:][copy_src >= 0],
                                                   minlength=nd) if len(copy_src) else 0.0)
        self.d_read_total += d_read * dt
        self.d_written_total += total_w * dt
        self.d_io_time_total += util * dt
        r_ops = d_read / OP_BYTES
        w_ops = total_w / OP_BYTES
        self.d_reads_total += r_ops * dt
        self.d_writes_total += w_ops * dt
        self.d_read_time_total += r_ops * dt * await_ms / 1000.0
        self.d_write_time_total += w_ops * dt * await_ms / 1000.0
        # ---- partitions: sizes, offsets, counters
        f["size"][:n] += demand * dt  # real bytes were added on append
        # retention, when the leader's broker runs its check (kafkasim.cluster.retention): time-based deletion keeps
        # about rate x retention.ms (what decays over the time since the log's last check); size-based caps it
        t_end = self.t + dt
        due_b = self.retention_clock.due(t_end, self.b_alive)
        self.retention_due = due_b
        due = online & due_b[np.maximum(lb, 0)] if due_b.any() else None
        if due is not None and due.any():
            size = f["size"][:n]
            checked = f["ret_checked"][:n]
            keep = np.minimum(size * np.exp(-(t_end - checked) / self.retention_s[:n]), self.retention_bytes[:n])
            keep = np.where(due & ~self.seg_mask[:n], keep, size)  # record-holding logs: whole segments, below
            checked[due] = t_end
            removed = size - keep
            f["size"][:n] = keep
            f["lso"][:n] = np.minimum(f["lso"][:n] + removed / np.maximum(f["msg_size"][:n], 1.0), f["leo"][:n])
        f["leo"][:n] += demand / np.maximum(f["msg_size"][:n], 1.0) * dt
        if self.seglogs:
            self._segment_retention(due)
        f["bytes_in_total"][:n] += demand * dt  # real bytes were counted on append
        f["bytes_out_total"][:n] += out_rate * dt
        f["msgs_in_total"][:n] += msgs * dt
        n_followers = np.bincount(self.r_slot[~self.r_leader], minlength=n)[:n] if len(self.r_slot) else 0
        f["repl_rate"][:n] = in_rate * n_followers
        lat_d = np.where(self.leader_d[:n] >= 0, await_ms[np.maximum(self.leader_d[:n], 0)], 0.0) \
            if nd else np.zeros(n)
        f["produce_latency_ms"][:n] = np.where(online, 0.5 + lat_d, 0.0)
        f["fetch_latency_ms"][:n] = np.where(from_disk, 0.3 + lat_d, np.where(online, 0.3, 0.0))
        if self.network is not None and len(self.net_produce_lat) == n:
            f["produce_latency_ms"][:n] += np.where(online, self.net_produce_lat, 0.0)
            f["fetch_latency_ms"][:n] += np.where(online, self.net_fetch_lat, 0.0)
        # per (broker, topic) counters on the leader
        self._ensure_bt()
        on = np.nonzero(online)[0]
        if len(on):
            nt = self.bt_in.shape[1]
            key = lb[on] * nt + ii["topic_idx"][on]
            nbt = nb * nt
            self.bt_in.ravel()[:] += np.bincount(key, weights=demand[on] * dt, minlength=nbt)
            self.bt_out.ravel()[:] += np.bincount(key, weights=out_rate[on] * dt, minlength=nbt)
            self.bt_msgs.ravel()[:] += np.bincount(key, weights=msgs[on] * dt, minlength=nbt)
            self.b_repl_out_total += np.bincount(lb[on], weights=f["repl_rate"][on] * dt, minlength=nb)
            w_lat = np.bincount(lb[on], weights=in_rate[on] * f["produce_latency_ms"][on], minlength=nb)
            w_sum = np.bincount(lb[on], weights=in_rate[on], minlength=nb)
            self.b_produce_lat = np.where(w_sum > 0, w_lat / np.maximum(w_sum, 1e-9), 0.5)
            o_lat = np.bincount(lb[on], weights=out_rate[on] * f["fetch_latency_ms"][on], minlength=nb)
            o_sum = np.bincount(lb[on], weights=out_rate[on], minlength=nb)
            self.b_fetch_lat = np.where(o_sum > 0, o_lat / np.maximum(o_sum, 1e-9), 0.3)
        if len(self.r_slot):
            fol = ~self.r_leader
            self.b_repl_in_total += np.bincount(self.r_broker[fol], weights=w_rows[fol] * dt, minlength=nb)
        self.b_cached = np.minimum(cache_max, self.b_cached + (b_write + 1.0) * dt)
        f["real_in"][:n] = 0.0
        f["real_msgs"][:n] = 0.0
        f["real_out"][:n] = 0.0
        self._update_used()
        self.t += dt
        self.ticks += 1
        for cb in self.listeners:
            cb(self, dt)

    # ------------------------------------------------------------------ helpers
    def advance(self, seconds: float, dt: float = 1.0) -> None:
        """Run ``seconds`` of simulated time in ticks of at most ``dt``."""
        left = seconds
        while left > 1e-9:
            step = min(dt, left)
            self.step(step)
            left -= step

    def partition_offsets(self, slot: int) -> tuple[int, int]:
        """(log start offset, log end offset) of a partition."""
        return int(self.f["lso"][slot]), math.ceil(self.f["leo"][slot] - 1e-9)
