"""``guardian serve|cluster|token-hash``: run the control plane (one node, or a local HA group).

``serve`` starts one controller node (Raft-replicated state, REST API, leader-only scheduler) from a
TOML settings file, overridden by ``--peers``/``--node-id``, the HTTP flags and ``--log-level``/
``--log-format``; a port in use exits 2 with one line naming it; ``--exit-with-parent`` stops the node
once the process that started it is gone (:mod:`parentwatch`). ``cluster`` runs N ``guardian serve``
processes until Ctrl-C or SIGTERM with a fresh admin token per run; a node that dies leaves the others
running. ``token-hash`` prints what a config's ``[[tokens]] sha256`` holds. These are top-level commands:
:mod:`controlplane.cli.app` mounts them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from controlplane.bootstrap import serve, token_path
from controlplane.cli.common import EXIT_INVALID_INPUT, err, fail_input, out
from controlplane.config import Settings, hash_token, load_settings
from controlplane.launcher import NodeExited, PortTaken, ServiceCluster
from controlplane.logs import LEVELS, LogFormat, setup_logging
from domain import ContractError

log = logging.getLogger(__name__)


def serve_cmd(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML settings file")] = None,
    node_id: Annotated[int | None, typer.Option(min=1, help="this node's position (1-based) in --peers")] = None,
    peers: Annotated[str | None, typer.Option(help="comma-separated Raft addresses of ALL nodes")] = None,
    http_peers: Annotated[str | None, typer.Option(help="comma-separated HTTP base URLs, same order as --peers "
                                                        "(followers redirect writes there)")] = None,
    host: Annotated[str | None, typer.Option(help="HTTP bind address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(min=0, max=65535, help="HTTP port (default 8080)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="journal, snapshots, tokens (default: the config's data_dir, "
                                                       "else var/guardian, var/guardian-N with --node-id N)")] = None,
    log_level: Annotated[str | None, typer.Option(help=f"one of {', '.join(LEVELS)} (default: the config's "
                                                       "logging.level, INFO)")] = None,
    log_format: Annotated[str | None, typer.Option(help="text or json (default: the config's logging.format, "
                                                        "text)")] = None,
    exit_with_parent: Annotated[bool, typer.Option(
        "--exit-with-parent", envvar="GUARDIAN_EXIT_WITH_PARENT",
        help="stop (in order, as on SIGTERM) once the process that started this node exits, even when it was "
             "killed: tests, supervisors; `guardian cluster` and the local launcher pass it")] = False,
) -> None:
    """Run a controller node: Raft-replicated state, REST API, leader-only scheduler."""
    parent_pid = os.getppid() if exit_with_parent else None  # first: the parent may die while we start
    try:
        settings = load_settings(config)
    except ContractError as exc:
        fail_input(exc)
    level = (log_level or settings.logging.level).upper()
    fmt = log_format or settings.logging.format
    if level not in LEVELS or fmt not in ("text", "json"):
        err.print(f"error: --log-level must be one of {', '.join(LEVELS)} and --log-format text or json",
                  markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT)
    log_fmt: LogFormat = "json" if fmt == "json" else "text"
    setup_logging(level, log_fmt)
    raft = settings.raft.model_copy()
    http_of: dict[str, str] = {}
    if peers:
        addrs = [p.strip() for p in peers.split(",") if p.strip()]
        if node_id is None or node_id > len(addrs):
            err.print(f"error: --node-id must be 1..{len(addrs)} with --peers", markup=False)
            raise typer.Exit(EXIT_INVALID_INPUT)
        raft = raft.model_copy(update={"self_addr": addrs[node_id - 1],
                                       "peers": [a for i, a in enumerate(addrs) if i != node_id - 1]})
        if http_peers:
            urls = [u.strip() for u in http_peers.split(",")]
            if len(urls) != len(addrs):
                err.print("error: --http-peers needs one URL per --peers entry", markup=False)
                raise typer.Exit(EXIT_INVALID_INPUT)
            http_of = dict(zip(addrs, urls, strict=True))
    http = settings.http.model_copy(update={k: v for k, v in (("host", host), ("port", port)) if v is not None})
    settings = settings.model_copy(update={"raft": raft, "http": http,
                                           "data_dir": node_data_dir(settings, node_id, data_dir),
                                           "logging": settings.logging.model_copy(update={"level": level,
                                                                                          "format": log_fmt})})
    if not settings.tokens:
        log.warning("no tokens configured: the admin token is in %s", token_path(settings))
    out.print(f"guardian node {raft.self_addr} (peers {raft.peers or 'none'}) "
              f"{http.scheme}://{http.host}:{http.port}", markup=False)
    serve(settings, http_of=http_of, parent_pid=parent_pid)


def node_data_dir(settings: Settings, node_id: int | None, data_dir: Path | None) -> Path:
    """Where a node keeps its state: ``--data-dir``; else the config's ``data_dir`` when the config sets it;
    else ``var/guardian-N`` with ``--node-id N`` (local nodes side by side), ``var/guardian`` without."""
    if data_dir is not None:
        return data_dir
    if node_id is not None and "data_dir" not in settings.model_fields_set:
        return Path(f"var/guardian-{node_id}")
    return settings.data_dir


def cluster_cmd(
    nodes: Annotated[int, typer.Option(min=1, max=7, help="controller nodes (3 or 5 for HA)")] = 3,
    root: Annotated[Path, typer.Option(help="data dirs and logs of the nodes")] = Path("var/cluster"),
    http_port: Annotated[int | None, typer.Option(min=1, max=65535, help="first node's HTTP port (the others "
                                                                          "follow); default: free ports")] = None,
    raft_port: Annotated[int | None, typer.Option(min=1, max=65535, help="first node's Raft port (the others "
                                                                          "follow); default: free ports")] = None,
) -> None:
    """Run a local HA controller group (N `guardian serve` processes) until Ctrl-C; prints its endpoints.

    The admin token is new on every run: printed once and written to ROOT/admin.token (mode 0600). A node
    that dies leaves the others running (kill the leader to watch a failover); Ctrl-C stops them all."""
    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # `kill` stops the group as Ctrl-C does
    try:
        group = ServiceCluster(root.resolve(), size=nodes, clickhouse=True,
                               http_ports=list(range(http_port, http_port + nodes)) if http_port else [],
                               raft_ports=list(range(raft_port, raft_port + nodes)) if raft_port else [])
    except (PortTaken, ValueError) as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT) from None
    reported: set[int] = set()
    try:
        try:
            group.start_group(timeout=60)
            leader = group.leader(timeout=30)
        except (TimeoutError, NodeExited):
            for node, code in sorted(group.exited().items()):
                err.print(f"node {node} exited (code {code}): {group.last_log_line(node)}", markup=False)
            err.print(f"error: the group did not come up; logs in {root}", markup=False)
            raise typer.Exit(1) from None
        print(json.dumps({"nodes": [group.url(n) for n in range(1, nodes + 1)], "leader": leader,
                          "token": group.token, "token_file": str(group.token_file), "logs": str(root)}), flush=True)
        while True:
            exited = group.exited()
            for node in sorted(set(exited) - reported):
                reported.add(node)
                alive = nodes - len(exited)
                err.print(f"node {node} exited (code {exited[node]}): {group.last_log_line(node)}; {alive} of "
                          f"{nodes} still running{' (no majority: writes stop)' if 2 * alive <= nodes else ''}",
                          markup=False)
            if len(exited) == nodes:
                err.print("every node has exited; stopping", markup=False)
                raise typer.Exit(1)
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        group.close()


def token_hash(token: Annotated[str | None, typer.Argument(
        help="the bearer token to hash for the config file; omit it to read the token from stdin (so it stays out "
             "of the shell's history and the process list)")] = None) -> None:
    r"""Print the SHA-256 of a bearer token (what the config's \[\[tokens]] sha256 holds).

    Example: ``openssl rand -hex 24 | tee admin.token | guardian token-hash``, then in the config
    ``\[\[tokens]]`` ``name = "admin"``, ``role = "admin"``, ``sha256 = "<the line printed>"``."""
    if token is None:
        token = typer.get_text_stream("stdin").readline().strip()
    if not token:
        err.print("error: no token given (an argument, or one line on stdin)", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT)
    print(hash_token(token))
