"""`python -m kafkasim up --realistic` as a real process: an operator's endpoints file (no secrets in it),
SASL_SSL/SCRAM-SHA-512 that clients complete from that file alone, and `sim truth` agreeing with it."""

from __future__ import annotations

import base64
import fnmatch
import json
import re
import signal
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Path]]:
    d = tmp_path_factory.mktemp("realistic")
    ep_file = d / "sim.json"
    proc = subprocess.Popen([sys.executable, "-m", "kafkasim", "up", "--realistic", "--endpoints-file", str(ep_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ep = json.loads(proc.stdout.readline())
        yield ep, ep_file
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait(5)
        assert rc == 0, proc.stderr.read() if proc.stderr else ""


def test_endpoints_file_is_what_an_operator_registers(up: tuple[dict[str, Any], Path]) -> None:
    ep, ep_file = up
    assert json.loads(ep_file.read_text()) == ep
    for c in ep["clusters"].values():
        assert set(c) == {"bootstrap_servers", "security", "brokers", "rack_to_idc", "hardware"}
        sec = c["security"]
        assert sec["protocol"] == "SASL_SSL" and sec["sasl_mechanism"] == "SCRAM-SHA-512"
        assert set(sec) == {"protocol", "sasl_mechanism", "username", "password_file", "ca_file"}
        for b in c["brokers"]:
            assert set(b) == {"id", "metrics"} and len(b["metrics"]) == 2
            for m in b["metrics"]:
                assert set(m) == {"url", "ca_file", "username", "password_file"}
                assert m["url"].startswith("https://")
    text = ep_file.read_text()
    secret_files = {Path(c["security"]["password_file"]) for c in ep["clusters"].values()}
    secret_files |= {Path(m["password_file"]) for c in ep["clusters"].values() for b in c["brokers"]
                     for m in b["metrics"]}
    assert len(secret_files) == 2
    for f in secret_files:
        assert f.parent == ep_file.parent
        assert f.stat().st_mode & 0o777 == 0o600
        assert f.read_text().strip() not in text


def test_clients_connect_with_the_registered_settings(up: tuple[dict[str, Any], Path]) -> None:
    from confluent_kafka.admin import AdminClient

    ep, _ = up
    c = ep["clusters"]["east"]
    sec = c["security"]
    password = Path(sec["password_file"]).read_text().strip()
    admin = KafkaAdminClient(bootstrap_servers=c["bootstrap_servers"], security_protocol=sec["protocol"],
                             sasl_mechanism=sec["sasl_mechanism"], sasl_plain_username=sec["username"],
                             sasl_plain_password=password, ssl_cafile=sec["ca_file"])
    try:
        assert "orders" in admin.list_topics()
    finally:
        admin.close()
    md = AdminClient({"bootstrap.servers": c["bootstrap_servers"], "security.protocol": sec["protocol"],
                      "sasl.mechanism": sec["sasl_mechanism"], "sasl.username": sec["username"],
                      "sasl.password": password, "ssl.ca.location": sec["ca_file"]}).list_topics(timeout=15)
    assert len(md.brokers) == 6
    m = c["brokers"][0]["metrics"][1]
    auth = base64.b64encode(f"{m['username']}:{Path(m['password_file']).read_text().strip()}".encode()).decode()
    req = urllib.request.Request(m["url"], headers={"Authorization": f"Basic {auth}"})
    ctx = ssl.create_default_context(cafile=m["ca_file"])
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        assert "node_filesystem_avail_bytes" in resp.read().decode()


def _truth(ep_file: Path, cluster: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "kafkasim", "truth", "--endpoints-file", str(ep_file),
                          "--cluster", cluster], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


@pytest.mark.parametrize("cluster", ["east", "west"])
def test_truth_agrees_with_the_declared_topology(up: tuple[dict[str, Any], Path], cluster: str) -> None:
    ep, ep_file = up
    c = ep["clusters"][cluster]
    truth = _truth(ep_file, cluster)
    assert truth["format"] == "guardian.snapshot/v1" and truth["cluster"] == cluster
    rx = re.compile(c["rack_to_idc"]["regex"])
    for b in truth["brokers"]:
        m = rx.match(b["rack"])
        assert m is not None and m.group("idc") == b["idc"]
        assert b["pool"]
        for d in b["disks"]:
            hits = [h for h in c["hardware"] if fnmatch.fnmatchcase(d["path"], h["log_dirs"])
                    and (h["brokers"] == "*" or b["id"] in h["brokers"])]
            assert len(hits) == 1, (b["id"], d["path"], hits)
            assert hits[0]["kind"] == d["kind"] and hits[0]["max_bytes_per_s"] == d["max_bytes_per_s"]
    parts = [p for t in truth["topics"] for p in t["partitions"]]
    assert parts and all("bytes_in_per_s" in p and "messages_in_per_s" in p for p in parts)
