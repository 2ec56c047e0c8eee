"""`guardian anomalies list|explain|ignore` (a new process each) against a controller's HTTP API served on
127.0.0.1 (uvicorn, the real app over a local store seeded with the self-healing loop's records)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.store import LocalStateStore
from tests.support.healing_support import seed_anomalies as seed

ROOT = Path(__file__).resolve().parents[2]


def guardian(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "controlplane.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, int], LocalStateStore]]:
    settings = Settings(data_dir=tmp_path, tokens=[TokenConf(name="viewer", role="viewer", sha256=hash_token("v")),
                                                   TokenConf(name="oncall", role="operator", sha256=hash_token("o"))])
    store = LocalStateStore()
    ids = seed(store)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(create_app(ServiceContext(settings=settings, store=store)),
                                        log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started
    yield f"http://127.0.0.1:{port}", ids, store
    srv.should_exit = True
    thread.join(10)
    sock.close()


def test_list_explain_ignore(server: tuple[str, dict[str, int], LocalStateStore]) -> None:
    url, ids, store = server
    r = guardian("anomalies", "list", "--url", url, "--token", "v")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and "disk-fail-slow" in lines[0] and "broker-dead" in lines[1] and "fixing" in lines[1]
    r = guardian("anomalies", "list", "--url", url, "--token", "v", "--all", "--json")
    assert [a["id"] for a in json.loads(r.stdout)] == [ids["urp"], ids["slow"], ids["dead"]]
    r = guardian("anomalies", "list", "--url", url, "--token", "v", "--cluster", "c2")
    assert r.returncode == 0 and r.stdout.strip() == "no anomalies"

    r = guardian("anomalies", "explain", str(ids["dead"]), "--url", url, "--token", "v")
    assert r.returncode == 0, r.stderr
    assert f"anomaly {ids['dead']} (broker-dead) on c1: fixing" in r.stdout
    assert '"dead_for_s": 400' in r.stdout and "heal-broker" in r.stdout and "drain broker 2" in r.stdout

    r = guardian("anomalies", "ignore", str(ids["slow"]), "--reason", "disk swap tonight", "--url", url, "--token", "v")
    assert r.returncode == 1 and "403" in r.stderr
    r = guardian("anomalies", "ignore", str(ids["slow"]), "--reason", "disk swap tonight", "--url", url, "--token", "o")
    assert r.returncode == 0, r.stderr
    assert store.read(lambda s: s["anomalies"][str(ids["slow"])]["status"]) == "ignored"
    r = guardian("anomalies", "ignore", str(ids["dead"]), "--url", url, "--token", "o")
    assert r.returncode == 1 and "409" in r.stderr and "stop its execution first" in r.stderr
    r = guardian("anomalies", "explain", "9999", "--url", url, "--token", "v")
    assert r.returncode == 1 and "404" in r.stderr and "unknown anomaly 9999" in r.stderr
    r = guardian("anomalies", "list", "--url", url, "--token", "wrong")
    assert r.returncode == 1 and "401" in r.stderr


def test_unreachable_controller_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = guardian("anomalies", "list", "--url", f"http://127.0.0.1:{port}", "--token", "v")
    assert r.returncode == 1 and "cannot reach" in r.stderr
