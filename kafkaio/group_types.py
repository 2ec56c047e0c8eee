"""The records of consumer and share groups: committed offsets as columns, KIP-932 share groups as read.

Goal: one shape for what the bulk reader learns about groups (:mod:`kafkaio.source` reads them through
:mod:`kafkaio.offset_fetch` and :mod:`kafkaio.share_groups`), held apart from the code that decodes them so the
collectors' pure stages and :class:`~kafkaio.types.KafkaState` use them without importing an I/O module.

Method: :class:`GroupOffsets` holds every group's committed offsets as four numpy columns (group index, topic
index, partition, offset) — no object per partition; :class:`ShareGroup` (its :class:`ShareMember` and
:class:`SharePartitionOffset`) is a frozen record of one ShareGroupDescribe + DescribeShareGroupOffsets answer;
:func:`share_positions` and :func:`members_by_partition` derive the collectors' and throttle protection's views.

Guarantee: plain data — no client, no socket, no secret; safe to share between threads (records are frozen).
Cost: four arrays per read of the offsets; one small object per share-group member and share-partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
TP = tuple[str, int]
"""``(topic, partition)``."""


@dataclass(frozen=True, eq=False)
class GroupOffsets:
    """Committed offsets of consumer groups: row ``k`` is group ``groups[group[k]]``, topic
    ``topics[topic[k]]``, partition ``partition[k]`` at ``offset[k]`` (Kafka answers a partition once per group).

    ``groups`` lists every group read without error, those with no committed offset included.
    """

    groups: list[str]
    topics: list[str]
    group: I32
    topic: I32
    partition: I32
    offset: I64

    def __len__(self) -> int:
        return len(self.offset)

    @classmethod
    def empty(cls) -> GroupOffsets:
        """No group, no offset."""
        z = np.zeros(0, dtype=np.int32)
        return cls([], [], z, z, z, np.zeros(0, dtype=np.int64))

    @classmethod
    def from_mapping(cls, offsets: Mapping[str, Mapping[tuple[str, int], int]]) -> GroupOffsets:
        """From ``group -> {(topic, partition): offset}`` (rows in the mapping's order)."""
        topics: dict[str, int] = {}
        g: list[int] = []
        t: list[int] = []
        p: list[int] = []
        o: list[int] = []
        for gi, offs in enumerate(offsets.values()):
            for (name, part), off in offs.items():
                g.append(gi)
                t.append(topics.setdefault(name, len(topics)))
                p.append(part)
                o.append(off)
        return cls(list(offsets), list(topics), np.asarray(g, dtype=np.int32), np.asarray(t, dtype=np.int32),
                   np.asarray(p, dtype=np.int32), np.asarray(o, dtype=np.int64))

    def as_dict(self) -> dict[str, dict[tuple[str, int], int]]:
        """``group -> {(topic, partition): offset}`` (every group of :attr:`groups`)."""
        out: dict[str, dict[tuple[str, int], int]] = {g: {} for g in self.groups}
        for g, t, p, o in zip(self.group.tolist(), self.topic.tolist(), self.partition.tolist(), self.offset.tolist(),
                              strict=True):
            out[self.groups[g]][(self.topics[t], p)] = o
        return out

    @classmethod
    def concat(cls, parts: Sequence[GroupOffsets]) -> GroupOffsets:
        """One table of several (groups and topics renumbered; a group in two parts is listed twice)."""
        parts = [x for x in parts if x.groups]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        groups: list[str] = []
        topics: dict[str, int] = {}
        gs, ts = [], []
        for x in parts:
            gs.append(x.group + len(groups))
            groups.extend(x.groups)
            remap = np.asarray([topics.setdefault(name, len(topics)) for name in x.topics], dtype=np.int32)
            ts.append(remap[x.topic] if len(x.topic) else x.topic)
        return cls(groups, list(topics), np.concatenate(gs).astype(np.int32), np.concatenate(ts).astype(np.int32),
                   np.concatenate([x.partition for x in parts]), np.concatenate([x.offset for x in parts]))


@dataclass(frozen=True, slots=True)
class ShareMember:
    """One member of a share group (ShareGroupDescribe): the client id its quota is set on, and the partitions the
    group's assignor gave it (several members may hold the same partition)."""

    member_id: str
    client_id: str
    client_host: str
    rack: str | None
    member_epoch: int
    subscribed: tuple[str, ...]
    assignment: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    """One share-partition of a group (DescribeShareGroupOffsets): its start offset (``None`` when not initialised
    or answered with an error), the leader epoch the share coordinator recorded, and the broker's own lag (v1,
    Kafka 4.2; ``None`` where not reported)."""

    topic: str
    partition: int
    start_offset: int | None
    leader_epoch: int
    lag: int | None
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True)
class ShareGroup:
    """A share group as one read saw it: state, members and share-partition start offsets."""

    group_id: str
    state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor: str = ""
    members: tuple[ShareMember, ...] = ()
    offsets: Mapping[TP, SharePartitionOffset] = field(default_factory=dict)
    error_code: int = 0
    error_message: str | None = None
    offsets_error: str | None = None
    """Why the start offsets could not be read (the group-level error of DescribeShareGroupOffsets), if so."""

    def members_of(self, tp: TP) -> tuple[ShareMember, ...]:
        """The members assigned ``tp`` (sorted by client id, then member id)."""
        return tuple(sorted((m for m in self.members if tp in m.assignment), key=lambda m: (m.client_id, m.member_id)))

    def assigned_partitions(self) -> list[TP]:
        """Every partition some member is assigned, sorted."""
        return sorted({tp for m in self.members for tp in m.assignment})

    def start_offset(self, tp: TP) -> int | None:
        """The SPSO of ``tp`` (``None`` when unknown)."""
        o = self.offsets.get(tp)
        return None if o is None else o.start_offset


def share_positions(groups: Mapping[str, ShareGroup]) -> GroupOffsets:
    """Every share group's position on each of its partitions — its SPSO, one row per (group, partition) however
    many members fetch it — in the collectors' column form (rows of a group in topic order)."""
    table: dict[str, dict[TP, int]] = {}
    for gid in sorted(groups):
        g = groups[gid]
        rows = {tp: o.start_offset for tp, o in sorted(g.offsets.items()) if o.start_offset is not None}
        if rows:
            table[gid] = rows
    return GroupOffsets.from_mapping(table)


def members_by_partition(groups: Mapping[str, ShareGroup]) -> dict[TP, dict[str, tuple[str, ...]]]:
    """``(topic, partition) -> {share group -> client ids of the members assigned it (sorted, distinct)}``."""
    out: dict[TP, dict[str, tuple[str, ...]]] = {}
    for gid in sorted(groups):
        g = groups[gid]
        for tp in g.assigned_partitions():
            out.setdefault(tp, {})[gid] = tuple(sorted({m.client_id for m in g.members_of(tp)}))
    return out
