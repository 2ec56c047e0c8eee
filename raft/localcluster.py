"""Launch a group of ``raft.node_main`` processes on 127.0.0.1 (reliability tests, benchmarks).

Also a client that streams writes to whichever node leads (:class:`LeaderFollowingWriter`).

Each node is a real OS process with its own Raft port, HTTP port and data directory; nodes can
be killed with SIGKILL and restarted on the same directory.  :meth:`LocalCluster.close` always
kills every process it started.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raft.auth import write_new_key


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http_json(
    port: int, method: str, path: str, body: Any = None, timeout: float = 5.0
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One HTTP request to 127.0.0.1:port; returns (status, JSON body, headers). Raises OSError."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else {}, {k.lower(): v for k, v in resp.getheaders()}
    except (http.client.HTTPException, ValueError) as exc:
        raise OSError(f"bad HTTP exchange with port {port}: {exc}") from exc
    finally:
        conn.close()


@dataclass
class NodeProcess:
    """One ``raft.node_main`` process (may be stopped and restarted on the same data dir)."""

    raft_port: int
    http_port: int
    data_dir: Path
    peers: list[str]
    extra_args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def raft_addr(self) -> str:
        return f"127.0.0.1:{self.raft_port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the process (its output goes to ``node.log`` beside its data dir)."""
        if self.alive:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        cmd = [
            sys.executable, "-m", "raft.node_main",
            "--self", self.raft_addr,
            "--peers", ",".join(self.peers),
            "--data-dir", str(self.data_dir),
            "--http-port", str(self.http_port),
            "--exit-with-parent",  # a killed test run does not leak its nodes
            *self.extra_args,
        ]  # fmt: skip
        log = open(self.data_dir.parent / f"{self.data_dir.name}.log", "ab")  # noqa: SIM115
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        finally:
            log.close()

    def kill(self) -> None:
        """SIGKILL the process (no clean shutdown) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 10.0) -> None:
        """SIGTERM (clean shutdown), SIGKILL if it does not exit in time."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def get(self, path: str, timeout: float = 2.0) -> dict[str, Any] | None:
        """GET a JSON endpoint; None when the node does not answer."""
        try:
            code, body, _ = http_json(self.http_port, "GET", path, timeout=timeout)
        except OSError:
            return None
        return body if code == 200 else None

    def propose(self, command: Any, timeout: float = 6.0) -> tuple[int, dict[str, Any], dict[str, str]]:
        """POST /propose; raises OSError when the node does not answer."""
        return http_json(self.http_port, "POST", "/propose", command, timeout=timeout)


class LocalCluster:
    """``size`` node processes forming one Raft group, in ``base_dir``.

    The nodes share a Raft key generated into ``base_dir/raft.key`` (mode 0600) on first use.
    """

    def __init__(self, size: int, base_dir: Path, extra_args: Sequence[str] = ()) -> None:
        ports = free_ports(2 * size)
        addrs = [f"127.0.0.1:{p}" for p in ports[:size]]
        self.key_file = Path(base_dir) / "raft.key"
        if not self.key_file.exists():
            write_new_key(self.key_file)
        self.nodes = [
            NodeProcess(
                raft_port=ports[i],
                http_port=ports[size + i],
                data_dir=Path(base_dir) / f"node{i}",
                peers=[a for a in addrs if a != addrs[i]],
                extra_args=["--key-file", str(self.key_file), *extra_args],
            )
            for i in range(size)
        ]

    def start(self) -> LocalCluster:
        for node in self.nodes:
            node.start()
        return self

    def close(self) -> None:
        """Kill every process of the cluster."""
        for node in self.nodes:
            node.kill()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def index_of(self, raft_addr: str | None) -> int | None:
        """Index of the node with that Raft address."""
        for i, node in enumerate(self.nodes):
            if node.raft_addr == raft_addr:
                return i
        return None

    def statuses(self) -> list[dict[str, Any] | None]:
        return [node.get("/status", timeout=1.0) if node.alive else None for node in self.nodes]

    def wait_leader(self, timeout: float = 15.0, exclude: int | None = None) -> int:
        """Index of a live node that is leader *and* ready; raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, st in enumerate(self.statuses()):
                if i != exclude and st is not None and st["is_leader"] and st["ready"]:
                    return i
            time.sleep(0.02)
        raise TimeoutError(f"no ready leader within {timeout}s: {self.statuses()}")

    def wait_node_ready(self, index: int, timeout: float = 20.0) -> dict[str, Any]:
        """Wait until node ``index`` knows a leader and has applied all it told it; return status."""
        deadline = time.monotonic() + timeout
        st = None
        while time.monotonic() < deadline:
            st = self.nodes[index].get("/status", timeout=1.0)
            if st is not None and st["ready"]:
                return st
            time.sleep(0.02)
        node = self.nodes[index]
        log = node.data_dir.parent / f"{node.data_dir.name}.log"
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
        raise TimeoutError(f"node {index} not ready within {timeout}s (process alive: {node.alive}): {st}\n"
                           f"--- tail of {log}:\n{tail}")

    def wait_converged(self, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Wait until every live node reports the same applied index and state hash.

        Returns the nodes' ``/state`` bodies; raises TimeoutError (naming the differences).
        """
        deadline = time.monotonic() + timeout
        last: list[Any] = []
        while time.monotonic() < deadline:
            states = [node.get("/state", timeout=3.0) for node in self.nodes if node.alive]
            last = [None if s is None else (s["applied_index"], s["hash"]) for s in states]
            if states and all(s is not None for s in states) and len(set(last)) == 1:
                return [s for s in states if s is not None]
            time.sleep(0.1)
        raise TimeoutError(f"nodes did not converge within {timeout}s: (applied_index, hash) = {last}")


class LeaderFollowingWriter(threading.Thread):
    """Streams puts (and every 7th an ID allocation) to whichever node leads, following hints.

    Records only *acknowledged* writes: ``acked[key] = value`` and ``id_blocks`` in ack order.
    """

    def __init__(self, cluster: LocalCluster, start_at: int = 0, prefix: str = "w") -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.prefix = prefix
        self.seq = start_at
        self.acked: dict[str, int] = {}
        self.ack_times: list[tuple[float, int]] = []  # (monotonic time, node index)
        self.id_blocks: list[tuple[int, int]] = []
        self.failures = 0
        self.stop_flag = threading.Event()
        self.target = 0

    def run(self) -> None:
        n = len(self.cluster.nodes)
        while not self.stop_flag.is_set():
            self.seq += 1
            if self.seq % 7 == 0:
                cmd: dict[str, Any] = {"type": "allocate_ids", "count": 5}
            else:
                cmd = {"type": "put", "key": f"{self.prefix}-{self.seq}", "value": self.seq}
            try:
                code, body, _ = self.cluster.nodes[self.target].propose(cmd, timeout=3.0)
            except OSError:
                code, body = None, {}
            if code == 200:
                self.ack_times.append((time.monotonic(), self.target))
                if cmd["type"] == "put":
                    self.acked[cmd["key"]] = cmd["value"]
                else:
                    self.id_blocks.append((body["result"]["first"], body["result"]["last"]))
                continue
            self.failures += 1
            hinted = self.cluster.index_of(body.get("leader")) if code == 503 else None
            if hinted is not None and hinted != self.target and self.cluster.nodes[hinted].alive:
                self.target = hinted
            else:
                self.target = (self.target + 1) % n
                time.sleep(0.01)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=15)

    def acks_after(self, t: float, exclude: int | None = None) -> list[float]:
        """Times of acknowledgements after ``t`` from nodes other than ``exclude``."""
        return [a for a, node in self.ack_times if a > t and node != exclude]

    def problems(self, state: dict[str, Any]) -> list[str]:
        """What a converged ``state`` (a node's /state ``state``) lacks of the acknowledged writes.

        Empty when every acknowledged put is present with its value and the acknowledged ID
        blocks are disjoint and increasing in acknowledgement order.
        """
        out: list[str] = []
        kv = state["kv"]
        missing = [k for k in self.acked if k not in kv]
        if missing:
            out.append(f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}")
        wrong = [k for k, v in self.acked.items() if k in kv and kv[k]["value"] != v]
        if wrong:
            out.append(f"acknowledged writes with wrong values: {wrong[:5]}")
        for (f1, l1), (f2, l2) in zip(self.id_blocks, self.id_blocks[1:], strict=False):
            if not f1 <= l1 < f2 <= l2:
                out.append(f"id blocks overlap or go backwards: {(f1, l1)} then {(f2, l2)}")
                break
        if self.id_blocks and state["next_id"].get("default", 1) <= self.id_blocks[-1][1]:
            out.append("the id counter is behind an acknowledged id block")
        return out


@dataclass(frozen=True)
class FailoverSample:
    """One leader kill: who died, seconds to a new ready leader, seconds to the next ack elsewhere."""

    killed: int
    new_leader: int
    election_s: float
    first_ack_s: float


def kill_leader(
    cluster: LocalCluster, writer: LeaderFollowingWriter, timeout: float = 10.0
) -> FailoverSample:
    """``kill -9`` the current leader while ``writer`` streams; measure the failover.

    Raises TimeoutError if no new leader is ready, or no write is acknowledged by another node,
    within ``timeout``.
    """
    old = cluster.wait_leader()
    t_kill = time.monotonic()
    cluster.nodes[old].kill()
    new = cluster.wait_leader(timeout=timeout, exclude=old)
    election = time.monotonic() - t_kill
    deadline = time.monotonic() + timeout
    while not writer.acks_after(t_kill, exclude=old):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no write acknowledged within {timeout}s of killing the leader")
        time.sleep(0.005)
    return FailoverSample(old, new, election, writer.acks_after(t_kill, exclude=old)[0] - t_kill)
