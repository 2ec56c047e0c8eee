"""KIP-932 share groups in a build: each share group is *one* reader of a partition, at its share-partition start
offset, whatever the number of members fetching it.

Goal: the page-cache estimate, the lag and the attribution of a partition read by a share group. In a consumer
group one member holds a partition and the group's committed offset is where it reads; in a share group N members
fetch the same partition concurrently, acquiring records in batches past the **share-partition start offset**
(SPSO: the first record not yet acknowledged or archived), so the partition is read once per group, near its
SPSO, not N times.

Method: :func:`share_table` turns the round's share groups (:attr:`~kafkaio.source.KafkaState.share_groups`) into
the column table the consumer positions are built from (one row per group and partition, at its SPSO), so the
position estimate of :mod:`collectors.pagecache` sees one reader per share group, with a rate (the SPSO's
progress: the whole group's consumption) like any consumer group's. :func:`share_readers` gives, per partition
index, what the round's partition detail reports: the SPSO, Guardian's lag ``LEO − SPSO`` (the leader's log end
offset of this round), the broker's own lag (DescribeShareGroupOffsets v1, Kafka 4.2: records not yet
delivery-complete) and the client ids of every member assigned the partition.

Guarantee: a share group adds one position per partition with a known SPSO (none before any member fetched it);
its members are listed per partition, sorted, each client id once; lag is ``None`` without both a LEO and an SPSO,
and never negative. Pure. Cost: O(share-group members × their partitions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kafkaio.offset_fetch import GroupOffsets
from kafkaio.share_groups import ShareGroup, share_positions

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ShareReader:
    """One share group reading one partition, as one round saw it."""

    group: str
    start_offset: int | None
    """The share-partition start offset (``None``: not initialised, or unreadable)."""
    lag: float | None
    """``LEO − SPSO`` (records the group has not finished with, in-flight ones included), ``None`` when unknown."""
    broker_lag: int | None
    """Kafka's own share-partition lag (KIP-1226, DescribeShareGroupOffsets v1), where the broker reports it."""
    members: tuple[str, ...]
    """Client ids of the members assigned the partition (sorted, distinct)."""
    member_count: int
    """Members assigned the partition (several may share a client id)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"group": self.group, "start_offset": self.start_offset,
                "lag": None if self.lag is None else round(self.lag, 3), "broker_lag": self.broker_lag,
                "members": list(self.members), "member_count": self.member_count}


def share_table(groups: Mapping[str, ShareGroup]) -> GroupOffsets:
    """The share groups' positions (their SPSOs) as consumer-position rows
    (:func:`~kafkaio.share_groups.share_positions`)."""
    return share_positions(groups)


def share_readers(groups: Mapping[str, ShareGroup], pidx: Mapping[tuple[str, int], int], leo: F64
                  ) -> dict[int, tuple[ShareReader, ...]]:
    """Per partition index (of this round's metadata), the share groups reading it: those with an SPSO for it or a
    member assigned it (see the module docstring)."""
    out: dict[int, list[ShareReader]] = {}
    for gid in sorted(groups):
        g = groups[gid]
        tps = set(g.offsets) | set(g.assigned_partitions())
        for tp in sorted(tps):
            i = pidx.get(tp)
            if i is None:
                continue
            members = g.members_of(tp)
            spso = g.start_offset(tp)
            o = g.offsets.get(tp)
            end = float(leo[i]) if i < len(leo) else math.nan
            lag = max(end - spso, 0.0) if spso is not None and math.isfinite(end) else None
            out.setdefault(i, []).append(ShareReader(gid, spso, lag, None if o is None else o.lag,
                                                     tuple(sorted({m.client_id for m in members})), len(members)))
    return {i: tuple(rs) for i, rs in out.items()}
