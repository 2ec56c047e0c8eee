"""Tiered-storage metadata: the pure rules of one partition's event groups (no I/O).

Goal
    Decide, for one partition, whether a batch of remote-segment events (KIP-405's copy started /
    copy finished / delete started / delete finished) may be appended, what each touched segment's
    state becomes, and from which offset a new follower copies the local tail.  The store
    (:mod:`tiered.store`) does the I/O; the replicated state machine (:mod:`tiered.machine`) calls
    these functions inside one store transaction per Raft entry.

Method
    Fencing: a partition remembers the highest leader epoch that appended to it; a batch from a lower
    epoch is refused (a deposed leader cannot write), an equal or higher one is accepted and raises
    the mark.  Every event must follow the segment life cycle
    ``COPY_STARTED -> COPY_FINISHED -> DELETE_STARTED -> DELETE_FINISHED`` (``DELETE_STARTED`` is also
    allowed straight after ``COPY_STARTED``: a failed upload is cleaned up); a copy-started event
    gets a fresh segment id from the state machine's allocator.  A segment is *live* (part of the
    current state a new replica starts from) until its delete finished.
    :func:`local_start_fetch_offset` = ``max(log start, log end - ingress x threshold)``, not above
    the end of what remote storage holds (so nothing between remote and local is skipped).
    Idempotence: a request may carry (producer id, sequence); per (partition, producer) the state
    machine keeps the last applied sequence with its answer and a digest of its content
    (:class:`ProducerState`), and :func:`check_sequence` decides: a higher sequence is new, the same one
    is a retry (answered again, nothing written), a lower one is refused.  At most
    :data:`MAX_PRODUCERS_PER_PARTITION` producers are kept per partition (the least recently applied
    is forgotten: only the partition's leader writes, so a handful is plenty).

Guarantee
    :func:`plan_group` either returns the full outcome of the batch or raises
    :class:`GroupRefused` without side effects: a group is applied whole or not at all.  The result
    depends only on its inputs (deterministic on every Raft node).

Cost
    O(events in the batch); one lookup per touched segment, done by the caller.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any


class EventKind(IntEnum):
    """A segment's life-cycle event (numbering = the protobuf enum's)."""

    COPY_STARTED = 1
    COPY_FINISHED = 2
    DELETE_STARTED = 3
    DELETE_FINISHED = 4


#: For each event kind, the states a segment may be in before it (None: the segment is new).
ALLOWED_BEFORE: dict[EventKind, frozenset[EventKind | None]] = {
    EventKind.COPY_STARTED: frozenset({None}),
    EventKind.COPY_FINISHED: frozenset({EventKind.COPY_STARTED}),
    EventKind.DELETE_STARTED: frozenset({EventKind.COPY_STARTED, EventKind.COPY_FINISHED}),
    EventKind.DELETE_FINISHED: frozenset({EventKind.DELETE_STARTED}),
}
MAX_EVENTS_PER_GROUP = 1000
MAX_NAME = 255
MAX_PRODUCERS_PER_PARTITION = 16
MAX_CUSTOM_METADATA = 16384  # base64 characters of an RSM's custom metadata (Kafka's default cap is 128 bytes)


class GroupRefused(Exception):
    """The batch cannot be appended (nothing was changed); ``stale_epoch`` marks a fencing refusal,
    ``stale_sequence`` an idempotent request older than its producer's last applied one."""

    def __init__(self, message: str, *, stale_epoch: bool = False, stale_sequence: bool = False) -> None:
        super().__init__(message)
        self.stale_epoch = stale_epoch
        self.stale_sequence = stale_sequence


@dataclass(frozen=True)
class PartitionKey:
    """(cluster, topic id, partition): the unit the metadata is kept and fenced for."""

    cluster: str
    topic_id: str
    partition: int

    def check(self) -> PartitionKey:
        for name, text in (("cluster", self.cluster), ("topic_id", self.topic_id)):
            if not text or len(text) > MAX_NAME or "\x00" in text:
                raise GroupRefused(f"{name} must be 1..{MAX_NAME} characters without NUL")
        if not 0 <= self.partition < 2**31:
            raise GroupRefused("partition must be 0..2^31-1")
        return self

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "topic_id": self.topic_id, "partition": self.partition}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PartitionKey:
        return cls(str(d["cluster"]), str(d["topic_id"]), int(d["partition"]))


@dataclass(frozen=True)
class KafkaSegment:
    """What a Kafka broker's ``RemoteLogSegmentMetadata`` adds to a segment, kept as Kafka gives it.

    ``segment_uuid`` is the ``RemoteLogSegmentId``'s Uuid (Kafka's base64 text form), ``leader_epochs``
    the segment's leader-epoch map (epoch -> its first offset in the segment, ascending epochs),
    ``custom_metadata`` the RSM's opaque bytes (base64 text; empty: none)."""

    segment_uuid: str
    leader_epochs: tuple[tuple[int, int], ...] = ()
    max_timestamp_ms: int = -1
    broker_id: int = -1
    event_timestamp_ms: int = 0
    custom_metadata: str = ""
    txn_index_empty: bool = False
    topic: str = ""  # the topic's name when the segment was copied (the partition key holds its id)

    def to_json(self) -> dict[str, Any]:
        return {"uuid": self.segment_uuid, "epochs": [list(e) for e in self.leader_epochs],
                "max_ts": self.max_timestamp_ms, "broker": self.broker_id, "event_ts": self.event_timestamp_ms,
                "custom": self.custom_metadata, "txn_empty": self.txn_index_empty, "topic": self.topic}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> KafkaSegment:
        return cls(str(d["uuid"]), tuple((int(e), int(o)) for e, o in d.get("epochs", ())),
                   int(d.get("max_ts", -1)), int(d.get("broker", -1)), int(d.get("event_ts", 0)),
                   str(d.get("custom", "")), bool(d.get("txn_empty", False)), str(d.get("topic", "")))

    def check(self) -> None:
        if not self.segment_uuid or len(self.segment_uuid) > 64:
            raise GroupRefused("kafka segment id must be 1..64 characters")
        epochs = [e for e, _ in self.leader_epochs]
        offsets = [o for _, o in self.leader_epochs]
        if epochs != sorted(set(epochs)) or offsets != sorted(offsets) or any(e < 0 for e in epochs):
            raise GroupRefused(f"segment {self.segment_uuid}: leader epochs must be ascending, distinct and >= 0 "
                               "with non-decreasing start offsets")
        if len(self.topic) > MAX_NAME:
            raise GroupRefused(f"segment {self.segment_uuid}: topic name above {MAX_NAME} characters")
        if len(self.custom_metadata) > MAX_CUSTOM_METADATA:
            raise GroupRefused(f"segment {self.segment_uuid}: custom metadata above {MAX_CUSTOM_METADATA} characters")

    def epoch_end(self, epoch: int, end_offset: int) -> int | None:
        """The last offset of ``epoch`` in the segment (None when the segment has no such epoch)."""
        for i, (e, _) in enumerate(self.leader_epochs):
            if e == epoch:
                return self.leader_epochs[i + 1][1] - 1 if i + 1 < len(self.leader_epochs) else end_offset
        return None

    def epoch_start(self, epoch: int) -> int | None:
        return next((o for e, o in self.leader_epochs if e == epoch), None)


@dataclass(frozen=True)
class SegmentEvent:
    """One event of a segment; ``segment_id`` is 0 on copy-started (the allocator assigns it), and 0 on a
    follow-up that names its segment by Kafka's segment uuid (``kafka.segment_uuid``) instead."""

    kind: EventKind
    segment_id: int
    start_offset: int
    end_offset: int
    leader_epoch: int
    size_bytes: int
    remote_path: str
    kafka: KafkaSegment | None = None

    def to_json(self) -> dict[str, Any]:
        d = {"kind": int(self.kind), "segment_id": self.segment_id, "start_offset": self.start_offset,
             "end_offset": self.end_offset, "leader_epoch": self.leader_epoch, "size_bytes": self.size_bytes,
             "remote_path": self.remote_path}
        if self.kafka is not None:
            d["kafka"] = self.kafka.to_json()
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SegmentEvent:
        try:
            kind = EventKind(int(d["kind"]))
        except ValueError:
            raise GroupRefused(f"unknown event kind {d.get('kind')!r}") from None
        kafka = KafkaSegment.from_json(d["kafka"]) if d.get("kafka") else None
        return cls(kind, int(d.get("segment_id", 0)), int(d.get("start_offset", 0)), int(d.get("end_offset", 0)),
                   int(d.get("leader_epoch", 0)), int(d.get("size_bytes", 0)), str(d.get("remote_path", "")), kafka)


@dataclass(frozen=True)
class Segment:
    """A segment's latest state (its last event)."""

    segment_id: int
    state: EventKind
    start_offset: int
    end_offset: int
    leader_epoch: int
    size_bytes: int
    remote_path: str
    copied: bool = False  # its bytes count in the partition's remote_bytes
    kafka: KafkaSegment | None = None

    @property
    def live(self) -> bool:
        return self.state != EventKind.DELETE_FINISHED

    def to_json(self) -> dict[str, Any]:
        d = {"segment_id": self.segment_id, "state": int(self.state), "start_offset": self.start_offset,
             "end_offset": self.end_offset, "leader_epoch": self.leader_epoch, "size_bytes": self.size_bytes,
             "remote_path": self.remote_path, "copied": self.copied}
        if self.kafka is not None:
            d["kafka"] = self.kafka.to_json()
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Segment:
        return cls(int(d["segment_id"]), EventKind(int(d["state"])), int(d["start_offset"]), int(d["end_offset"]),
                   int(d["leader_epoch"]), int(d["size_bytes"]), str(d["remote_path"]), bool(d.get("copied")),
                   KafkaSegment.from_json(d["kafka"]) if d.get("kafka") else None)


@dataclass(frozen=True)
class PartitionMeta:
    """Per-partition counters and the fencing mark."""

    leader_epoch: int = -1
    last_group_id: int = 0
    groups: int = 0
    events: int = 0
    live_segments: int = 0
    remote_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"leader_epoch": self.leader_epoch, "last_group_id": self.last_group_id, "groups": self.groups,
                "events": self.events, "live_segments": self.live_segments, "remote_bytes": self.remote_bytes}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PartitionMeta:
        return cls(**{k: int(d[k]) for k in ("leader_epoch", "last_group_id", "groups", "events",
                                             "live_segments", "remote_bytes")})


@dataclass(frozen=True)
class GroupOutcome:
    """What appending a batch does: the events as stored (ids filled in), new segment states, new meta."""

    events: tuple[SegmentEvent, ...]
    segments: dict[int, Segment]
    meta: PartitionMeta
    segment_ids: tuple[int, ...]


@dataclass(frozen=True)
class ProducerState:
    """A producer's last applied request on one partition: its sequence, content digest and answer."""

    sequence: int
    digest: str
    group_id: int
    segment_ids: tuple[int, ...]
    index: int  # the Raft index that applied it

    def to_json(self) -> dict[str, Any]:
        return {"sequence": self.sequence, "digest": self.digest, "group_id": self.group_id,
                "segment_ids": list(self.segment_ids), "index": self.index}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProducerState:
        return cls(int(d["sequence"]), str(d["digest"]), int(d["group_id"]), tuple(int(x) for x in d["segment_ids"]),
                   int(d["index"]))


def request_digest(leader_epoch: int, events: Sequence[SegmentEvent]) -> str:
    """A digest of an append's content (epoch and events as sent): tells a retry from a reused sequence."""
    body = json.dumps([int(leader_epoch), [e.to_json() for e in events]], separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def check_sequence(last: ProducerState | None, producer_id: int, sequence: int, digest: str) -> ProducerState | None:
    """None when the request is new (apply it); ``last`` when it is a retry of the last applied request.

    Raises :class:`GroupRefused` for a sequence below the last applied one (``stale_sequence``) and for
    the last sequence reused with different content.
    """
    if producer_id <= 0 or sequence <= 0:
        raise GroupRefused("producer_id and sequence must both be > 0 for an idempotent append")
    if last is None or sequence > last.sequence:
        return None
    if sequence < last.sequence:
        raise GroupRefused(f"sequence {sequence} of producer {producer_id} is below its last applied sequence "
                           f"{last.sequence} on this partition", stale_sequence=True)
    if digest != last.digest:
        raise GroupRefused(f"sequence {sequence} of producer {producer_id} was applied with a different group")
    return last


def _check_event(ev: SegmentEvent, leader_epoch: int) -> None:
    if ev.start_offset < 0 or ev.end_offset < ev.start_offset:
        raise GroupRefused(f"segment {ev.segment_id}: offsets must satisfy 0 <= start <= end")
    if ev.size_bytes < 0:
        raise GroupRefused(f"segment {ev.segment_id}: size must be >= 0")
    if ev.leader_epoch > leader_epoch:
        raise GroupRefused(f"segment {ev.segment_id}: event epoch {ev.leader_epoch} above the caller's {leader_epoch}")
    if len(ev.remote_path) > 4096:
        raise GroupRefused("remote_path longer than 4096 characters")


def plan_group(meta: PartitionMeta, leader_epoch: int, events: Sequence[SegmentEvent], group_id: int,
               lookup: Callable[[int], Segment | None], next_segment_id: int,
               resolve: Callable[[str], int | None] | None = None) -> GroupOutcome:
    """The outcome of appending ``events`` as group ``group_id``; raises :class:`GroupRefused`.

    ``lookup(segment_id)`` returns a segment's stored state; ``next_segment_id`` is the first id the
    allocator hands out to this batch's copy-started events (consecutive ids in event order);
    ``resolve(kafka uuid)`` the id of the live segment registered under a Kafka segment uuid (None: none).
    A follow-up event may name its segment by that uuid (``segment_id`` 0); a copy-started event whose
    uuid is already registered is refused (a Kafka segment id names one segment).
    """
    if leader_epoch < 0:
        raise GroupRefused("leader_epoch must be >= 0")
    if leader_epoch < meta.leader_epoch:
        raise GroupRefused(f"stale leader epoch {leader_epoch}: the partition is fenced at epoch {meta.leader_epoch}",
                           stale_epoch=True)
    if not events:
        raise GroupRefused("a group needs at least one event")
    if len(events) > MAX_EVENTS_PER_GROUP:
        raise GroupRefused(f"a group holds at most {MAX_EVENTS_PER_GROUP} events")
    touched: dict[int, Segment] = {}
    stored: list[SegmentEvent] = []
    new_ids: list[int] = []
    by_uuid: dict[str, int] = {}  # uuids registered by this batch

    def find(uuid: str) -> int | None:
        return by_uuid.get(uuid) or (resolve(uuid) if resolve is not None else None)

    live, remote = meta.live_segments, meta.remote_bytes
    for ev in events:
        _check_event(ev, leader_epoch)
        if ev.kafka is not None:
            ev.kafka.check()
        if ev.kind == EventKind.COPY_STARTED:
            if ev.segment_id != 0:
                raise GroupRefused("copy-started events get their segment id from Guardian: send segment_id 0")
            if ev.kafka is not None and find(ev.kafka.segment_uuid) is not None:
                raise GroupRefused(f"kafka segment {ev.kafka.segment_uuid} is already registered in this partition")
            sid = next_segment_id + len(new_ids)
            new_ids.append(sid)
            if ev.kafka is not None:
                by_uuid[ev.kafka.segment_uuid] = sid
            ev = replace(ev, segment_id=sid)
            before: Segment | None = None
        else:
            if ev.segment_id == 0 and ev.kafka is not None:
                found = find(ev.kafka.segment_uuid)
                if found is None:
                    raise GroupRefused(f"kafka segment {ev.kafka.segment_uuid} is unknown in this partition")
                ev = replace(ev, segment_id=found)
            before = touched.get(ev.segment_id) or lookup(ev.segment_id)
            if before is None:
                raise GroupRefused(f"segment {ev.segment_id} is unknown in this partition")
        state = None if before is None else before.state
        if state not in ALLOWED_BEFORE[ev.kind]:
            raise GroupRefused(f"segment {ev.segment_id}: {ev.kind.name} not allowed after "
                               f"{'nothing' if state is None else state.name}")
        if before is not None:  # follow-ups describe the segment registered at copy start
            size = ev.size_bytes if ev.kind == EventKind.COPY_FINISHED and ev.size_bytes else before.size_bytes
            ev = replace(ev, start_offset=before.start_offset, end_offset=before.end_offset, size_bytes=size,
                         remote_path=before.remote_path, leader_epoch=before.leader_epoch,
                         kafka=_follow_up(before.kafka, ev.kafka))
        copied = before is not None and before.copied
        if ev.kind == EventKind.COPY_STARTED:
            live += 1
        elif ev.kind == EventKind.COPY_FINISHED:
            remote += ev.size_bytes
            copied = True
        elif ev.kind == EventKind.DELETE_FINISHED:
            live -= 1
            remote -= ev.size_bytes if copied else 0
            copied = False
        touched[ev.segment_id] = Segment(ev.segment_id, ev.kind, ev.start_offset, ev.end_offset, ev.leader_epoch,
                                         ev.size_bytes, ev.remote_path, copied, ev.kafka)
        stored.append(ev)
    new_meta = PartitionMeta(leader_epoch=leader_epoch, last_group_id=group_id, groups=meta.groups + 1,
                             events=meta.events + len(stored), live_segments=live, remote_bytes=remote)
    return GroupOutcome(tuple(stored), touched, new_meta, tuple(new_ids))


def _follow_up(before: KafkaSegment | None, update: KafkaSegment | None) -> KafkaSegment | None:
    """A follow-up keeps the segment's Kafka description and takes the update's broker, time and (when the
    update has some) custom metadata, as Kafka's ``createWithUpdates`` does."""
    if before is None or update is None:
        return before
    if update.segment_uuid != before.segment_uuid:
        raise GroupRefused(f"kafka segment {update.segment_uuid} does not name segment {before.segment_uuid}")
    return replace(before, broker_id=update.broker_id, event_timestamp_ms=update.event_timestamp_ms,
                   custom_metadata=update.custom_metadata or before.custom_metadata)


def find_segment(segments: Sequence[Segment], leader_epoch: int, offset: int) -> Segment | None:
    """The copied segment holding ``offset`` written at ``leader_epoch`` (KIP-405's lookup).

    Among copy-finished segments with ``leader_epoch`` in their epoch map, the one whose start offset for
    that epoch is the greatest not above ``offset``; it answers only if ``offset`` is not past that
    epoch's end in the segment (the next epoch's start - 1, else the segment's end).  Segments without a
    Kafka epoch map count as holding their ``leader_epoch`` from their start offset.
    """
    best: tuple[int, Segment] | None = None
    for seg in segments:
        if seg.state != EventKind.COPY_FINISHED:
            continue
        start, end = epoch_range(seg, leader_epoch)
        if start is None or end is None or start > offset:
            continue
        if best is None or start > best[0]:
            best = (start, seg)
    if best is None:
        return None
    _, end = epoch_range(best[1], leader_epoch)
    return best[1] if end is not None and offset <= end else None


def segment_for_offset(segments: Sequence[Segment], offset: int, leader_epoch: int | None = None) -> Segment | None:
    """The copied segment holding ``offset``: at ``leader_epoch`` by :func:`find_segment`, or (no epoch) the
    copy-finished segment whose offsets contain it, the one of the highest leader epoch when several do
    (an unclean election's divergent copies)."""
    if leader_epoch is not None:
        return find_segment(segments, leader_epoch, offset)
    holding = [s for s in segments if s.state == EventKind.COPY_FINISHED and s.start_offset <= offset <= s.end_offset]
    return max(holding, key=lambda s: (s.leader_epoch, s.segment_id)) if holding else None


def epoch_range(seg: Segment, leader_epoch: int) -> tuple[int | None, int | None]:
    """(first, last) offset of ``leader_epoch`` in ``seg`` ((None, None): the segment has no such epoch)."""
    if seg.kafka is None or not seg.kafka.leader_epochs:
        return (seg.start_offset, seg.end_offset) if seg.leader_epoch == leader_epoch else (None, None)
    return seg.kafka.epoch_start(leader_epoch), seg.kafka.epoch_end(leader_epoch, seg.end_offset)


def segments_for_epoch(segments: Sequence[Segment], leader_epoch: int) -> list[Segment]:
    """Copy-finished segments holding ``leader_epoch``, by that epoch's first offset (Kafka's
    ``listRemoteLogSegments(partition, epoch)``)."""
    found: list[tuple[int, int, Segment]] = []
    for seg in segments:
        start = epoch_range(seg, leader_epoch)[0] if seg.state == EventKind.COPY_FINISHED else None
        if start is not None:
            found.append((start, seg.segment_id, seg))
    return [seg for _, _, seg in sorted(found, key=lambda x: (x[0], x[1]))]


def highest_offset_for_epoch(segments: Sequence[Segment], leader_epoch: int) -> int | None:
    """The highest offset of ``leader_epoch`` held by a copy-finished segment (None: none holds it)."""
    ends = [epoch_range(s, leader_epoch)[1] for s in segments if s.state == EventKind.COPY_FINISHED]
    got = [e for e in ends if e is not None]
    return max(got) if got else None


def local_start_fetch_offset(log_start: int, log_end: int, avg_ingress_per_s: float, threshold_s: float,
                             remote_end: int | None) -> int:
    """Where a new follower starts copying: ``max(log start, log end - ingress x threshold)``.

    Clamped to ``[log_start, log_end]`` and to at most ``remote_end + 1`` (the first offset remote
    storage does not hold; None when nothing is remote: the follower then copies from the log start).
    """
    if log_end < log_start or log_start < 0:
        raise ValueError("need 0 <= log_start <= log_end")
    if not (math.isfinite(avg_ingress_per_s) and math.isfinite(threshold_s)) or avg_ingress_per_s < 0 \
            or threshold_s < 0:
        raise ValueError("ingress and threshold must be finite and >= 0")
    if remote_end is None:
        return log_start
    tail = int(log_end - avg_ingress_per_s * threshold_s)
    start = max(log_start, min(tail, log_end))
    return max(log_start, min(start, remote_end + 1))
