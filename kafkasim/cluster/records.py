"""Kafka v2 record batches in kafkasim: split what real producers send, store it, stand in for simulated traffic.

Goal: real Produce/Fetch clients see a consistent log although most of it is simulated traffic.
Method: :func:`split_batches` reads v2 batch headers (no decompression); :func:`store_batches`
keeps real batches per partition with Kafka offsets from the engine and the leader's epoch stamped in, as a
broker stamps them; :func:`synthetic_batch`
builds records for offsets produced by the simulation.
Guarantee: stored memory is bounded (``Cluster.max_batch_bytes_per_partition`` per partition,
``Engine.batch_budget`` overall; oldest batches are evicted first and then read as simulated records).
Cost: O(batches) per request; no payload is decoded.
"""

from __future__ import annotations

import struct

from kafka.record.memory_records import MemoryRecordsBuilder
from kafka.record.util import calc_crc32c

from kafkasim.cluster import model as m
from kafkasim.cluster.epochs import epoch_at
from kafkasim.cluster.model import Cluster, Partition, SimError

BATCH_HEADER = 61


def split_batches(data: bytes) -> list[tuple[bytes, int, int, int]]:
    """Split v2 record batches: [(batch bytes, record count, last offset delta, max timestamp)].

    Raises SimError(CORRUPT_MESSAGE / UNSUPPORTED_FOR_MESSAGE_FORMAT) on malformed data.
    """
    out = []
    pos = 0
    mv = memoryview(data)
    while pos < len(data):
        if len(data) - pos < BATCH_HEADER:
            raise SimError(m.CORRUPT_MESSAGE, "truncated record batch")
        length = struct.unpack_from(">i", data, pos + 8)[0]
        end = pos + 12 + length
        if length < BATCH_HEADER - 12 or end > len(data):
            raise SimError(m.CORRUPT_MESSAGE, "bad record batch length")
        magic = data[pos + 16]
        if magic != 2:
            raise SimError(m.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"magic {magic} not supported")
        last_delta = struct.unpack_from(">i", data, pos + 23)[0]
        max_ts = struct.unpack_from(">q", data, pos + 35)[0]
        count = struct.unpack_from(">i", data, pos + 57)[0]
        if count < 0 or last_delta < 0:
            raise SimError(m.CORRUPT_MESSAGE, "bad record count")
        out.append((bytes(mv[pos:end]), count, last_delta, max_ts))
        pos = end
    return out


def log_append_time(raw: bytes, now_ms: int) -> bytes:
    """``raw`` (one v2 batch) stamped as Kafka stamps a batch of a ``message.timestamp.type=LogAppendTime``
    topic: the timestamp-type attribute bit set, the max timestamp = the broker's clock, the CRC-32C (over
    attributes .. end) recomputed. Consumers then read ``now_ms`` as every record's timestamp."""
    buf = bytearray(raw)
    attributes = struct.unpack_from(">h", buf, 21)[0] | 0x08
    struct.pack_into(">h", buf, 21, attributes)
    struct.pack_into(">q", buf, 35, now_ms)
    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def store_batches(cl: Cluster, p: Partition, records: bytes, log_append_ms: int | None = None) -> tuple[int, int, int]:
    """Append v2 batches to a partition; returns (base offset, bytes, records). With ``log_append_ms`` (the
    topic's ``message.timestamp.type`` is ``LogAppendTime``) every batch is stamped with that time.

    Memory stays bounded: at most ``cl.max_batch_bytes_per_partition`` per partition and
    ``engine.batch_budget`` bytes over the whole federation (oldest batches are evicted first;
    their offsets then read as simulated records).
    """
    batches = split_batches(records)
    if not batches:
        raise SimError(m.CORRUPT_MESSAGE, "no record batches")
    eng = cl.engine
    first = -1
    total_b = total_r = 0
    for raw, count, last_delta, max_ts in batches:
        if log_append_ms is not None:
            raw, max_ts = log_append_time(raw, log_append_ms), log_append_ms
        base = eng.append_real(p.slot, len(raw), last_delta + 1)
        if first < 0:
            first = base
        # the broker's offsets and its leader epoch, as Kafka's LogValidator stamps them (outside the CRC)
        buf = struct.pack(">q", base) + raw[8:12] + struct.pack(">i", p.leader_epoch) + raw[16:]
        p.batches.append((base, base + last_delta, max_ts, buf))
        for cb in eng.append_listeners:
            cb(cl, p, p.batches[-1])
        p.batch_bytes += len(buf)
        eng.batch_fifo.append(p)
        eng.batch_bytes += len(buf)
        total_b += len(raw)
        total_r += count
        while p.batch_bytes > cl.max_batch_bytes_per_partition and len(p.batches) > 1:
            old = p.batches.popleft()
            p.batch_bytes -= len(old[-1])
            eng.batch_bytes -= len(old[-1])
            p.evicted_early += 1  # its oldest entry in the global FIFO is now stale
        while eng.batch_bytes > eng.batch_budget and eng.batch_fifo:
            q = eng.batch_fifo.popleft()
            if q.evicted_early > 0:
                q.evicted_early -= 1
                continue
            if (q.batches and q is not p) or len(q.batches) > 1:  # keep the batch just appended
                old = q.batches.popleft()
                q.batch_bytes -= len(old[-1])
                eng.batch_bytes -= len(old[-1])
    return first, total_b, total_r


SYNTH_MAX_RECORDS = 500
_FILL = b"kafkasim-simulated-record:" * 64


def synthetic_batch(cl: Cluster, p: Partition, start: int, end: int, max_bytes: int) -> bytes:
    """Records standing in for simulated producer traffic at offsets [start, end) (at least one record).

    Values are ``msg_size`` bytes of filler (capped at 64 KiB); timestamps are the simulated clock; the batch
    carries the leader epoch its first offset was produced in and stops where the next epoch starts.
    """
    eng = cl.engine
    epoch, next_epoch = epoch_at(p.epochs, start)
    if next_epoch is not None and next_epoch > start:
        end = min(end, next_epoch)  # a batch never spans two leader epochs
    msg = int(min(max(float(eng.f["msg_size"][p.slot]), 1.0), 65536.0))
    count = int(max(1, min(end - start, SYNTH_MAX_RECORDS, max_bytes // (msg + 24))))
    value = (_FILL * (msg // len(_FILL) + 1))[:msg]
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=count * (msg + 32) + 1024,
                                   offset=start)
    ts = int(eng.t * 1000)
    for _ in range(count):
        builder.append(ts, None, value)
    builder.close()
    buf = bytearray(builder.buffer())
    struct.pack_into(">i", buf, 12, max(epoch, 0))  # the epoch these offsets were produced in
    return bytes(buf)
