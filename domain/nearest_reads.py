"""Nearest-replica reads (KIP-392): is a cluster ready for them, and who reads across IDCs.

Goal: one pure reading, per cluster, of the three things KIP-392 needs — every broker's ``broker.rack``
maps to the broker's IDC (through the cluster's declared rack -> IDC rule), every broker runs a
rack-aware ``replica.selector.class`` (the leader names a same-rack preferred read replica only then),
and consumers send ``client.rack`` — plus, from the audit lineage, the consumers that read across IDCs
and the per-topic, per-IDC read demand the read-local planner (:mod:`planners.read_local`) places for.

Method: plain records in, a :class:`NearestReadsReport` out. A broker passes when its rack maps to its
declared IDC and its selector is :data:`RACK_AWARE_SELECTOR` (or a declared custom class). Each finding
that fails carries its remedy: a read-only config (stock Kafka: ``broker.rack`` and
``replica.selector.class`` are "Update Mode: read-only") is a server.properties line and a rolling
restart; a config the broker reports as dynamic can be set by IncrementalAlterConfigs (:attr:`Fix.dynamic`).
The stock selector matches ``client.rack`` to ``broker.rack`` exactly, so where an IDC has several racks
the report warns that same-IDC reads need the rack, not the IDC, in ``client.rack``. Fetch flows whose
client IDC differs from the serving broker's IDC are cross-IDC; flows with an unknown side ("" or
``local``) are counted apart, never guessed.

Guarantee: pure and deterministic (sorted output); no I/O, no Kafka client. Cost: O(brokers + flows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

BROKER_RACK = "broker.rack"
REPLICA_SELECTOR = "replica.selector.class"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
READ_ONLY_KEYS = frozenset({BROKER_RACK, REPLICA_SELECTOR})
"""Broker configs stock Kafka refuses to change at run time (server.properties + restart)."""
UNKNOWN_IDCS = frozenset({"", "local", "unknown"})


@dataclass(frozen=True, slots=True)
class BrokerReadFacts:
    """What Kafka and the operator say about one broker: its rack, its IDC (declared, and by the rule),
    its replica selector and whether the broker lets that selector change at run time."""

    id: int
    rack: str | None
    idc: str | None
    idc_by_rule: str | None
    selector: str | None
    selector_read_only: bool = True


@dataclass(frozen=True, slots=True)
class FetchFlow:
    """Bytes/s one client fetched from one broker for one topic (an audit aggregate)."""

    topic: str
    client_id: str
    client_idc: str
    client_rack: str
    broker: int
    broker_idc: str
    bytes_per_s: float


@dataclass(frozen=True, slots=True)
class Fix:
    """One config change that makes a broker ready; ``dynamic``: IncrementalAlterConfigs can apply it,
    else it is a server.properties line taking effect on the broker's restart."""

    broker: int
    key: str
    value: str
    dynamic: bool
    reason: str

    def to_json(self) -> dict[str, object]:
        """Plain JSON."""
        return {"broker": self.broker, "key": self.key, "value": self.value,
                "how": "IncrementalAlterConfigs" if self.dynamic else "server.properties + rolling restart",
                "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ConsumerReads:
    """One consumer (group, else client id) reading one topic from one IDC."""

    consumer: str
    client_ids: tuple[str, ...]
    topic: str
    client_idc: str
    client_rack: str
    bytes_per_s: float
    cross_idc_bytes_per_s: float

    def to_json(self) -> dict[str, object]:
        """Plain JSON."""
        return {"consumer": self.consumer, "client_ids": list(self.client_ids), "topic": self.topic,
                "client_idc": self.client_idc, "client_rack": self.client_rack or None,
                "sets_client_rack": bool(self.client_rack), "bytes_per_s": round(self.bytes_per_s, 3),
                "cross_idc_bytes_per_s": round(self.cross_idc_bytes_per_s, 3)}


@dataclass(frozen=True)
class NearestReadsReport:
    """A cluster's KIP-392 readiness, its cross-IDC readers and their demand per topic and IDC."""

    brokers: tuple[dict[str, object], ...]
    fixes: tuple[Fix, ...]
    warnings: tuple[str, ...]
    consumers: tuple[ConsumerReads, ...]
    demand: dict[str, dict[str, float]] = field(default_factory=dict)
    cross_idc_fetch_bytes_per_s: float = 0.0
    unattributed_fetch_bytes_per_s: float = 0.0

    @property
    def racks_ok(self) -> bool:
        """Every broker's rack maps to its IDC."""
        return all(bool(b["rack_maps_to_idc"]) for b in self.brokers)

    @property
    def selector_ok(self) -> bool:
        """Every broker runs a rack-aware replica selector."""
        return all(bool(b["selector_ok"]) for b in self.brokers)

    @property
    def ready(self) -> bool:
        """Brokers are ready for nearest-replica reads (consumers still need ``client.rack``)."""
        return bool(self.brokers) and self.racks_ok and self.selector_ok

    def to_json(self) -> dict[str, object]:
        """Plain JSON (what the API answers)."""
        return {"ready": self.ready, "racks_ok": self.racks_ok, "selector_ok": self.selector_ok,
                "brokers": list(self.brokers), "fixes": [f.to_json() for f in self.fixes],
                "warnings": list(self.warnings), "consumers": [c.to_json() for c in self.consumers],
                "cross_idc_readers_without_client_rack": sorted(
                    {c.consumer for c in self.consumers if c.cross_idc_bytes_per_s > 0 and not c.client_rack}),
                "demand": self.demand, "cross_idc_fetch_bytes_per_s": round(self.cross_idc_fetch_bytes_per_s, 3),
                "unattributed_fetch_bytes_per_s": round(self.unattributed_fetch_bytes_per_s, 3)}


def assess_nearest_reads(brokers: Sequence[BrokerReadFacts], flows: Iterable[FetchFlow] = (),
                         groups: Mapping[str, str] | None = None,
                         selectors: Iterable[str] = (RACK_AWARE_SELECTOR,)) -> NearestReadsReport:
    """Readiness of ``brokers`` and the cross-IDC readers of ``flows`` (``groups``: client id -> group;
    ``selectors``: the classes accepted as rack-aware — a custom IDC-aware selector may be declared)."""
    accepted = set(selectors)
    rows: list[dict[str, object]] = []
    fixes: list[Fix] = []
    racks_per_idc: dict[str, set[str]] = {}
    for b in sorted(brokers, key=lambda x: x.id):
        maps = bool(b.rack) and b.idc is not None and b.idc_by_rule == b.idc
        sel_ok = b.selector in accepted
        rows.append({"id": b.id, "rack": b.rack, "idc": b.idc, "idc_by_rule": b.idc_by_rule,
                     "rack_maps_to_idc": maps, "replica_selector": b.selector, "selector_ok": sel_ok})
        if b.idc and b.rack:
            racks_per_idc.setdefault(b.idc, set()).add(b.rack)
        if not maps:
            why = ("no broker.rack" if not b.rack else "no IDC declared for the broker" if b.idc is None
                   else f"rack {b.rack!r} maps to {b.idc_by_rule!r} under the rack_to_idc rule, not {b.idc!r}")
            fixes.append(Fix(b.id, BROKER_RACK, b.idc or "<idc>", False, why))
        if not sel_ok:
            fixes.append(Fix(b.id, REPLICA_SELECTOR, RACK_AWARE_SELECTOR, not b.selector_read_only,
                             f"replica.selector.class is {b.selector or 'unset'}: the leader never names a "
                             f"preferred read replica"))
    warnings = [f"{idc} has {len(racks)} racks ({', '.join(sorted(racks))}): the stock RackAwareReplicaSelector "
                f"matches client.rack to broker.rack exactly, so a consumer reads in its IDC only from a replica "
                f"in its own rack (set broker.rack to the IDC, or declare an IDC-aware selector)"
                for idc, racks in sorted(racks_per_idc.items()) if len(racks) > 1]
    consumers, demand, cross, unknown = _reads(flows, groups or {})
    return NearestReadsReport(brokers=tuple(rows), fixes=tuple(fixes), warnings=tuple(warnings),
                              consumers=consumers, demand=demand, cross_idc_fetch_bytes_per_s=cross,
                              unattributed_fetch_bytes_per_s=unknown)


def flows_from_audit(records: Iterable[Mapping[str, object]]) -> list[FetchFlow]:
    """Fetch flows (bytes/s over the records' window) from audit records as brokers' audit plugins and
    kafkasim write them (``kind``/``api`` = fetch; ``broker_idc``/``client_rack`` may be missing: "").
    The window is the number of distinct intervals seen x ``interval_s`` (default 60 s); malformed
    records are skipped."""
    acc: dict[tuple[str, str, str, str, int, str], float] = {}
    stamps: set[str] = set()
    interval = 60.0
    for r in records:
        try:
            if str(r.get("api", r.get("kind", ""))) != "fetch":
                continue
            key = (str(r["topic"]), str(r.get("client_id", "")), str(r.get("client_idc", "")),
                   str(r.get("client_rack", "") or ""), int(str(r["broker"])), str(r.get("broker_idc", "") or ""))
            nbytes = float(str(r["bytes"]))
            interval = float(str(r.get("interval_s") or interval))
        except (KeyError, TypeError, ValueError):
            continue
        stamps.add(str(r.get("ts", "")))
        acc[key] = acc.get(key, 0.0) + nbytes
    window = max(len(stamps), 1) * interval
    return [FetchFlow(topic=t, client_id=c, client_idc=ci, client_rack=cr, broker=b, broker_idc=bi,
                      bytes_per_s=v / window) for (t, c, ci, cr, b, bi), v in sorted(acc.items())]


@dataclass(slots=True)
class _Acc:
    client_ids: set[str] = field(default_factory=set)
    racks: set[str] = field(default_factory=set)
    total: float = 0.0
    cross: float = 0.0


def _reads(flows: Iterable[FetchFlow], groups: Mapping[str, str]
           ) -> tuple[tuple[ConsumerReads, ...], dict[str, dict[str, float]], float, float]:
    acc: dict[tuple[str, str, str], _Acc] = {}
    demand: dict[str, dict[str, float]] = {}
    cross = unknown = 0.0
    for f in flows:
        if f.client_idc in UNKNOWN_IDCS or f.broker_idc in UNKNOWN_IDCS:
            unknown += f.bytes_per_s
            continue
        row = acc.setdefault((groups.get(f.client_id, f.client_id), f.topic, f.client_idc), _Acc())
        row.client_ids.add(f.client_id)
        if f.client_rack:
            row.racks.add(f.client_rack)
        row.total += f.bytes_per_s
        per_topic = demand.setdefault(f.topic, {})
        per_topic[f.client_idc] = per_topic.get(f.client_idc, 0.0) + f.bytes_per_s
        if f.client_idc != f.broker_idc:
            row.cross += f.bytes_per_s
            cross += f.bytes_per_s
    consumers = tuple(ConsumerReads(consumer=c, client_ids=tuple(sorted(v.client_ids)), topic=t, client_idc=idc,
                                    client_rack=",".join(sorted(v.racks)), bytes_per_s=v.total,
                                    cross_idc_bytes_per_s=v.cross)
                      for (c, t, idc), v in sorted(acc.items()))
    return consumers, {t: dict(sorted(d.items())) for t, d in sorted(demand.items())}, cross, unknown
