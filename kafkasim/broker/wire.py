"""Kafka wire framing for kafkasim: the API registry, the versions answered, request decoding, response framing.

Goal
    One place that knows how a Kafka frame is read and written, so the API handlers
    (:mod:`kafkasim.broker.protocol`), the SASL listener (:mod:`kafkasim.broker.security`) and the server loop
    (:mod:`kafkasim.broker.server`) never touch bytes.

Method
    kafka-python 3.x's own message classes: :data:`REGISTRY` maps an API key to its request/response
    classes (found by walking ``kafka.protocol``); :func:`decode_request` decodes a frame (without the
    4-byte size) into ``(header, request)``; :func:`encode_response` frames an answer; APIs without a
    handler get :func:`generic_error` (a well-formed response whose error codes are set) and API keys
    without a schema :func:`minimal_error_frame`.  :data:`SUPPORTED` is the highest version answered per
    key and :func:`api_versions_list` what ApiVersions advertises.

Guarantee
    Every request gets a well-formed frame back, never a closed socket.

Cost
    The registry is built once at import (~100 modules of kafka-python); per frame, one decode and one
    encode by kafka-python.
"""

from __future__ import annotations

import importlib
import pkgutil
import struct
from dataclasses import dataclass
from typing import Any

import kafka.protocol as kp
from kafka.protocol.api_message import ApiMessage

from kafkasim.broker.groups import GROUP_VERSIONS
from kafkasim.cluster import model as m
from kafkasim.cluster.model import Broker, Cluster


def _load_registry() -> dict[int, dict[str, Any]]:
    for mod in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        if ".old" in mod.name or "generate" in mod.name or "schemas" in mod.name:
            continue
        try:
            importlib.import_module(mod.name)
        except Exception:  # pragma: no cover - optional protocol modules
            continue

    def subs(c: type) -> list[type]:
        out: list[type] = []
        sc: type
        for sc in c.__subclasses__():
            out.append(sc)
            out.extend(subs(sc))
        return out

    reg: dict[int, dict[str, Any]] = {}
    for c in subs(ApiMessage):
        if getattr(c, "_class_version", None) is not None:
            continue
        try:
            key = c.API_KEY  # type: ignore[attr-defined]
        except Exception:
            continue
        reg.setdefault(key, {})[c.type] = c  # type: ignore[attr-defined]
    return reg


REGISTRY = _load_registry()

# api key -> max version we answer (min comes from the schema's validVersions)
SUPPORTED: dict[int, int] = {
    0: 9,  # Produce
    1: 12,  # Fetch (no topic ids)
    2: 7,  # ListOffsets
    3: 12,  # Metadata
    18: 4,  # ApiVersions
    19: 7,  # CreateTopics
    20: 6,  # DeleteTopics
    22: 4,  # InitProducerId
    23: 4,  # OffsetForLeaderEpoch (kafka-python's schema: 2-4, as Kafka 4.x)
    32: 4,  # DescribeConfigs
    33: 2,  # AlterConfigs
    34: 2,  # AlterReplicaLogDirs
    35: 4,  # DescribeLogDirs
    37: 3,  # CreatePartitions
    43: 2,  # ElectLeaders
    44: 1,  # IncrementalAlterConfigs
    45: 0,  # AlterPartitionReassignments
    46: 0,  # ListPartitionReassignments
    48: 1,  # DescribeClientQuotas
    49: 1,  # AlterClientQuotas
    60: 1,  # DescribeCluster
    **GROUP_VERSIONS,  # group coordinator APIs (kafkasim.broker.groups)
}


def min_version(key: int) -> int:
    """Lowest version kafka-python's schema for ``key`` declares valid."""
    req = REGISTRY[key]["request"]
    return int(str(req.json["validVersions"]).split("-")[0])


SASL_APIS = ((17, 0, 1), (36, 0, 2))  # SaslHandshake, SaslAuthenticate (answered by kafkasim.broker.security)


def api_versions_list(sasl: bool = False) -> list[tuple[int, int, int]]:
    """(api_key, min, max) triples advertised in ApiVersions (with the SASL APIs on SASL listeners)."""
    out = [(k, min_version(k), v) for k, v in sorted(SUPPORTED.items())]
    return sorted([*out, *SASL_APIS]) if sasl else out


@dataclass
class ReqContext:
    """Who sent a request (for audit and metrics)."""

    client_id: str
    host: str
    cluster: Cluster
    broker: Broker
    sasl: bool = False  # the listener speaks SASL (ApiVersions advertises SaslHandshake/SaslAuthenticate)
    principal: str = "ANONYMOUS"
    client_rack: str = ""  # a Fetch's rack_id (client.rack, v11+), as a broker-side audit plugin sees it


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request."""
    if len(frame) < 8:
        raise ValueError("request shorter than a header")
    key, ver, cid = struct.unpack_from(">hhi", frame, 0)
    return key, ver, cid


def decode_request(frame: bytes) -> tuple[Any, Any]:
    """Decode header and body with kafka-python's classes; raises on malformed input."""
    key, ver, _ = peek_header(frame)
    cls = REGISTRY[key]["request"]
    req = cls.decode(frame, version=ver, header=True)
    return req.header, req


def encode_response(resp: Any, version: int, correlation_id: int) -> bytes:
    """Frame a response (size prefix, header, body)."""
    if version != resp.API_VERSION:
        resp.API_VERSION = version  # before with_header: kafka-python would touch the header
    resp.with_header(correlation_id=correlation_id)
    return bytes(resp.encode(header=True, framed=True))


def minimal_error_frame(correlation_id: int, code: int = m.UNSUPPORTED_VERSION) -> bytes:
    """A response for API keys with no schema: correlation id + int16 error code."""
    body = struct.pack(">ih", correlation_id, code)
    return struct.pack(">i", len(body)) + body


def _set_errors(obj: Any, code: int) -> None:
    for f in obj._struct._fields:
        if f.name == "error_code" and obj.version is not None and f.for_version_q(obj.version):
            setattr(obj, f.name, code)


def generic_error(key: int, version: int, code: int) -> Any:
    """A default-valued response of ``key``/``version`` with its top-level error codes set."""
    resp = REGISTRY[key]["response"](version=version)
    _set_errors(resp, code)
    return resp
