"""Stages 10, 12 and 13 of a build: brokers and disks, topics, and the round's coverage.

Goal: the records of a ``guardian.snapshot/v1`` snapshot from the stages' arrays, and the
coverage that says how much of it was measured this round. Method: a broker is described from the
metadata when alive, else from what was last known of it (the endpoints file, earlier metadata);
its IDC is the one declared for it, else its ``broker.rack`` (Kafka metadata) through the cluster's
rack→IDC rule, else ``unknown`` (counted per source in ``coverage.facts["idc"]``, as are the disks'
kind and ceiling sources); its pool is the declared one, else ``shared`` (the service overlays the
replicated pool assignments);
a disk's util/read/write/await are this round's figures, else the last good value up to
``hold_s``; used bytes come from the filesystem gauges, else the listing's total − usable, else
the sum of its replicas' sizes; a partition's size is its leader's ``kafka_log_log_size``, else
any replica's, else the leader's listing. A topic's pool is the one pool all its replicas'
brokers are in, else ``shared``. Guarantee: every figure is clamped into the snapshot contract's
ranges (util in [0, 1], non-negative rates and sizes, used ≤ capacity); a dead broker's disks
carry no figures. Cost: O(disks) + O(partitions) Python (the Partition records themselves).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.build.disks import DiskKey, DiskRound
from collectors.build.methods import InFigures
from collectors.build.names import M_NAMES, PLACEHOLDER_DIR
from collectors.build.partition_rates import F64, PartitionCounters, PartitionIndex
from collectors.build.records import BrokerPayloads, ModelConfig, ReplicaLayout
from collectors.build.state import BrokerBook, DiskBook, Holds
from collectors.completeness import Coverage
from collectors.pagecache import Behaviours
from collectors.rates import DropLog
from domain import Broker, BrokerState, Partition, Topic
from kafkaio.endpoints import BrokerInfo, ClusterEndpoints
from kafkaio.types import KafkaState, PartitionMeta

BrokerRecord = tuple[dict[str, Any], list[dict[str, Any]]]
"""A broker's fields and its disks' fields (``load_history`` is added by the windows stage)."""


@dataclass(frozen=True)
class BrokerRound:
    """Every known broker's fields with its disks', and each disk's util this round (None = none)."""

    brokers: list[BrokerRecord]
    disk_util: dict[Hashable, float | None]


_IDC_SOURCE = {"broker": "declared", "rack_to_idc": "rack", "unknown": "unknown"}


def assemble_brokers(known: set[int], alive: set[int], state: KafkaState, payloads: BrokerPayloads,
                     disks: DiskRound, behaviours: dict[DiskKey, Behaviours], brokers_book: BrokerBook,
                     disk_book: DiskBook, holds: Holds, cfg: ModelConfig, now: float, cov: Coverage,
                     endpoints: ClusterEndpoints) -> BrokerRound:
    """Broker and disk fields of every known broker; completes ``behaviours`` with each alive disk's
    measured read/write and the disk counts and fact sources of ``cov``."""
    brokers: list[BrokerRecord] = []
    disk_util_round: dict[Hashable, float | None] = {}
    disks_total = 0
    disks_fresh = 0
    hold = holds.hold
    idc_src: dict[str, int] = defaultdict(int)
    kind_src: dict[str, int] = defaultdict(int)
    max_src: dict[str, int] = defaultdict(int)
    no_idc: list[int] = []
    for bid in sorted(known):
        info = brokers_book.brokers.get(bid, BrokerInfo(bid))
        meta = state.brokers.get(bid)
        host, port, rack = brokers_book.meta.get(bid, (info.host or "unknown", info.port or 1, info.rack))
        if meta is not None:
            host, port, rack = meta.host, meta.port, meta.rack
        rack = rack or info.rack
        idc_found, how = endpoints.idc_of(bid, rack)
        idc_src[_IDC_SOURCE.get(how, how)] += 1
        if idc_found is None:
            no_idc.append(bid)
        idc = idc_found or cfg.default_idc
        rack = rack or cfg.default_idc
        pool = info.pool or cfg.default_pool
        is_alive = bid in alive
        mem, _ = hold(("mem", bid), disks.memory.get(bid, (None, None))[0], now)
        disk_fields: list[dict[str, Any]] = []
        facts = disk_book.facts.get(bid, {})
        ld = state.log_dirs.get(bid) or {}
        for path in sorted(facts):
            f = facts[path]
            disks_total += 1
            if path != PLACEHOLDER_DIR:
                kind_src[f.kind_source] += 1
                max_src[f.max_source] += 1
            dk = (bid, path)
            rr = disks.rates.get(dk, {}) if is_alive else {}
            if is_alive:
                util, fresh = hold(("util", dk), rr.get("util"), now)
                rd, _ = hold(("read", dk), rr.get("read"), now)
                wr, _ = hold(("write", dk), rr.get("write"), now)
                aw, _ = hold(("await", dk), rr.get("await"), now)
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
            bh = behaviours.get(dk)
            if bh is None and is_alive and path != PLACEHOLDER_DIR:
                bh = behaviours[dk] = Behaviours()
            if bh is not None:
                bh.measured_read = rd
                bh.measured_write = wr
            disk_fields.append({"path": path, "kind": f.kind, "capacity_bytes": cap,
                                "max_bytes_per_s": max(float(f.max_bytes_per_s), 1.0), "used_bytes": used,
                                "util": min(max(util or 0.0, 0.0), 1.0), "await_ms": max(aw or 0.0, 0.0),
                                "read_bytes_per_s": max(rd or 0.0, 0.0), "write_bytes_per_s": max(wr or 0.0, 0.0)})
        if is_alive and bid in payloads:
            cov.brokers_with_metrics.append(bid)
        brokers.append(({"id": bid, "host": host or "unknown", "port": port if port and 0 < port < 65536 else 1,
                         "idc": idc, "rack": rack, "pool": pool,
                         "state": BrokerState.ALIVE if is_alive else BrokerState.DEAD,
                         "memory_bytes": int(mem or 0)}, disk_fields))
    cov.brokers_dead = sorted(known - alive)
    cov.facts = {"idc": dict(idc_src), "disk_kind": dict(kind_src), "max_bytes_per_s": dict(max_src)}
    cov.brokers_without_idc = no_idc
    cov.disks_total = disks_total
    cov.disks_with_metrics = disks_fresh
    return BrokerRound(brokers, disk_util_round)


def topics(ix: PartitionIndex, lay: ReplicaLayout, pc: PartitionCounters, fin: InFigures, b_out: F64, dr: F64,
           state: KafkaState, brokers: list[Broker], book: DiskBook) -> tuple[Topic, ...]:
    """Every topic with its partitions' placement, size and rates (NaN figures become 0)."""
    keys, pms, leader = ix.keys, ix.pms, ix.leader
    sizes = np.where(leader >= 0, pc.size_lead_val, pc.size_any_val)
    if state.log_dirs:
        missing = np.nonzero(np.isnan(sizes) & (leader >= 0))[0].tolist()
        for i in missing:
            key = keys[i]
            for d in (state.log_dirs.get(int(leader[i])) or {}).values():
                ldir = d.replicas.get(key)
                if ldir is not None and not ldir.is_future:
                    sizes[i] = float(ldir.size)
    sizes = np.nan_to_num(sizes)
    pool_of = {b.id: b.pool for b in brokers}
    b_in_l = np.nan_to_num(fin.b_in).tolist()
    b_out_l = np.nan_to_num(b_out).tolist()
    msgs_l = np.nan_to_num(fin.msgs).tolist()
    dr_l = np.nan_to_num(dr).tolist()
    size_l = sizes.tolist()
    size_l = [max(int(x), 0) for x in size_l]
    topic_pool = topic_pools(lay, keys, pms, pool_of, book)
    log_dirs = lay.log_dirs
    by_topic: dict[str, list[Partition]] = defaultdict(list)
    for i, (key, pm) in enumerate(zip(keys, pms, strict=True)):
        by_topic[key[0]].append(Partition(key[0], key[1], pm.replicas, pm.leader if pm.leader >= 0 else None,
                                          lay.isrs[i], log_dirs[i],
                                          size_l[i], b_in_l[i], b_out_l[i], msgs_l[i], dr_l[i]))
    return tuple(Topic(name=t, partitions=tuple(ps), pool=topic_pool[t]) for t, ps in by_topic.items())


def topic_pools(lay: ReplicaLayout, keys: list[tuple[str, int]], pms: list[PartitionMeta],
                pool_of: dict[int, str], book: DiskBook) -> dict[str, str]:
    """Each topic's pool: the one pool all its replicas' brokers are in, else ``shared``
    (recomputed only when the replica layout or a broker's pool changed; cached in ``book``)."""
    sig = (lay, tuple(sorted(pool_of.items())))
    got = book.topic_pool_cache
    if got is not None and got[0][0] is lay and got[0][1] == sig[1]:
        return got[1]
    pools: dict[str, set[str]] = defaultdict(set)
    for key, pm in zip(keys, pms, strict=True):
        tp = pools[key[0]]
        if len(tp) < 2:
            tp.update(pool_of.get(r, "shared") for r in pm.replicas)
    out = {t: next(iter(ps)) if len(ps) == 1 else "shared" for t, ps in pools.items()}
    book.topic_pool_cache = (sig, out)
    return out


def partition_coverage(cov: Coverage, ix: PartitionIndex, fin: InFigures, m_out: npt.NDArray[np.int8],
                       drops: DropLog, state: KafkaState, first_round: bool) -> None:
    """The partition counts, methods, drops and admin facts of ``cov``."""
    keys, b_in, in_fresh, m_in = ix.keys, fin.b_in, fin.in_fresh, fin.m_in
    cov.partitions_total = ix.n
    cov.partitions_with_rates = int(np.count_nonzero(in_fresh))
    cov.partitions_held = int(np.count_nonzero(~in_fresh & ~np.isnan(b_in)))
    cov.partitions_without_rates = [f"{keys[i][0]}-{keys[i][1]}" for i in np.nonzero(np.isnan(b_in))[0][:51]]
    cov.partitions_offline = [f"{keys[i][0]}-{keys[i][1]}" for i in np.nonzero(ix.leader < 0)[0][:51]]
    cov.bytes_in_methods = {M_NAMES[int(c)]: int(k) for c, k in enumerate(np.bincount(m_in, minlength=6)) if k}
    cov.bytes_out_methods = {M_NAMES[int(c)]: int(k) for c, k in enumerate(np.bincount(m_out, minlength=6)) if k}
    cov.drops = drops.as_dict()
    cov.drop_examples = list(drops.examples)
    cov.reassignments_in_flight = len(state.reassignments)
    cov.first_round = first_round
    cov.admin_details_age_s = state.details_age_s
