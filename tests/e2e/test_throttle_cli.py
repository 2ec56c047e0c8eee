"""`guardian throttle list|explain` against a real HTTP server on 127.0.0.1 (and offline on a snapshot)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import uvicorn

from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.service.protection import ClusterBinding, ProtectionService
from controlplane.state.store import LocalStateStore
from domain import dump_snapshot
from domain.throttles import Lever
from planners.protection import Observation
from tests.support.throttle_support import hot_snapshot

ROOT = Path(__file__).resolve().parents[2]


def guardian(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The checkout's ``guardian`` (``python -m controlplane.cli`` from the repository root)."""
    return subprocess.run([sys.executable, "-m", "controlplane.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin",
                                                                 "NO_COLOR": "1"})


class Source:
    def observe(self) -> Observation:
        return Observation(snapshot=replace(hot_snapshot(), taken_at=datetime.now(UTC)), partition_throttle=True)


class Actuator:
    def apply(self, lever: Lever) -> None:
        pass

    def remove(self, lever: Lever) -> None:
        pass


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[str]:
    settings = Settings(data_dir=tmp_path, tokens=[TokenConf(name="viewer", role="viewer", sha256=hash_token("v"))])
    store = LocalStateStore()
    store.propose({"type": "cluster.register", "meta": {"who": "t", "at": "2026-11-22T00:00:00Z"}, "name": "c1",
                   "bootstrap_servers": ["127.0.0.1:9"]})
    store.propose({"type": "cluster.register", "meta": {"who": "t", "at": "2026-11-22T00:00:00Z"}, "name": "c2",
                   "bootstrap_servers": ["127.0.0.1:9"]})
    service = ProtectionService(store)
    service.bind("c1", ClusterBinding(Source(), Actuator()))
    service.job()
    service.job()  # two hot samples: fetch:orders:0 is set
    app = create_app(ServiceContext(settings=settings, store=store, throttle=service))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)
    sock.close()


def test_list_and_explain_over_http(server: str) -> None:
    r = guardian("throttle", "list", "--url", server, "--token", "v", "--json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["key"] == "fetch:orders:0" and row["set_by"] == "throttle-protection"
    r = guardian("throttle", "list", "--url", server, "--token", "v")
    assert r.returncode == 0 and "fetch:orders:0" in r.stdout and "partition_fetch" in r.stdout
    r = guardian("throttle", "explain", "c1", "--url", server, "--token", "v")
    assert r.returncode == 0, r.stderr
    assert "UNHEALTHY" in r.stdout and "user_read" in r.stdout
    r = guardian("throttle", "explain", "c1", "fetch:orders:0", "--url", server, "--token", "v", "--json")
    doc = json.loads(r.stdout)
    assert doc["throttle"]["evidence"]["causes"][0]["topic"] == "orders"
    assert [a["type"] for a in doc["history"]] == ["throttle.set"]
    r = guardian("throttle", "explain", "c1", "nope", "--url", server, "--token", "v")
    assert r.returncode == 1 and "no throttle 'nope'" in r.stderr
    r = guardian("throttle", "list", "--url", server, "--token", "wrong")
    assert r.returncode == 1 and "401" in r.stderr


def test_list_takes_the_cluster_as_an_argument_and_says_when_nothing_is_throttled(server: str) -> None:
    r = guardian("throttle", "list", "c1", "--url", server, "--token", "v", "--json")
    assert r.returncode == 0, r.stderr
    assert [t["key"] for t in json.loads(r.stdout)] == ["fetch:orders:0"]
    quiet = guardian("throttle", "list", "c2", "--url", server, "--token", "v")
    assert quiet.returncode == 0 and quiet.stdout.strip() == "nothing throttled on c2", quiet.stdout + quiet.stderr
    assert guardian("throttle", "list", "--cluster", "c2", "--url", server, "--token", "v").stdout == quiet.stdout
    both = guardian("throttle", "list", "c1", "--cluster", "c2", "--url", server, "--token", "v")
    assert both.returncode == 2 and "two clusters" in both.stderr
    explained = guardian("throttle", "explain", "c2", "--url", server, "--token", "v")
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.strip().splitlines()[-1] == "nothing throttled on c2", explained.stdout


def test_unreachable_service_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = guardian("throttle", "list", "--url", f"http://127.0.0.1:{port}", "--token", "v")
    assert r.returncode == 1 and "cannot reach" in r.stderr


def test_explain_offline_on_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(dump_snapshot(hot_snapshot()))
    r = guardian("throttle", "explain", "--snapshot", path, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["offline"] and doc["decisions"][0]["key"] == "fetch:orders:0"
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "nope"}')
    r = guardian("throttle", "explain", "--snapshot", bad)
    assert r.returncode == 2 and "$.format" in r.stderr
    assert guardian("throttle", "explain").returncode == 2
    calm = tmp_path / "calm.json"
    from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
    calm.write_text(dump_snapshot(generate_snapshot(GeneratorSpec(brokers=3, disks_per_broker=2, partitions=10,
                                                                  seed=1, skew="uniform", cluster="calm"))))
    r = guardian("throttle", "explain", "--snapshot", calm)
    assert r.returncode == 0 and "nothing would be throttled on calm" in r.stdout, r.stdout + r.stderr
