"""A runnable Raft node with the demo state machine behind a tiny HTTP API (tests, benchmarks).

    python -m raft.node_main --self 127.0.0.1:7001 --peers 127.0.0.1:7002,127.0.0.1:7003 \
        --data-dir var/n1 --http-port 8001 --key-file var/raft.key

Endpoints (JSON in and out):

* ``POST /propose`` body = a command (see :mod:`raft.demo`) -> 200 ``{"ok", "result", "index"}``;
  400 malformed/invalid; 409 refused by the state machine; 503 ``{"error": "not_leader",
  "leader": "host:port"}`` on a follower (also header ``X-Raft-Leader``); 504 commit timeout.
* ``GET /state`` -> ``{"state", "applied_index", "hash"}``
* ``GET /status`` -> Raft role, term, leader, commit index, readiness (``RaftNode.status()``)
* ``GET /healthz`` -> 200 while the process serves.

``--exit-with-parent`` (passed by :mod:`raft.localcluster`) stops the node once its starter is gone.

The real service replaces this HTTP layer; keep it thin.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from parentwatch import watch_parent
from raft.auth import read_key
from raft.demo import DemoStateMachine, validate_demo_command
from raft.errors import NodeClosed, NotLeaderError, ProposalFailed, ProposalTimeout, RaftError
from raft.node import RaftNode, RaftSettings
from raft.protocol import CommandConflict, CommandRejected, state_hash

MAX_BODY = 1 << 20


def _make_handler(node: RaftNode, default_timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in separate writes

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._send(200, {"ok": True})
            elif path == "/status":
                self._send(200, node.status())
            elif path == "/state":
                snap, index = node.state()
                self._send(200, {"state": snap, "applied_index": index, "hash": state_hash(snap)})
            else:
                self._send(404, {"error": "not_found", "detail": f"no such path {path}"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if path != "/propose":
                self._send(404, {"error": "not_found", "detail": f"no such path {path}"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY:
                self.close_connection = True
                self._send(
                    400, {"error": "bad_request", "detail": f"need a JSON body of 1..{MAX_BODY} bytes"}
                )
                return
            raw = self.rfile.read(length)
            try:
                command = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                self._send(400, {"error": "bad_request", "detail": f"malformed JSON: {exc}"})
                return
            try:
                committed = node.propose_committed(command, timeout=default_timeout)
            except CommandConflict as exc:
                self._send(409, {"error": "rejected", "detail": str(exc)})
            except CommandRejected as exc:
                self._send(400, {"error": "invalid_command", "detail": str(exc)})
            except NotLeaderError as exc:
                headers = {"X-Raft-Leader": exc.leader} if exc.leader else {}
                self._send(503, {"error": "not_leader", "leader": exc.leader, "detail": str(exc)}, headers)
            except ProposalTimeout as exc:
                self._send(504, {"error": "timeout", "detail": str(exc), "maybe_applied": True})
            except ProposalFailed as exc:
                self._send(503, {"error": "failed", "detail": str(exc), "maybe_applied": exc.maybe_applied})
            except (NodeClosed, RaftError) as exc:
                self._send(503, {"error": "unavailable", "detail": str(exc)})
            else:
                self._send(200, {"ok": True, "result": committed.result, "index": committed.index})

    return Handler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of the node."""
    p = argparse.ArgumentParser(prog="python -m raft.node_main", description=__doc__.split("\n")[0])
    p.add_argument("--self", dest="self_addr", required=True, help="this node's Raft address host:port")
    p.add_argument("--peers", default="", help="comma-separated Raft addresses of the other nodes")
    p.add_argument("--data-dir", required=True, help="directory for the journal and snapshots")
    p.add_argument("--key-file", type=Path, default=None,
                   help="the group's shared Raft key (required with --peers; a lone node generates its own)")
    p.add_argument("--http-host", default="127.0.0.1")
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--timeout", type=float, default=5.0, help="commit timeout of a proposal (s)")
    p.add_argument("--election-min", type=float, default=RaftSettings.election_timeout_min)
    p.add_argument("--election-max", type=float, default=RaftSettings.election_timeout_max)
    p.add_argument("--compaction-entries", type=int, default=RaftSettings.compaction_min_entries)
    p.add_argument("--min-free-bytes", type=int, default=RaftSettings.min_free_bytes,
                   help="refuse proposals while the journal's file system has less free space")
    p.add_argument(
        "--pysyncobj-defaults", action="store_true", help="use pysyncobj's default (batched) settings"
    )
    p.add_argument("--log-level", default="WARNING")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop, as on SIGTERM, once the process that started this node has exited (even SIGKILLed)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run a node until SIGTERM/SIGINT; returns the process exit code."""
    args = parse_args(argv)
    parent_pid = os.getppid()  # first: the parent may die while we start
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    try:
        if args.pysyncobj_defaults:
            settings = RaftSettings.pysyncobj_defaults(compaction_min_entries=args.compaction_entries,
                                                       min_free_bytes=args.min_free_bytes)
        else:
            settings = RaftSettings(
                election_timeout_min=args.election_min,
                election_timeout_max=args.election_max,
                compaction_min_entries=args.compaction_entries,
                min_free_bytes=args.min_free_bytes,
            )
        node = RaftNode(
            args.self_addr,
            peers,
            DemoStateMachine(),
            args.data_dir,
            validator=validate_demo_command,
            settings=settings,
            key=read_key(args.key_file) if args.key_file is not None else None,
        )
    except (ValueError, RaftError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        server = ThreadingHTTPServer((args.http_host, args.http_port), _make_handler(node, args.timeout))
    except OSError as exc:
        node.close()
        print(f"error: cannot serve HTTP on {args.http_host}:{args.http_port}: {exc}", file=sys.stderr)
        return 2
    server.daemon_threads = True
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.exit_with_parent:
        watch_parent(parent_pid, stop.set)
    serving = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    serving.start()
    print(f"raft node {args.self_addr} serving http://{args.http_host}:{args.http_port}", flush=True)
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
