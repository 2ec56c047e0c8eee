"""The per-cluster execution lease, as records of a one-partition log: who holds it is a pure fold.

Goal: one executor per cluster at a time — a ``guardian exec`` CLI, a service execution, a second
controller group — decided *on the cluster itself*, with the holder's identity, its expiry, the moves it
has in flight and the throttles it set readable by every other executor, alive or not.

Why a log (and not a config entry): Kafka has no lock primitive. A custom dynamic broker config is
accepted by ``IncrementalAlterConfigs`` but unreadable: ``DescribeConfigs`` treats a config name it does
not know as possibly sensitive and returns its value as null (``KafkaConfig.maybeSensitive``); a custom
topic config is rejected (``Unknown topic config name``). A single-partition topic is readable and
writable on any Kafka >= 2.4 with the cluster's own security, and its log is a total order: every writer
appends, every reader folds the same records in the same order to the same holder — a compare-and-set
without a lock server. With ``message.timestamp.type=LogAppendTime`` the partition leader stamps each
record, so expiry is judged on one clock, not on the writers'.

Method: each record (JSON) names the offset of the record its writer believed current (``prev``) and that
record's facts (``parent``: its token, its expiry, whether it was a release), so its own validity is
decidable from itself (:func:`locally_valid`):

* ``claim`` — valid when the parent was released, expired at the claim's append time, was the claimant's
  own (same token), or there was none;
* ``renew`` / ``release`` — valid when the parent was the writer's own (same token).

The valid records form a chain: a record is valid when it is locally valid and its ``prev`` is the
offset of the last valid record (the first such record wins; a writer that raced and lost sees a
different tip). Retention may cut the log's head: the chain then starts at the locally valid record
whose cut parent is the latest (``prev`` largest, earliest offset on ties) — a parent older than the
retention (hours) is long expired, so nothing decided by the cut records still matters.

Guarantee: readers of the same records agree on the tip (:func:`fold` is deterministic); a claim never
succeeds while another holder's lease is unexpired on the partition leader's clock; a renewal after an
expiry is valid only if nobody claimed in between. No fencing: an executor paused longer than its TTL
between a renewal and a write may still write once (it finds out at its next renewal).
Cost: O(records read); records are a few hundred bytes, one per renewal (every TTL/3 or on change).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LEASE_TOPIC = "__guardian_executor_lease"
"""The lease log's topic (one partition)."""
LEASE_TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "3600000", "segment.ms": "600000",
                       "message.timestamp.type": "LogAppendTime"}
"""Retention (1 h) far above any TTL; the leader's clock stamps every record."""
CLAIM, RENEW, RELEASE = "claim", "renew", "release"


@dataclass(frozen=True)
class LeaseRecord:
    """One record of the lease log (``offset`` and ``ts_ms`` are the log's; the rest is the writer's)."""

    op: str
    token: str
    prev: int
    """Offset of the record the writer built on (-1: it saw none)."""
    parent_token: str | None = None
    parent_until_ms: int | None = None
    parent_released: bool = False
    ttl_ms: int = 0
    owner: Mapping[str, Any] = field(default_factory=dict)
    """Who writes: host, pid, kind (cli | service), execution, client id, group (service) or state (cli)."""
    moves: tuple[str, ...] = ()
    """Partitions (``topic:partition``) the holder has reassignments in flight for."""
    throttles: Mapping[str, Any] = field(default_factory=dict)
    """Throttles the holder set: ``{"brokers": {id: {config: value}}, "topics": {name: {config: [entries]}}}``."""
    inherited: Mapping[str, Any] = field(default_factory=dict)
    """What an earlier holder left and this one has not cleaned yet: ``{"moves": [...], "throttles": {...}}``."""
    offset: int = -1
    ts_ms: int = 0

    @property
    def until_ms(self) -> int:
        """When this record's lease expires (append time + TTL)."""
        return self.ts_ms + self.ttl_ms

    @property
    def released(self) -> bool:
        """True for a release (the lease is free from this record on)."""
        return self.op == RELEASE

    def holds_at(self, now_ms: float) -> bool:
        """True when this record, as the tip, means its writer holds the lease at ``now_ms``."""
        return not self.released and now_ms < self.until_ms

    def describe(self) -> str:
        """``kind executor pid P on HOST (execution E, group G)``: who wrote this record."""
        o = self.owner
        extra = ", ".join(f"{k} {o[k]}" for k in ("execution", "group", "state") if o.get(k) not in (None, ""))
        return (f"{o.get('kind', '?')} executor pid {o.get('pid', '?')} on {o.get('host', '?')}"
                + (f" ({extra})" if extra else ""))

    def to_bytes(self) -> bytes:
        """The record's value (the writer's fields; offset and time are the log's)."""
        doc = {"v": 1, "op": self.op, "token": self.token, "prev": self.prev, "ttl_ms": self.ttl_ms,
               "parent": {"token": self.parent_token, "until_ms": self.parent_until_ms,
                          "released": self.parent_released},
               "owner": dict(self.owner), "moves": list(self.moves), "throttles": self.throttles,
               "inherited": self.inherited}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @staticmethod
    def from_bytes(value: bytes | None, offset: int, ts_ms: int) -> LeaseRecord | None:
        """Parse a record value; ``None`` for anything that is not a lease record (never raises)."""
        try:
            doc = json.loads(value or b"")
            parent = doc.get("parent") or {}
            if doc.get("v") != 1 or doc.get("op") not in (CLAIM, RENEW, RELEASE):
                return None
            return LeaseRecord(op=str(doc["op"]), token=str(doc["token"]), prev=int(doc["prev"]),
                               parent_token=parent.get("token"), parent_until_ms=parent.get("until_ms"),
                               parent_released=bool(parent.get("released")), ttl_ms=int(doc["ttl_ms"]),
                               owner=dict(doc.get("owner") or {}), moves=tuple(str(m) for m in doc.get("moves", ())),
                               throttles=dict(doc.get("throttles") or {}), inherited=dict(doc.get("inherited") or {}),
                               offset=offset, ts_ms=ts_ms)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def locally_valid(r: LeaseRecord) -> bool:
    """Whether ``r`` is a legal step from the parent it names (see the module docstring)."""
    if r.op == CLAIM:
        if r.parent_token is None or r.parent_released or r.parent_token == r.token:
            return True
        return r.parent_until_ms is not None and r.ts_ms >= r.parent_until_ms
    return r.parent_token == r.token


def child(tip: LeaseRecord | None, op: str, token: str, ttl_ms: int, **fields: Any) -> LeaseRecord:
    """The record a writer appends after reading ``tip`` (the log's fields are filled in by the log)."""
    if tip is None:
        return LeaseRecord(op=op, token=token, prev=-1, ttl_ms=ttl_ms, **fields)
    return LeaseRecord(op=op, token=token, prev=tip.offset, parent_token=tip.token, parent_until_ms=tip.until_ms,
                       parent_released=tip.released, ttl_ms=ttl_ms, **fields)


def fold(records: Iterable[LeaseRecord], tip: LeaseRecord | None = None, first_offset: int = 0) -> LeaseRecord | None:
    """The last valid record after ``records`` (offset order), continuing from ``tip`` (a previous fold's).

    Without a ``tip``, the chain starts at the locally valid record whose parent lies before
    ``first_offset`` (the log's first offset read; -1 for "none") with the largest ``prev``, earliest first.
    """
    rows = sorted(records, key=lambda r: r.offset)
    if tip is None:
        heads = [r for r in rows if r.prev < first_offset and locally_valid(r)]
        if not heads:
            return None
        tip = max(heads, key=lambda r: (r.prev, -r.offset))
    for r in rows:
        if r.offset > tip.offset and r.prev == tip.offset and locally_valid(r):
            tip = r
    return tip
