"""KIP-392 readiness (pure) and the check through the Kafka port's fake: racks, selector, readers, fixes."""

from __future__ import annotations

import pytest

from controlplane.service.read_local import apply_fixes, check_read_local
from domain.nearest_reads import RACK_AWARE_SELECTOR, BrokerReadFacts, FetchFlow, assess_nearest_reads, flows_from_audit
from kafkaio.endpoints import BrokerInfo, ClusterEndpoints, RackToIdc
from kafkaio.errors import AdminError
from kafkaio.fake import FakeKafkaCluster


def _flow(client: str, cidc: str, bidc: str, rate: float, rack: str = "", topic: str = "orders") -> FetchFlow:
    return FetchFlow(topic, client, cidc, rack, 1, bidc, rate)


def test_cross_idc_readers_demand_and_unknown_sides() -> None:
    brokers = [BrokerReadFacts(1, "idc-a", "idc-a", "idc-a", RACK_AWARE_SELECTOR),
               BrokerReadFacts(2, "idc-b", "idc-b", "idc-b", RACK_AWARE_SELECTOR)]
    report = assess_nearest_reads(brokers, [
        _flow("r1", "idc-b", "idc-a", 100.0), _flow("r1", "idc-b", "idc-b", 50.0),
        _flow("r2", "idc-b", "idc-a", 10.0, rack="idc-b"), _flow("r3", "local", "idc-a", 7.0)],
        groups={"r1": "billing"})
    assert report.ready
    body = report.to_json()
    assert body["cross_idc_readers_without_client_rack"] == ["billing"]
    assert report.demand == {"orders": {"idc-b": 160.0}}
    assert report.cross_idc_fetch_bytes_per_s == 110.0 and report.unattributed_fetch_bytes_per_s == 7.0
    billing = next(c for c in report.consumers if c.consumer == "billing")
    assert billing.bytes_per_s == 150.0 and billing.cross_idc_bytes_per_s == 100.0


def test_unmapped_racks_unset_selector_and_multi_rack_idcs_are_reported_with_fixes() -> None:
    report = assess_nearest_reads([
        BrokerReadFacts(1, "idc-a-r1", "idc-a", "idc-a", None),
        BrokerReadFacts(2, "idc-a-r2", "idc-a", "idc-a", RACK_AWARE_SELECTOR, selector_read_only=False),
        BrokerReadFacts(3, "x-r1", "idc-b", "x", RACK_AWARE_SELECTOR),
        BrokerReadFacts(4, None, "idc-b", None, RACK_AWARE_SELECTOR)])
    assert not report.ready and not report.racks_ok and not report.selector_ok
    assert [(f.broker, f.key, f.dynamic) for f in report.fixes] == [
        (1, "replica.selector.class", False), (3, "broker.rack", False), (4, "broker.rack", False)]
    assert any("idc-a has 2 racks" in w for w in report.warnings)


def test_flows_from_audit_average_over_the_intervals_seen() -> None:
    recs = [{"kind": "fetch", "ts": t, "interval_s": 10, "topic": "o", "client_id": "c", "client_idc": "idc-b",
             "broker": 1, "broker_idc": "idc-a", "bytes": 1000} for t in ("t1", "t2")]
    recs += [{"kind": "produce", "ts": "t1", "topic": "o", "broker": 1, "bytes": 5}, {"kind": "fetch", "bytes": "x"}]
    (flow,) = flows_from_audit(recs)
    assert flow.bytes_per_s == pytest.approx(100.0) and flow.client_rack == ""


def test_check_through_the_fake_port_and_fixes_respect_read_only_configs() -> None:
    fake = FakeKafkaCluster({1: ["/d"], 2: ["/d"]}, racks={1: "idc-a-r1", 2: "idc-b-r1"})
    endpoints = ClusterEndpoints("c1", "fake:9092", brokers=(BrokerInfo(1, idc="idc-a"), BrokerInfo(2, idc="idc-b")),
                                 rack_to_idc=RackToIdc(regex=r"^(?P<idc>.+?)-r\d+$"))
    report = check_read_local(fake, endpoints)
    assert report.racks_ok and not report.selector_ok
    result = apply_fixes(fake, report)
    assert result["applied"] == [] and len(result["manual"]) == 2  # stock Kafka: read-only, a restart's job
    with pytest.raises(AdminError, match="dynamically"):
        fake.set_broker_configs({1: {"replica.selector.class": RACK_AWARE_SELECTOR}})
    fake.static_cfg[1]["replica.selector.class"] = RACK_AWARE_SELECTOR
    fake.static_cfg[2]["replica.selector.class"] = RACK_AWARE_SELECTOR
    assert check_read_local(fake, endpoints).ready
