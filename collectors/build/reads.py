"""Stages 5, 7 and 8 of a build: consumer positions, each broker's page-cache residence time, and
which fetches read the disk.

Goal: per partition, the bytes per second its consumers read from the leader's disk (the
``disk_read`` figure) and which groups read from disk or from the page cache. Method
(:mod:`collectors.pagecache`): consumer positions are the groups' committed offsets read from
Kafka's admin API this round (:attr:`~kafkaio.types.KafkaState.group_offsets`, clocked by the
round's sample clock, the newest broker payload's), and, when an operator registers a
kafka_exporter as an exporter URL, its ``kafka_consumergroup_current_offset`` (a position) or
``kafka_consumergroup_lag`` reported with the leader's log-end offset (position = LEO − lag); the
admin API's offsets win for a group both report. Their rates over measured time go through
:class:`~collectors.rates.VectorCounterTracker`. A broker's
residence time T = MemAvailable / Σ its disks' read + write bytes per second (held up to
``hold_s``); a group at offset O reads the disk when LEO − R·T > O (a position at or below the log
start reads from the log start). A disk-reading group
contributes its offset rate × bytes/message, else an equal share of the partition's bytes-out.
Guarantee: no residence time (no memory gauge or disk counters) means no disk-read verdict, never
a guessed one; a lag without the leader's LEO of the same moment is skipped. Cost: O(consumer
samples + partitions with consumers) Python, O(partitions) numpy.
"""

from __future__ import annotations

import math
import sys
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from collectors.build.disks import DiskRound
from collectors.build.names import M_GROUP_LAG, M_GROUP_OFFSET
from collectors.build.partition_rates import F64, PartitionIndex
from collectors.build.series import SeriesIndex
from collectors.build.share import share_table
from collectors.build.state import GroupBook, Holds, PartHold
from collectors.build.topology import Sources
from collectors.completeness import Coverage
from collectors.pagecache import position_disk_reads, residence_seconds
from collectors.rates import PhysicalLimits, VectorCounterTracker
from kafkaio.group_types import GroupOffsets
from kafkaio.types import KafkaState


@dataclass(frozen=True)
class Positions:
    """Consumer positions per partition index and group, and their rates (messages per second)."""

    positions: dict[int, dict[str, float]]
    group_rate: dict[tuple[int, str], float]


def consumer_positions(sources: Sources, ix: PartitionIndex, leo_lead_val: F64, tracker: VectorCounterTracker,
                       series: SeriesIndex, state: KafkaState, groups: GroupBook, now: float, hold_s: float,
                       cov: Coverage, limits: PhysicalLimits | None = None) -> Positions:
    """Positions and offset rates of every consumer group: committed offsets from the admin API, and the
    kafka_exporter conventions on exporters (and broker endpoints, for exporters co-hosted there)."""
    pidx, leader = ix.pidx, ix.leader
    positions: dict[int, dict[str, float]] = defaultdict(dict)
    group_rate: dict[tuple[int, str], float] = {}
    who_list = [(p, c, k, f"broker {b}", b) for b, (p, c, k) in sources.brokers.items()]
    who_list += [(p, c, k, u, -1) for p, c, k, u in sources.exporters]
    for p, clock, ck, who, bid in who_list:
        for fam_name in (M_GROUP_OFFSET, M_GROUP_LAG):
            fam = p.raw.get(fam_name)
            if not fam:
                continue
            bodies, raw_vals = fam
            entries: list[tuple[str, float, int, str]] = []
            for body, v in zip(bodies, raw_vals, strict=True):
                gk = series.group_key(body)
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
            ceiling = limits.ceiling("nic", bid if bid >= 0 else None) if limits is not None else math.inf
            rates, _codes = tracker.update((ck, who, fam_name), [e[0] for e in entries], clock,
                                           [e[1] for e in entries], ceiling)
            for (_body, v, i, group), r in zip(entries, rates.tolist(), strict=True):
                positions[i][group] = v
                if r == r:
                    group_rate[(i, group)] = r
    from_exporters = sum(len(g) for g in positions.values())
    n_admin = admin_positions(state, ix, leo_lead_val, sources, tracker, groups, now, hold_s, positions, group_rate)
    cov.consumer_offsets = {
        "source": "admin" if n_admin else ("exporter" if from_exporters else "none"),
        "groups": len({g for gs in positions.values() for g in gs}), "partitions": len(positions),
        "groups_listed": state.groups_listed, "fresh": state.group_offsets_fresh,
        "share_groups": len(state.share_groups)}
    return Positions(positions, group_rate)


def admin_positions(state: KafkaState, ix: PartitionIndex, leo: F64, sources: Sources, tracker: VectorCounterTracker,
                    groups: GroupBook, now: float, hold_s: float, positions: dict[int, dict[str, float]],
                    group_rate: dict[tuple[int, str], float]) -> int:
    """Fold the committed offsets read through the admin API into ``positions`` / ``group_rate``; the count.

    A fresh read is rated against the previous one at the round's sample clock (the newest broker
    payload's). Between reads (``state.group_offsets_fresh`` False) a group's position is its last
    committed offset moved on at its last rate to this round's clock, never past the leader's log end;
    the rates stand for at most ``hold_s`` (``groups``). The offsets arrive as columns
    (:class:`~kafkaio.group_types.GroupOffsets`): partition indexes, rates and moves are numpy over the
    rows; the rate tracker sees one segment per (group, topic); Python touches each row only to fill
    the two dictionaries. KIP-932 share groups come in as one row per group and partition at their position
    (:mod:`collectors.build.share`: the SPSO, moved up by the broker's lag where reported): one reader per share
    group, however many members fetch there."""
    tab = state.group_offsets
    if state.share_groups:
        tab = GroupOffsets.concat([tab, share_table(state.share_groups, ix.pidx, leo)])
    if not len(tab):
        return 0
    fresh = state.group_offsets_fresh
    if not fresh and now - groups.at > hold_s:
        groups.rates.clear()
    clocks = [(c, k) for _, c, k in sources.brokers.values()]
    stamped = [x for x in clocks if x[1] == "ts"]
    clock, kind = max(stamped or clocks) if clocks else (None, "mono")
    rows_i = _rows_partition_index(ix, tab)
    sel = np.flatnonzero(rows_i >= 0)
    n = len(sel)
    if n == 0:
        return 0
    at = rows_i[sel]
    g_of, t_of, part = tab.group[sel], tab.topic[sel], tab.partition[sel]
    vals = tab.offset[sel].astype(np.float64)
    names = np.asarray(tab.groups, dtype=object)[g_of]
    tnames = np.asarray(tab.topics, dtype=object)[t_of]
    if fresh and clock is not None:
        cut = np.flatnonzero((g_of[1:] != g_of[:-1]) | (t_of[1:] != t_of[:-1])) + 1
        bounds = [0, *cut.tolist(), n]
        plist = part.tolist()
        segments = [((tab.groups[int(g_of[lo])], tab.topics[int(t_of[lo])]), plist[lo:hi], clock, vals[lo:hi])
                    for lo, hi in pairwise(bounds)]
        rates, _codes, _v, _off = tracker.update_segments((kind, "admin", "committed_offsets"), segments)
        ok = ~np.isnan(rates)
        groups.rates = dict(zip(zip(names[ok].tolist(), tnames[ok].tolist(), part[ok].tolist(), strict=True),
                                rates[ok].tolist(), strict=True))
        groups.at, groups.clock = now, clock
        row_rate = rates
    else:
        held = groups.rates
        row_rate = np.fromiter((held.get(k, math.nan) for k in zip(names.tolist(), tnames.tolist(), part.tolist(),
                                                                  strict=True)), dtype=np.float64, count=n)
    since = clock - groups.clock if not fresh and clock is not None and groups.clock is not None else 0.0
    has = ~np.isnan(row_rate)
    if since > 0 and has.any():
        end = leo[at]
        moved = vals + row_rate * since
        moved = np.where(np.isnan(end), moved, np.minimum(moved, np.maximum(end, vals)))
        vals = np.where(has, moved, vals)
    name_list = names.tolist()
    for i, group, v in zip(at.tolist(), name_list, vals.tolist(), strict=True):
        positions[i][group] = v
    group_rate.update(zip(zip(at[has].tolist(), names[has].tolist(), strict=True), row_rate[has].tolist(),
                          strict=True))
    return n


def _rows_partition_index(ix: PartitionIndex, tab: GroupOffsets) -> npt.NDArray[np.int64]:
    """The partition index of every row of ``tab`` (-1 for partitions the metadata does not list): one
    lookup table per topic named (``ix.keys`` is sorted, a topic's partitions are one run of it)."""
    keys = ix.keys
    nt = len(tab.topics)
    base = np.zeros(nt, dtype=np.int64)
    size = np.zeros(nt, dtype=np.int64)
    luts: list[npt.NDArray[np.int64]] = []
    off = 0
    for k, name in enumerate(tab.topics):
        lo = bisect_left(keys, (name, -1))
        hi = bisect_right(keys, (name, sys.maxsize))
        count = hi - lo
        if count and keys[lo][1] == 0 and keys[hi - 1][1] == count - 1:
            lut = np.arange(lo, hi, dtype=np.int64)  # partitions 0..count-1, as Kafka numbers them
        elif count:
            nums = [p for _, p in keys[lo:hi]]
            lut = np.full(max(max(nums) + 1, 0), -1, dtype=np.int64)
            for j, p in enumerate(nums):
                if p >= 0:
                    lut[p] = lo + j
        else:
            lut = np.zeros(0, dtype=np.int64)
        luts.append(lut)
        base[k], size[k] = off, len(lut)
        off += len(lut)
    out = np.full(len(tab), -1, dtype=np.int64)
    if off:
        tops = tab.topic.astype(np.int64)
        nums_p = tab.partition.astype(np.int64)
        ok = (nums_p >= 0) & (nums_p < size[tops])
        out[ok] = np.concatenate(luts)[base[tops[ok]] + nums_p[ok]]
    return out


def residence_times(disks: DiskRound, alive: Iterable[int], holds: Holds, now: float) -> dict[int, float]:
    """Page-cache residence time T per broker (seconds), fresh or held."""
    residence_b: dict[int, float] = {}
    io_by_broker: dict[int, float] = defaultdict(float)
    have_io: set[int] = set()
    for (b2, _path), rr in disks.rates.items():
        if rr.get("read") is not None and rr.get("write") is not None:
            io_by_broker[b2] += (rr["read"] or 0.0) + (rr["write"] or 0.0)
            have_io.add(b2)
    for bid, (_mem_total, mem_avail) in disks.memory.items():
        if mem_avail is not None and bid in have_io:
            residence_b[bid] = residence_seconds(mem_avail, io_by_broker[bid])
            holds.put(("T", bid), residence_b[bid], now)
    for bid in set(alive) - set(residence_b):
        held = holds.young(("T", bid), now)
        if held is not None:
            residence_b[bid] = held
    return residence_b


@dataclass(frozen=True)
class Reads:
    """Per partition: the leader's residence time, the disk-read rate, and the readers."""

    residence: F64
    dr: F64
    readers: dict[int, tuple[list[str], list[str]]]
    """partition index -> (groups reading the disk, groups served from the page cache)."""


def disk_reads(ix: PartitionIndex, leo: F64, msgs: F64, b_out: F64, bpm: F64, pos: Positions,
               residence_b: dict[int, float], phold: PartHold, now: float, hold_s: float,
               log_start: F64 | None = None) -> Reads:
    """Which consumer fetches read the leader's disk, and at what rate (held up to ``hold_s``)."""
    n, leader, group_rate = ix.n, ix.leader, pos.group_rate
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
    for i, groups in pos.positions.items():
        if np.isnan(leo[i]) or leader[i] < 0:
            continue
        rates_i = {grp: group_rate[(i, grp)] for grp in groups if (i, grp) in group_rate}
        lso = float(log_start[i]) if log_start is not None else math.nan
        est = position_disk_reads(float(leo[i]), lso, float(msgs[i]), float(residence[i]), float(bpm[i]),
                                  float(b_out[i]), groups, rates_i)
        readers[i] = (est.disk, est.cached)
        dr[i] = est.bytes_per_s
    dr, _ = phold.hold("dr", ix.g, dr, now, hold_s)
    return Reads(residence, dr, readers)
