"""Launch a local group of real `guardian serve` processes on 127.0.0.1 (``make cluster``,
reliability tests, benchmarks). Every process it starts is killed by :meth:`ServiceCluster.close`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.config import hash_token
from raft.auth import write_new_key
from raft.localcluster import free_ports

TOKEN = "local-cluster-admin-token"  # loopback-only development clusters


@dataclass
class ServiceCluster:
    """Processes of `guardian serve --node-id i --peers ...` with their own data dirs."""

    root: Path
    size: int = 3
    clickhouse: bool = False
    intervals: dict[str, float] = field(default_factory=dict)
    """Overrides of the ``[intervals]`` settings (e.g. ``{"executor_s": 1.0}``)."""
    tiered: bool = False
    """Also run the tiered-metadata service (its own Raft group and gRPC port per node)."""
    raft_ports: list[int] = field(default_factory=list)
    http_ports: list[int] = field(default_factory=list)
    tiered_raft_ports: list[int] = field(default_factory=list)
    grpc_ports: list[int] = field(default_factory=list)
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ports = free_ports((4 if self.tiered else 2) * self.size)  # one call: all distinct
        self.raft_ports, self.http_ports = ports[: self.size], ports[self.size: 2 * self.size]
        if self.tiered:
            self.tiered_raft_ports, self.grpc_ports = ports[2 * self.size: 3 * self.size], ports[3 * self.size:]
        config = self.root / "guardian.toml"
        key_file = self.root / "raft.key"  # the group's shared Raft transport key (mode 0600)
        if not key_file.exists():
            write_new_key(key_file)
        config.write_text(f'[raft]\nkey_file = "{key_file}"\n'
                          f'[[tokens]]\nname = "admin"\nrole = "admin"\nsha256 = "{hash_token(TOKEN)}"\n'
                          "[intervals]\n" + "".join(f"{k} = {float(v)}\n" for k, v in
                                                   {"auto_rebalance_check_s": 3600, **self.intervals}.items())
                          + ("" if self.clickhouse else '[clickhouse]\nmode = "off"\n'))
        self.config = config

    def node_config(self, node: int) -> Path:
        """The config file of ``node``: the shared one, plus its ``[tiered]`` section when enabled."""
        if not self.tiered:
            return self.config
        addrs = [f"127.0.0.1:{p}" for p in self.tiered_raft_ports]
        grpc_of = ", ".join(f'"{a}" = "127.0.0.1:{g}"' for a, g in zip(addrs, self.grpc_ports, strict=True))
        path = self.root / f"guardian-node{node}.toml"
        path.write_text(self.config.read_text() + "[tiered]\nenabled = true\n"
                        f"port = {self.grpc_ports[node - 1]}\nraft_addr = \"{addrs[node - 1]}\"\n"
                        f"raft_peers = {json.dumps([a for i, a in enumerate(addrs) if i != node - 1])}\n"
                        f"grpc_of = {{ {grpc_of} }}\n")
        return path

    @property
    def grpc_addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.grpc_ports]

    def start(self, node: int) -> None:
        peers = ",".join(f"127.0.0.1:{p}" for p in self.raft_ports)
        http = ",".join(f"http://127.0.0.1:{p}" for p in self.http_ports)
        log = (self.root / f"node{node}.log").open("ab")
        self.procs[node] = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "serve", "--config", str(self.node_config(node)), "--node-id",
             str(node), "--peers", peers, "--http-peers", http, "--port", str(self.http_ports[node - 1]),
             "--data-dir", str(self.root / f"node{node}")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start_all(self) -> None:
        for node in range(1, self.size + 1):
            self.start(node)

    def kill(self, node: int) -> None:
        proc = self.procs.pop(node)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def close(self) -> None:
        for node in list(self.procs):
            self.kill(node)

    def request(self, node: int, method: str, path: str, body: Any = None,
                timeout: float = 3.0) -> tuple[int, Any]:
        """(status, JSON) from node; redirects are returned, not followed; (0, error) when unreachable."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.http_ports[node - 1]}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else None
        except (OSError, ValueError) as exc:
            return 0, str(exc)

    def status(self, node: int) -> dict[str, Any] | None:
        code, body = self.request(node, "GET", "/api/v1/status", timeout=1.0)
        return body["raft"] if code == 200 else None

    def wait_up(self, timeout: float = 30.0) -> None:
        """Wait until every running node answers its status endpoint."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.status(n) is not None for n in self.procs):
                return
            time.sleep(0.1)
        raise TimeoutError("not every node answers")

    def leader(self, timeout: float = 15.0, exclude: int | None = None) -> int:
        """The node that is leader and ready, waiting up to ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.procs:
                if node == exclude:
                    continue
                st = self.status(node)
                if st and st["is_leader"] and st["ready"]:
                    return node
            time.sleep(0.05)
        raise TimeoutError("no ready leader")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
