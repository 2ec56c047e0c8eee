"""A tiered-metadata Raft member as a process (TieredNode + its gRPC server) with a chosen compaction threshold.

Run as ``python -m tests.support.tiered_support --self A --peers B,C --data DIR --grpc HOST:PORT
--grpc-of A=HOST:PORT,... --key-file F --compaction N --status FILE``.  Every 0.2 s it writes its Raft
status, store watermark and store digest to ``FILE`` (JSON, replaced atomically), so a test can watch
nodes that it stops, kills and restarts.  Exit code 3: the node refused to start (message on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raft.auth import read_key
from raft.errors import StartupRefused
from raft.localcluster import free_ports
from raft.node import RaftSettings
from tiered.node import TieredNode
from tiered.server import start_server

TOKEN = "tiered-test-token"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--self", dest="self_addr", required=True)
    p.add_argument("--peers", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--grpc", required=True)
    p.add_argument("--grpc-of", required=True)
    p.add_argument("--key-file", required=True)
    p.add_argument("--compaction", type=int, required=True)
    p.add_argument("--status", required=True)
    a = p.parse_args(argv)
    grpc_of = dict(item.split("=", 1) for item in a.grpc_of.split(","))
    try:
        node = TieredNode(a.self_addr, [x for x in a.peers.split(",") if x], Path(a.data),
                          key=read_key(Path(a.key_file)),
                          settings=RaftSettings(compaction_min_entries=a.compaction))
    except StartupRefused as exc:
        print(f"refused: {exc}", file=sys.stderr, flush=True)
        return 3
    server = start_server(node, a.grpc, lambda token, write: token == TOKEN, grpc_of)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    status = Path(a.status)
    while not stop.is_set():
        st = node.status()
        st["digest"] = node.store.digest()
        tmp = status.with_name(status.name + ".tmp")
        tmp.write_text(json.dumps(st, default=str))
        os.replace(tmp, status)
        stop.wait(0.2)
    server.stop(1)
    node.close()
    return 0


@dataclass
class Member:
    """One member process; ``start`` (re)launches it on the same ports and data directory."""

    index: int
    raft_addr: str
    grpc_addr: str
    args: list[str]
    base: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Any = None

    @property
    def status_file(self) -> Path:
        return self.base / f"status{self.index}.json"

    def start(self) -> None:
        self.status_file.unlink(missing_ok=True)
        self.log = open(self.base / f"node{self.index}.log", "ab")  # noqa: SIM115 (closed by stop)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.tiered_support", *self.args],
                                     stdout=self.log, stderr=self.log, env=dict(os.environ))

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.log is not None:
            self.log.close()
            self.log = None

    def status(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return None
        # a status file older than a second belongs to a stopped or dead process
        if time.time() - self.status_file.stat().st_mtime > 1.5:
            return None
        return data

    def log_text(self) -> str:
        try:
            return (self.base / f"node{self.index}.log").read_text(errors="replace")
        except OSError:
            return ""


@dataclass
class Group:
    """Three members on loopback sharing one transport key."""

    base: Path
    compaction: int
    members: list[Member] = field(default_factory=list)

    def __post_init__(self) -> None:
        ports = free_ports(6)
        raft = [f"127.0.0.1:{ports[i]}" for i in range(3)]
        grpc_addrs = [f"127.0.0.1:{ports[3 + i]}" for i in range(3)]
        key_file = self.base / "raft.key"
        key_file.write_text("k" * 48)
        key_file.chmod(0o600)
        grpc_of = ",".join(f"{r}={g}" for r, g in zip(raft, grpc_addrs, strict=True))
        for i in range(3):
            args = ["--self", raft[i], "--peers", ",".join(r for r in raft if r != raft[i]),
                    "--data", str(self.base / f"n{i}"), "--grpc", grpc_addrs[i], "--grpc-of", grpc_of,
                    "--key-file", str(key_file), "--compaction", str(self.compaction),
                    "--status", str(self.base / f"status{i}.json")]
            self.members.append(Member(i, raft[i], grpc_addrs[i], args, self.base))

    @property
    def grpc_addresses(self) -> list[str]:
        return [m.grpc_addr for m in self.members]

    def start(self) -> None:
        for m in self.members:
            m.start()

    def close(self) -> None:
        for m in self.members:
            m.stop()

    def leader(self, timeout: float = 30.0, exclude: int | None = None) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.members:
                st = m.status()
                if m.index != exclude and st and st["is_leader"] and st["ready"]:
                    return m.index
            time.sleep(0.05)
        raise TimeoutError("no ready tiered leader")


@contextmanager
def running_group(base: Path, compaction: int) -> Iterator[Group]:
    """A started :class:`Group` with a ready leader (up to 60 s), closed on exit."""
    group = Group(base, compaction)
    group.start()
    try:
        group.leader(60)
        yield group
    finally:
        group.close()


if __name__ == "__main__":
    raise SystemExit(main())
