"""Audit record format and its pure validation (no I/O).

An audit record is one JSON object per Kafka message on the audit topic, as a broker's audit
plugin (or kafkasim) writes it::

    {"ts": "2026-11-21T10:00:00.123Z" | 1763719200123 (epoch ms),
     "cluster": "c1", "broker": 1, "broker_idc": "idc-a",
     "client_id": "orders-writer", "user": "svc-orders", "client_ip": "10.1.2.3",
     "client_idc": "idc-b", "api": "produce" | "fetch", "topic": "orders", "partition": 0,
     "bytes": 1048576, "records": 100, "latency_ms": 2.5, "client_rack": "idc-b"}

``client_idc``, ``user``, ``broker_idc`` and ``client_rack`` (a fetch's ``client.rack``, KIP-392) may be
missing (stored as ""; the ingestor can fill
``broker_idc`` from the topology), and ``kind`` is accepted for ``api`` (kafkasim's audit stream
uses it); unknown fields such as ``interval_s`` are ignored. Anything else missing, of the wrong
type or impossible (negative bytes, NaN latency, bad IP, unknown api) rejects the record with a
reason; a rejected record is counted, never inserted.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

AUDIT_COLUMNS: tuple[str, ...] = (
    "ts", "cluster", "broker", "broker_idc", "client_id", "user", "client_ip", "client_idc",
    "api", "topic", "partition", "bytes", "records", "latency_ms", "client_rack",
)
PROVENANCE_COLUMNS: tuple[str, ...] = ("src_topic", "src_partition", "src_offset")

_MIN_TS = datetime(2000, 1, 1, tzinfo=UTC)
_MAX_TS = datetime(2200, 1, 1, tzinfo=UTC)
_Name = Field(min_length=1, max_length=255)


class AuditRecord(BaseModel):
    """One validated produce/fetch audit record."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=False)

    ts: datetime
    cluster: str = _Name
    broker: int = Field(ge=0, le=2**31 - 1)
    broker_idc: str = Field(default="", max_length=255)
    client_id: str = Field(max_length=255)
    user: str = Field(default="", max_length=255)
    client_ip: str = Field(max_length=64)
    client_idc: str = Field(default="", max_length=255)
    api: Literal["produce", "fetch"] = Field(validation_alias=AliasChoices("api", "kind"))
    topic: str = Field(min_length=1, max_length=249)
    partition: int = Field(ge=0, le=2**31 - 1)
    bytes: int = Field(ge=0, le=2**63 - 1)
    records: int = Field(ge=0, le=2**63 - 1)
    latency_ms: float = Field(ge=0.0, le=1e9)
    client_rack: str = Field(default="", max_length=255)

    @field_validator("ts", mode="before")
    @classmethod
    def _parse_ts(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("ts must be epoch milliseconds or an ISO-8601 string")
        if isinstance(v, int | float):
            if not math.isfinite(v):
                raise ValueError("ts is not finite")
            return datetime.fromtimestamp(v / 1000.0, tz=UTC)
        return v

    @field_validator("ts")
    @classmethod
    def _check_ts(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            v = v.replace(tzinfo=UTC)
        v = v.astimezone(UTC)
        if not (_MIN_TS <= v < _MAX_TS):
            raise ValueError("ts out of range")
        return v

    @field_validator("client_ip")
    @classmethod
    def _check_ip(cls, v: str) -> str:
        return str(ipaddress.ip_address(v))

    @field_validator("latency_ms")
    @classmethod
    def _check_latency(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("latency_ms is not finite")
        return v

    def row(self) -> tuple[Any, ...]:
        """Values in ``AUDIT_COLUMNS`` order (ts as an aware UTC datetime)."""
        return tuple(getattr(self, c) for c in AUDIT_COLUMNS)


def parse_audit(value: bytes | str | None) -> AuditRecord:
    """Decode and validate one message value; raise ``ValueError`` naming every problem."""
    if value is None:
        raise ValueError("empty message (tombstone)")
    try:
        obj = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    try:
        return AuditRecord.model_validate(obj)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<record>'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(problems) from None


def validate_many(values: Sequence[bytes | str | None]) -> tuple[list[AuditRecord | None], list[str]]:
    """Validate a batch: per value the record or None, and per value the reason ('' when valid)."""
    out: list[AuditRecord | None] = []
    reasons: list[str] = []
    for v in values:
        try:
            out.append(parse_audit(v))
            reasons.append("")
        except ValueError as exc:
            out.append(None)
            reasons.append(str(exc))
    return out, reasons
