"""Registering a real cluster through the API: security by reference, metrics endpoints per broker, the
declared topology (rack -> IDC rule, IDC overrides, hardware), checked at write time with 400s naming the
JSON path, and read back without a secret (real app, local store)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.api.app import create_app
from controlplane.cli.clusters import registration_body
from controlplane.cli.connect_options import ConnectOptions
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.launcher import free_ports
from controlplane.service.clusters import endpoints_of
from controlplane.service.context import ServiceContext
from controlplane.state.store import LocalStateStore
from kafkaio.security import SaslMechanism, SecurityProtocol

TOKENS = {"viewer": "v-token", "admin": "a-token"}
SECRET = "s3cr3t-literal-9"


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}", "X-Guardian-Reason": "register"}


@pytest.fixture()
def ctx(tmp_path: Path) -> ServiceContext:
    settings = Settings(data_dir=tmp_path, tokens=[TokenConf(name=f"{r}-user", role=r, sha256=hash_token(t))
                                                   for r, t in TOKENS.items()])
    return ServiceContext(settings=settings, store=LocalStateStore())


@pytest.fixture()
def client(ctx: ServiceContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx)) as c:
        yield c


def operator_body(name: str = "east") -> dict[str, Any]:
    """What an operator registers for a SASL_SSL cluster with two exporters per broker."""
    return {
        "name": name, "bootstrap_servers": "k1:9093,k2:9093",
        "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "guardian",
                     "password_file": "/etc/guardian/kafka.pw", "ca_file": "/etc/guardian/ca.pem"},
        "brokers": [{"id": b, "idc": "idc-z" if b == 2 else None,
                     "metrics": [{"url": f"https://k{b}:7071/metrics", "ca_file": "/etc/guardian/ca.pem",
                                  "username": "prom", "password_file": "/etc/guardian/metrics.pw"},
                                 f"https://k{b}:9100/metrics"]} for b in (1, 2)],
        "rack_to_idc": {"regex": r"^(?P<idc>idc-[a-z])-r\d+$"},
        "hardware": [{"brokers": "*", "log_dirs": "/data/nvme*", "kind": "nvme", "max_bytes_per_s": 2e9},
                     {"brokers": [1], "log_dirs": "/data/hdd[0-9]", "kind": "hdd", "max_bytes_per_s": 2e8}],
        "consumer_offsets": "admin",
    }


def _clean(body: dict[str, Any]) -> dict[str, Any]:
    body = json.loads(json.dumps(body))
    for b in body["brokers"]:
        if b.get("idc") is None:
            b.pop("idc", None)
    return body


def test_register_show_and_bind_a_secured_cluster(client: TestClient, ctx: ServiceContext) -> None:
    r = client.post("/api/v1/clusters?probe=false", headers=auth("admin"), json=_clean(operator_body()))
    assert r.status_code == 201, r.text
    assert r.json() == {"cluster": "east", "created": True, "security": "SASL_SSL",
                        "sasl_mechanism": "SCRAM-SHA-512", "username": "guardian"}
    shown = client.get("/api/v1/clusters/east", headers=auth("viewer")).json()
    assert shown["security"]["password_file"] == "/etc/guardian/kafka.pw" and "password" not in shown["security"]
    assert shown["idc_overrides"] == {"2": "idc-z"} and all("idc" not in b for b in shown["brokers"])
    record = ctx.store.read(lambda s: json.loads(json.dumps(s["clusters"]["east"])))
    eps = endpoints_of("east", record)
    assert eps.bootstrap_servers == "k1:9093,k2:9093"
    assert eps.security.protocol is SecurityProtocol.SASL_SSL
    assert eps.security.sasl_mechanism is SaslMechanism.SCRAM_SHA_512
    assert [len(b.metrics_endpoints) for b in eps.brokers] == [2, 2]
    first = eps.brokers[0].metrics_endpoints[0]
    assert (first.username, first.password_file, first.ca_file) == ("prom", "/etc/guardian/metrics.pw",
                                                                     "/etc/guardian/ca.pem")
    assert eps.idc_of(1, "idc-a-r1") == ("idc-a", "rack_to_idc") and eps.idc_of(2, "idc-a-r2") == ("idc-z", "broker")
    assert eps.hardware is not None
    found = eps.hardware.lookup(1, "/data/hdd3")
    assert found is not None and found[0].kind.value == "hdd" and found[0].max_bytes_per_s == 2e8
    assert eps.exporter_urls == ()
    actions = client.get("/api/v1/actions", headers=auth("viewer")).json()
    assert any(a["type"] == "cluster.register" and a["result"]["security"] == "SASL_SSL" for a in actions)


def test_the_older_metrics_urls_form_and_an_offsets_exporter(client: TestClient, ctx: ServiceContext) -> None:
    r = client.post("/api/v1/clusters?probe=false", headers=auth("admin"), json={
        "name": "old", "bootstrap_servers": ["k1:9092"], "metrics_urls": {"1": "http://k1:7071/metrics"},
        "consumer_offsets": "http://exporter:9308/metrics"})
    assert r.status_code == 201, r.text
    eps = endpoints_of("old", ctx.store.read(lambda s: dict(s["clusters"]["old"])))
    assert eps.metrics_url_by_broker == {1: "http://k1:7071/metrics"}
    assert eps.exporter_urls == ("http://exporter:9308/metrics",)
    assert eps.security.protocol is SecurityProtocol.PLAINTEXT


@pytest.mark.parametrize(("change", "path"), [
    (lambda b: b["security"].update(password=SECRET), "$.security"),
    (lambda b: b["security"].update(sasl_password=SECRET), "$.security"),
    (lambda b: b["brokers"][1]["metrics"][0].update(password=SECRET), "$.brokers[1].metrics[0]"),
    (lambda b: b["brokers"][0]["metrics"].append(f"https://prom:{SECRET}@k1:7072/metrics"),
     "$.brokers[0].metrics[2]"),
    (lambda b: b["security"].pop("password_file"), "$.security"),
    (lambda b: b["security"].update(sasl_mechanism="GSSAPI"), "$.security.sasl_mechanism"),
    (lambda b: b.update(rack_to_idc={"regex": "^(idc-[a-z])"}), "$.rack_to_idc.regex"),
    (lambda b: b.update(rack_to_idc={"regex": "^(?P<idc>[a-z"}), "$.rack_to_idc.regex"),
    (lambda b: b.update(rack_to_idc={"regex": "x", "table": {"r1": "a"}}), "$.rack_to_idc"),
    (lambda b: b["hardware"][0].update(kind="floppy"), "$.hardware.rules[0].kind"),
    (lambda b: b["hardware"][1].update(max_bytes_per_s=0), "$.hardware.rules[1].max_bytes_per_s"),
    (lambda b: b["hardware"][1].update(log_dirs="/data/hdd[0-9"), "$.hardware.rules[1].log_dirs"),
    (lambda b: b["brokers"][0]["metrics"][0].pop("password_file"), "$.brokers[0].metrics[0]"),
    (lambda b: b["brokers"][0]["metrics"].append("https://k1:9100/metrics"), "$.brokers[0].metrics[2].url"),
    (lambda b: b.update(consumer_offsets="kafka_exporter"), "$.consumer_offsets"),
    (lambda b: b.update(idc_overrides={"one": "idc-a"}), "$.idc_overrides"),
    (lambda b: b["brokers"].append({"id": 1}), "$.brokers[2].id"),
    (lambda b: b["brokers"][1]["metrics"].__setitem__(0, dict(b["brokers"][0]["metrics"][0])),  # copy-pasted
     "$.brokers: metrics URL https://k1:7071/metrics is declared by brokers 1 and 2"),
])
def test_bad_registrations_are_400s_naming_the_json_path(client: TestClient, change: Any, path: str) -> None:
    body = _clean(operator_body())
    change(body)
    r = client.post("/api/v1/clusters?probe=false", headers=auth("admin"), json=body)
    assert r.status_code == 400, r.text
    problem = r.json()
    assert problem["detail"].startswith(path) or any(p["path"].startswith(path) for p in problem["problems"]), \
        problem
    assert SECRET not in r.text
    assert client.get("/api/v1/clusters", headers=auth("viewer")).json() == []


def test_a_literal_password_is_refused_by_name(client: TestClient) -> None:
    body = _clean(operator_body())
    body["security"]["password"] = SECRET
    r = client.post("/api/v1/clusters?probe=false", headers=auth("admin"), json=body)
    assert r.status_code == 400 and "'password' is not accepted" in r.json()["detail"]
    assert "password_file" in r.json()["detail"] and SECRET not in r.text


def test_edit_the_declared_topology(client: TestClient, ctx: ServiceContext) -> None:
    assert client.post("/api/v1/clusters?probe=false", headers=auth("admin"),
                       json=_clean(operator_body())).status_code == 201
    r = client.put("/api/v1/clusters/east/topology", headers=auth("admin"), json={
        "rack_to_idc": {"table": {"rack-1": "north", "rack-2": "south"}}, "idc_overrides": {"3": "west"},
        "hardware": {"rules": [{"brokers": [1, 2], "log_dirs": "/kafka/*", "kind": "ssd"}],
                     "default": {"kind": "hdd", "max_bytes_per_s": 1.5e8}}})
    assert r.status_code == 200, r.text
    topo = client.get("/api/v1/clusters/east/topology", headers=auth("viewer")).json()
    assert topo["idc_overrides"] == {"3": "west"} and topo["rack_to_idc"] == {"table": {"rack-1": "north",
                                                                                          "rack-2": "south"}}
    eps = endpoints_of("east", ctx.store.read(lambda s: dict(s["clusters"]["east"])))
    assert eps.idc_of(1, "rack-2") == ("south", "rack_to_idc") and eps.idc_of(2, "rack-1") == ("north", "rack_to_idc")
    assert eps.idc_of(3) == ("west", "broker")
    assert eps.hardware is not None and eps.hardware.lookup(9, "/x") is not None
    assert eps.security.protocol is SecurityProtocol.SASL_SSL  # the connection facts are untouched
    bad = client.put("/api/v1/clusters/east/topology", headers=auth("admin"),
                     json={"rack_to_idc": {"regex": "(?P<dc>.*)"}})
    assert bad.status_code == 400 and bad.json()["detail"].startswith("$.rack_to_idc.regex: ")
    assert client.put("/api/v1/clusters/nope/topology", headers=auth("admin"), json={}).status_code == 404
    assert client.put("/api/v1/clusters/east/topology", headers=auth("viewer"), json={}).status_code == 403


def test_the_cli_body_from_kafka_style_flags_registers(client: TestClient, ctx: ServiceContext) -> None:
    """What ``guardian clusters register`` posts for flags (one broker with two exporters) is accepted as is."""
    connect = ConnectOptions(cluster="east", bootstrap_servers="k1:9093,k2:9093", security_protocol="SASL_SSL",
                             sasl_mechanism="SCRAM-SHA-512", sasl_username="guardian",
                             sasl_password_file="/etc/guardian/kafka.pw", ssl_cafile="/etc/guardian/ca.pem",
                             metrics_url=["1=https://k1:7071/metrics", "1=https://k1:9100/metrics"])
    body = registration_body(connect.endpoints())
    assert body["brokers"] == [{"id": 1, "metrics": ["https://k1:7071/metrics", "https://k1:9100/metrics"]}]
    r = client.post("/api/v1/clusters?probe=false", headers=auth("admin"), json=body)
    assert r.status_code == 201, r.text
    eps = endpoints_of("east", ctx.store.read(lambda s: dict(s["clusters"]["east"])))
    assert eps.security == connect.endpoints().security
    assert [m.url for m in eps.brokers[0].metrics_endpoints] == ["https://k1:7071/metrics", "https://k1:9100/metrics"]


@pytest.mark.parametrize("address", ["000", "k1", "k1:", "k1:0", "k1:99999", "::1:9092", "k 1:9092"])
def test_a_bootstrap_address_must_be_host_port(client: TestClient, address: str) -> None:
    r = client.post("/api/v1/clusters?probe=false", headers=auth("admin"),
                    json={"name": "typo", "bootstrap_servers": ["k2:9092", address]})
    assert r.status_code == 400, r.text
    assert r.json()["problems"][0]["path"] == "$.bootstrap_servers"
    assert "[1]" in r.json()["detail"] and "host:port" in r.json()["detail"]


def test_registration_probes_the_bootstrap_and_every_endpoint_unless_told_not_to(client: TestClient) -> None:
    closed, dead_metrics = free_ports(2)
    body = {"name": "closed", "bootstrap_servers": [f"127.0.0.1:{closed}"],
            "brokers": [{"id": 1, "metrics": [f"http://127.0.0.1:{dead_metrics}/metrics"]}]}
    t0 = time.monotonic()
    r = client.post("/api/v1/clusters", headers=auth("admin"), json=body)
    assert time.monotonic() - t0 < 8
    assert r.status_code == 400, r.text
    problems = {p["path"]: p["message"] for p in r.json()["problems"]}
    assert "connection refused" in problems["$.bootstrap_servers"]
    assert f"127.0.0.1:{dead_metrics}" in problems["$.brokers[0].metrics[0]"]
    assert client.get("/api/v1/clusters", headers=auth("viewer")).json() == []
    assert client.post("/api/v1/clusters?probe=false", headers=auth("admin"), json=body).status_code == 201
