"""A rolling upgrade of a real three-node group (``guardian serve`` processes, pysyncobj over TCP).

Node 3 runs "old code": the same build capped at state version 1 by ``GUARDIAN_MAX_STATE_VERSION`` (what a
release without version 2 supports). The test checks, in order: a version-2 command form is refused while the
group runs version 1; raising the version is refused while node 3 cannot apply it, naming node 3; forced
anyway, node 3 *holds* (not ready, its state exactly as before the raise) instead of applying the log
differently, while the majority goes on; upgraded (restarted without the cap), node 3 replays the held entries
and ends with the very state of the others; the version-2 command then works on every node.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.launcher import ServiceCluster
from controlplane.state.commands import meta
from controlplane.state.raft_store import RaftStateStore
from controlplane.state.versions import ENV_CAP, LATEST
from raft.errors import StartupRefused
from raft.localcluster import free_ports

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[ServiceCluster]:
    c = ServiceCluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def wait_for(what: str, probe: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def hashes(cluster: ServiceCluster, nodes: tuple[int, ...]) -> dict[int, str | None]:
    return {n: (cluster.status(n) or {}).get("state_hash") for n in nodes}


def converged(cluster: ServiceCluster, nodes: tuple[int, ...]) -> str | None:
    """The one state hash of ``nodes`` once they agree and are ready (None meanwhile)."""
    statuses = [cluster.status(n) for n in nodes]
    if not all(s and s["ready"] for s in statuses):
        return None
    found = {s["state_hash"] for s in statuses if s}
    return found.pop() if len(found) == 1 else None


def test_mixed_version_group_never_diverges_and_upgrades(cluster: ServiceCluster,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def start_old_node_3() -> None:
        monkeypatch.setenv(ENV_CAP, "1")
        cluster.start(3)  # "old code"
        monkeypatch.delenv(ENV_CAP)

    cluster.start(1)
    cluster.start(2)
    start_old_node_3()
    if cluster.leader(timeout=60) == 3:  # let new code lead (an old leader would refuse even a forced raise)
        cluster.kill(3)
        cluster.leader(timeout=60, exclude=3)
        start_old_node_3()

    def on_leader(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        for _ in range(5):  # a leader change under load: ask the new one
            code, answer = cluster.request(cluster.leader(timeout=30), method, path, body)
            if code != 307:
                return code, answer
        return code, answer

    old_addr = f"127.0.0.1:{cluster.raft_ports[2]}"
    code, body = on_leader("POST", "/api/v1/clusters?probe=false",
                                 {"name": "c1", "bootstrap_servers": ["127.0.0.1:9092"]})
    assert code == 201, body
    wait_for("three ready nodes with one state", lambda: converged(cluster, (1, 2, 3)), 60)
    assert (cluster.status(3) or {})["state_version"] == {"group": 1, "supported": 1, "latest": LATEST}

    # a version-2 command form is refused while the group runs version 1, with what to do
    code, body = on_leader("PUT", "/api/v1/clusters/c1/labels", {"labels": {"team": "payments"}})
    assert code == 409 and "needs state version 2; the group runs version 1" in body["detail"], body
    # raising is refused while node 3 cannot apply version 2, naming it
    code, body = on_leader("POST", "/api/v1/state/version", {"version": 2})
    assert code == 409 and old_addr in body["detail"] and "supports versions up to 1" in body["detail"], body
    code, body = on_leader("GET", "/api/v1/state/version")
    assert code == 200 and body["group"] == 1
    before = wait_for("one state before the raise", lambda: converged(cluster, (1, 2, 3)))

    # forced while node 3 is old: node 3 holds, its state untouched, instead of diverging
    code, body = on_leader("POST", "/api/v1/state/version", {"version": 2, "force": True})
    assert code == 200 and body == {"version": 2, "previous": 1}, body
    held = wait_for("node 3 to hold", lambda: (cluster.status(3) or {}).get("held"))
    assert "needs state version 2" in held and "supports up to 1" in held
    code, body = cluster.request(3, "GET", "/readyz")
    assert code == 503 and "holds" in body["detail"]
    code, body = on_leader("PUT", "/api/v1/clusters/c1/labels", {"labels": {"team": "payments"}})
    assert code == 200 and body["labels"] == {"team": "payments"}, body  # the upgraded majority goes on
    assert (cluster.status(3) or {})["state_hash"] == before  # nothing of the raise or the labels applied there
    with urllib.request.urlopen(cluster.url(3) + "/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    assert "guardian_raft_held 1.0" in metrics and 'guardian_state_version{kind="supported"} 1.0' in metrics
    majority = wait_for("nodes 1 and 2 agree", lambda: converged(cluster, (1, 2)))
    assert majority != before

    # upgrade node 3: the same data directory, code without the cap; it replays what it held
    cluster.kill(3)
    cluster.start(3)
    final = wait_for("three ready nodes with one state after the upgrade", lambda: converged(cluster, (1, 2, 3)), 60)
    assert final == majority
    assert all((cluster.status(n) or {})["state_version"]["group"] == 2 for n in (1, 2, 3))
    # every node upgraded: the check passes (no force), the same version again is a no-op
    code, body = on_leader("POST", "/api/v1/state/version", {"version": 2})
    assert code == 200 and body == {"version": 2, "previous": 2}, body
    code, body = on_leader("PUT", "/api/v1/clusters/c1/labels", {"labels": {"tier": "gold"}})
    assert code == 200, body
    wait_for("one state with the new labels", lambda: converged(cluster, (1, 2, 3)))
    code, body = cluster.request(3, "GET", "/api/v1/clusters/c1")
    assert code == 200 and body["labels"] == {"tier": "gold"}
    # a downgrade is refused
    code, body = on_leader("POST", "/api/v1/state/version", {"version": 1})
    assert code == 400 and "never go down" in body["detail"]


def test_old_code_restarted_on_a_newer_journal_refuses_to_start_and_new_code_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One node, restarted on its own data: capped at version 1 it refuses to start, naming the entry; uncapped it
    replays to the same state."""
    (port,) = free_ports(1)
    addr = f"127.0.0.1:{port}"
    store = RaftStateStore(addr, [], tmp_path / "raft")
    try:
        assert store.node.wait_ready(10)
        store.propose({"type": "cluster.register", "meta": meta("op"), "name": "c1",
                       "bootstrap_servers": ["127.0.0.1:9092"]})
        store.propose({"type": "state.version", "meta": meta("admin"), "version": 2})
        store.propose({"type": "cluster.labels", "meta": meta("op"), "name": "c1", "labels": {"tier": "gold"}})
        digest = store.status()["state_hash"]
    finally:
        store.close()
    monkeypatch.setenv(ENV_CAP, "1")
    with pytest.raises(StartupRefused, match=r"needs state version 2; this node's code supports up to 1"):
        RaftStateStore(addr, [], tmp_path / "raft")
    monkeypatch.delenv(ENV_CAP)
    store = RaftStateStore(addr, [], tmp_path / "raft")
    try:
        assert store.node.wait_ready(10)
        assert store.status()["state_hash"] == digest
        assert store.read(lambda s: s["clusters"]["c1"]["labels"]) == {"tier": "gold"}
    finally:
        store.close()
