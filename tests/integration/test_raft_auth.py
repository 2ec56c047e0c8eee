"""The Raft port against a client without the key: three real node processes on 127.0.0.1.

A pickled frame whose unpickling would run ``os.system("touch <marker>")`` executes nothing on a
node of the group and is logged (one line naming the peer); ``status`` needs the key as well; the
group keeps committing.  The same frame against a pysyncobj node without a password does run the
command — the test's payload is real.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from pysyncobj import SyncObj, SyncObjConf

from raft.localcluster import LocalCluster, free_ports

pytestmark = [pytest.mark.timeout(120)]


class _Touch:
    """Unpickling this object runs ``os.system("touch <path>")``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.path}",)


def evil_frame(marker: Path) -> bytes:
    data = zlib.compress(pickle.dumps(_Touch(marker)), 3)
    return struct.pack("i", len(data)) + data


def send_frames(port: int, frames: list[bytes], wait_s: float = 0.5) -> bytes:
    """Send ``frames`` on one connection; return whatever the node answered before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        for frame in frames:
            try:
                sock.sendall(frame)
            except OSError:
                break
        sock.settimeout(wait_s)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except OSError:
            pass
        return got


@pytest.fixture
def cluster3(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(3, tmp_path / "raft", extra_args=["--log-level", "WARNING"])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def test_the_payload_runs_on_a_node_without_a_password(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    obj = SyncObj(f"127.0.0.1:{port}", [], SyncObjConf(autoTick=True))
    try:
        obj.waitBinded()
        marker = tmp_path / "pwned-plain"
        send_frames(port, [evil_frame(marker)])
        deadline = time.monotonic() + 3
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "an unauthenticated pysyncobj node unpickles the frame"
    finally:
        obj.destroy_synchronous()


def test_a_frame_from_a_client_without_the_key_executes_nothing_and_is_logged(
    cluster3: LocalCluster, tmp_path: Path
) -> None:
    leader = cluster3.wait_leader()
    code, _, _ = cluster3.nodes[leader].propose({"type": "put", "key": "before", "value": 1})
    assert code == 200
    marker = tmp_path / "pwned"
    status_request = zlib.compress(pickle.dumps(["status"]), 3)
    for node in cluster3.nodes:
        answer = send_frames(node.raft_port, [evil_frame(marker)])
        assert answer == b"", "a client without the key gets nothing back"
        # the admin 'status' command without the key: no answer either
        assert send_frames(node.raft_port, [struct.pack("i", len(status_request)) + status_request]) == b""
    time.sleep(0.5)
    assert not marker.exists(), "the pickled payload ran inside a node"
    for node in cluster3.nodes:
        log = (node.data_dir.parent / f"{node.data_dir.name}.log").read_text()
        lines = [line for line in log.splitlines() if "failed authentication" in line]
        assert len(lines) >= 2, f"node {node.raft_addr} did not log the dropped frames:\n{log[-2000:]}"
        assert "127.0.0.1:" in lines[0] and "nothing unpickled" in lines[0]
    # the group still works and agrees
    leader = cluster3.wait_leader()
    code, _, _ = cluster3.nodes[leader].propose({"type": "put", "key": "after", "value": 2})
    assert code == 200
    states = cluster3.wait_converged()
    assert states[0]["state"]["kv"]["after"]["value"] == 2
    key_file = cluster3.key_file
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_a_node_with_another_key_cannot_join(tmp_path: Path) -> None:
    cluster = LocalCluster(3, tmp_path / "raft")
    try:
        intruder = cluster.nodes[2]
        other_key = tmp_path / "other.key"
        other_key.write_text("a-completely-different-raft-key-0123456789\n")
        other_key.chmod(0o600)
        intruder.extra_args = ["--key-file", str(other_key)]
        cluster.start()
        leader = cluster.wait_leader(timeout=20)
        assert leader != 2
        code, _, _ = cluster.nodes[leader].propose({"type": "put", "key": "k", "value": 1})
        assert code == 200
        time.sleep(1.0)
        st = intruder.get("/status")
        assert st is not None and st["last_applied"] < 3 and not st["ready"], st
    finally:
        cluster.close()
