"""Stage 4 of a build: the partition index and every per-partition and per-topic counter rate.

Goal: the round's partitions in one sorted order (the index every later array uses), their
leaders, and from the scraped families the arrays the bytes-in/out methods choose from: leader's
and any replica's log-end-offset rate and value, leader's size and size rate, any replica's size,
the own LEO / size rates of out-of-sync followers
and reassignment targets; per topic, the bytes/message ratio and the per-(broker, topic)
bytes-out. Method: each family of every broker is one :func:`~collectors.build.series.family_rates`
pass; label strings become partition registry ids (memoised per broker while unchanged), then
round indexes; leader samples are picked by comparing each sample's broker with the leader array
(``np.fmax.at`` keeps the largest of any replica). The ratio is Σ bytes-in / Σ messages-in over the
brokers that report both for the topic, held up to ``hold_s``. Guarantee: a sample naming a
partition not in the metadata is ignored; NaN marks "no value" in every array. Cost: O(samples)
numpy per family; Python only over the special replicas' segments and over topics.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.build.names import M_LEO, M_LSO, M_SIZE, M_T_IN, M_T_MSGS, M_T_OUT
from collectors.build.records import BrokerPayloads
from collectors.build.series import SeriesIndex, family_rates
from collectors.build.state import Holds, PartHold
from collectors.rates import DropLog, PhysicalLimits, VectorCounterTracker
from kafkaio.types import KafkaState, PartitionMeta

F64 = npt.NDArray[np.float64]


def nan_array(n: int) -> F64:
    """``n`` NaNs."""
    return np.full(n, np.nan)


@dataclass(frozen=True)
class PartitionIndex:
    """The round's partitions: sorted keys, their metadata, leaders and registry ids."""

    keys: list[tuple[str, int]]
    pidx: dict[tuple[str, int], int]
    pms: list[PartitionMeta]
    leader: npt.NDArray[np.int64]
    """Leader broker per partition (-1 = offline)."""
    g: npt.NDArray[np.int64]
    """Partition registry id per partition (indexes the holds)."""
    special: dict[int, set[tuple[str, int]]]
    """broker -> partitions it holds as an out-of-sync follower or reassignment target."""

    @property
    def n(self) -> int:
        """Number of partitions."""
        return len(self.keys)


def index_partitions(state: KafkaState, phold: PartHold) -> PartitionIndex:
    """Sort the partitions, find leaders and the replicas whose own LEO / size rates matter."""
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
    return PartitionIndex(keys, pidx, pms, leader, phold.ids(keys), special)


@dataclass(frozen=True)
class PartitionCounters:
    """Per-partition rates and values from the partition-level families (NaN = none)."""

    leo_lead_rate: F64
    leo_lead_val: F64
    leo_any_rate: F64
    leo_any_val: F64
    size_lead_rate: F64
    size_lead_val: F64
    size_any_val: F64
    sp_leo_rate: dict[tuple[int, str, int], float]
    """(broker, topic, partition) -> LEO rate of a special replica."""
    sp_leo_val: dict[tuple[int, str, int], float]
    sp_size_rate: dict[tuple[int, str, int], float]
    lso_lead_val: F64
    """Per-partition log start offset (leader's; NaN = not exported)."""


def partition_counters(ix: PartitionIndex, payloads: BrokerPayloads, tracker: VectorCounterTracker,
                       series: SeriesIndex, phold: PartHold, drops: DropLog,
                       limits: PhysicalLimits | None = None) -> PartitionCounters:
    """Rates of the LEO, size and log-start-offset families of every broker."""
    n, g, leader, special = ix.n, ix.g, ix.leader, ix.special
    sp_leo_rate: dict[tuple[int, str, int], float] = {}
    sp_leo_val: dict[tuple[int, str, int], float] = {}
    sp_size_rate: dict[tuple[int, str, int], float] = {}
    g_round = phold.round_index(g)
    leo_lead_rate, leo_lead_val = nan_array(n), nan_array(n)
    leo_any_rate, leo_any_val = nan_array(n), nan_array(n)
    size_lead_val, size_lead_rate, size_any_val = nan_array(n), nan_array(n), nan_array(n)
    tp_of = series.tp
    lso_lead_val = nan_array(n)
    for name, short in ((M_LEO, "leo"), (M_SIZE, "size"), (M_LSO, "lso")):
        fr = family_rates(tracker, "partition." + short, name, payloads, drops, limits, "nic")
        if not fr.bids:
            continue
        garr = np.concatenate([series.seg_ids(bid, short, bodies, series.gid_of_body)
                               for bid, bodies in zip(fr.bids, fr.bodies, strict=True)])
        if len(garr) and int(garr.max()) >= len(g_round):
            g_round = phold.round_index(g)
        rates, vals = fr.rates, fr.values
        ix_ = np.where(garr >= 0, g_round[np.maximum(garr, 0)], -1)
        known_ix = ix_ >= 0
        is_lead = np.zeros(len(ix_), dtype=bool)
        is_lead[known_ix] = leader[ix_[known_ix]] == fr.bid_per_sample()[known_ix]
        lm = known_ix & is_lead
        okv = np.isfinite(vals) & (vals >= 0)
        if short == "leo":
            leo_lead_rate[ix_[lm]] = rates[lm]
            leo_lead_val[ix_[lm & okv]] = vals[lm & okv]
            np.fmax.at(leo_any_rate, ix_[known_ix], rates[known_ix])
            np.fmax.at(leo_any_val, ix_[known_ix & okv], vals[known_ix & okv])
        elif short == "size":
            size_lead_rate[ix_[lm]] = rates[lm]
            size_lead_val[ix_[lm & okv]] = vals[lm & okv]
            np.fmax.at(size_any_val, ix_[known_ix & okv], vals[known_ix & okv])
        else:
            lso_lead_val[ix_[lm & okv]] = vals[lm & okv]
        if short == "lso" or not special:
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
    return PartitionCounters(leo_lead_rate, leo_lead_val, leo_any_rate, leo_any_val, size_lead_rate, size_lead_val,
                             size_any_val, sp_leo_rate, sp_leo_val, sp_size_rate, lso_lead_val)


@dataclass(frozen=True)
class TopicCounters:
    """Topic-level figures: bytes/message per topic, and bytes-out per (broker, topic) sorted by key."""

    bytes_per_msg: dict[str, float]
    out_key_sorted: npt.NDArray[np.int64]
    """``broker * n_topics + topic registry id``, ascending."""
    out_rate_sorted: F64
    n_topics: int
    """The key's multiplier (topic registry size when the keys were made, at least 1)."""


def topic_counters(payloads: BrokerPayloads, tracker: VectorCounterTracker, series: SeriesIndex, holds: Holds,
                   now: float, drops: DropLog, limits: PhysicalLimits | None = None) -> TopicCounters:
    """Per topic, Σ over brokers of bytes-in and messages-in where a broker reports both (the
    bytes/message ratio, held); bytes-out per (broker, topic)."""
    topic_in: dict[str, float] = defaultdict(float)
    topic_msgs: dict[str, float] = defaultdict(float)
    t_fams = {short: family_rates(tracker, "topic." + short, name, payloads, drops, limits, "nic")
              for name, short in ((M_T_IN, "t_in"), (M_T_MSGS, "t_msgs"), (M_T_OUT, "t_out"))}
    t_keys: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], F64]] = {}
    for short, fr in t_fams.items():
        tids = (np.concatenate([series.seg_ids(bid, short, bodies, series.tid_of_body)
                                for bid, bodies in zip(fr.bids, fr.bodies, strict=True)])
                if fr.bids else np.zeros(0, dtype=np.int64))
        ok = (tids >= 0) & ~np.isnan(fr.rates)
        t_keys[short] = (fr.bid_per_sample()[ok], tids[ok], fr.rates[ok])
    n_topics = max(len(series.topic_reg), 1)
    topic_names = list(series.topic_reg)
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
    bytes_per_msg: dict[str, float] = {}
    for topic in set(topic_msgs) | holds.tagged("ratio"):
        m = topic_msgs.get(topic, 0.0)
        ratio_v, _ = holds.hold(("ratio", topic), topic_in[topic] / m if m > 0 else None, now)
        if ratio_v is not None:
            bytes_per_msg[topic] = ratio_v
    return TopicCounters(bytes_per_msg, out_key[out_order], r_o[out_order], n_topics)
