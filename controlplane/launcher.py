"""Launch a local group of real `guardian serve` processes on 127.0.0.1 (``make cluster``,
reliability tests, benchmarks).

Goal: a local HA group an operator can try failover on, and tests can drive — with credentials no other
local user can guess. Method: one shared config (Raft key file, the admin token's hash, optional TLS
files) under ``root``; node ``i`` is ``guardian serve --node-id i --peers ... --http-peers ...`` with its
own data dir and log file (``node<i>.log``). The admin token is fresh per :class:`ServiceCluster`
(``secrets.token_urlsafe``), written once to ``root/admin.token`` (mode 0600) and never put in the config
(only its SHA-256). Ports are picked free, or given; given ports are probed first and a taken one is
refused with :class:`PortTaken` naming the port and the option. Guarantee: every process it starts is
killed by :meth:`ServiceCluster.close`, and begins an orderly stop within half a second once the process
that started it is gone, even SIGKILLed (``serve --exit-with-parent``: the nodes run in their own session,
so a test run killed before its teardown would otherwise leak them); nodes are independent processes (one
dying leaves the others running). Cost: N Python processes (~150 MB each with ClickHouse off).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.bootstrap import EXIT_PORT_IN_USE, PortInUse, probe_port
from controlplane.config import hash_token
from raft.auth import write_new_key
from raft.localcluster import free_ports

TOKEN_FILE = "admin.token"


class PortTaken(PortInUse):
    """A port given to :class:`ServiceCluster` is in use (one line naming it and its option)."""


@dataclass(frozen=True)
class ApiTls:
    """TLS files for every node's API; with ``client_ca_file`` the nodes require client certificates, and
    :meth:`ServiceCluster.request` presents ``client_cert``/``client_key``."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    client_ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None


@dataclass
class ServiceCluster:
    """Processes of `guardian serve --node-id i --peers ...` with their own data dirs (see the module docstring)."""

    root: Path
    size: int = 3
    clickhouse: bool = False
    intervals: dict[str, float] = field(default_factory=dict)
    """Overrides of the ``[intervals]`` settings (e.g. ``{"executor_s": 1.0}``)."""
    tiered: bool = False
    """Also run the tiered-metadata service (its own Raft group and gRPC port per node)."""
    raft_ports: list[int] = field(default_factory=list)
    http_ports: list[int] = field(default_factory=list)
    """Given ports are probed (:class:`PortTaken` when one is in use); empty: free ones are picked."""
    tls: ApiTls | None = None
    tiered_raft_ports: list[int] = field(default_factory=list)
    grpc_ports: list[int] = field(default_factory=list)
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    _picked: bool = field(default=False, init=False, repr=False)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    """This group's admin token (fresh per instance; also in ``root/admin.token``, mode 0600)."""

    def __post_init__(self) -> None:
        for option, ports in (("--raft-port", self.raft_ports), ("--http-port", self.http_ports)):
            if ports and len(ports) != self.size:
                raise ValueError(f"{option}: {len(ports)} ports for {self.size} nodes")
            for port in ports:
                problem = probe_port("127.0.0.1", port)
                if problem is not None:
                    raise PortTaken(f"port {port} on 127.0.0.1 is in use ({problem}): choose another {option}")
        self._picked = not self.raft_ports and not self.http_ports  # all ours: may be picked again
        self._pick_ports(keep_given=True)
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "guardian.toml"
        key_file = self.root / "raft.key"  # the group's shared Raft transport key (mode 0600)
        if not key_file.exists():
            write_new_key(key_file)
        token_file = self.root / TOKEN_FILE
        token_file.unlink(missing_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.token + "\n")
        self.token_file = token_file
        http = ""
        if self.tls is not None:
            http = (f'[http]\ntls_cert_file = "{self.tls.cert_file}"\ntls_key_file = "{self.tls.key_file}"\n'
                    + (f'tls_client_ca_file = "{self.tls.client_ca_file}"\n' if self.tls.client_ca_file else ""))
        config.write_text(f'[raft]\nkey_file = "{key_file}"\n' + http
                          + f'[[tokens]]\nname = "admin"\nrole = "admin"\nsha256 = "{hash_token(self.token)}"\n'
                          "[intervals]\n" + "".join(f"{k} = {float(v)}\n" for k, v in
                                                   {"auto_rebalance_check_s": 3600, **self.intervals}.items())
                          + ("" if self.clickhouse else '[clickhouse]\nmode = "off"\n'))
        self.config = config

    @property
    def scheme(self) -> str:
        """``https`` when the nodes serve TLS, else ``http``."""
        return "https" if self.tls is not None else "http"

    def url(self, node: int) -> str:
        """Base URL of ``node``'s API."""
        return f"{self.scheme}://127.0.0.1:{self.http_ports[node - 1]}"

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
        http = ",".join(self.url(n) for n in range(1, self.size + 1))
        log = (self.root / f"node{node}.log").open("ab")
        self.procs[node] = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "serve", "--config", str(self.node_config(node)), "--node-id",
             str(node), "--peers", peers, "--http-peers", http, "--port", str(self.http_ports[node - 1]),
             "--data-dir", str(self.root / f"node{node}"), "--exit-with-parent"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start_all(self) -> None:
        for node in range(1, self.size + 1):
            self.start(node)

    def start_group(self, timeout: float = 60.0, attempts: int = 3) -> None:
        """Start every node and wait until each answers. Ports picked free can be taken by another process before
        a node binds them (an outgoing connection's ephemeral port, say): a node that exits for that reason
        (:data:`EXIT_PORT_IN_USE`) restarts the group on newly picked ports, up to ``attempts`` times. Raises
        :class:`NodeExited` for any other exit, ``TimeoutError`` when nodes stay silent."""
        for attempt in range(1, attempts + 1):
            self.start_all()
            try:
                self.wait_up(timeout)
                return
            except NodeExited as exc:
                if exc.code != EXIT_PORT_IN_USE or not self._picked or attempt == attempts:
                    raise
            self.close()
            self._pick_ports()

    def _pick_ports(self, keep_given: bool = False) -> None:
        """Free ports for every list (``keep_given``: for the Raft and HTTP lists not given)."""
        picked = free_ports((4 if self.tiered else 2) * self.size)  # one call: all distinct
        self.raft_ports = (keep_given and self.raft_ports) or picked[: self.size]
        self.http_ports = (keep_given and self.http_ports) or picked[self.size: 2 * self.size]
        if self.tiered:
            self.tiered_raft_ports, self.grpc_ports = picked[2 * self.size: 3 * self.size], picked[3 * self.size:]

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
        """(status, JSON) from node; redirects are returned, not followed; (0, error) when unreachable or when the
        answer breaks off (a node killed between a response's headers and its body: ``IncompleteRead``)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url(node)}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
        if self.tls is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self.client_context()))
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            return 0, f"{type(exc).__name__}: {exc}"

    def client_context(self) -> ssl.SSLContext:
        """An SSL context trusting the group's CA (with the client certificate when there is one)."""
        assert self.tls is not None
        context = ssl.create_default_context(cafile=str(self.tls.ca_file))
        if self.tls.client_cert is not None and self.tls.client_key is not None:
            context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        return context

    def exited(self) -> dict[int, int]:
        """Nodes whose process has ended: node -> exit code (they stay listed until :meth:`kill`/:meth:`close`)."""
        return {node: code for node, proc in self.procs.items() if (code := proc.poll()) is not None}

    def last_log_line(self, node: int) -> str:
        """The last non-empty line of ``node``'s log (why it exited, usually)."""
        try:
            text = (self.root / f"node{node}.log").read_text(errors="replace")
        except OSError:
            return ""
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def status(self, node: int) -> dict[str, Any] | None:
        code, body = self.request(node, "GET", "/api/v1/status", timeout=1.0)
        return body["raft"] if code == 200 else None

    def wait_up(self, timeout: float = 30.0) -> None:
        """Wait until every running node answers its status endpoint; :class:`NodeExited` at once when one has
        ended (a node :meth:`kill`-ed is no longer running)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if gone := self.exited():
                node, code = min(gone.items())
                raise NodeExited(node, code, self.last_log_line(node))
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


class NodeExited(RuntimeError):
    """A node's process ended while the group was to be up; ``code`` is its exit code, the message its last
    log line (why, usually)."""

    def __init__(self, node: int, code: int, last_line: str) -> None:
        super().__init__(f"node {node} exited (code {code}): {last_line}")
        self.node, self.code = node, code


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
