"""The one connection over kafkasim's secured listeners: SASL_SSL/SCRAM, a wrong password, an untrusted CA,
and the endpoints document ``sim up --realistic`` writes for an operator, read by the one parser."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.collector import ClusterCollector, CollectionError
from kafkaio.admin import KafkaAdmin
from kafkaio.connection import KafkaConnection
from kafkaio.endpoints import parse_endpoints
from kafkaio.errors import KafkaAuthError
from kafkaio.security import SecuritySettings
from kafkaio.source import KafkaSource
from kafkasim.broker.security import SecurityConfig
from kafkasim.broker.server import SimRunner
from kafkasim.broker.tls import TlsMaterial
from kafkasim.scenarios.realistic import operator_endpoints, prepare
from tests.support.kafkasim_support import start_sim

USER, PASSWORD, WRONG = "guardian", "correct horse battery staple", "wrong-horse-9f3"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsMaterial, Any]:
    material = TlsMaterial()
    return material, material.write(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def sim(tls: tuple[TlsMaterial, Any]) -> Iterator[SimRunner]:
    sec = SecurityConfig(protocol="SASL_SSL", tls=tls[0])
    sec.users.add(USER, PASSWORD)
    r = start_sim(realistic=False, security=sec)
    yield r
    r.stop()


def _settings(tmp_path: Path, ca_file: Any, password: str, mechanism: str = "SCRAM-SHA-512") -> SecuritySettings:
    pw = tmp_path / f"pw-{mechanism}-{len(password)}"
    pw.write_text(password + "\n")
    return SecuritySettings(protocol="SASL_SSL", sasl_mechanism=mechanism, username=USER, password_file=str(pw),
                            ca_file=str(ca_file))


def test_scram_over_sasl_ssl_one_connection_for_reads_and_the_port(sim: SimRunner, tls: Any, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    doc = {"clusters": {"east": {"bootstrap_servers": sim.endpoints["clusters"]["east"]["bootstrap_servers"],
                                 "security": _settings(tmp_path, tls[1].ca_file, PASSWORD).model_dump(mode="json")}}}
    eps = parse_endpoints(doc, "east")
    conn = KafkaConnection.for_endpoints(eps)
    src, adm = KafkaSource(conn), KafkaAdmin(conn)
    try:
        first = src.fetch()
        assert "orders" in first.topics and set(first.brokers) == {1, 2, 3, 4}
        assert adm.live().partitions[("orders", 0)] == first.partitions[("orders", 0)]
        second = src.fetch(full=False, previous=first)  # Metadata over TLS+SASL, unchanged: not decoded again
        assert second.partitions is first.partitions and conn.metadata.reused == 1 and conn.connects == 1
    finally:
        conn.close()
    assert PASSWORD not in caplog.text


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_other_mechanisms(sim: SimRunner, tls: Any, tmp_path: Path, mechanism: str) -> None:
    conn = KafkaConnection(sim.endpoints["clusters"]["east"]["bootstrap_servers"], cluster="east",
                           security=_settings(tmp_path, tls[1].ca_file, PASSWORD, mechanism))
    try:
        assert KafkaAdmin(conn).live().alive == frozenset({1, 2, 3, 4})
    finally:
        conn.close()


def test_a_wrong_password_is_an_authentication_error_at_once(sim: SimRunner, tls: Any, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    boot = sim.endpoints["clusters"]["east"]["bootstrap_servers"]
    conn = KafkaConnection(boot, cluster="east", security=_settings(tmp_path, tls[1].ca_file, WRONG),
                           request_timeout_ms=15_000)
    t0 = time.monotonic()
    with pytest.raises(KafkaAuthError) as exc:
        KafkaAdmin(conn).live()
    assert time.monotonic() - t0 < 2, "an authentication failure must not wait for the bootstrap timeout"
    msg = str(exc.value)
    assert msg.startswith("cluster east: authentication failed with SASL_SSL/SCRAM-SHA-512 as user 'guardian': ")
    assert "invalid credentials" in msg
    with pytest.raises(KafkaAuthError):  # the bulk reads say the same (a KafkaSourceError too)
        KafkaSource(conn).fetch()
    eps = parse_endpoints({"clusters": {"east": {"bootstrap_servers": boot, "security": conn.security.model_dump()}}},
                          "east")
    col = ClusterCollector(eps)
    try:
        with pytest.raises(CollectionError, match="authentication failed"):
            col.collect_once()
    finally:
        col.close()
    assert WRONG not in caplog.text and WRONG not in msg


def test_an_untrusted_certificate_is_a_tls_error(sim: SimRunner, tls: Any, tmp_path: Path) -> None:
    other = TlsMaterial().write(tmp_path / "other")  # a CA that did not sign the brokers' certificates
    conn = KafkaConnection(sim.endpoints["clusters"]["east"]["bootstrap_servers"], cluster="east",
                           security=_settings(tmp_path, other.ca_file, PASSWORD))
    t0 = time.monotonic()
    with pytest.raises(KafkaAuthError, match="cluster east: TLS handshake failed"):
        KafkaAdmin(conn).live()
    assert time.monotonic() - t0 < 5


def test_the_realistic_operator_document_reads_and_connects(tmp_path: Path) -> None:
    """What ``sim up --realistic`` registers (SASL_SSL/SCRAM-SHA-512, two https exporters per broker with
    basic auth, rack->IDC rule, hardware profile) parses, connects, and declares the simulator's truth."""
    setup = prepare(tmp_path)
    runner = start_sim(realistic=False, security=setup.security, metrics=setup.metrics)
    try:
        doc = operator_endpoints(runner.endpoints, runner.server.fed, setup)
        eps = parse_endpoints(json.loads(json.dumps(doc)), "east")
        assert eps.security.protocol.value == "SASL_SSL" and eps.security.sasl_mechanism is not None
        assert all(len(b.metrics_endpoints) == 2 and all(m.url.startswith("https://") and m.username
                                                         and m.password_file and m.ca_file
                                                         for m in b.metrics_endpoints) for b in eps.brokers)
        src = KafkaSource.for_endpoints(eps)
        try:
            state = src.fetch()
        finally:
            src.close()
        truth = runner.server.fed.cluster("east").brokers
        assert set(state.brokers) == set(truth)
        hw = eps.hardware
        assert hw is not None
        for bid, meta in state.brokers.items():
            assert eps.idc_of(bid, meta.rack) == (truth[bid].idc, "rack_to_idc")
            for d in truth[bid].disks:
                found = hw.lookup(bid, d.path)
                assert found is not None and found[1] == "declared"
                assert (found[0].kind.value, found[0].max_bytes_per_s) == (d.kind, float(d.max_bytes_per_s))
    finally:
        runner.stop()
