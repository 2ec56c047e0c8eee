"""Series identity and counter rates of one metric family across every broker of a round.

Goal: turn the raw label strings of a payload into the ids the stages index arrays by (partition
registry ids, topic ids, ``(group, partition)`` keys), and a family of every broker into rates in
one pass. Method: :func:`family_rates` hands one segment per broker to
:meth:`~collectors.rates.VectorCounterTracker.update_segments` (the collectors' one rate guard) and
records every drop reason but ``first_sample``; :class:`SeriesIndex` memoises label string -> id
and, per (broker, family), the id array of a label list while that list is unchanged round after
round. Guarantee: a label string that names no partition/topic maps to -1 / None, never to a wrong
id; caches are bounded (cleared past 2,000,000 entries). Cost: O(samples) numpy work per family
plus one C-level list comparison per broker when its label list is unchanged; per-sample Python
work only for label lists that changed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import numpy as np
import numpy.typing as npt

from collectors.build.records import FamilyRates
from collectors.build.state import PartHold
from collectors.promtext import Payload, labels_of
from collectors.rates import REASONS, DropLog, DropReason, Limit, PhysicalLimits, VectorCounterTracker


def family_rates(tracker: VectorCounterTracker, kind: str, name: str,
                 payloads: Mapping[int, tuple[Payload, float, str]], drops: DropLog,
                 limits: PhysicalLimits | None = None, limit: Limit | None = None) -> FamilyRates:
    """Rates of family ``name`` of every broker in one vectorised pass, each broker's bounded by its
    ``limit`` ceiling when given (a faster sample is refused); drops recorded under ``kind``."""
    segs: list[tuple[Hashable, list[str], float, list[float]]] = []
    bids: list[int] = []
    for bid, (p, clock, ck) in payloads.items():
        fam = p.raw.get(name)
        if fam is None or not fam[0]:
            continue
        if p.clocks:  # merged endpoints: the family's own endpoint clock
            clock, ck = p.clocks.get(name, (clock, ck))
        segs.append(((ck, bid), fam[0], clock, fam[1]))
        bids.append(bid)
    ceilings = limits.ceilings(limit, bids) if limits is not None and limit is not None else None
    rates, codes, vals, offs = tracker.update_segments(kind, segs, ceilings)
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


class SeriesIndex:
    """Label string -> partition / topic / consumer-group ids, memoised across rounds."""

    def __init__(self, partitions: PartHold) -> None:
        self.partitions = partitions
        """The partition registry the ids index (shared with the per-partition holds)."""
        self.tp_cache: dict[str, tuple[str, int] | None] = {}
        self.body_gid: dict[str, int] = {}
        # (broker, family) -> (label strings as last seen, derived ids): unchanged label lists
        # (the normal case round after round) skip every per-sample lookup
        self.seg_cache: dict[tuple[int, str], tuple[list[str], npt.NDArray[np.int64]]] = {}
        self.topic_reg: dict[str, int] = {}
        self.topic_of_body: dict[str, int] = {}
        self.group_cache: dict[str, tuple[str, tuple[str, int]] | None] = {}

    def tp(self, body: str) -> tuple[str, int] | None:
        """(topic, partition) of a label string, or None."""
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

    def group_key(self, body: str) -> tuple[str, tuple[str, int]] | None:
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

    def seg_ids(self, bid: int, short: str, bodies: list[str], one: Callable[[str], int]) -> npt.NDArray[np.int64]:
        """``one(body)`` for every label string of a broker's family, cached while the list is unchanged."""
        got = self.seg_cache.get((bid, short))
        if got is not None and got[0] == bodies:
            return got[1]
        ids = np.fromiter((one(b) for b in bodies), dtype=np.int64, count=len(bodies))
        self.seg_cache[(bid, short)] = (list(bodies), ids)
        return ids

    def gid_of_body(self, body: str) -> int:
        """Partition registry id of a ``topic,partition`` label string (-1 when it names none)."""
        gid = self.body_gid.get(body)
        if gid is None:
            tp = self.tp(body)
            gid = self.partitions.id_of(tp) if tp is not None else -1
            if len(self.body_gid) > 2_000_000:
                self.body_gid.clear()
            self.body_gid[body] = gid
        return gid

    def tid_of_body(self, body: str) -> int:
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
