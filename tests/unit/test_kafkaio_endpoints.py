"""The one endpoints parser: the older kafkasim documents, the new per-cluster declarations, errors by JSON path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from domain import DiskKind
from kafkaio.endpoints import (
    BrokerInfo,
    ClusterEndpoints,
    DiskProfile,
    EndpointsError,
    MetricsEndpoint,
    endpoints_from_options,
    load_endpoints_file,
    parse_endpoints,
)
from kafkaio.security import SaslMechanism, SecurityProtocol, security_from_options

OLD: dict[str, Any] = {
    "format": "kafkasim.endpoints/v1", "control_url": "http://127.0.0.1:9000",
    "clusters": {"c1": {
        "bootstrap_servers": "127.0.0.1:19092,127.0.0.1:19093",
        "metrics_urls": ["http://127.0.0.1:8001/metrics", "http://127.0.0.1:8009/metrics"],
        "brokers": [
            {"id": 1, "host": "127.0.0.1", "port": 19092, "idc": "idc-a", "rack": "idc-a-r1", "pool": "shared",
             "metrics_url": "http://127.0.0.1:8001/metrics", "jmx_port": 1},
            {"id": 2, "host": "127.0.0.1", "port": 19093, "idc": "idc-b", "rack": "idc-b-r1", "pool": "p1",
             "metrics_url": "http://127.0.0.1:8002/metrics"}]}}}

NEW: dict[str, Any] = {"clusters": {"c1": {
    "bootstrap_servers": ["b1:9093", "b2:9093"],
    "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "guardian",
                 "password_file": "/etc/guardian/kafka.pw", "ca_file": "/etc/guardian/ca.pem"},
    "rack_to_idc": {"regex": r"^(?P<idc>[^-]+-[^-]+)-r\d+$"},
    "hardware": {"rules": [{"brokers": [2], "log_dirs": "/nvme*", "kind": "nvme", "max_bytes_per_s": 2e9},
                           {"brokers": "*", "log_dirs": "/data*", "kind": "hdd", "max_bytes_per_s": 180e6}],
                 "default": {"kind": "ssd"}},
    "brokers": [
        {"id": 1, "rack": "dc-east-r1",
         "metrics": ["http://b1:7071/metrics",
                     {"url": "https://b1:9100/metrics", "ca_file": "/ca.pem", "username": "prom",
                      "password_file": "/prom.pw"}]},
        {"id": 2, "rack": "dc-west-r7", "idc": "dc-override",
         "metrics": [{"url": "https://b2:7071/metrics", "bearer_token_file": "/token", "kind": "jmx"}]},
        {"id": "3", "rack": "nowhere"}]}}}


def test_an_older_document_reads_as_before() -> None:
    eps = parse_endpoints(OLD, "c1")
    assert eps.cluster == "c1" and eps.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19093"
    assert eps.control_url == "http://127.0.0.1:9000"
    assert eps.metrics_urls == ["http://127.0.0.1:8001/metrics", "http://127.0.0.1:8002/metrics",
                                "http://127.0.0.1:8009/metrics"]
    assert eps.unmapped_metrics_urls == ("http://127.0.0.1:8009/metrics",)
    assert eps.metrics_url_by_broker == {1: "http://127.0.0.1:8001/metrics", 2: "http://127.0.0.1:8002/metrics"}
    assert eps.url_to_brokers() == {"http://127.0.0.1:8001/metrics": (1,), "http://127.0.0.1:8002/metrics": (2,)}
    b2 = eps.broker(2)
    assert b2 == BrokerInfo(2, "http://127.0.0.1:8002/metrics", "127.0.0.1", 19093, "idc-b", "idc-b-r1", "p1")
    assert eps.security.protocol is SecurityProtocol.PLAINTEXT
    assert eps.rack_to_idc is None and eps.hardware is None
    assert eps.idc_of(1) == ("idc-a", "broker") and eps.idc_of(7, "idc-a-r1") == (None, "unknown")


def test_the_executor_parsers_extras_bootstrap_list_and_string_ids() -> None:
    doc = {"clusters": {"c": {"bootstrap_servers": ["h1:1", "h2:2"], "brokers": [{"id": "4", "port": 9}]}}}
    eps = parse_endpoints(doc, "c")
    assert eps.bootstrap_servers == "h1:1,h2:2" and eps.brokers == (BrokerInfo(4, port=9),)


def test_the_new_declarations() -> None:
    eps = parse_endpoints(NEW, "c1")
    assert eps.bootstrap_servers == "b1:9093,b2:9093"
    sec = eps.security
    assert (sec.protocol, sec.sasl_mechanism, sec.username) == (SecurityProtocol.SASL_SSL,
                                                                 SaslMechanism.SCRAM_SHA_512, "guardian")
    assert sec.password_file == "/etc/guardian/kafka.pw" and sec.ca_file == "/etc/guardian/ca.pem"
    b1 = eps.broker(1)
    assert b1 is not None and b1.metrics_endpoints == (
        MetricsEndpoint("http://b1:7071/metrics"),
        MetricsEndpoint("https://b1:9100/metrics", ca_file="/ca.pem", username="prom", password_file="/prom.pw"))
    assert eps.metrics_urls == ["http://b1:7071/metrics", "https://b1:9100/metrics", "https://b2:7071/metrics"]
    assert eps.url_to_brokers() == {"http://b1:7071/metrics": (1,), "https://b1:9100/metrics": (1,),
                                   "https://b2:7071/metrics": (2,)}
    assert eps.metrics_url_by_broker == {1: "http://b1:7071/metrics", 2: "https://b2:7071/metrics"}
    assert eps.metrics_endpoint_by_url()["https://b2:7071/metrics"] == MetricsEndpoint(
        "https://b2:7071/metrics", bearer_token_file="/token", kind="jmx")
    # IDC: the broker's own declaration wins, else the rack rule, else unknown (never a guess)
    assert eps.idc_of(1) == ("dc-east", "rack_to_idc")
    assert eps.idc_of(1, "dc-south-r2") == ("dc-south", "rack_to_idc")  # the metadata's rack first
    assert eps.idc_of(2) == ("dc-override", "broker")
    assert eps.idc_of(3) == (None, "unknown") and eps.idc_of(99) == (None, "unknown")
    # hardware: first matching rule, else the default
    hw = eps.hardware
    assert hw is not None
    assert hw.lookup(2, "/nvme0") == (DiskProfile(DiskKind.NVME, 2e9), "declared")
    assert hw.lookup(1, "/nvme0") == (DiskProfile(DiskKind.SSD), "default")
    assert hw.lookup(1, "/data3") == (DiskProfile(DiskKind.HDD, 180e6), "declared")


def test_a_table_rule_and_a_hardware_list_without_default() -> None:
    doc = copy.deepcopy(NEW)
    c = doc["clusters"]["c1"]
    c["rack_to_idc"] = {"table": {"dc-east-r1": "east", "nowhere": "far"}}
    c["hardware"] = [{"log_dirs": "/data*", "kind": "hdd"}]
    eps = parse_endpoints(doc, "c1")
    assert eps.idc_of(1) == ("east", "rack_to_idc") and eps.idc_of(3) == ("far", "rack_to_idc")
    assert eps.idc_of(1, "unlisted") == (None, "unknown")
    assert eps.hardware is not None
    assert eps.hardware.lookup(5, "/data1") == (DiskProfile(DiskKind.HDD), "declared")
    assert eps.hardware.lookup(5, "/other") is None


def _broken(path: list[Any], value: Any, delete: bool = False) -> dict[str, Any]:
    doc = copy.deepcopy(NEW)
    cur: Any = doc["clusters"]["c1"]
    for k in path[:-1]:
        cur = cur[k]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return doc


@pytest.mark.parametrize(("path", "value", "error"), [
    (["bootstrap_servers"], 7, "$.clusters.c1.bootstrap_servers: required"),
    (["brokers", 0, "metrics", 1, "url"], "ftp://x", "$.clusters.c1.brokers[0].metrics[1].url: expected an http"),
    (["brokers", 0, "metrics", 1, "tls"], True, "$.clusters.c1.brokers[0].metrics[1].tls: unknown key"),
    (["brokers", 0, "metrics", 1, "password_file"], None,
     "$.clusters.c1.brokers[0].metrics[1]: username and password_file go together"),
    (["brokers", 0, "metrics", 0], {"url": "http://a/m", "ca_file": "/ca"},
     "$.clusters.c1.brokers[0].metrics[0].ca_file: only for an https:// URL"),
    (["brokers", 0, "metrics"], "http://a/m", "$.clusters.c1.brokers[0].metrics: expected a list"),
    (["brokers", 1, "id"], 1, "$.clusters.c1.brokers[1].id: broker 1 listed twice"),
    (["brokers", 2, "id"], "x", "$.clusters.c1.brokers[2].id: required integer"),
    (["brokers", 1, "port"], "9092", "$.clusters.c1.brokers[1].port: expected an integer"),
    (["security", "protocol"], "TLS", "$.clusters.c1.security.protocol: Input should be"),
    (["security", "password_env"], "PW", "$.clusters.c1.security: protocol SASL_SSL needs exactly one of"),
    (["security", "sasl_mechanism"], "GSSAPI", "$.clusters.c1.security.sasl_mechanism: Input should be"),
    (["security", "passwrd_file"], "/x", "$.clusters.c1.security.passwrd_file: Extra inputs are not permitted"),
    (["rack_to_idc"], {"regex": "^(.+)-r"}, "$.clusters.c1.rack_to_idc.regex: needs a named group (?P<idc>...)"),
    (["rack_to_idc"], {"regex": "("}, "$.clusters.c1.rack_to_idc.regex: not a regular expression"),
    (["rack_to_idc"], {"regex": "(?P<idc>x)", "table": {}}, "$.clusters.c1.rack_to_idc: give exactly one of"),
    (["rack_to_idc"], {"table": {"r1": 3}}, "$.clusters.c1.rack_to_idc.table.r1: required non-empty string"),
    (["hardware", "rules", 0, "kind"], "tape", "$.clusters.c1.hardware.rules[0].kind: one of hdd, ssd, nvme"),
    (["hardware", "rules", 1, "brokers"], ["a"], "$.clusters.c1.hardware.rules[1].brokers[0]: required integer"),
    (["hardware", "rules", 1, "max_bytes_per_s"], -1, "$.clusters.c1.hardware.rules[1].max_bytes_per_s: expected a"),
    (["hardware", "default"], {"kind": "hdd", "max_bytes_per_s": "fast"},
     "$.clusters.c1.hardware.default.max_bytes_per_s: expected a positive number"),
    (["hardware", "spare"], [], "$.clusters.c1.hardware.spare: unknown key"),
])
def test_errors_name_the_json_path(path: list[Any], value: Any, error: str) -> None:
    with pytest.raises(EndpointsError) as exc:
        parse_endpoints(_broken(path, value), "c1")
    assert str(exc.value).startswith(error), str(exc.value)


def test_a_literal_password_is_refused_without_echoing_it() -> None:
    for path in (["security", "password"], ["brokers", 0, "metrics", 1, "password"]):
        with pytest.raises(EndpointsError) as exc:
            parse_endpoints(_broken(path, "hunter2-secret"), "c1")
        assert "password" in str(exc.value) and "hunter2" not in str(exc.value)
        assert str(exc.value).startswith("$.clusters.c1.")


def test_file_errors_carry_the_file_name(tmp_path: Path) -> None:
    with pytest.raises(EndpointsError, match="cannot read endpoints file"):
        load_endpoints_file(tmp_path / "missing.json", "c1")
    bad = tmp_path / "e.json"
    bad.write_text(json.dumps(_broken(["hardware", "rules", 0, "kind"], "tape")))
    with pytest.raises(EndpointsError, match=r"e\.json: \$\.clusters\.c1\.hardware\.rules\[0\]\.kind"):
        load_endpoints_file(bad, "c1")
    good = tmp_path / "g.json"
    good.write_text(json.dumps(OLD))
    assert load_endpoints_file(good, "c1") == parse_endpoints(OLD, "c1")


def test_options_several_endpoints_per_broker_and_security() -> None:
    sec = security_from_options(security_protocol="SASL_PLAINTEXT", sasl_mechanism="plain", sasl_username="u",
                                sasl_password_env="PW")
    eps = endpoints_from_options("c", "h:1", ["1=http://a/m", "1=https://a:9100/metrics", "http://u/m"],
                                 security=sec)
    assert eps.url_to_brokers() == {"http://a/m": (1,), "https://a:9100/metrics": (1,)}
    assert eps.metrics_url_by_broker == {1: "http://a/m"} and eps.unmapped_metrics_urls == ("http://u/m",)
    assert eps.security is sec
    with pytest.raises(EndpointsError, match="--metrics-url"):
        endpoints_from_options("c", "h:1", ["1=ftp://nope"])


def _two_brokers(first: Any, second: Any) -> dict[str, Any]:
    """Brokers 1 and 2, each with its own JMX exporter (``metrics_url``) and one more endpoint."""
    return {"clusters": {"c1": {"bootstrap_servers": "b1:9092", "brokers": [
        {"id": 1, "metrics_url": "http://b1:7071/metrics", "metrics": [first]},
        {"id": 2, "metrics_url": "http://b2:7071/metrics", "metrics": [second]}]}}}


@pytest.mark.parametrize(("first", "second", "why"), [
    ("http://b3:7071/metrics", "http://b3:7071/metrics", "serves one broker JVM"),  # a copy-pasted JMX URL
    ({"url": "http://h:9100/metrics", "kind": "jmx"}, {"url": "http://h:9100/metrics", "kind": "node"},
     "serves one broker JVM"),
    ({"url": "https://h:9100/metrics", "kind": "node", "ca_file": "/a.pem"},
     {"url": "https://h:9100/metrics", "kind": "node", "ca_file": "/b.pem"}, "declared differently"),
])
def test_a_metrics_url_of_two_brokers_is_refused_naming_both(first: Any, second: Any, why: str) -> None:
    url = first if isinstance(first, str) else first["url"]
    with pytest.raises(EndpointsError, match=rf"^\$\.clusters\.c1\.brokers: metrics URL {url} is declared by "
                                             rf"brokers 1 and 2: .*{why}"):
        parse_endpoints(_two_brokers(first, second), "c1")


def test_every_way_to_build_endpoints_refuses_a_shared_broker_url() -> None:
    with pytest.raises(EndpointsError, match="metrics URL http://a/m is declared by brokers 1 and 2"):
        endpoints_from_options("c", "h:1", ["1=http://a/m", "2=http://a/m"])
    with pytest.raises(EndpointsError, match="cluster c: metrics URL http://a/m is declared by brokers 3 and 4"):
        ClusterEndpoints("c", "h:1", (BrokerInfo(3, "http://a/m"),
                                      BrokerInfo(4, "http://b/m", metrics=(MetricsEndpoint("http://a/m"),))))
    # one broker declaring its URL both ways is still one endpoint of one broker
    assert endpoints_from_options("c", "h:1", ["1=http://a/m", "1=http://b/m"]).url_to_brokers() == {
        "http://a/m": (1,), "http://b/m": (1,)}


def test_a_host_exporter_shared_by_the_brokers_on_one_host_is_scraped_once_for_each() -> None:
    node = {"url": "http://h:9100/metrics", "kind": "node"}
    eps = parse_endpoints(_two_brokers(node, dict(node)), "c1")
    assert eps.metrics_urls == ["http://b1:7071/metrics", "http://h:9100/metrics", "http://b2:7071/metrics"]
    assert eps.url_to_brokers()["http://h:9100/metrics"] == (1, 2)
