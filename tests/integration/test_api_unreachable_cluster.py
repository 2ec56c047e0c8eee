"""Calls against an unreachable cluster answer within 5 s with a 503 naming it and never block other requests:
a closed port (connection refused) and a port whose connections hang (a listener that never accepts)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.launcher import free_ports
from controlplane.service.context import ServiceContext
from controlplane.state.store import LocalStateStore

H = {"Authorization": "Bearer a-token", "X-Guardian-Reason": "test"}


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path, tokens=[TokenConf(name="admin", role="admin", sha256=hash_token("a-token"))])
    with TestClient(create_app(ServiceContext(settings=settings, store=LocalStateStore()))) as c:
        yield c


@pytest.fixture()
def black_hole() -> Iterator[str]:
    """host:port of a listener whose backlog is full: a connection attempt hangs (its SYNs are dropped)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    fillers = []
    for _ in range(3):
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(server.getsockname())
        fillers.append(filler)
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        for s in [server, *fillers]:
            s.close()


@pytest.mark.parametrize("kind", ["closed", "hanging"])
def test_read_local_against_an_unreachable_cluster_is_a_503_within_5_s(client: TestClient, black_hole: str,
                                                                        kind: str) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}" if kind == "closed" else black_hole
    assert client.post("/api/v1/clusters?probe=false", headers=H,
                       json={"name": "gone", "bootstrap_servers": [address]}).status_code == 201
    other: list[float] = []

    def meanwhile() -> None:
        time.sleep(0.3)
        t = time.monotonic()
        assert client.get("/api/v1/clusters", headers=H).status_code == 200
        other.append(time.monotonic() - t)

    side = threading.Thread(target=meanwhile)
    side.start()
    t0 = time.monotonic()
    r = client.get("/api/v1/clusters/gone/read-local", headers=H)
    took = time.monotonic() - t0
    side.join(10)
    assert r.status_code == 503, r.text
    assert "'gone'" in r.json()["detail"] and address in r.json()["detail"]
    assert took < 5.0, took
    assert other and other[0] < 1.0, other  # another request was answered meanwhile
