"""KIP-932 share groups as Kafka's admin API shows them: members, their assignments, and each share-partition's
start offset.

Goal: the collectors' consumer positions and throttle protection's attribution must see share groups (Kafka 4.x,
production-ready in 4.2). A share group is not a consumer group: several members fetch the *same* partition
concurrently, records are acquired and acknowledged one by one, and progress is one **share-partition start
offset** (SPSO) per partition — the first offset not yet acknowledged (or archived) by the group — not one
committed offset per consumer. For Guardian a share group's position on a partition is its SPSO: the lag is
``log end offset − SPSO``, and the group counts as *one* reader at its SPSO however many members fetch there.

Method: kafka-python 3.x has no schema for ShareGroupDescribe (API key 77) or DescribeShareGroupOffsets (API key
90), so their bodies are encoded and decoded here from the fields KIP-932 documents (flexible versions: compact
strings and arrays, unsigned varints, tagged fields), and sent through kafka-python's connections as a
:class:`WireRequest` (a request object that carries its own bytes and whose response comes back undecoded, as
:mod:`kafkaio.connection` does for Metadata). Versions: ShareGroupDescribe v1 (Kafka 4.1+ answers only v1);
DescribeShareGroupOffsets v1 when the broker offers it (4.2: adds the broker's own ``Lag``), else v0. The group
names come from ListGroups (``GroupType`` = ``share``, v5+), the coordinator from FindCoordinator (key type
GROUP: share groups live in the group coordinator), both read by :class:`~kafkaio.source.KafkaSource`;
:func:`read_share_groups` sends both requests to every coordinator at once, all of its groups in each.

What the admin API does not give (see ``docs/share-groups.md``): which offsets each member holds (acquired,
in-flight records), the share-partition's end offset (where new fetches read; SPSO + in-flight ≤
``group.share.partition.max.record.locks``), and any per-member byte or record count.

Guarantee: the decoders read exactly the documented fields and refuse (``ValueError``) bytes that run past the
body; a group Kafka could not describe keeps its error code and message and no member; a partition answered with
an error has no start offset (``None``), and ``start_offset = -1`` (a share-partition not initialised yet: no
member has fetched it) is reported as ``None`` too.
Cost: two requests per group coordinator per read (all its share groups in each); O(members + partitions)
Python to decode.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafkaio.connection import _RawBody
from kafkaio.group_types import TP, ShareGroup, ShareMember, SharePartitionOffset

SHARE_GROUP_DESCRIBE = 77
"""API key of ShareGroupDescribe (KIP-932)."""
DESCRIBE_SHARE_GROUP_OFFSETS = 90
"""API key of DescribeShareGroupOffsets (KIP-932)."""
DESCRIBE_VERSIONS = (1, 1)
"""ShareGroupDescribe versions read here (v0 was Kafka 4.0's early-access shape, refused by 4.1+)."""
OFFSETS_VERSIONS = (0, 1)
"""DescribeShareGroupOffsets versions read here (v1, Kafka 4.2, adds the share-partition lag)."""
SHARE_GROUP_TYPE = "share"
"""ListGroups' ``GroupType`` (v5+) of a share group."""

# ------------------------------------------------------------------------------------------------ wire format
class _Writer:
    """Flexible-version (KIP-482) encoding: compact strings/arrays, unsigned varints, empty tagged fields."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def uvarint(self, n: int) -> None:
        out = bytearray()
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        self.parts.append(bytes(out))

    def string(self, s: str | None) -> None:
        if s is None:
            self.uvarint(0)
            return
        raw = s.encode()
        self.uvarint(len(raw) + 1)
        self.parts.append(raw)

    def array_len(self, n: int | None) -> None:
        self.uvarint(0 if n is None else n + 1)

    def int32(self, n: int) -> None:
        self.parts.append(struct.pack(">i", n))

    def int8(self, n: int) -> None:
        self.parts.append(struct.pack(">b", n))

    def no_tags(self) -> None:
        self.uvarint(0)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    """The decoding counterpart of :class:`_Writer` over one response body (``ValueError`` past its end)."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise ValueError(f"response body ends at {len(self.buf)}, field needs bytes {self.pos}..{end}")
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            (b,) = self._take(1)
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uuid(self) -> bytes:
        return self._take(16)

    def nullable_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode()

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise ValueError("null where a string is required")
        return s

    def count(self) -> int:
        n = self.uvarint()
        return max(n - 1, 0)  # a null array (0) reads as empty

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise ValueError(f"{len(self.buf) - self.pos} bytes left after the response")


def encode_share_group_describe(groups: Sequence[str], include_authorized_operations: bool = False) -> bytes:
    """The body of ShareGroupDescribe v1: ``GroupIds``, ``IncludeAuthorizedOperations``."""
    w = _Writer()
    w.array_len(len(groups))
    for g in groups:
        w.string(g)
    w.int8(1 if include_authorized_operations else 0)
    w.no_tags()
    return w.bytes()


def decode_share_group_describe(body: bytes) -> list[ShareGroup]:
    """The groups of a ShareGroupDescribe v1 response body (after the response header), members and assignments
    decoded (offsets not included: see :func:`decode_describe_share_group_offsets`)."""
    r = _Reader(body)
    r.int32()  # throttle time
    out: list[ShareGroup] = []
    for _ in range(r.count()):
        err = r.int16()
        msg = r.nullable_string()
        gid = r.string()
        state = r.string()
        epoch = r.int32()
        a_epoch = r.int32()
        assignor = r.string()
        members: list[ShareMember] = []
        for _ in range(r.count()):
            member_id = r.string()
            rack = r.nullable_string()
            m_epoch = r.int32()
            client_id = r.string()
            host = r.string()
            subscribed = tuple(r.string() for _ in range(r.count()))
            tps: list[TP] = []
            for _ in range(r.count()):  # Assignment.TopicPartitions
                r.uuid()
                name = r.string()
                tps.extend((name, r.int32()) for _ in range(r.count()))
                r.skip_tags()
            r.skip_tags()  # Assignment
            r.skip_tags()  # Member
            members.append(ShareMember(member_id, client_id, host, rack, m_epoch, subscribed, tuple(sorted(tps))))
        r.int32()  # authorized operations
        r.skip_tags()
        out.append(ShareGroup(gid, state, epoch, a_epoch, assignor,
                              tuple(sorted(members, key=lambda m: (m.client_id, m.member_id))), {}, err, msg))
    r.skip_tags()
    r.done()
    return out


def encode_describe_share_group_offsets(groups: Sequence[str]) -> bytes:
    """The body of DescribeShareGroupOffsets v0/v1 (same shape): every group with ``Topics`` null (all its
    share-partitions)."""
    w = _Writer()
    w.array_len(len(groups))
    for g in groups:
        w.string(g)
        w.array_len(None)
        w.no_tags()
    w.no_tags()
    return w.bytes()


@dataclass(frozen=True, slots=True)
class GroupShareOffsets:
    """One group of a DescribeShareGroupOffsets answer."""

    group_id: str
    error_code: int
    error_message: str | None
    partitions: tuple[SharePartitionOffset, ...]


def decode_describe_share_group_offsets(body: bytes, version: int) -> list[GroupShareOffsets]:
    """The groups of a DescribeShareGroupOffsets response body (v0 or v1) with their share-partitions."""
    if version not in range(OFFSETS_VERSIONS[0], OFFSETS_VERSIONS[1] + 1):
        raise ValueError(f"DescribeShareGroupOffsets v{version} is not read here")
    r = _Reader(body)
    r.int32()  # throttle time
    out: list[GroupShareOffsets] = []
    for _ in range(r.count()):
        gid = r.string()
        parts: list[SharePartitionOffset] = []
        for _ in range(r.count()):
            name = r.string()
            r.uuid()
            for _ in range(r.count()):
                index = r.int32()
                start = r.int64()
                epoch = r.int32()
                lag = r.int64() if version >= 1 else -1
                err = r.int16()
                msg = r.nullable_string()
                r.skip_tags()
                ok = err == 0 and start >= 0
                parts.append(SharePartitionOffset(name, index, start if ok else None, epoch,
                                                  lag if ok and lag >= 0 else None, err, msg))
            r.skip_tags()
        err = r.int16()
        msg = r.nullable_string()
        r.skip_tags()
        out.append(GroupShareOffsets(gid, err, msg, tuple(sorted(parts, key=lambda p: (p.topic, p.partition)))))
    r.skip_tags()
    r.done()
    return out


def merge(described: Iterable[ShareGroup], offsets: Iterable[GroupShareOffsets]) -> dict[str, ShareGroup]:
    """One :class:`ShareGroup` per group of either answer: its description with its start offsets."""
    by_id: dict[str, ShareGroup] = {g.group_id: g for g in described}
    for o in offsets:
        base = by_id.get(o.group_id, ShareGroup(o.group_id))
        if o.error_code:
            by_id[o.group_id] = _with(base, offsets_error=f"error code {o.error_code}"
                                      + (f": {o.error_message}" if o.error_message else ""))
        else:
            by_id[o.group_id] = _with(base, offsets={(p.topic, p.partition): p for p in o.partitions})
    return dict(sorted(by_id.items()))


def _with(g: ShareGroup, **changes: Any) -> ShareGroup:
    from dataclasses import replace

    return replace(g, **changes)


# ------------------------------------------------------------------------------------------------ transport
class _ResponseHeader:
    __slots__ = ("correlation_id",)

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id


class _WireResponseType:
    """Stands in for a response class in kafka-python's parser: reads the v1 response header (correlation id,
    tagged fields), keeps the body undecoded."""

    def __init__(self, version: int) -> None:
        self.version = version

    def parse_header(self, data: Any) -> _ResponseHeader:
        (cid,) = struct.unpack(">i", data.read(4))
        n = _uvarint_io(data)
        for _ in range(n):
            _uvarint_io(data)
            data.read(_uvarint_io(data))
        return _ResponseHeader(int(cid))

    def decode(self, data: Any) -> _RawBody:
        return _RawBody(self.version, bytes(data.read()))


def _uvarint_io(data: Any) -> int:
    value = shift = 0
    while True:
        raw = data.read(1)
        if not raw:
            raise ValueError("response header ends inside a varint")
        b = raw[0]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7


class _WireHeader:
    """Request header v2 (flexible): api key, version, correlation id, client id, no tagged field."""

    __slots__ = ("api_key", "api_version", "client_id", "correlation_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    @property
    def request_api_key(self) -> int:
        return self.api_key

    @property
    def request_api_version(self) -> int:
        return self.api_version

    def get_response_class(self) -> _WireResponseType:
        return _WireResponseType(self.api_version)

    def encode(self) -> bytes:
        cid = b"\xff\xff" if self.client_id is None else struct.pack(">h", len(self.client_id.encode())) \
            + self.client_id.encode()
        return struct.pack(">hhi", self.api_key, self.api_version, self.correlation_id) + cid + b"\x00"


class WireRequest:
    """A request whose body is encoded here, sent through kafka-python's connection (which frames it, stamps the
    correlation id and hands back the response body undecoded as a ``_RawBody``)."""

    def __init__(self, api_key: int, version: int, body: bytes, name: str) -> None:
        self.API_KEY = api_key
        self.API_VERSION = version
        self.body = body
        self.name = name
        self._header: _WireHeader | None = None

    def expect_response(self) -> bool:
        return True

    def with_header(self, correlation_id: int = 0, client_id: str | None = "kafka-python") -> None:
        self._header = _WireHeader(self.API_KEY, self.API_VERSION, correlation_id, client_id)

    @property
    def header(self) -> _WireHeader | None:
        return self._header

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> bytes:
        if version is not None and version != self.API_VERSION:
            raise ValueError(f"{self.name} was encoded for v{self.API_VERSION}")
        if header and self._header is None:
            raise ValueError("No header found")
        data = (self._header.encode() if header and self._header is not None else b"") + self.body
        return struct.pack(">i", len(data)) + data if framed else data

    def __repr__(self) -> str:
        return f"<{self.name} v{self.API_VERSION}, {len(self.body)} bytes>"


def broker_version(api_versions: Mapping[int, tuple[int, int]] | None, api_key: int,
                   ours: tuple[int, int]) -> int | None:
    """The highest version of ``api_key`` both the broker (its ApiVersions answer) and this module speak, or
    ``None`` (the broker does not offer the API: share groups are not enabled there, or Kafka < 4.1)."""
    if not api_versions or api_key not in api_versions:
        return None
    lo, hi = api_versions[api_key]
    v = min(hi, ours[1])
    return v if v >= max(lo, ours[0]) else None


async def read_share_groups(mgr: Any, by_coordinator: Mapping[int, Sequence[str]], timeout_ms: int,
                            errors: dict[str, str]) -> tuple[dict[str, ShareGroup], set[int]]:
    """Describe the share groups of every coordinator and read their start offsets, all requests in flight at once
    (``mgr``: kafka-python's connection manager, on its loop). Returns the groups and the coordinators that failed
    to answer (their groups' coordinators should be found again); failures go to ``errors``."""
    api = getattr(getattr(mgr, "broker_version_data", None), "api_versions", None)
    v_desc = broker_version(api, SHARE_GROUP_DESCRIBE, DESCRIBE_VERSIONS)
    v_off = broker_version(api, DESCRIBE_SHARE_GROUP_OFFSETS, OFFSETS_VERSIONS)
    if not by_coordinator:
        return {}, set()
    if v_desc is None or v_off is None:
        errors["share_groups"] = ("the brokers offer no ShareGroupDescribe v1 / DescribeShareGroupOffsets "
                                  "(share groups not enabled: share.version feature)")
        return {}, set()
    sends: list[tuple[int, str, Any]] = []
    for c, names in sorted(by_coordinator.items()):
        gs = sorted(names)
        for kind, req in (("describe", WireRequest(SHARE_GROUP_DESCRIBE, v_desc, encode_share_group_describe(gs),
                                                   "ShareGroupDescribeRequest")),
                          ("offsets", WireRequest(DESCRIBE_SHARE_GROUP_OFFSETS, v_off,
                                                  encode_describe_share_group_offsets(gs),
                                                  "DescribeShareGroupOffsetsRequest"))):
            sends.append((c, kind, mgr.send(req, node_id=c, request_timeout_ms=timeout_ms)))
    described: list[ShareGroup] = []
    offsets: list[GroupShareOffsets] = []
    failed: set[int] = set()
    for c, kind, fut in sends:
        try:
            resp = await mgr.wait_for(fut, timeout_ms)
            if kind == "describe":
                described.extend(decode_share_group_describe(resp.body))
            else:
                offsets.extend(decode_describe_share_group_offsets(resp.body, resp.version))
        except Exception as exc:
            errors[f"share_group_{kind} coordinator {c}"] = f"{type(exc).__name__}: {exc}"
            failed.add(c)
    read = merge(described, offsets)
    for gid, g in read.items():
        if g.error_code:
            errors[f"share_group_describe group {gid}"] = f"error code {g.error_code}" + (
                f": {g.error_message}" if g.error_message else "")
        if g.offsets_error:
            errors[f"share_group_offsets group {gid}"] = g.offsets_error
    return read, failed
