"""Stage 3 of a build: every disk's facts (kind, capacity, max throughput, device) and its rates.

Goal: per (broker, log dir) the util, read/write bytes per second, await and used bytes of this
round, and each broker's memory gauges. Method: log-dir listings read this round refresh the
facts and the replica -> log dir map; ``kafkasim_log_dir_info`` (else the filesystem mountpoint
holding the dir) maps a device to its log dir; the ``node_disk_*`` counters of every broker go
through :func:`~collectors.build.series.family_rates` (one pass per family); util is the rate of
io time, await = Δ(read+write time) / Δ(reads+writes). Guarantee: util in (1, 1 + overshoot] is
clamped to 1, above it dropped as implausible; every drop is named in the round's
:class:`~collectors.rates.DropLog`; a missing or dropped counter gives None, never 0. Cost:
O(disk samples) numpy work + O(disks) Python per round (about 12,000 disks at 1,000 brokers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collectors.build.names import (
    M_DISK_MAX,
    M_FS_AVAIL,
    M_FS_SIZE,
    M_IO_TIME,
    M_LOG_DIR_INFO,
    M_MEM_AVAIL,
    M_MEM_TOTAL,
    M_READ_B,
    M_READ_T,
    M_READS,
    M_WRITE_B,
    M_WRITE_T,
    M_WRITES,
    PLACEHOLDER_DIR,
)
from collectors.build.records import BrokerPayloads, DiskFacts, ModelConfig
from collectors.build.series import family_rates
from collectors.build.state import DiskBook
from collectors.promtext import labels_of
from collectors.rates import DropLog, DropReason, VectorCounterTracker, gauge_value
from domain import DiskKind
from kafkaio.source import KafkaState

DiskKey = tuple[int, str]


@dataclass(frozen=True)
class DiskRound:
    """This round's disk figures (None = no fresh value) and memory gauges per broker."""

    rates: dict[DiskKey, dict[str, float | None]]
    """(broker, log dir) -> util, read, write, reads, writes, read_t, write_t, await, used."""
    memory: dict[int, tuple[float | None, float | None]]
    """broker -> (MemTotal, MemAvailable) bytes."""


def refresh_log_dirs(state: KafkaState, book: DiskBook, cfg: ModelConfig) -> None:
    """Fold the log-dir listings read this round into ``book`` (facts, replica -> dir map)."""
    for bid in sorted(state.log_dirs_fresh):  # listings read this round (all brokers' in a full round)
        ld = state.log_dirs.get(bid)
        if ld is not None:
            facts = book.facts.setdefault(bid, {})
            for path, d in ld.items():
                f = facts.get(path)
                if f is None:
                    f = facts[path] = DiskFacts(path, cfg.default_disk_kind, 0,
                                                cfg.default_max_bytes_per_s.get(cfg.default_disk_kind.value, 200e6))
                if d.total_bytes:
                    f.capacity_bytes = d.total_bytes
                for (tn, pn), rdir in d.replicas.items():
                    if not rdir.is_future and book.dirs.get((bid, tn, pn)) != path:
                        book.dirs[(bid, tn, pn)] = path
                        book.version += 1
            if PLACEHOLDER_DIR in facts:
                del facts[PLACEHOLDER_DIR]
                book.version += 1


def disk_rates(payloads: BrokerPayloads, tracker: VectorCounterTracker, book: DiskBook, cfg: ModelConfig,
               drops: DropLog) -> DiskRound:
    """Device map, facts from the payloads, and the rates of every disk of every scraped broker."""
    disk_rates: dict[DiskKey, dict[str, float | None]] = {}
    broker_mem: dict[int, tuple[float | None, float | None]] = {}
    disk_fams = {short: family_rates(tracker, "disk." + short, name, payloads, drops, cfg.limits,
                                     "disk" if short in ("read", "write") else None)
                 for name, short in ((M_IO_TIME, "util"), (M_READ_B, "read"), (M_WRITE_B, "write"),
                                     (M_READS, "reads"), (M_WRITES, "writes"), (M_READ_T, "read_t"),
                                     (M_WRITE_T, "write_t"))}
    disk_seg = {short: {b: k for k, b in enumerate(fr.bids)} for short, fr in disk_fams.items()}
    for bid, (p, _clock, _ck) in payloads.items():
        facts = book.facts.setdefault(bid, {})
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

    return DiskRound(disk_rates, broker_mem)
