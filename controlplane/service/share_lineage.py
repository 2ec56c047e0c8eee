"""Throttle protection's clients of a partition read by KIP-932 share groups: every member assigned it.

Goal: on stock Kafka the finest lever against a hot partition is the client-id quota of whoever reads it. A
share group's partition is read by *all* the members the group's assignor gave it (several at once), so each of
their client ids is responsible, and none alone: quota-ing one of N members relieves about 1/N of the group's reads.

Method: :func:`share_fetch_shares` takes the round's share readers (:meth:`PartitionDetails.share_read
<collectors.build.records.PartitionDetails.share_read>`: the members assigned each partition, from
ShareGroupDescribe) and the partition's readers (the groups the position estimate counts: consumer and share groups
alike). A partition's bytes out are split equally over its reading groups (no Kafka API reports a group's or a
member's bytes), a share group's part equally over its members (by client id). :func:`with_share_members` adds
these shares to the planner's :class:`~planners.protection.Lineage` as the partition's fetch lineage where the audit
topic gave none (audit lineage measures bytes per client: it wins). The shares cover only the share groups' part;
a consumer group reading the same partition is left to the other evidence.

Guarantee: pure; a partition with no share member is untouched; the shares of a partition sum to at most its
bytes out. Cost: O(partitions read by share groups + their members).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from collectors.build.records import Collected, PartitionDetails
from collectors.build.share import ShareReader
from domain import PartitionId
from planners.protection import ClientShare, Lineage


def share_fetch_shares(share_read: Mapping[PartitionId, Sequence[ShareReader]],
                       readers: Mapping[PartitionId, Sequence[str]],
                       bytes_out: Mapping[PartitionId, float]) -> dict[PartitionId, tuple[ClientShare, ...]]:
    """Per partition read by a share group with members: each member client's estimated fetch bytes/s (see the
    module docstring); ``readers`` are all the groups reading the partition (the share groups count even if
    absent from it)."""
    out: dict[PartitionId, tuple[ClientShare, ...]] = {}
    for pid, groups in sorted(share_read.items()):
        with_members = [g for g in groups if g.members]
        if not with_members:
            continue
        reading = set(readers.get(pid, ())) | {g.group for g in groups}
        total = bytes_out.get(pid, 0.0)
        total = total if math.isfinite(total) and total > 0 else 0.0
        per_group = total / len(reading)
        rates: dict[str, float] = {}
        for g in with_members:
            for client in g.members:
                rates[client] = rates.get(client, 0.0) + per_group / len(g.members)
        out[pid] = tuple(ClientShare(c, r) for c, r in sorted(rates.items()))
    return out


def with_share_members(lineage: Lineage, share_read: Mapping[PartitionId, Sequence[ShareReader]],
                       readers: Mapping[PartitionId, Sequence[str]],
                       bytes_out: Mapping[PartitionId, float]) -> Lineage:
    """``lineage`` with the share groups' members as the fetch lineage of the partitions they read and the audit
    topic says nothing about (unchanged when no share group has members)."""
    shares = share_fetch_shares(share_read, readers, bytes_out)
    extra = {pid: s for pid, s in shares.items() if not lineage.fetch.get(pid)}
    if not extra:
        return lineage
    return replace(lineage, fetch={**lineage.fetch, **extra})


def with_round_share_members(lineage: Lineage, collected: Collected) -> Lineage:
    """:func:`with_share_members` over one collection round (its share readers, readers and bytes out)."""
    details = collected.partitions
    share_read = details.share_read() if isinstance(details, PartitionDetails) else {}
    if not share_read:
        return lineage
    readers: dict[PartitionId, list[str]] = {}
    for pid in share_read:
        d = details.get(pid)
        if d is not None:
            readers[pid] = [*d.disk_readers, *d.cached_readers]
    bytes_out = {p.id: p.bytes_out_per_s for p in collected.snapshot.iter_partitions() if p.id in share_read}
    return with_share_members(lineage, share_read, readers, bytes_out)
