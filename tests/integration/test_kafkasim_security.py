"""kafkasim's secured listeners: real TLS and SASL handshakes by kafka-python, confluent-kafka and kcat."""

from __future__ import annotations

import logging
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient

from kafkasim.broker.security import SecurityConfig
from kafkasim.broker.server import SimRunner
from kafkasim.broker.tls import TlsFiles, TlsMaterial
from kafkasim.broker.wire import REGISTRY
from tests.support.kafkasim_support import start_sim

USER, PASSWORD = "guardian", "correct horse battery staple"
KCAT = shutil.which("kcat")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsMaterial, TlsFiles]:
    material = TlsMaterial()
    return material, material.write(tmp_path_factory.mktemp("tls"))


def _sim(tls: tuple[TlsMaterial, TlsFiles], protocol: str, **kw: Any) -> SimRunner:
    sec = SecurityConfig(protocol=protocol, tls=tls[0], **kw)
    sec.users.add(USER, PASSWORD)
    return start_sim(realistic=False, security=sec)


@pytest.fixture(scope="module")
def sasl_ssl(tls: tuple[TlsMaterial, TlsFiles]) -> Iterator[SimRunner]:
    r = _sim(tls, "SASL_SSL")
    yield r
    r.stop()


@pytest.fixture(scope="module")
def sasl_plain(tls: tuple[TlsMaterial, TlsFiles]) -> Iterator[SimRunner]:
    r = _sim(tls, "SASL_PLAINTEXT")
    yield r
    r.stop()


@pytest.fixture(scope="module")
def ssl_only(tls: tuple[TlsMaterial, TlsFiles]) -> Iterator[SimRunner]:
    r = _sim(tls, "SSL")
    yield r
    r.stop()


def _bootstrap(r: SimRunner) -> str:
    return str(r.endpoints["clusters"]["east"]["bootstrap_servers"])


def _kafka_python(r: SimRunner, protocol: str, files: TlsFiles, mechanism: str | None = None,
                  password: str = PASSWORD, **kw: Any) -> list[str]:
    conf: dict[str, Any] = {"bootstrap_servers": _bootstrap(r), "security_protocol": protocol, **kw}
    if "SSL" in protocol:
        conf["ssl_cafile"] = str(files.ca_file)
    if mechanism:
        conf.update(sasl_mechanism=mechanism, sasl_plain_username=USER, sasl_plain_password=password)
    admin = KafkaAdminClient(**conf)
    try:
        return sorted(admin.list_topics())
    finally:
        admin.close()


def _confluent_conf(r: SimRunner, protocol: str, files: TlsFiles, mechanism: str | None = None,
                    password: str = PASSWORD) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": _bootstrap(r), "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(files.ca_file)
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": password})
    return conf


def _confluent_topics(conf: dict[str, Any]) -> list[str]:
    from confluent_kafka.admin import AdminClient

    return sorted(t for t in AdminClient(conf).list_topics(timeout=15).topics)


def _kcat(r: SimRunner, protocol: str, files: TlsFiles, mechanism: str | None = None) -> str:
    assert KCAT is not None
    args = [KCAT, "-L", "-b", _bootstrap(r), "-X", f"security.protocol={protocol}", "-m", "15"]
    if "SSL" in protocol:
        args += ["-X", f"ssl.ca.location={files.ca_file}"]
    if mechanism:
        args += ["-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={USER}", "-X", f"sasl.password={PASSWORD}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_kafka_python_and_confluent_list_topics_over_sasl_ssl(sasl_ssl: SimRunner, tls: Any, mechanism: str) -> None:
    files = tls[1]
    assert _kafka_python(sasl_ssl, "SASL_SSL", files, mechanism) == ["orders"]
    assert _confluent_topics(_confluent_conf(sasl_ssl, "SASL_SSL", files, mechanism)) == ["orders"]


@pytest.mark.skipif(KCAT is None, reason="kcat not installed")
def test_kcat_lists_the_cluster_over_sasl_ssl_and_ssl(sasl_ssl: SimRunner, ssl_only: SimRunner, tls: Any) -> None:
    out = _kcat(sasl_ssl, "SASL_SSL", tls[1], "SCRAM-SHA-512")
    assert "4 brokers" in out and 'topic "orders" with 4 partitions' in out
    out = _kcat(ssl_only, "SSL", tls[1])
    assert "4 brokers" in out and "ssl://" in out


def test_ssl_listener_serves_kafka_python_and_confluent(ssl_only: SimRunner, tls: Any) -> None:
    files = tls[1]
    assert _kafka_python(ssl_only, "SSL", files) == ["orders"]
    assert _confluent_topics(_confluent_conf(ssl_only, "SSL", files)) == ["orders"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_sasl_plaintext_mechanisms(sasl_plain: SimRunner, tls: Any, mechanism: str) -> None:
    assert _kafka_python(sasl_plain, "SASL_PLAINTEXT", tls[1], mechanism) == ["orders"]
    assert _confluent_topics(_confluent_conf(sasl_plain, "SASL_PLAINTEXT", tls[1], mechanism)) == ["orders"]


def test_wrong_password_is_an_authentication_error_in_confluent_kafka(sasl_ssl: SimRunner, tls: Any) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    got = threading.Event()

    def on_error(err: Any) -> None:
        errors.append(err)
        got.set()

    conf = _confluent_conf(sasl_ssl, "SASL_SSL", tls[1], "SCRAM-SHA-512", password="wrong")
    t0 = time.monotonic()
    conf["error_cb"] = on_error
    admin = AdminClient(conf)
    while not got.is_set() and time.monotonic() - t0 < 5:
        admin.poll(0.1)
    assert got.is_set(), "no error reported within 5 s"
    err = errors[0]
    assert err.code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in err.str()


def test_wrong_password_is_an_authentication_error_in_kafka_python(sasl_ssl: SimRunner, tls: Any,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """kafka-python 3.0 retries the bootstrap after any failure, so the error is in its log, on the
    first attempt — well before its bootstrap timeout — not a silent hang."""
    caplog.set_level(logging.WARNING, logger="kafka")
    t0 = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - kafka-python gives up with KafkaTimeoutError
        _kafka_python(sasl_ssl, "SASL_SSL", tls[1], "SCRAM-SHA-512", password="wrong", bootstrap_timeout_ms=3000)
    assert time.monotonic() - t0 < 5
    msgs = [r.getMessage() for r in caplog.records]
    assert any("SaslAuthenticationFailedError" in m and "invalid credentials" in m for m in msgs), msgs[:5]


def _frame(api_key: int, version: int, cid: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhih", api_key, version, cid, 4) + b"test" + body
    return struct.pack(">i", len(payload)) + payload


def test_kafka_requests_before_authentication_close_the_connection(sasl_plain: SimRunner) -> None:
    host, port = _bootstrap(sasl_plain).split(",")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(_frame(3, 1, 7, struct.pack(">i", -1)))  # Metadata v1, all topics
        assert s.recv(4) == b""  # closed, nothing answered


def test_api_versions_advertises_the_sasl_apis_only_on_sasl_listeners(sasl_plain: SimRunner) -> None:
    def keys(runner: SimRunner) -> set[int]:
        host, port = _bootstrap(runner).split(",")[0].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(_frame(18, 0, 1))
            size = struct.unpack(">i", s.recv(4))[0]
            data = b""
            while len(data) < size:
                data += s.recv(size - len(data))
        resp = REGISTRY[18]["response"].decode(data[4:], version=0)
        return {k.api_key for k in resp.api_keys}

    assert {17, 36} <= keys(sasl_plain)
    plain = start_sim(realistic=False)
    try:
        assert not {17, 36} & keys(plain)
    finally:
        plain.stop()


def test_mutual_tls_requires_a_client_certificate(tls: Any) -> None:
    material, files = tls
    r = _sim(tls, "SSL", require_client_cert=True)
    try:
        host, port = _bootstrap(r).split(",")[0].split(":")
        assert _kafka_python(r, "SSL", files, ssl_certfile=str(files.client_cert),
                             ssl_keyfile=str(files.client_key)) == ["orders"]
        ctx = material.client_context()
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)), \
                socket.create_connection((host, int(port)), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(_frame(18, 0, 1))
            if not s.recv(4):
                raise ConnectionError("closed without a client certificate")
    finally:
        r.stop()


def test_tls_files_are_private_and_verify_against_localhost(tls: Any) -> None:
    files: TlsFiles = tls[1]
    assert Path(files.server_key).stat().st_mode & 0o777 == 0o600
    assert Path(files.client_key).stat().st_mode & 0o777 == 0o600
    ctx = ssl.create_default_context(cafile=str(files.ca_file))
    assert ctx.check_hostname
