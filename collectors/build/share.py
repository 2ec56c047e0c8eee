"""KIP-932 share groups in a build: each share group is *one* reader of a partition, near its share-partition start
offset, whatever the number of members fetching it.

Goal: the page-cache estimate, the lag and the attribution of a partition read by a share group. In a consumer
group one member holds a partition and the group's committed offset is where it reads; in a share group N members
fetch the same partition concurrently, acquiring records in batches past the **share-partition start offset**
(SPSO: the first record not yet acknowledged or archived), so the partition is read once per group, not N times.

Method: the group's **position** on a partition is where its records stop being delivery-complete. Kafka's admin
API gives two figures (DescribeShareGroupOffsets): the SPSO the share coordinator *persisted*, and (v1, Kafka 4.2,
KIP-1226) the broker's lag — records from that SPSO to the end that are not yet delivery-complete. The persisted
SPSO can stay well behind the records already acknowledged (on a 4.2.0 lab: 1,638 while all 2,000 records were
acknowledged and the lag was 0, and it stayed there while the group was idle), so the position is
``max(SPSO, LEO − lag)`` where the broker reports a lag (LEO: the leader's log end offset of this round), else the
SPSO. :func:`share_table` turns the round's share groups into the column table the consumer positions are built
from (one row per group and partition), so the position estimate of :mod:`collectors.pagecache` sees one reader
per share group, with a rate (the position's progress: the whole group's consumption) like any consumer group's.
:func:`share_readers` gives, per partition index, what the round's partition detail reports: the persisted SPSO,
the position, Guardian's lag ``LEO − position``, the broker's own lag and the client ids of every member assigned
the partition.

Guarantee: a share group adds one position per partition with a known SPSO (none before any member fetched it),
never below the SPSO nor above the LEO; its members are listed per partition, sorted, each client id once; lag is
``None`` without both a LEO and a position, and never negative. Pure. Cost: O(share-group members × their
partitions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kafkaio.group_types import GroupOffsets, ShareGroup

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ShareReader:
    """One share group reading one partition, as one round saw it."""

    group: str
    start_offset: int | None
    """The share-partition start offset as the share coordinator persisted it (``None``: not initialised, or
    unreadable)."""
    position: float | None
    """Where the group's records stop being delivery-complete: ``max(SPSO, LEO − broker lag)``, else the SPSO."""
    lag: float | None
    """``LEO − position``: records the group has not finished with, in-flight ones included (``None``: unknown)."""
    broker_lag: int | None
    """Kafka's own share-partition lag (KIP-1226, DescribeShareGroupOffsets v1), where the broker reports it."""
    members: tuple[str, ...]
    """Client ids of the members assigned the partition (sorted, distinct)."""
    member_count: int
    """Members assigned the partition (several may share a client id)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"group": self.group, "start_offset": self.start_offset,
                "position": None if self.position is None else round(self.position, 3),
                "lag": None if self.lag is None else round(self.lag, 3), "broker_lag": self.broker_lag,
                "members": list(self.members), "member_count": self.member_count}


def position(spso: int | None, broker_lag: int | None, leo: float) -> float | None:
    """A share group's position on a partition (see the module docstring): ``max(SPSO, LEO − lag)`` capped at the
    LEO when both the lag and the LEO are known, else the SPSO (``None`` without an SPSO)."""
    if spso is None:
        return None
    if broker_lag is None or not math.isfinite(leo):
        return float(spso)
    return float(max(spso, min(leo - broker_lag, leo)))


def share_table(groups: Mapping[str, ShareGroup], pidx: Mapping[tuple[str, int], int], leo: F64) -> GroupOffsets:
    """The share groups' positions as consumer-position rows: one per (group, partition) with an SPSO, whatever
    the number of members (partitions the metadata lacks keep their SPSO)."""
    table: dict[str, dict[tuple[str, int], int]] = {}
    for gid in sorted(groups):
        for tp, o in sorted(groups[gid].offsets.items()):
            i = pidx.get(tp)
            end = float(leo[i]) if i is not None and i < len(leo) else math.nan
            pos = position(o.start_offset, o.lag, end)
            if pos is not None:
                table.setdefault(gid, {})[tp] = int(pos)
    return GroupOffsets.from_mapping(table)


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
            o = g.offsets.get(tp)
            spso = None if o is None else o.start_offset
            b_lag = None if o is None else o.lag
            end = float(leo[i]) if i < len(leo) else math.nan
            pos = position(spso, b_lag, end)
            lag = max(end - pos, 0.0) if pos is not None and math.isfinite(end) else None
            out.setdefault(i, []).append(ShareReader(gid, spso, pos, lag, b_lag,
                                                     tuple(sorted({m.client_id for m in members})), len(members)))
    return {i: tuple(rs) for i, rs in out.items()}
