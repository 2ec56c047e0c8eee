"""Stage 6 of a build: each partition's messages-in, bytes-in and bytes-out, and how each was got.

Goal: one figure per partition and the method behind it (counted in the coverage), first
available wins:

* messages-in: the leader's log-end-offset rate, else any replica's (held up to ``hold_s``);
* bytes-in: messages-in × the topic's bytes/message (``leo_x_topic_ratio``: a stock broker has no
  per-partition byte counter, only its log-end offset and topic-level BrokerTopicMetrics; a partition
  whose log end did not move has 0 even when its topic has no ratio yet), else the
  leader's size delta (``size_delta``), else the last good value (``held``);
* bytes-out: the leader's topic-level bytes-out split over its partitions of that topic
  (``topic_split``) by consumer activity (committed-offset deltas × bytes per message) or, where no
  consumer is seen, by bytes-in; else ``held``. Bytes per message: the topic's bytes-in over messages-in,
  else the partition's log size over its offsets (a partition nobody writes now still has a consumer's
  offset rate in bytes).

Method: whole-array numpy selections over the partition index; the split groups partitions by
(leader, topic) with ``np.unique`` + ``np.bincount`` and finds each group's topic-level rate by
binary search in the sorted (broker, topic) keys. Guarantee: a (leader, topic) group's shares sum
to 1 where any weight is positive, so the split never invents bytes-out; NaN = no figure.
Cost: O(partitions log partitions) numpy, Python only over consumer-group rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.build.names import M_CODES
from collectors.build.partition_rates import F64, PartitionCounters, PartitionIndex, TopicCounters, nan_array
from collectors.build.state import PartHold


@dataclass(frozen=True)
class InFigures:
    """Messages-in, bytes-in and what the later stages derive from them, per partition."""

    tid: npt.NDArray[np.int64]
    """Round-local topic id per partition (index into :attr:`topic_ids`)."""
    topic_ids: dict[str, int]
    ratio: F64
    """The topic's bytes/message (NaN = unknown)."""
    msgs: F64
    leo: F64
    """Log-end offset (leader's, else any replica's)."""
    b_in: F64
    m_in: npt.NDArray[np.int8]
    in_fresh: npt.NDArray[np.bool_]
    bpm: F64
    """Bytes per message: the topic's ratio, else this partition's bytes-in / messages-in, else its log's size
    over its offsets (:func:`stored_bytes_per_msg`)."""


def bytes_in(ix: PartitionIndex, pc: PartitionCounters, tc: TopicCounters, phold: PartHold, now: float,
             hold_s: float) -> InFigures:
    """Messages-in and bytes-in per partition (with the method codes), held up to ``hold_s``."""
    n, g = ix.n, ix.g
    topics_of = [k[0] for k in ix.keys]
    topic_ids: dict[str, int] = {}
    tid = np.fromiter((topic_ids.setdefault(t, len(topic_ids)) for t in topics_of), dtype=np.int64, count=n)
    ratio_by_tid = np.array([tc.bytes_per_msg.get(t, np.nan) for t in topic_ids], dtype=np.float64)
    ratio = ratio_by_tid[tid] if n else np.zeros(0)
    has_lead_leo = ~np.isnan(pc.leo_lead_rate)
    msgs_fresh = np.where(has_lead_leo, pc.leo_lead_rate, pc.leo_any_rate)
    msgs, _ = phold.hold("msgs", g, msgs_fresh, now, hold_s)
    leo = np.where(np.isnan(pc.leo_lead_val), pc.leo_any_val, pc.leo_lead_val)
    m_in = np.zeros(n, dtype=np.int8)
    b_in = nan_array(n)
    sel2 = ~np.isnan(msgs_fresh) & (~np.isnan(ratio) | (msgs_fresh == 0))  # an idle partition: 0 without a ratio
    b_in[sel2] = msgs_fresh[sel2] * np.nan_to_num(ratio[sel2])
    m_in[sel2] = M_CODES["leo_x_topic_ratio"]
    sel3 = np.isnan(b_in) & ~np.isnan(pc.size_lead_rate)
    b_in[sel3] = pc.size_lead_rate[sel3]
    m_in[sel3] = M_CODES["size_delta"]
    b_in, in_fresh = phold.hold("in", g, b_in, now, hold_s)
    m_in[~in_fresh & ~np.isnan(b_in)] = M_CODES["held"]
    bpm = np.where(np.isnan(ratio), np.where(msgs > 0, b_in / np.where(msgs > 0, msgs, 1.0), np.nan), ratio)
    bpm = np.where(np.isnan(bpm), stored_bytes_per_msg(pc, leo), bpm)
    return InFigures(tid, topic_ids, ratio, msgs, leo, b_in, m_in, in_fresh, bpm)


def stored_bytes_per_msg(pc: PartitionCounters, leo: F64) -> F64:
    """Bytes per message of what each partition *stores*: its log's size over its offsets (LEO − log start),
    NaN where either is unknown or the log is empty. The rates give no ratio for a partition nobody writes
    now — yet that is where a lagging consumer replays old data (found on the lab: without it, a consumer
    reading a 200 MB partition no longer written had no offset rate in bytes, so no bytes-out share and no
    disk-read estimate)."""
    size = np.where(np.isnan(pc.size_lead_val), pc.size_any_val, pc.size_lead_val)
    span = leo - pc.lso_lead_val
    ok = (span > 0) & (size > 0)
    return np.where(ok, size / np.where(ok, span, 1.0), np.nan)


def bytes_out(ix: PartitionIndex, tc: TopicCounters, fin: InFigures,
              group_rate: dict[tuple[int, str], float], topic_reg: dict[str, int], phold: PartHold, now: float,
              hold_s: float) -> tuple[F64, npt.NDArray[np.int8]]:
    """(bytes-out, method codes) per partition, held up to ``hold_s``."""
    n, leader, tid, topic_ids, bpm = ix.n, ix.leader, fin.tid, fin.topic_ids, fin.bpm
    out_key_sorted, out_rate_sorted = tc.out_key_sorted, tc.out_rate_sorted
    # consumer activity per partition (offset deltas x bytes/msg) weights the topic-level bytes-out split
    act = np.zeros(n)
    for (i, _grp), r in group_rate.items():
        if not math.isnan(bpm[i]):
            act[i] += r * bpm[i]
    weight = np.where(act > 0, act, np.nan_to_num(fin.b_in))
    m_out = np.zeros(n, dtype=np.int8)
    b_out = nan_array(n)
    if len(out_key_sorted):
        nt = max(len(topic_ids), 1)
        lead_ok = leader >= 0
        gkey = np.where(lead_ok, leader * nt + tid, -1)
        uniq, inv = np.unique(gkey, return_inverse=True)
        wsum = np.bincount(inv, weights=weight, minlength=len(uniq))
        loc2reg = np.fromiter((topic_reg.get(t, -1) for t in topic_ids), dtype=np.int64, count=len(topic_ids))
        reg_tid = loc2reg[tid] if n else np.zeros(0, dtype=np.int64)
        want_key = np.where(lead_ok & (reg_tid >= 0), leader * tc.n_topics + reg_tid, -1)
        pos = np.minimum(np.searchsorted(out_key_sorted, want_key), len(out_key_sorted) - 1)
        tot_for = np.where((want_key >= 0) & (out_key_sorted[pos] == want_key), out_rate_sorted[pos], np.nan)
        share = np.where(wsum[inv] > 0, weight / np.where(wsum[inv] > 0, wsum[inv], 1.0), 0.0)
        sel = ~np.isnan(tot_for)
        b_out[sel] = tot_for[sel] * share[sel]
        m_out[sel] = M_CODES["topic_split"]
    b_out, out_fresh = phold.hold("out", g=ix.g, fresh=b_out, now=now, hold_s=hold_s)
    m_out[~out_fresh & ~np.isnan(b_out)] = M_CODES["held"]
    return b_out, m_out
