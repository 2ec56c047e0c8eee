"""Leased-line accounting: per IDC pair, the bytes/s that cross it, by kind, from one collection round.

Goal: know in real time what fills each leased line — follower replication, migration (reassignment
copies), client produce and client fetch — so the line can be shown, alerted on and protected
(:mod:`planners.line_protection`).

Method (:func:`line_flows`, then :func:`account_lines`), per partition of the snapshot:

* **replication**: every follower (in sync or catching up) in another IDC than the leader fetches the
  leader's ``bytes_in_per_s`` over ``leader IDC → follower IDC`` (a reassignment target still copying is
  migration, not replication); a measured catch-up transfer replaces that estimate with its rate;
* **migration**: every in-flight reassignment copy (:class:`~planners.protection.Transfer` ``reassign``)
  whose source and destination brokers are in different IDCs, at its measured rate; intra-broker moves
  never cross;
* **client produce / fetch** (where the audit says who and where — :class:`AuditFlow`): each client's
  share of the partition's audited bytes, scaled to the partition's *live* ``bytes_in_per_s`` /
  ``bytes_out_per_s`` (the audit says who and where, the metrics say how much now); produce crosses
  ``client IDC → leader IDC``, a fetch ``serving broker's IDC → client IDC`` (the audited broker, so a
  KIP-392 follower fetch counts where it is served). Without audit rows the client kinds are unknown
  (reported as such, never guessed).

Brokers with no IDC (empty) or unknown to the snapshot are skipped; non-finite or negative rates count
as 0. :func:`account_lines` sums the flows per ordered pair and adds each configured capacity.

Guarantee: pure and deterministic (flows sorted); ``Σ by kind == total`` per line; a flow within one
IDC is never counted. Cost: O(replicas + transfers + audit rows).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from domain.model import ClusterSnapshot
from planners.protection import Transfer

LineKind = Literal["replication", "migration", "client_produce", "client_fetch"]
LINE_KINDS: tuple[LineKind, ...] = ("replication", "migration", "client_produce", "client_fetch")
Pair = tuple[str, str]
"""(source IDC, destination IDC): one direction of a leased line."""


@dataclass(frozen=True, slots=True)
class AuditFlow:
    """One client's audited bytes/s on one partition (latest audit interval)."""

    kind: Literal["produce", "fetch"]
    topic: str
    partition: int
    client_id: str
    client_idc: str
    bytes_per_s: float
    broker: int | None = None
    """The broker that served it (None: the partition's leader)."""


@dataclass(frozen=True, slots=True)
class LineFlow:
    """Bytes/s one partition's traffic of one kind puts on one line."""

    kind: LineKind
    src_idc: str
    dst_idc: str
    topic: str
    partition: int
    broker: int
    """The receiving replica (replication, migration), the serving broker (fetch) or the leader (produce)."""
    bytes_per_s: float
    client_id: str = ""
    in_sync: bool = True
    """Replication by an in-sync follower (Kafka's KIP-73 throttles never slow it)."""
    transfer: str = ""
    """``reassign`` / ``catch_up`` when the flow is a measured copy."""
    source_broker: int | None = None

    @property
    def pair(self) -> Pair:
        """The line it uses."""
        return (self.src_idc, self.dst_idc)


@dataclass(frozen=True, slots=True)
class LineUsage:
    """One line's accounted traffic and capacity."""

    src_idc: str
    dst_idc: str
    bytes_per_s: Mapping[str, float]
    capacity_bytes_per_s: float | None = None

    @property
    def total(self) -> float:
        """Bytes/s of every kind."""
        return float(sum(self.bytes_per_s.values()))

    @property
    def util(self) -> float | None:
        """total / capacity (None without a configured capacity)."""
        cap = self.capacity_bytes_per_s
        return self.total / cap if cap else None


@dataclass(frozen=True, slots=True)
class LineAccount:
    """Every line's usage plus the flows behind it and whether client traffic was known."""

    lines: tuple[LineUsage, ...]
    flows: tuple[LineFlow, ...]
    clients_known: bool
    """True when audit rows fed the client kinds (else they are 0 because unknown)."""

    def usage(self, pair: Pair) -> LineUsage | None:
        """The usage of one line (None when nothing crosses it and it has no capacity)."""
        for u in self.lines:
            if (u.src_idc, u.dst_idc) == pair:
                return u
        return None

    def as_json(self) -> dict[str, Any]:
        """A JSON-able view (API, dashboard)."""
        return {"clients_known": self.clients_known,
                "lines": [{"src_idc": u.src_idc, "dst_idc": u.dst_idc, "capacity_bytes_per_s": u.capacity_bytes_per_s,
                           "total_bytes_per_s": round(u.total, 1),
                           "util": None if u.util is None else round(u.util, 4),
                           "bytes_per_s": {k: round(v, 1) for k, v in u.bytes_per_s.items()}} for u in self.lines]}


def _rate(x: float) -> float:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) and x > 0 else 0.0


def line_flows(snapshot: ClusterSnapshot, transfers: Sequence[Transfer] = (),
               audit: Iterable[AuditFlow] = ()) -> list[LineFlow]:
    """Every cross-IDC flow of the round (see the module docstring), sorted."""
    idc = {b.id: b.idc for b in snapshot.brokers if b.idc}
    parts = {p.id: p for p in snapshot.iter_partitions()}
    out: list[LineFlow] = []
    copying = {(t.topic, t.partition, t.dest[0]) for t in transfers if t.kind == "reassign"}
    catching = {(t.topic, t.partition, t.dest[0]) for t in transfers if t.kind == "catch_up"}
    for p in parts.values():
        lead = p.leader
        if lead is None or lead not in idc:
            continue
        rate = _rate(p.bytes_in_per_s)
        for b in p.replicas:
            if b == lead or b not in idc or idc[b] == idc[lead] or not rate:
                continue
            if (p.topic, p.partition, b) in copying or (p.topic, p.partition, b) in catching:
                continue
            out.append(LineFlow("replication", idc[lead], idc[b], p.topic, p.partition, b, rate,
                                in_sync=b in p.isr, source_broker=lead))
    for t in transfers:
        if t.kind == "intra_broker":
            continue
        tp = parts.get((t.topic, t.partition))
        src = t.source[0] if t.source is not None else (tp.leader if tp is not None else None)
        dst = t.dest[0]
        if src is None or src not in idc or dst not in idc or idc[src] == idc[dst] or not _rate(t.bytes_per_s):
            continue
        kind: LineKind = "migration" if t.kind == "reassign" else "replication"
        out.append(LineFlow(kind, idc[src], idc[dst], t.topic, t.partition, dst, _rate(t.bytes_per_s),
                            in_sync=False, transfer=t.kind, source_broker=src))
    audited: dict[tuple[str, str, int], list[AuditFlow]] = defaultdict(list)
    for a in audit:
        if _rate(a.bytes_per_s):
            audited[(a.kind, a.topic, a.partition)].append(a)
    for (akind, topic, part), unsorted in sorted(audited.items()):
        ap = parts.get((topic, part))
        if ap is None or ap.leader is None:
            continue
        rows = sorted(unsorted, key=_audit_key)  # summed in one order: equal inputs give equal floats
        whole = sum(a.bytes_per_s for a in rows)
        live = _rate(ap.bytes_out_per_s if akind == "fetch" else ap.bytes_in_per_s)
        for a in rows:
            broker = a.broker if a.broker is not None and a.broker in idc else ap.leader
            if broker not in idc or not a.client_idc or a.client_idc == idc[broker]:
                continue
            rate = live * a.bytes_per_s / whole if whole > 0 else 0.0
            if not rate:
                continue
            if akind == "fetch":
                out.append(LineFlow("client_fetch", idc[broker], a.client_idc, topic, part, broker, rate,
                                    client_id=a.client_id))
            else:
                out.append(LineFlow("client_produce", a.client_idc, idc[broker], topic, part, broker, rate,
                                    client_id=a.client_id))
    return sorted(out, key=_flow_key)


def _audit_key(a: AuditFlow) -> tuple[str, int, str, float]:
    return (a.client_id, -1 if a.broker is None else a.broker, a.client_idc, a.bytes_per_s)


def _flow_key(f: LineFlow) -> tuple[str, str, str, str, int, int, str, str, float]:
    return (f.src_idc, f.dst_idc, f.kind, f.topic, f.partition, f.broker, f.client_id, f.transfer, f.bytes_per_s)


def client_fetch_rates(snapshot: ClusterSnapshot, audit: Iterable[AuditFlow]) -> dict[str, dict[int, float]]:
    """Per client, the bytes/s it fetches from each broker now, inside IDCs too (audit shares x live
    ``bytes_out_per_s``, as :func:`line_flows` scales them): what a consumer quota, enforced per broker,
    would also slow."""
    parts = {p.id: p for p in snapshot.iter_partitions()}
    rows: dict[tuple[str, int], list[AuditFlow]] = defaultdict(list)
    for a in audit:
        if a.kind == "fetch" and _rate(a.bytes_per_s):
            rows[(a.topic, a.partition)].append(a)
    out: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for pid, unsorted in sorted(rows.items()):
        p = parts.get(pid)
        if p is None or p.leader is None:
            continue
        rs = sorted(unsorted, key=_audit_key)
        whole = sum(a.bytes_per_s for a in rs)
        live = _rate(p.bytes_out_per_s)
        for a in rs:
            broker = a.broker if a.broker is not None else p.leader
            out[a.client_id][broker] += live * a.bytes_per_s / whole if whole > 0 else 0.0
    return {c: dict(v) for c, v in sorted(out.items())}


def account_lines(flows: Sequence[LineFlow], capacities: Mapping[Pair, float] | None = None,
                  clients_known: bool = False) -> LineAccount:
    """Sum ``flows`` per line and kind; every line with a configured capacity is listed even when idle."""
    caps = dict(capacities or {})
    sums: dict[Pair, dict[str, float]] = defaultdict(lambda: {k: 0.0 for k in LINE_KINDS})
    for pair in caps:
        sums[pair]  # an idle configured line is listed too
    ordered = tuple(sorted(flows, key=_flow_key))  # summed in one order: equal inputs give equal floats
    for f in ordered:
        sums[f.pair][f.kind] += f.bytes_per_s
    lines = tuple(LineUsage(src, dst, dict(v), caps.get((src, dst))) for (src, dst), v in sorted(sums.items()))
    return LineAccount(lines, ordered, clients_known)


@dataclass(frozen=True, slots=True)
class Accounting:
    """Inputs of one round's accounting besides the snapshot (built by the service)."""

    transfers: tuple[Transfer, ...] = ()
    audit: tuple[AuditFlow, ...] = ()
    capacities: Mapping[Pair, float] = field(default_factory=dict)


def account_round(snapshot: ClusterSnapshot, inputs: Accounting) -> LineAccount:
    """:func:`line_flows` + :func:`account_lines` in one call."""
    flows = line_flows(snapshot, inputs.transfers, inputs.audit)
    return account_lines(flows, inputs.capacities, clients_known=bool(inputs.audit))
