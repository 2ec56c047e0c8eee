"""The columnar OffsetFetch v8/v9 decoder reads what kafka-python's decoder reads, on random responses."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import OffsetFetchResponse

from kafkaio.group_types import GroupOffsets
from kafkaio.offset_fetch import _decode_v8, decode_offset_fetch, offsets_of_response

Part = tuple[int, int, int, str | None, int, list[tuple[int, bytes]]]
Topic = tuple[str, list[Part], list[tuple[int, bytes]]]
Group = tuple[str, int, list[Topic], list[tuple[int, bytes]]]

_text = st.text(st.characters(codec="utf-8"), max_size=10)
_names = st.sampled_from(["orders", "clicks", "t-1", "ü-topic", ""]) | _text
_tags = st.lists(st.tuples(st.integers(0, 300), st.binary(max_size=6)), max_size=2,
                 unique_by=lambda x: x[0]).map(lambda xs: sorted(xs))
_offsets = st.sampled_from([-1, 0, 1, 2**31, 2**63 - 1, -2**63]) | st.integers(-2**63, 2**63 - 1)
_errors = st.sampled_from([0, 0, 0, 3, 16, -1])


def _part(tagged: bool) -> st.SearchStrategy[Part]:
    return st.tuples(st.integers(-2**31, 2**31 - 1), _offsets, st.integers(-2**31, 2**31 - 1),
                     st.sampled_from([None, ""]) | _text, _errors, _tags if tagged else st.just([]))


def _groups(tagged: bool) -> st.SearchStrategy[list[Group]]:
    tags = _tags if tagged else st.just([])
    topic = st.tuples(_names, st.lists(_part(tagged), max_size=5), tags)
    return st.lists(st.tuples(_names, _errors, st.lists(topic, max_size=3), tags), max_size=4)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _str(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _tagged(tags: list[tuple[int, bytes]]) -> bytes:
    return _uvarint(len(tags)) + b"".join(_uvarint(t) + _uvarint(len(v)) + v for t, v in tags)


def encode(groups: list[Group], top_tags: list[tuple[int, bytes]] | None = None) -> bytes:
    """A v8 body written by hand per the schema (tagged fields where kafka-python's objects cannot put them)."""
    out = [struct.pack(">i", 0), _uvarint(len(groups) + 1)]
    for gid, err, topics, gtags in groups:
        out += [_str(gid), _uvarint(len(topics) + 1)]
        for name, parts, ttags in topics:
            out += [_str(name), _uvarint(len(parts) + 1)]
            for p, o, e, md, pe, ptags in parts:
                out += [struct.pack(">iqi", p, o, e), _str(md), struct.pack(">h", pe), _tagged(ptags)]
            out.append(_tagged(ttags))
        out += [struct.pack(">h", err), _tagged(gtags)]
    out.append(_tagged(top_tags or []))
    return b"".join(out)


def by_kafka_python(groups: list[Group]) -> bytes:
    R = OffsetFetchResponse
    G = R.OffsetFetchResponseGroup
    T = G.OffsetFetchResponseTopics
    P = T.OffsetFetchResponsePartitions
    return bytes(R(version=8, throttle_time_ms=0, groups=[
        G(group_id=gid, error_code=err, topics=[
            T(name=name, partitions=[P(partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=md,
                                       error_code=pe) for p, o, e, md, pe, _ in parts]) for name, parts, _ in topics])
        for gid, err, topics, _ in groups]).encode())


def same(a: tuple[list[tuple[str, int]], GroupOffsets], b: tuple[list[tuple[str, int]], GroupOffsets]) -> None:
    assert a[0] == b[0]
    assert a[1].as_dict() == b[1].as_dict()
    assert a[1].groups == b[1].groups
    for col in ("group", "topic", "partition"):
        assert getattr(a[1], col).dtype == np.int32
    assert a[1].offset.dtype == np.int64


@settings(deadline=None, max_examples=150)
@given(_groups(tagged=False))
def test_decodes_kafka_pythons_encoding_as_kafka_python_does(groups: list[Group]) -> None:
    body = by_kafka_python(groups)
    assert encode(groups) == body  # the hand encoder is the schema
    for version in (8, 9):
        fast = _decode_v8(body)  # never the fallback: these bytes are well-formed
        same(fast, offsets_of_response(OffsetFetchResponse[version].decode(body)))
        same(decode_offset_fetch(body, version), fast)


@settings(deadline=None, max_examples=150)
@given(_groups(tagged=True), _tags)
def test_tagged_fields_and_metadata_are_skipped_as_kafka_python_skips_them(groups: list[Group],
                                                                           top: list[tuple[int, bytes]]) -> None:
    body = encode(groups, top)
    same(_decode_v8(body), offsets_of_response(OffsetFetchResponse[8].decode(body)))


@settings(deadline=None, max_examples=100)
@given(_groups(tagged=True), st.data())
def test_truncated_bodies_fail_as_kafka_pythons_decoder_fails(groups: list[Group], data: Any) -> None:
    body = encode(groups)
    cut = data.draw(st.integers(0, max(len(body) - 1, 0)))
    try:
        ref = offsets_of_response(OffsetFetchResponse[8].decode(body[:cut]))
    except Exception:
        with pytest.raises(Exception):  # noqa: B017 - kafka-python's own error, whatever it is
            decode_offset_fetch(body[:cut], 8)
        return
    same(decode_offset_fetch(body[:cut], 8), ref)


def test_errors_and_missing_commits_are_left_out() -> None:
    body = by_kafka_python([("g", 0, [("t", [(0, 5, -1, "", 0, []), (1, -1, -1, None, 0, []), (2, 9, 1, "x", 3, [])],
                                       [])], []), ("h", 16, [], [])])
    errors, tab = decode_offset_fetch(body, 8)
    assert errors == [("g", 0), ("h", 16)]
    assert tab.as_dict() == {"g": {("t", 0): 5}}  # no commit (-1) and a partition error are left out
    assert GroupOffsets.concat([tab, GroupOffsets.from_mapping({"k": {("u", 3): 7, ("t", 1): 2}})]).as_dict() == {
        "g": {("t", 0): 5}, "k": {("u", 3): 7, ("t", 1): 2}}
