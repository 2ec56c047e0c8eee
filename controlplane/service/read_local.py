"""KIP-392 check of one cluster, and its fixes, through the Kafka port: the shell around
:func:`domain.nearest_reads.assess_nearest_reads`.

Goal: answer "can this cluster's consumers read from a replica in their own IDC, and who reads across
IDCs today?" from what Kafka and the operator say — ``broker.rack`` and ``replica.selector.class`` by
DescribeConfigs (:meth:`kafkaio.port.KafkaCluster.describe_broker_configs`), each broker's IDC by the
cluster's declared rack -> IDC rule and overrides (:mod:`kafkaio.endpoints`), fetch flows from the audit
lineage (ClickHouse, :func:`analytics_spark.clickhouse.store.fetch_flows`, or audit records given).
Without a declared rule a rack maps to an IDC only by naming it (``broker.rack`` = the IDC).

Method: read, then hand plain data to the pure assessment. :func:`apply_fixes` applies only the fixes a
broker reports as dynamic (IncrementalAlterConfigs); a read-only config (stock Kafka: both keys) is
returned as the server.properties line and rolling restart it needs — never silently skipped.
Guarantee: reads only, except :func:`apply_fixes`; no secret is read or returned.
Cost: one DescribeConfigs per broker (concurrent) and one metadata read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from analytics_spark.clickhouse.store import fetch_flows
from controlplane.service.clusters import endpoints_of
from domain.nearest_reads import (
    BROKER_RACK,
    REPLICA_SELECTOR,
    BrokerReadFacts,
    FetchFlow,
    NearestReadsReport,
    assess_nearest_reads,
)
from kafkaio.admin import KafkaAdmin
from kafkaio.endpoints import ClusterEndpoints
from kafkaio.port import KafkaCluster


def broker_facts(port: KafkaCluster, endpoints: ClusterEndpoints) -> list[BrokerReadFacts]:
    """Rack, IDC (declared and by the rule) and replica selector of every alive broker."""
    live = port.live()
    ids = sorted(live.alive)
    configs = port.describe_broker_configs(ids, (BROKER_RACK, REPLICA_SELECTOR))
    out = []
    for b in ids:
        cfg = configs.get(b, {})
        rack_entry = cfg.get(BROKER_RACK)
        rack = (rack_entry.value if rack_entry is not None else None) or live.racks.get(b) or None
        declared, _ = endpoints.idc_of(b, rack)
        info = endpoints.broker(b)
        # no declared rule: a rack maps to an IDC only by naming it (broker.rack = the IDC)
        by_rule = (endpoints.rack_to_idc.idc_of(rack) if endpoints.rack_to_idc is not None
                   else rack if rack is not None and rack == declared else None)
        if declared is None and info is not None and info.idc:
            declared = info.idc
        sel = cfg.get(REPLICA_SELECTOR)
        out.append(BrokerReadFacts(id=b, rack=rack, idc=declared, idc_by_rule=by_rule,
                                   selector=sel.value if sel is not None else None,
                                   selector_read_only=sel.read_only if sel is not None else True))
    return out


def flows_of(rows: Iterable[Mapping[str, Any]]) -> list[FetchFlow]:
    """Fetch flows from :func:`analytics_spark.clickhouse.store.fetch_flows` rows."""
    return [FetchFlow(topic=str(r["topic"]), client_id=str(r["client_id"]), client_idc=str(r["client_idc"]),
                      client_rack=str(r.get("client_rack") or ""), broker=int(r["broker"]),
                      broker_idc=str(r["broker_idc"]), bytes_per_s=float(r["bytes_per_s"])) for r in rows]


def check_read_local(port: KafkaCluster, endpoints: ClusterEndpoints, flows: Iterable[FetchFlow] = (),
                     groups: Mapping[str, str] | None = None) -> NearestReadsReport:
    """The cluster's KIP-392 readiness and cross-IDC readers."""
    return assess_nearest_reads(broker_facts(port, endpoints), flows, groups)


def apply_fixes(port: KafkaCluster, report: NearestReadsReport) -> dict[str, list[dict[str, object]]]:
    """Set every fix the brokers accept at run time; return ``applied`` and ``manual`` (read-only) fixes."""
    dynamic = [f for f in report.fixes if f.dynamic]
    if dynamic:
        changes: dict[int, dict[str, str | None]] = {}
        for f in dynamic:
            changes.setdefault(f.broker, {})[f.key] = f.value
        port.set_broker_configs(changes)
    return {"applied": [f.to_json() for f in dynamic], "manual": [f.to_json() for f in report.fixes if not f.dynamic]}


CALL_TIMEOUT_MS = 4000
"""An API call against a cluster gives up after this (an unreachable cluster answers 503 within 5 s)."""


def check_registered(name: str, record: Mapping[str, Any], clickhouse: Any = None, window_s: float = 3600.0,
                     fix: bool = False) -> dict[str, Any]:
    """The check of registered cluster ``name`` over a short-lived admin connection (and, with ``fix``,
    the fixes applied); flows from ClickHouse when configured, else none and said so."""
    endpoints = endpoints_of(name, record)
    rows: list[dict[str, Any]] = fetch_flows(clickhouse, name, window_s) if clickhouse is not None else []
    admin = KafkaAdmin.for_endpoints(endpoints, client_id="guardian-read-local", request_timeout_ms=CALL_TIMEOUT_MS)
    try:
        report = check_read_local(admin, endpoints, flows_of(rows))
        body: dict[str, Any] = {"cluster": name, "window_s": window_s, **report.to_json()}
        if clickhouse is None:
            body["warnings"] = [*body["warnings"], "no ClickHouse configured: no audit lineage, no readers shown"]
        if fix:
            body["fix"] = apply_fixes(admin, report)
        return body
    finally:
        admin.close()
