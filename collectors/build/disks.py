"""Stage 3 of a build: every disk's facts (kind, capacity, max throughput, device) and its rates.

Goal: per (broker, log dir) the util, read/write bytes per second, await and used bytes of this
round, and each broker's memory gauges — from what stock node_exporter shows and what the operator
declared. Method: log-dir listings read this round refresh the facts and the replica -> log dir
map; a new log dir takes its kind and ceiling from the cluster's hardware profile (first matching
rule by broker id and log-dir glob ``declared``, else the profile's ``default``), else from the host
(NVMe by device name, rotational or not by ``node_disk_ata_rotation_rate_rpm``: ``measured``) with
the built-in ceiling of that kind, else the built-in default (``assumed``). A log dir's device is
found from the host's filesystems: the mount whose mountpoint is the longest prefix of the log dir
(``node_filesystem_size_bytes{device,mountpoint}``), its device resolved to the ``node_disk_*``
device: ``/dev/mapper/<name>`` through ``node_disk_device_mapper_info{device="dm-K",name}``,
``/dev/sdb`` → ``sdb``, a partition (``/dev/sdb1``, ``/dev/nvme0n1p1``) → its disk when the host
counts I/O only for the disk. The ``node_disk_*`` counters of every broker go through
:func:`~collectors.build.series.family_rates` (one pass per family); util is the rate of io time,
await = Δ(read+write time) / Δ(reads+writes). Guarantee: util in (1, 1 + overshoot] is clamped to
1, above it dropped as implausible; every drop is named in the round's
:class:`~collectors.rates.DropLog`; a missing or dropped counter gives None, never 0; a log dir no
filesystem holds has no device (and no figures), never a guessed one. Cost: O(disk samples) numpy
work + O(disks) Python per round (about 12,000 disks at 1,000 brokers); the device map of a broker
is recomputed only when its filesystem or device-mapper label lists change.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from collectors.build.names import (
    M_DM_INFO,
    M_FS_AVAIL,
    M_FS_SIZE,
    M_IO_TIME,
    M_MEM_AVAIL,
    M_MEM_TOTAL,
    M_READ_B,
    M_READ_T,
    M_READS,
    M_ROTATION,
    M_WRITE_B,
    M_WRITE_T,
    M_WRITES,
    PLACEHOLDER_DIR,
)
from collectors.build.records import BrokerPayloads, DiskFacts, ModelConfig
from collectors.build.series import family_rates
from collectors.build.state import DiskBook
from collectors.promtext import Payload, labels_of
from collectors.rates import DropLog, DropReason, VectorCounterTracker, gauge_value
from domain import DiskKind
from kafkaio.endpoints import HardwareProfile
from kafkaio.types import KafkaState

DiskKey = tuple[int, str]
_PARTITION_RE = re.compile(r"^((?:[shv]|xv)d[a-z]+|nvme\d+n\d+|mmcblk\d+)p?\d+$")


@dataclass(frozen=True)
class DiskRound:
    """This round's disk figures (None = no fresh value) and memory gauges per broker."""

    rates: dict[DiskKey, dict[str, float | None]]
    """(broker, log dir) -> util, read, write, reads, writes, read_t, write_t, await, used."""
    memory: dict[int, tuple[float | None, float | None]]
    """broker -> (MemTotal, MemAvailable) bytes."""


def new_facts(bid: int, path: str, cfg: ModelConfig, hardware: HardwareProfile | None) -> DiskFacts:
    """Facts of a newly listed log dir: kind and ceiling from the hardware profile, else the built-in default."""
    got = hardware.lookup(bid, path) if hardware is not None else None
    if got is None:
        kind = cfg.default_disk_kind
        return DiskFacts(path, kind, 0, cfg.default_max_bytes_per_s.get(kind.value, 200e6))
    disk, how = got
    ceiling = disk.max_bytes_per_s
    return DiskFacts(path, disk.kind, 0, ceiling if ceiling is not None
                     else cfg.default_max_bytes_per_s.get(disk.kind.value, 200e6),
                     kind_source=how, max_source=how if ceiling is not None else "assumed")


def refresh_log_dirs(state: KafkaState, book: DiskBook, cfg: ModelConfig,
                     hardware: HardwareProfile | None = None) -> None:
    """Fold the log-dir listings read this round into ``book`` (facts, replica -> dir map)."""
    for bid in sorted(state.log_dirs_fresh):  # listings read this round (all brokers' in a full round)
        ld = state.log_dirs.get(bid)
        if ld is not None:
            facts = book.facts.setdefault(bid, {})
            for path, d in ld.items():
                f = facts.get(path)
                if f is None:
                    f = facts[path] = new_facts(bid, path, cfg, hardware)
                    book.device_maps.pop(bid, None)  # a new log dir: map this broker's devices again
                if d.total_bytes:
                    f.capacity_bytes = d.total_bytes
                for (tn, pn), rdir in d.replicas.items():
                    if not rdir.is_future and book.dirs.get((bid, tn, pn)) != path:
                        book.dirs[(bid, tn, pn)] = path
                        book.version += 1
            if PLACEHOLDER_DIR in facts:
                del facts[PLACEHOLDER_DIR]
                book.version += 1


def io_device(fs_device: str, dm_names: dict[str, str], io_devices: set[str]) -> str | None:
    """The ``node_disk_*`` device counting the I/O of a filesystem on ``fs_device`` (None: not a block device)."""
    if fs_device.startswith("/dev/mapper/"):
        return dm_names.get(fs_device[len("/dev/mapper/"):])
    if not fs_device.startswith("/dev/"):
        return None  # tmpfs, overlay, nfs: no local block device
    dev = fs_device[len("/dev/"):]
    if dev in io_devices or not io_devices:
        return dev
    m = _PARTITION_RE.match(dev)
    return m.group(1) if m is not None and m.group(1) in io_devices else dev


def map_devices(p: Payload, paths: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(log dir -> node_disk device, log dir -> filesystem device) of the log dirs ``paths`` on a host."""
    dm_names: dict[str, str] = {}
    for labels, _ in p.get(M_DM_INFO):
        dev, name = labels.get("device"), labels.get("name")
        if dev and name:
            dm_names[name] = dev
    io_fam = p.raw.get(M_IO_TIME)
    io_devices = {lab.get("device", "") for lab in map(labels_of, io_fam[0]) if lab} if io_fam else set()
    mounts: list[tuple[str, str]] = []
    for labels, _ in p.get(M_FS_SIZE):
        mp, dev = labels.get("mountpoint"), labels.get("device")
        if mp and dev:
            mounts.append((mp.rstrip("/") or "/", dev))
    mounts.sort(key=lambda m: len(m[0]), reverse=True)
    to_io: dict[str, str] = {}
    to_fs: dict[str, str] = {}
    for path in paths:
        for mp, dev in mounts:
            if path == mp or path.startswith(mp if mp == "/" else mp + "/"):
                io = io_device(dev, dm_names, io_devices)
                if io is not None:
                    to_io[path] = io
                    to_fs[path] = dev
                break
    return to_io, to_fs


def _measured_kind(p: Payload, device: str) -> DiskKind | None:
    """The kind the host shows for a device: NVMe by name, HDD/SSD by ATA rotation rate."""
    if device.startswith("nvme"):
        return DiskKind.NVME
    for labels, v in p.get(M_ROTATION):
        if labels.get("device") == device and math.isfinite(v):
            return DiskKind.HDD if v > 0 else DiskKind.SSD
    return None


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
        fs_fam = p.raw.get(M_FS_SIZE)
        dm_fam = p.raw.get(M_DM_INFO)
        sig = (fs_fam[0] if fs_fam else None, dm_fam[0] if dm_fam else None, len(facts))
        cached = book.device_maps.get(bid)
        if cached is not None and cached[0] == sig:
            dir_dev, dir_fs = cached[1], cached[2]
        else:
            dir_dev, dir_fs = map_devices(p, sorted(x for x in facts if x != PLACEHOLDER_DIR))
            book.device_maps[bid] = (sig, dir_dev, dir_fs)
            for path, dev in dir_dev.items():
                f = facts[path]
                f.device = dev
                if f.kind_source == "assumed":
                    kind = _measured_kind(p, dev)
                    if kind is not None:
                        f.kind, f.kind_source = kind, "measured"
                        if f.max_source == "assumed":
                            f.max_bytes_per_s = cfg.default_max_bytes_per_s.get(kind.value, f.max_bytes_per_s)
        fs_size: dict[str, float] = {}
        fs_avail: dict[str, float] = {}
        for name, target in ((M_FS_SIZE, fs_size), (M_FS_AVAIL, fs_avail)):
            for labels, v in p.get(name):
                fsd = labels.get("device")
                if fsd:
                    target[fsd] = v
        devs = set(dir_dev.values())
        per_dev: dict[str, dict[str, float | None]] = {dev: {} for dev in devs}
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
        for path, dev in dir_dev.items():
            f = facts[path]
            fs_dev = dir_fs[path]
            fsz = fs_size.get(fs_dev)
            if fsz is not None and math.isfinite(fsz) and fsz > 0:
                f.capacity_bytes = int(fsz)
            rr = dict(per_dev[dev])
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
            avail = fs_avail.get(fs_dev)
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
