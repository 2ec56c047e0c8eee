"""``guardian serve|cluster|token-hash``: run the control plane (one node, or a local HA group).

``serve`` starts one controller node (Raft-replicated state, REST API, leader-only scheduler) from a
TOML settings file, overridden by ``--peers``/``--node-id`` and the HTTP flags; ``cluster`` runs N
``guardian serve`` processes until Ctrl-C or SIGTERM; ``token-hash`` prints what a config's
``[[tokens]] sha256`` holds. These are top-level commands: :mod:`controlplane.cli.app` mounts them.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from controlplane.bootstrap import serve, token_path
from controlplane.cli.common import EXIT_INVALID_INPUT, err, fail_input, out
from controlplane.config import hash_token, load_settings
from controlplane.launcher import TOKEN, ServiceCluster
from domain import ContractError


def serve_cmd(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML settings file")] = None,
    node_id: Annotated[int | None, typer.Option(min=1, help="this node's position (1-based) in --peers")] = None,
    peers: Annotated[str | None, typer.Option(help="comma-separated Raft addresses of ALL nodes")] = None,
    http_peers: Annotated[str | None, typer.Option(help="comma-separated HTTP base URLs, same order as --peers "
                                                        "(followers redirect writes there)")] = None,
    host: Annotated[str | None, typer.Option(help="HTTP bind address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(min=0, max=65535, help="HTTP port (default 8080)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="journal, snapshots, tokens (default var/guardian[-N])")] = None,
) -> None:
    """Run a controller node: Raft-replicated state, REST API, leader-only scheduler."""
    try:
        settings = load_settings(config)
    except ContractError as exc:
        fail_input(exc)
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
    default_dir = Path(f"var/guardian-{node_id}") if node_id else settings.data_dir
    settings = settings.model_copy(update={"raft": raft, "http": http, "data_dir": data_dir or default_dir})
    if not settings.tokens:
        err.print(f"no tokens configured: admin token in {token_path(settings)}", markup=False)
    out.print(f"guardian node {raft.self_addr} (peers {raft.peers or 'none'}) "
              f"http://{http.host}:{http.port}", markup=False)
    serve(settings, http_of=http_of)


def cluster_cmd(
    nodes: Annotated[int, typer.Option(min=1, max=7, help="controller nodes (3 or 5 for HA)")] = 3,
    root: Annotated[Path, typer.Option(help="data dirs and logs of the nodes")] = Path("var/cluster"),
) -> None:
    """Run a local HA controller group (N `guardian serve` processes) until Ctrl-C; prints its endpoints."""
    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # `kill` stops the group as Ctrl-C does
    root.mkdir(parents=True, exist_ok=True)
    group = ServiceCluster(root.resolve(), size=nodes, clickhouse=True)
    group.start_all()
    try:
        group.wait_up(timeout=60)
        leader = group.leader(timeout=30)
        print(json.dumps({"nodes": [f"http://127.0.0.1:{p}" for p in group.http_ports], "leader": leader,
                          "token": TOKEN, "logs": str(root)}), flush=True)
        while all(p.poll() is None for p in group.procs.values()):
            time.sleep(1)
        err.print("a node exited; stopping the group", markup=False)
        raise typer.Exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        group.close()


def token_hash(token: Annotated[str, typer.Argument(help="the bearer token to hash for the config file")]) -> None:
    """Print the SHA-256 of a bearer token (what the config's [[tokens]] sha256 holds)."""
    print(hash_token(token))
