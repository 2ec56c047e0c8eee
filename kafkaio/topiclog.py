"""A small one-partition topic read and appended through the cluster's one admin client (the lease log).

Goal: records Guardian keeps *on the cluster* (the execution lease, :mod:`domain.lease`) with nothing but
the connection every other Kafka call uses — its security settings, its broker connections — and no
producer or consumer client, group or offset commit of its own.

Method: :func:`ensure_topic` creates the topic (one partition, RF up to 3) when missing; :func:`append`
builds one v2 record batch (kafka-python's ``MemoryRecordsBuilder``) and sends a ``Produce`` (acks=all)
to partition 0's leader, returning the record's offset and the time the log stamped on it
(``log_append_time_ms`` of a ``LogAppendTime`` topic); :func:`read` asks the leader for the log's first
and end offsets (``ListOffsets``) and ``Fetch``-es from the wanted offset to the end, decoding each batch
(a ``LogAppendTime`` batch gives every record the broker's time). The raw requests go through the admin
client's connection manager (``_manager.send``), as the client-quota requests do.

Guarantee: a broker answering that it does not lead the partition (its metadata behind the one that named
it) is retried at the leader named next for a few seconds — nothing was appended there; any other failure
raises (the caller, :class:`~kafkaio.admin.KafkaAdmin`, turns it into
:class:`~kafkaio.errors.AdminError` and reconnects); an append is acknowledged by every in-sync replica
before it returns. Cost: append = one metadata read + one Produce; read = one metadata read, one
ListOffsets per bound and one Fetch per 1 MiB of records.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

import kafka.errors as kerrors
from kafka.admin import NewTopic
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kafkaio.types import LogRead, LogRecord

FETCH_BYTES = 1 << 20


def _run(a: Any, request: Any, node: int) -> Any:
    async def go() -> Any:
        return await a._manager.send(request, node_id=node)

    return a._manager.run(go)


def _check(code: int, what: str) -> None:
    if code:
        raise kerrors.for_code(code)(what)


def _leader(a: Any, topic: str, wait_s: float = 0.0) -> int:
    """The leader of ``topic``-0; for ``wait_s`` seconds a topic unknown or leaderless is asked again (a broker's
    metadata may lag a CreateTopics the controller has just applied)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _leader_once(a, topic)
        except (kerrors.UnknownTopicOrPartitionError, kerrors.LeaderNotAvailableError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _leader_once(a: Any, topic: str) -> int:
    for t in a.describe_topics([topic]):
        if t.get("error_code", 0):
            _check(int(t["error_code"]), f"describing topic {topic}")
        for p in t["partitions"]:
            if int(p["partition_index"]) == 0 and int(p["leader_id"]) >= 0:
                return int(p["leader_id"])
    raise kerrors.LeaderNotAvailableError(f"{topic}-0 has no leader")


CREATE_VISIBLE_S = 10.0
"""How long a created topic may take to show in the metadata with a leader."""
LAGGING_METADATA_S = 3.0
"""How long an append waits for a broker's metadata to show the log (the lease log exists once ensured)."""


def ensure_topic(a: Any, topic: str, configs: Mapping[str, str]) -> None:
    """Create ``topic`` (one partition, RF min(3, brokers)) with ``configs`` unless it exists."""
    if any(str(t.get("name") or t.get("topic")) == topic and not t.get("error_code")
           for t in a.describe_topics([topic])):
        return
    rf = min(3, len([b for b in a.describe_cluster()["brokers"] if not b.get("is_fenced")]))
    with contextlib.suppress(kerrors.TopicAlreadyExistsError):  # another executor created it first
        a.create_topics([NewTopic(topic, 1, rf, topic_configs=dict(configs))])
    # Kafka's controller answers CreateTopics before every broker's metadata has the topic: a read at once may
    # reach a broker that answers UNKNOWN_TOPIC_OR_PARTITION (seen on Kafka 4.2). Wait until it has a leader.
    _leader(a, topic, CREATE_VISIBLE_S)


def append(a: Any, topic: str, key: bytes, value: bytes, timeout_ms: int = 15000) -> tuple[int, int]:
    """Append one record to ``topic``-0; returns (its offset, its append time in ms)."""
    now = int(time.time() * 1000)
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=len(key) + len(value) + 1024)
    builder.append(now, key, value)
    builder.close()
    topic_data = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=timeout_ms, topic_data=[topic_data(
        name=topic, partition_data=[topic_data.PartitionProduceData(index=0, records=builder.buffer())])],
        min_version=3, max_version=9)

    def send(node: int) -> Any:
        part = _run(a, request, node).responses[0].partition_responses[0]
        _check(int(part.error_code), f"appending to {topic}-0")
        return part

    part = _at_leader(a, topic, send)
    stamped = int(getattr(part, "log_append_time_ms", -1))
    return int(part.base_offset), stamped if stamped >= 0 else now


_MOVED = (kerrors.NotLeaderForPartitionError, kerrors.LeaderNotAvailableError, kerrors.UnknownTopicOrPartitionError)
"""What a broker answers when the metadata that named it leader is ahead of (or behind) its own: nothing was
appended or read, so the call is sent again to the leader the metadata names then."""


def _at_leader(a: Any, topic: str, call: Any, wait_s: float = LAGGING_METADATA_S) -> Any:
    """``call(leader)`` on ``topic``-0's leader, asked again for ``wait_s`` seconds while the broker answers that
    it does not lead the partition (seen on Kafka 4.2 right after CreateTopics: the metadata names a leader
    before that broker has applied the partition's record, and a Produce there answers NOT_LEADER_OR_FOLLOWER)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return call(_leader(a, topic, wait_s))
        except _MOVED:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _offset(a: Any, topic: str, node: int, which: int) -> int:
    lt = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[lt(
        name=topic, partitions=[lt.ListOffsetsPartition(partition_index=0, timestamp=which)])],
        min_version=1, max_version=7)
    part = _run(a, request, node).topics[0].partitions[0]
    _check(int(part.error_code), f"listing offsets of {topic}-0")
    return int(part.offset)


def read(a: Any, topic: str, start: int = 0) -> LogRead:
    """The records of ``topic``-0 from ``start`` (or the log's first offset, if later) to its end.

    Retention may delete the first segment between ``ListOffsets`` and the first ``Fetch`` (the broker
    answers OffsetOutOfRange): the read then begins at the new first offset. A broker that no longer (or not
    yet) leads the partition is left for the leader the metadata names next."""
    return _at_leader(a, topic, lambda node: _read_at(a, topic, node, start))


def _read_at(a: Any, topic: str, node: int, start: int) -> LogRead:
    first, end = _offset(a, topic, node, -2), _offset(a, topic, node, -1)
    position = begin = max(start, first)
    out: list[LogRecord] = []
    ft = FetchRequest.FetchTopic
    while position < end:
        request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=FETCH_BYTES, isolation_level=0,
                               session_id=0, session_epoch=-1, topics=[ft(topic=topic, partitions=[ft.FetchPartition(
                                   partition=0, fetch_offset=position, partition_max_bytes=FETCH_BYTES)])],
                               forgotten_topics_data=[], rack_id="", min_version=4, max_version=12)
        part = _run(a, request, node).responses[0].partitions[0]
        if int(part.error_code) == kerrors.OffsetOutOfRangeError.errno and not out:
            first = _offset(a, topic, node, -2)  # retention removed the start since ListOffsets: begin there
            if first > position:
                position = begin = first
                continue
        _check(int(part.error_code), f"fetching {topic}-0")
        records = MemoryRecords(bytes(part.records or b""))
        advanced = position
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            for rec in batch:
                if rec.offset >= position:
                    out.append(LogRecord(int(rec.offset), int(rec.timestamp), bytes(rec.value or b"")))
                    advanced = int(rec.offset) + 1
        if advanced == position:
            break  # nothing decodable at this offset (e.g. a gap): stop rather than spin
        position = advanced
    return LogRead(begin, end, tuple(out))
