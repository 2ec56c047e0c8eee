"""KIP-932 share groups at the Kafka edge: the request bodies kafka-python lacks (ShareGroupDescribe v1,
DescribeShareGroupOffsets v0/v1), their responses decoded from bytes built here field by field (the test's own
writer, not the module's), the request framing through kafka-python's parser, and the read over a fake manager."""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

import pytest

from kafkaio.group_types import ShareGroup, ShareMember, SharePartitionOffset, members_by_partition, share_positions
from kafkaio.share_groups import (
    DESCRIBE_SHARE_GROUP_OFFSETS,
    SHARE_GROUP_DESCRIBE,
    WireRequest,
    broker_version,
    decode_describe_share_group_offsets,
    decode_share_group_describe,
    encode_describe_share_group_offsets,
    encode_share_group_describe,
    merge,
    read_share_groups,
)

TOPIC_ID = bytes(range(16))


# ---------------------------------------------------------------------------------------------- a test writer
def uv(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cs(s: str | None) -> bytes:
    """Compact (nullable) string."""
    return b"\x00" if s is None else uv(len(s.encode()) + 1) + s.encode()


def arr(items: list[bytes]) -> bytes:
    return uv(len(items) + 1) + b"".join(items)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


NO_TAGS = b"\x00"
SOME_TAGS = uv(2) + uv(0) + uv(3) + b"abc" + uv(7) + uv(1) + b"z"  # two unknown tagged fields to skip


def member(mid: str, client: str, parts: dict[str, list[int]], rack: str | None = None, tags: bytes = NO_TAGS) -> bytes:
    tps = [TOPIC_ID + cs(t) + arr([i32(p) for p in ps]) + NO_TAGS for t, ps in parts.items()]
    return (cs(mid) + cs(rack) + i32(5) + cs(client) + cs("/127.0.0.1") + arr([cs(t) for t in parts])
            + arr(tps) + NO_TAGS + tags)


def describe_response(groups: list[bytes]) -> bytes:
    return i32(0) + arr(groups) + NO_TAGS


def described_group(gid: str, members: list[bytes], error: int = 0, message: str | None = None) -> bytes:
    return (i16(error) + cs(message) + cs(gid) + cs("Stable" if not error else "") + i32(4) + i32(4)
            + cs("simple") + arr(members) + i32(-2147483648) + SOME_TAGS)


def offsets_partition(p: int, start: int, lag: int | None, error: int = 0, message: str | None = None) -> bytes:
    return i32(p) + i64(start) + i32(0) + (i64(lag) if lag is not None else b"") + i16(error) + cs(message) + NO_TAGS


def offsets_response(groups: list[tuple[str, dict[str, list[bytes]], int]]) -> bytes:
    out = []
    for gid, topics, err in groups:
        ts = [cs(t) + TOPIC_ID + arr(parts) + NO_TAGS for t, parts in topics.items()]
        out.append(cs(gid) + arr(ts) + i16(err) + cs("not a share group" if err else None) + NO_TAGS)
    return i32(0) + arr(out) + NO_TAGS


# ---------------------------------------------------------------------------------------------- requests
def test_request_bodies_are_the_documented_fields_in_compact_form() -> None:
    # GroupIds: compact array of compact strings; IncludeAuthorizedOperations: bool; no tagged field
    assert encode_share_group_describe(["workers", "b"]) == arr([cs("workers"), cs("b")]) + b"\x00" + NO_TAGS
    assert encode_share_group_describe([], include_authorized_operations=True) == arr([]) + b"\x01" + NO_TAGS
    # Groups[GroupId, Topics = null (every share-partition), tags], tags
    assert encode_describe_share_group_offsets(["workers"]) == arr([cs("workers") + b"\x00" + NO_TAGS]) + NO_TAGS


def test_a_wire_request_is_framed_with_a_v2_header_and_its_response_header_is_read() -> None:
    req = WireRequest(SHARE_GROUP_DESCRIBE, 1, b"BODY", "ShareGroupDescribeRequest")
    with pytest.raises(ValueError):
        req.encode(header=True)  # no header yet
    req.with_header(correlation_id=42, client_id="guardian")
    data = req.encode(framed=True, header=True)
    (size,) = struct.unpack(">i", data[:4])
    assert size == len(data) - 4
    assert data[4:] == struct.pack(">hhi", 77, 1, 42) + struct.pack(">h", 8) + b"guardian" + b"\x00" + b"BODY"
    assert req.header is not None and req.header.correlation_id == 42 and req.expect_response()
    rtype = req.header.get_response_class()
    buf = io.BytesIO(i32(42) + SOME_TAGS + b"payload")
    assert rtype.parse_header(buf).correlation_id == 42
    body = rtype.decode(buf)
    assert (body.version, body.body) == (1, b"payload")


def test_kafka_pythons_parser_sends_a_wire_request_and_hands_back_its_body() -> None:
    from kafka.protocol.parser import KafkaProtocol

    proto = KafkaProtocol(client_id="guardian")
    req = WireRequest(DESCRIBE_SHARE_GROUP_OFFSETS, 1, encode_describe_share_group_offsets(["g"]), "X")
    cid = proto.send_request(req)
    sent = proto.send_bytes()
    assert sent[8:12] == i32(cid) and sent[4:6] == i16(90)
    reply = i32(cid) + NO_TAGS + b"\x01\x02"
    got = proto.receive_bytes(i32(len(reply)) + reply)
    assert len(got) == 1 and got[0][0] == cid and got[0][1].body == b"\x01\x02" and got[0][1].version == 1


# ---------------------------------------------------------------------------------------------- responses
def test_describe_decodes_members_sharing_a_partition_and_skips_tagged_fields() -> None:
    body = describe_response([
        described_group("workers", [member("m-2", "worker-b", {"jobs": [0]}, tags=SOME_TAGS),
                                    member("m-1", "worker-a", {"jobs": [0, 1], "logs": [3]}, rack="r1"),
                                    member("m-3", "worker-c", {"jobs": [0]})]),
        described_group("gone", [], error=69, message="Group gone not found."),
    ])
    g, gone = decode_share_group_describe(body)
    assert (g.group_id, g.state, g.group_epoch, g.assignor, g.error_code) == ("workers", "Stable", 4, "simple", 0)
    assert [m.client_id for m in g.members] == ["worker-a", "worker-b", "worker-c"]
    a = g.members[0]
    assert a.rack == "r1" and a.member_id == "m-1" and a.subscribed == ("jobs", "logs")
    assert a.assignment == (("jobs", 0), ("jobs", 1), ("logs", 3))
    assert [m.client_id for m in g.members_of(("jobs", 0))] == ["worker-a", "worker-b", "worker-c"]
    assert [m.client_id for m in g.members_of(("jobs", 1))] == ["worker-a"]
    assert (gone.group_id, gone.error_code, gone.error_message, gone.members) == ("gone", 69, "Group gone not found.",
                                                                                  ())


@pytest.mark.parametrize("version", [0, 1])
def test_offsets_decode_start_offsets_lag_and_errors(version: int) -> None:
    lag = (lambda n: n) if version else (lambda n: None)  # v0 has no Lag field
    body = offsets_response([
        ("workers", {"jobs": [offsets_partition(0, 1500, lag(20)), offsets_partition(1, -1, lag(-1)),
                              offsets_partition(2, 7, lag(0), error=5, message="leader not available")]}, 0),
        ("other", {}, 69),
    ])
    w, other = decode_describe_share_group_offsets(body, version)
    p0, p1, p2 = w.partitions
    assert (p0.topic, p0.partition, p0.start_offset, p0.lag) == ("jobs", 0, 1500, 20 if version else None)
    assert p1.start_offset is None and p1.lag is None  # -1: not initialised (no member fetched it yet)
    assert p2.start_offset is None and p2.error_code == 5 and p2.error_message == "leader not available"
    assert (other.group_id, other.error_code, other.partitions) == ("other", 69, ())
    with pytest.raises(ValueError):
        decode_describe_share_group_offsets(body, 1 - version)  # the other version's shape does not fit
    with pytest.raises(ValueError):
        decode_describe_share_group_offsets(body, 2)


def test_truncated_or_padded_bodies_are_refused() -> None:
    body = describe_response([described_group("workers", [member("m", "c", {"jobs": [0]})])])
    for cut in (3, len(body) // 2, len(body) - 1):
        with pytest.raises(ValueError):
            decode_share_group_describe(body[:cut])
    with pytest.raises(ValueError):
        decode_share_group_describe(body + b"\x00")


# ---------------------------------------------------------------------------------------------- derived views
def group(gid: str, members: list[tuple[str, tuple[tuple[str, int], ...]]], offsets: dict[tuple[str, int], int | None]
          ) -> ShareGroup:
    return ShareGroup(gid, "Stable", members=tuple(ShareMember(f"m-{c}-{k}", c, "h", None, 1, ("jobs",), a)
                                                   for k, (c, a) in enumerate(members)),
                      offsets={tp: SharePartitionOffset(tp[0], tp[1], o, 0, None) for tp, o in offsets.items()})


def test_a_share_group_is_one_position_per_partition_whatever_its_member_count() -> None:
    j0, j1 = ("jobs", 0), ("jobs", 1)
    groups = {"workers": group("workers", [("a", (j0,)), ("b", (j0, j1)), ("c", (j0,)), ("c", (j0,))],
                               {j0: 1500, j1: None}),
              "audit": group("audit", [("x", (j1,))], {j1: 30})}
    tab = share_positions(groups)
    assert tab.as_dict() == {"audit": {j1: 30}, "workers": {j0: 1500}}  # j1 of workers: no SPSO yet, no row
    assert len(tab) == 2
    assert members_by_partition(groups) == {j0: {"workers": ("a", "b", "c")}, j1: {"audit": ("x",), "workers": ("b",)}}


def test_merge_keeps_each_answer_and_says_why_offsets_are_missing() -> None:
    desc = [ShareGroup("workers", "Stable"), ShareGroup("idle", "Empty")]
    offs = decode_describe_share_group_offsets(offsets_response([
        ("workers", {"jobs": [offsets_partition(0, 9, 0)]}, 0), ("idle", {}, 16), ("orphan", {}, 0)]), 1)
    got = merge(desc, offs)
    assert list(got) == ["idle", "orphan", "workers"]
    assert got["workers"].start_offset(("jobs", 0)) == 9 and got["workers"].state == "Stable"
    assert got["idle"].offsets_error is not None and "16" in got["idle"].offsets_error
    assert got["orphan"].state == "" and got["orphan"].offsets == {}


# ---------------------------------------------------------------------------------------------- the read
class FakeManager:
    """kafka-python's connection manager as :func:`read_share_groups` uses it: ``send`` / ``wait_for``."""

    def __init__(self, api_versions: dict[int, tuple[int, int]], answers: dict[tuple[int, int], Any]) -> None:
        self.broker_version_data = type("V", (), {"api_versions": api_versions})()
        self.answers = answers
        self.sent: list[tuple[int, int, int, bytes]] = []

    def send(self, req: WireRequest, node_id: int, request_timeout_ms: int) -> tuple[int, int]:
        self.sent.append((node_id, req.API_KEY, req.API_VERSION, req.body))
        return node_id, req.API_KEY

    async def wait_for(self, fut: tuple[int, int], timeout_ms: int) -> Any:
        ans = self.answers[fut]
        if isinstance(ans, Exception):
            raise ans
        return ans


def test_read_asks_every_coordinator_once_per_api_and_reports_a_silent_one() -> None:
    from kafkaio.connection import _RawBody

    ans: dict[tuple[int, int], Any] = {
        (1, 77): _RawBody(1, describe_response([described_group("workers", [member("m", "w-1", {"jobs": [0]})])])),
        (1, 90): _RawBody(1, offsets_response([("workers", {"jobs": [offsets_partition(0, 12, 3)]}, 0)])),
        (2, 77): TimeoutError("no answer"),
        (2, 90): _RawBody(0, offsets_response([("z", {}, 15)])),
    }
    mgr = FakeManager({77: (1, 1), 90: (0, 1)}, ans)
    errors: dict[str, str] = {}
    got, failed = asyncio.run(read_share_groups(mgr, {1: ["workers"], 2: ["z"]}, 1000, errors))
    assert sorted((n, k, v) for n, k, v, _ in mgr.sent) == [(1, 77, 1), (1, 90, 1), (2, 77, 1), (2, 90, 1)]
    assert failed == {2} and "share_group_describe coordinator 2" in errors
    assert got["workers"].start_offset(("jobs", 0)) == 12 and got["workers"].offsets[("jobs", 0)].lag == 3
    assert [m.client_id for m in got["workers"].members] == ["w-1"]
    assert "share_group_offsets group z" in errors  # COORDINATOR_NOT_AVAILABLE for z


def test_a_broker_without_share_groups_is_not_asked() -> None:
    mgr = FakeManager({16: (0, 5)}, {})
    errors: dict[str, str] = {}
    got, failed = asyncio.run(read_share_groups(mgr, {1: ["workers"]}, 1000, errors))
    assert got == {} and failed == set() and mgr.sent == [] and "share.version" in errors["share_groups"]
    assert asyncio.run(read_share_groups(mgr, {}, 1000, {})) == ({}, set())  # no share group: nothing to say


def test_versions_are_the_highest_both_sides_speak() -> None:
    assert broker_version({77: (1, 1)}, 77, (1, 1)) == 1
    assert broker_version({77: (0, 0)}, 77, (1, 1)) is None  # Kafka 4.0's early-access v0 only
    assert broker_version({90: (0, 3)}, 90, (0, 1)) == 1
    assert broker_version({90: (0, 0)}, 90, (0, 1)) == 0
    assert broker_version(None, 90, (0, 1)) is None
