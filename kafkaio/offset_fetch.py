"""Consumer groups' committed offsets as columns, and a decoder of batched OffsetFetch responses that builds them.

Goal: the collectors read every consumer group's committed offsets every round (a replaying consumer
must be seen within one round). At 2,000 groups that is ~40,000 partitions per round; kafka-python
decodes them into one object per partition, topic and group, and the collector then turns those into
dictionaries — per-row Python twice. This module makes the read cost what the bytes cost.

Method: :class:`RawOffsetFetchRequest` is kafka-python's ``OffsetFetchRequest`` whose response comes
back undecoded (the response hook of :mod:`kafkaio.connection`, as its ``MetadataReader`` does).
:func:`decode_offset_fetch` reads a v8/v9 body (flexible versions: compact arrays and strings, unsigned
varints, tagged fields; the schema of ``OffsetFetchResponse.json``) with one pass over groups and
topics; a topic's partitions are taken as one slice of 20-byte rows (partition int32, committed
offset int64, leader epoch int32, metadata, error int16, tagged fields) when every row's metadata is
empty or null and carries no tagged field — checked on the bytes (two strided slices counted in C), which
proves the rows have that size — else read by a per-row ``struct`` loop; all rows become one
``numpy.frombuffer``. Any other version, and bytes the fast decoder refuses, go
through kafka-python's decoder (:func:`offsets_of_response`). The result is a :class:`GroupOffsets`:
group names, topic names and four arrays (group index, topic index, partition, offset).

Guarantee: for every well-formed v8/v9 body, :func:`decode_offset_fetch` returns what
:func:`offsets_of_response` returns for kafka-python's decoding of it (property-tested on random
responses, metadata and tagged fields included): each group's error code, and the partitions answered
without error with a committed offset ≥ 0 of the groups answered without error.
Cost: O(groups + topics) Python plus O(partitions) C/numpy: 40,000 partitions in 2,000 groups (886 kB)
≈ 7 ms, kafka-python's decoder ≈ 80 ms and its objects into rows ≈ 40 ms more.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from kafkaio.connection import _RawHeader
from kafkaio.group_types import GroupOffsets

ROW = np.dtype([("p", ">i4"), ("o", ">i8"), ("e", ">i4"), ("m", "u1"), ("err", ">i2"), ("tags", "u1")])
"""A partition of a v8+ response whose metadata is empty (or null) and that has no tagged fields: 20 bytes."""
FAST_VERSIONS = (8, 9)
"""Versions :func:`decode_offset_fetch` reads itself (v10 names topics by id)."""


class RawOffsetFetchRequest(OffsetFetchRequest, init=False):  # type: ignore[call-arg]
    """``OffsetFetchRequest`` whose response kafka-python hands back undecoded (``version``, ``body``)."""

    @property
    def header(self) -> Any:
        h = self._header
        return None if h is None else _RawHeader(h)


def offsets_of_response(resp: Any) -> tuple[list[tuple[str, int]], GroupOffsets]:
    """(group id, group error) per group of a decoded batched (v8+) ``OffsetFetchResponse``, and the committed
    offsets (≥ 0, no partition error) of the groups without error — the reference :func:`decode_offset_fetch`
    must equal."""
    errors: list[tuple[str, int]] = []
    good: dict[str, dict[tuple[str, int], int]] = {}
    for gr in resp.groups or []:
        gid = str(gr.group_id)
        errors.append((gid, int(gr.error_code)))
        if gr.error_code:
            continue
        offs = good.setdefault(gid, {})
        for t in gr.topics or []:
            for p in t.partitions or []:
                if not p.error_code and p.committed_offset >= 0:
                    offs[(str(t.name), int(p.partition_index))] = int(p.committed_offset)
    return errors, GroupOffsets.from_mapping(good)


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 35:
            raise ValueError("varint longer than 5 bytes")


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    n, pos = _uvarint(buf, pos)
    if n == 0:
        raise ValueError("null where a string is required")
    end = pos + n - 1
    if end > len(buf):
        raise ValueError("string past the end of the response")
    return buf[pos:end].decode(), end


def _skip_tags(buf: bytes, pos: int) -> int:
    n, pos = _uvarint(buf, pos)
    for _ in range(n):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise ValueError("tagged field past the end of the response")
    return pos


def _count(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = _uvarint(buf, pos)
    return max(n - 1, 0), pos  # a null array (0) reads as empty


_PIE = struct.Struct(">iqi")
_ERR = struct.Struct(">h")


def _rows_slow(buf: bytes, pos: int, n: int) -> tuple[npt.NDArray[Any], int]:
    """``n`` partitions read one by one (metadata of any length, tagged fields)."""
    rows = np.zeros(n, dtype=ROW)
    ps, os_, es = [], [], []
    for _ in range(n):
        p, o, _e = _PIE.unpack_from(buf, pos)
        m, pos = _uvarint(buf, pos + 16)
        pos += max(m - 1, 0)
        (e,) = _ERR.unpack_from(buf, pos)
        pos = _skip_tags(buf, pos + 2)
        ps.append(p)
        os_.append(o)
        es.append(e)
    rows["p"], rows["o"], rows["err"] = ps, os_, es
    return rows, pos


def _decode_v8(buf: bytes) -> tuple[list[tuple[str, int]], GroupOffsets]:
    size = ROW.itemsize
    total = len(buf)
    pos = 4  # throttle_time_ms
    n_groups, pos = _count(buf, pos)
    errors: list[tuple[str, int]] = []
    topics: dict[str, int] = {}
    chunks: list[bytes] = []
    blk_group: list[int] = []
    blk_topic: list[int] = []
    blk_n: list[int] = []
    for gi in range(n_groups):
        gid, pos = _string(buf, pos)
        n_topics, pos = _count(buf, pos)
        for _ in range(n_topics):
            name, pos = _string(buf, pos)
            n, pos = _count(buf, pos)
            if n:
                end = pos + n * size
                meta = buf[pos + 16:end:size]  # each row's metadata length byte, if every row is 20 bytes
                if end <= total and buf[pos + 19:end:size].count(0) == n \
                        and meta.count(0) + meta.count(1) == n:
                    chunks.append(buf[pos:end])  # every row is 20 bytes: no metadata, no tagged field
                    pos = end
                else:
                    rows, pos = _rows_slow(buf, pos, n)
                    chunks.append(rows.tobytes())
                blk_group.append(gi)
                blk_topic.append(topics.setdefault(name, len(topics)))
                blk_n.append(n)
            pos = _skip_tags(buf, pos)
        (err,) = _ERR.unpack_from(buf, pos)
        pos = _skip_tags(buf, pos + 2)
        errors.append((gid, err))
    _skip_tags(buf, pos)
    names: dict[str, int] = {}  # groups answered without error, each once (a repeated one merges)
    renum = np.full(n_groups, -1, dtype=np.int32)
    for k, (gid, e) in enumerate(errors):
        if e == 0:
            renum[k] = names.setdefault(gid, len(names))
    if not chunks:
        z = np.zeros(0, dtype=np.int32)
        return errors, GroupOffsets(list(names), [], z, z, z, np.zeros(0, dtype=np.int64))
    rows = np.frombuffer(b"".join(chunks), dtype=ROW)
    counts = np.asarray(blk_n, dtype=np.int64)
    group = np.repeat(renum[np.asarray(blk_group, dtype=np.int64)], counts)
    topic = np.repeat(np.asarray(blk_topic, dtype=np.int32), counts)
    offset = rows["o"].astype(np.int64)
    keep = (group >= 0) & (rows["err"] == 0) & (offset >= 0)
    return errors, GroupOffsets(list(names), list(topics), group[keep], topic[keep],
                                rows["p"][keep].astype(np.int32), offset[keep])


def decode_offset_fetch(body: bytes, version: int) -> tuple[list[tuple[str, int]], GroupOffsets]:
    """:func:`offsets_of_response` of a batched OffsetFetch response body (after the response header):
    read here for v8/v9, by kafka-python for other versions and for bytes this decoder refuses (which
    then raises what kafka-python raises)."""
    if version in FAST_VERSIONS:
        try:
            return _decode_v8(body)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError):
            pass
    return offsets_of_response(OffsetFetchResponse[version].decode(body))
