"""Wires the service: state store (Raft), snapshot cache, API, leader-only scheduler, and each cluster's
one binding to its clients and one observer (the collection job), read by throttle protection, the
executor and auto-rebalance.

``build_service`` is used by ``guardian serve`` and by the tests; nothing here holds logic of its own.
"""

from __future__ import annotations

import gc
import logging
import os
import platform
import secrets
import socket
import ssl
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import uvicorn
from fastapi import FastAPI

from analytics_spark.clickhouse import ClickHouse, ClickHouseUnavailable, connect
from analytics_spark.clickhouse.rollups import RollupWriter
from analytics_spark.clickhouse.store import LineageReader, partition_peaks
from controlplane import DISTRIBUTION, __version__
from controlplane.api.app import create_app
from controlplane.config import ROLE_RANK, HttpConf, Settings, TokenConf, hash_token
from controlplane.executor.service import ExecutorService
from controlplane.service.analytics_job import AnalyticsJob
from controlplane.service.auto_rebalance import AutoRebalanceJob
from controlplane.service.clusters import ClusterBindings
from controlplane.service.collection import CollectionJob
from controlplane.service.context import ServiceContext
from controlplane.service.fanout import loop_fanout
from controlplane.service.leased_lines import LineCollector, LineService
from controlplane.service.observation import RoundBoard, executor_binding
from controlplane.service.protection import ProtectionService, throttle_config
from controlplane.service.protection_source import round_binding
from controlplane.service.scheduler import Job, LeaderScheduler
from controlplane.service.self_healing import SelfHealingJob
from controlplane.service.snapshots import partition_ingress
from controlplane.state.raft_store import RaftStateStore
from domain.redaction import mask_url, register_secret
from parentwatch import watch_parent
from planners import disk_balance
from raft.auth import LOCAL_KEY_FILE, placeholder_problem, read_key
from raft.errors import StartupRefused
from tiered.metrics import TieredCollector
from tiered.node import COMPACTION_MIN_ENTRIES, TieredNode
from tiered.server import Authorizer, ServerTls, start_server

log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.001  # CPython's default is 0.005
EXIT_PORT_IN_USE = 2


@dataclass
class Service:
    """A running node: its context, HTTP app and scheduler."""

    ctx: ServiceContext
    app: FastAPI
    scheduler: LeaderScheduler
    store: RaftStateStore
    collection: CollectionJob
    rollups: RollupWriter | None = None
    tiered_server: grpc.Server | None = None

    def close(self) -> None:
        """Stop the scheduler, close the collectors, flush rollups and leave the Raft group."""
        if self.tiered_server is not None:
            self.tiered_server.stop(1)
        if self.ctx.tiered is not None:
            self.ctx.tiered.close()
        self.scheduler.shutdown()
        self.collection.close()
        if self.ctx.analytics is not None:
            self.ctx.analytics.close()
        if self.rollups is not None:
            self.rollups.flush()
        if self.ctx.clickhouse is not None:
            self.ctx.clickhouse.close()
        self.store.close()


def ensure_admin_token(settings: Settings) -> Settings:
    """With no token configured, create an admin token, store it in ``data_dir/admin.token`` (mode 0600)
    and return settings that accept it; an existing file is reused across restarts."""
    if settings.tokens:
        return settings
    path = token_path(settings)
    if path.exists():
        token = path.read_text().strip()
    else:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        token = secrets.token_urlsafe(24)
        path.touch(mode=0o600)
        path.write_text(token + "\n")
    register_secret(token)
    return settings.model_copy(update={"tokens": [TokenConf(name="admin", role="admin", sha256=hash_token(token))]})


def raft_key(settings: Settings) -> bytes | None:
    """The group's Raft transport key from ``raft.key_file`` or ``raft.key_env``; None for a single node
    without one (it generates its own). Raises :class:`StartupRefused` (one line naming the setting) when a
    multi-node group has none or the configured source is empty or unreadable."""
    conf = settings.raft
    if conf.key_file is not None:
        key = read_key(conf.key_file)
        register_secret(key)
        return key
    if conf.key_env is not None:
        value = os.environ.get(conf.key_env, "").strip()
        if len(value) < 16:
            raise StartupRefused(f"raft.key_env names ${conf.key_env}, which is unset or shorter than 16 characters")
        problem = placeholder_problem(value.encode(), f"${conf.key_env} (raft.key_env)")
        if problem is not None:
            raise StartupRefused(problem)
        register_secret(value)
        return value.encode()
    if conf.peers:
        raise StartupRefused("raft.key_file is not set: a multi-node group needs the same secret key file on every "
                             "node (e.g. `openssl rand -base64 32 > raft.key; chmod 600 raft.key`, then "
                             "key_file = \"raft.key\" under [raft])")
    return None


def open_clickhouse(settings: Settings) -> ClickHouse | None:
    """ClickHouse as configured (embedded chdb under ``data_dir/chdb`` by default); None when off or
    unavailable (logged: the control plane runs without rollup history rather than not at all)."""
    conf = settings.clickhouse
    if conf.mode == "off":
        return None
    url = conf.url if conf.mode == "url" else None
    try:
        ch = connect(url, data_path=conf.path or settings.data_dir / "chdb", database=conf.database)
    except ClickHouseUnavailable as exc:
        log.warning("ClickHouse unavailable, metric rollups are not stored: %s", exc)
        return None
    log.info("ClickHouse: %s, database %s", mask_url(url) if url else f"embedded chdb under "
             f"{conf.path or settings.data_dir / 'chdb'}", conf.database)
    return ch


def build_service(settings: Settings, *, http_of: dict[str, str] | None = None,
                  jobs: list[Job] | None = None) -> Service:
    """Create the node (Raft store under ``data_dir/raft``), the API app and the scheduler (not started)."""
    settings = ensure_admin_token(settings)
    store = RaftStateStore(settings.raft.self_addr, settings.raft.peers, settings.data_dir / "raft",
                           key=raft_key(settings), settings=settings.raft.timing())
    local_key = settings.data_dir / "raft" / LOCAL_KEY_FILE  # a single node's own key, when it generated one
    if local_key.exists():
        register_secret(local_key.read_bytes())
    ctx = ServiceContext(settings=settings, store=store, http_of=dict(http_of or {}))
    ctx.clickhouse = open_clickhouse(settings)
    ch = ctx.clickhouse
    # one binding of each cluster to its clients and one observer per cluster, shared by every loop
    bindings = ClusterBindings(audit_topic=settings.analytics.audit_topic)
    rounds = RoundBoard()
    lines = LineService(settings.leased_lines)
    ctx.metrics.registry.register(LineCollector(lines))
    ctx.throttle = ProtectionService(store, throttle_config(settings.throttle),
                                   bind=round_binding(rounds, bindings, throttle_config(settings.throttle)),
                                   max_snapshot_age_s=settings.max_snapshot_age_s,
                                   lineage=LineageReader(ch) if ch is not None else None, lines=lines,
                                   status=ctx.cluster_status, deadline_s=settings.intervals.cluster_deadline_s,
                                   workers=settings.intervals.cluster_workers)
    if ch is not None:
        ctx.load_model = partial(partition_peaks, ch)
    rollups = RollupWriter(ctx.clickhouse) if ctx.clickhouse is not None else None
    collection = CollectionJob(on_collected=rollups, bindings=bindings, board=rounds)
    ctx.executor = ExecutorService(store, interval_s=settings.intervals.executor_s,
                                   bind=executor_binding(rounds, bindings),
                                   ingress=lambda cluster: partial(partition_ingress, ctx.snapshots, cluster),
                                   group=",".join(sorted({settings.raft.self_addr, *settings.raft.peers})),
                                   fanout=loop_fanout("executor", settings.intervals, ctx.cluster_status,
                                                      count_error=ctx.metrics.loop_errors.labels("executor").inc))
    all_jobs = [Job("collect", settings.intervals.collect_s, collection),
                Job("auto_rebalance", settings.intervals.auto_rebalance_check_s, AutoRebalanceJob()),
                Job("throttle", settings.intervals.throttle_s, ctx.throttle.job),
                Job("executor", settings.intervals.executor_s, lambda c: c.executor and c.executor.run_once()),
                Job("self_healing", settings.intervals.collect_s, SelfHealingJob(rounds)),
                *(jobs or [])]
    if settings.analytics.enabled:
        if ch is None:
            log.warning("[analytics] is enabled but ClickHouse is not available: no scheduled analytics")
        else:
            ctx.analytics = AnalyticsJob(ch, settings.analytics)
            all_jobs.append(Job("analytics", settings.analytics.interval_s, ctx.analytics))
    scheduler = LeaderScheduler(ctx, all_jobs)
    tiered_server = start_tiered(settings, ctx) if settings.tiered.enabled else None
    return Service(ctx=ctx, app=create_app(ctx), scheduler=scheduler, store=store, collection=collection,
                   rollups=rollups, tiered_server=tiered_server)


def token_authorizer(settings: Settings) -> Authorizer:
    """Bearer token -> allowed: reads need a viewer token, writes an operator one (the API's roles)."""
    roles = {t.sha256: ROLE_RANK[t.role] for t in settings.tokens}

    def authorize(token: str, write: bool) -> bool:
        rank = roles.get(hash_token(token))
        return rank is not None and rank >= ROLE_RANK["operator" if write else "viewer"]

    return authorize


def start_tiered(settings: Settings, ctx: ServiceContext) -> grpc.Server:
    """The tiered-metadata Raft member (``data_dir/tiered``), its /metrics collector and its gRPC server."""
    conf = settings.tiered
    tls = tiered_tls(settings)  # unreadable TLS files refuse the start before anything is opened
    node = TieredNode(conf.raft_addr, conf.raft_peers, settings.data_dir / "tiered", key=raft_key(settings),
                      settings=settings.raft.timing(compaction_min_entries=COMPACTION_MIN_ENTRIES))
    ctx.tiered = node
    ctx.metrics.registry.register(TieredCollector(node))
    if not conf.tls and not _loopback(conf.host):
        log.warning("SECURITY: the tiered gRPC port listens on %s:%d WITHOUT TLS (tiered.allow_plaintext): bearer "
                    "tokens cross the network in clear. Set [tiered] tls_cert_file and tls_key_file",
                    conf.host, conf.port)
    return start_server(node, f"{conf.host}:{conf.port}", token_authorizer(settings), dict(conf.grpc_of),
                        tls=tls, allow_plaintext=conf.allow_plaintext)


def checked_tls_files(section: str, cert: Path | None, key: Path | None, client_ca: Path | None) -> bool:
    """Whether ``[section]`` serves TLS (a cert and a key given); :class:`StartupRefused` naming the setting when
    a file cannot be read or does not hold what it should (loaded into an SSL context, as the server will)."""
    if cert is None or key is None:
        return False
    files = {f"{section}.tls_cert_file": cert, f"{section}.tls_key_file": key}
    if client_ca is not None:
        files[f"{section}.tls_client_ca_file"] = client_ca
    for setting, path in files.items():
        if not path.is_file() or not os.access(path, os.R_OK):
            raise StartupRefused(f"{setting} = {str(path)!r}: no readable file there")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise StartupRefused(f"{section}.tls_cert_file / {section}.tls_key_file: not a certificate and its private "
                             f"key ({exc.__class__.__name__}: {exc})") from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(client_ca))
        except (ssl.SSLError, OSError) as exc:
            raise StartupRefused(f"{section}.tls_client_ca_file: not a CA certificate ({exc})") from None
    return True


def tiered_tls(settings: Settings) -> ServerTls | None:
    """The tiered gRPC port's TLS material (None without TLS); :class:`StartupRefused` names a bad file."""
    conf = settings.tiered
    if not checked_tls_files("tiered", conf.tls_cert_file, conf.tls_key_file, conf.tls_client_ca_file):
        return None
    assert conf.tls_cert_file is not None and conf.tls_key_file is not None
    return ServerTls.from_files(conf.tls_cert_file, conf.tls_key_file, conf.tls_client_ca_file)


def serve(settings: Settings, *, http_of: dict[str, str] | None = None, parent_pid: int | None = None) -> None:
    """Run a node until interrupted: Raft, scheduler, then the HTTP server (blocking).

    A node that must not start (no Raft key in a multi-node group, damaged Raft files, unreadable TLS files)
    exits with one line on stderr naming the setting or file and the remedy. With ``parent_pid`` (``serve
    --exit-with-parent``) the node also stops, as on SIGTERM, once that process is no longer its parent."""
    # The Raft thread shares the interpreter with the HTTP threads: a short switch interval bounds how long
    # it waits for the GIL when requests keep the others busy (heartbeats every 50 ms, elections after 200 ms).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # Plans made by the service take the Python shedding loop: the compiled one's runtime (numba, LLVM: ~90 MB)
    # took a 3,000-broker snapshot's PUT + POST rebalance + GET to 1,148 MiB peak RSS, over the 1 GiB the API
    # keeps (972 MiB with Python's loop); `guardian plan` commands use the compiled loop (the same plans).
    disk_balance.COMPILED = False
    gc.collect()  # the import-time garbage, before the Raft thread runs (see the freeze below)
    try:
        check_ports(settings)
        tls = tls_options(settings.http)
        service = build_service(settings, http_of=http_of)
    except PortInUse as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_PORT_IN_USE) from None
    except StartupRefused as exc:
        raise SystemExit(f"error: {exc}") from None
    warn_plaintext(settings, http_of or {})
    log.info("guardian %s (%s, Python %s) starting", __version__, DISTRIBUTION, platform.python_version())
    log.info("node %s (peers %s) serving %s://%s:%d%s, data dir %s", settings.raft.self_addr,
             ",".join(settings.raft.peers) or "none", settings.http.scheme, settings.http.host, settings.http.port,
             " (client certificates required)" if settings.http.tls_client_ca_file else "", settings.data_dir)
    # A full collection holds the GIL for as long as it walks every tracked object: ~170k after the imports,
    # 150-220 ms of CPU on this machine's cores, as long as the shortest election timeout, so a follower voted
    # while the leader collected during a read burst. Frozen, the code's objects are never walked again; a
    # full collection then walks the state and the requests' objects only.
    gc.freeze()
    service.scheduler.start()
    config = uvicorn.Config(service.app, host=settings.http.host, port=settings.http.port,
                            log_level=settings.logging.level.lower(), log_config=None, access_log=False, **tls)
    server = uvicorn.Server(config)
    watch = watch_parent(parent_pid, partial(_parent_gone, server, parent_pid)) if parent_pid is not None else None
    try:
        server.run()
    finally:
        if watch is not None:
            watch.set()
        log.info("node %s stopping", settings.raft.self_addr)
        service.close()


def _parent_gone(server: uvicorn.Server, parent_pid: int) -> None:
    log.warning("the process that started this node (pid %d) has exited: stopping (--exit-with-parent)", parent_pid)
    server.should_exit = True  # what uvicorn's SIGTERM handler does: the same orderly stop


class PortInUse(StartupRefused):
    """A port this node must listen on is taken (exit code :data:`EXIT_PORT_IN_USE`)."""


def check_ports(settings: Settings) -> None:
    """Raise :class:`PortInUse` — one line naming the port and its setting — when the HTTP or the Raft port
    cannot be bound (another process listens there). Port 0 (any free port) is not checked."""
    raft_host, _, raft_port = settings.raft.self_addr.rpartition(":")
    wanted = (("http.port (--port)", settings.http.host, settings.http.port),
              ("raft.self_addr (--peers/--node-id)", raft_host, int(raft_port) if raft_port.isdigit() else 0))
    for setting, host, port in wanted:
        if port == 0:
            continue
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise StartupRefused(f"cannot resolve {host!r} of {setting}: {exc.strerror or exc}") from None
        problem = probe_port(host, port)
        if problem is not None:
            raise PortInUse(f"port {port} on {host} is in use ({problem}): set another {setting}, "
                            "or stop what listens there")


def probe_port(host: str, port: int) -> str | None:
    """None when a TCP server could bind ``host:port`` now, else why not (e.g. "Address already in use")."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is fine
            probe.bind(addr)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def tls_options(http: HttpConf) -> dict[str, Any]:
    """uvicorn's SSL keyword arguments for ``[http]`` (empty without TLS); :class:`StartupRefused` names a bad
    file (:func:`checked_tls_files`)."""
    if not checked_tls_files("http", http.tls_cert_file, http.tls_key_file, http.tls_client_ca_file):
        return {}
    out: dict[str, Any] = {"ssl_certfile": str(http.tls_cert_file), "ssl_keyfile": str(http.tls_key_file)}
    if http.tls_client_ca_file is not None:
        out.update(ssl_ca_certs=str(http.tls_client_ca_file), ssl_cert_reqs=ssl.CERT_REQUIRED)
    return out


def warn_plaintext(settings: Settings, http_of: dict[str, str]) -> None:
    """Log loudly when bearer tokens would cross a network in clear, or redirects would leave HTTPS."""
    http = settings.http
    if not http.tls and not _loopback(http.host):
        log.warning("SECURITY: the API listens on %s:%d WITHOUT TLS: bearer tokens cross the network in clear. "
                    "Set [http] tls_cert_file and tls_key_file, or bind to 127.0.0.1 behind a TLS proxy",
                    http.host, http.port)
    plain = sorted(url for url in http_of.values() if url.startswith("http://"))
    if http.tls and plain:
        log.warning("SECURITY: TLS is on but --http-peers lists plain http:// URLs (%s): followers would redirect "
                    "clients (and their tokens) there", ", ".join(plain))


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def token_path(settings: Settings) -> Path:
    """Where :func:`ensure_admin_token` keeps the generated admin token."""
    return settings.data_dir / "admin.token"
