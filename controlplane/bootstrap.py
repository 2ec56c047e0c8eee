"""Wires the service: state store (Raft), snapshot cache, API, leader-only scheduler, and each cluster's
one binding to its clients and one observer (the collection job), read by throttle protection, the
executor and auto-rebalance.

``build_service`` is used by ``guardian serve`` and by the tests; nothing here holds logic of its own.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from analytics_spark.clickhouse import ClickHouse, ClickHouseUnavailable, connect
from analytics_spark.rollups import RollupWriter
from analytics_spark.store import LineageReader, partition_peaks
from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.executor.service import ExecutorService
from controlplane.service.analytics_job import AnalyticsJob
from controlplane.service.auto_rebalance import run_auto_rebalance
from controlplane.service.clusters import ClusterBindings
from controlplane.service.collection import CollectionJob
from controlplane.service.context import ServiceContext
from controlplane.service.observation import RoundBoard, executor_binding
from controlplane.service.scheduler import Job, LeaderScheduler
from controlplane.service.snapshots import partition_ingress
from controlplane.service.throttle_loop import ThrottleService, throttle_config
from controlplane.service.throttle_source import round_binding
from controlplane.state.raft_store import RaftStateStore
from raft.auth import read_key
from raft.errors import StartupRefused

log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.001  # CPython's default is 0.005


@dataclass
class Service:
    """A running node: its context, HTTP app and scheduler."""

    ctx: ServiceContext
    app: FastAPI
    scheduler: LeaderScheduler
    store: RaftStateStore
    collection: CollectionJob
    rollups: RollupWriter | None = None

    def close(self) -> None:
        """Stop the scheduler, close the collectors, flush rollups and leave the Raft group."""
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
    return settings.model_copy(update={"tokens": [TokenConf(name="admin", role="admin", sha256=hash_token(token))]})


def raft_key(settings: Settings) -> bytes | None:
    """The group's Raft transport key from ``raft.key_file`` or ``raft.key_env``; None for a single node
    without one (it generates its own). Raises :class:`StartupRefused` (one line naming the setting) when a
    multi-node group has none or the configured source is empty or unreadable."""
    conf = settings.raft
    if conf.key_file is not None:
        return read_key(conf.key_file)
    if conf.key_env is not None:
        value = os.environ.get(conf.key_env, "").strip()
        if len(value) < 16:
            raise StartupRefused(f"raft.key_env names ${conf.key_env}, which is unset or shorter than 16 characters")
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
    try:
        return connect(conf.url if conf.mode == "url" else None, data_path=conf.path or settings.data_dir / "chdb",
                       database=conf.database)
    except ClickHouseUnavailable as exc:
        log.warning("ClickHouse unavailable, metric rollups are not stored: %s", exc)
        return None


def build_service(settings: Settings, *, http_of: dict[str, str] | None = None,
                  jobs: list[Job] | None = None) -> Service:
    """Create the node (Raft store under ``data_dir/raft``), the API app and the scheduler (not started)."""
    settings = ensure_admin_token(settings)
    store = RaftStateStore(settings.raft.self_addr, settings.raft.peers, settings.data_dir / "raft",
                           key=raft_key(settings))
    ctx = ServiceContext(settings=settings, store=store, http_of=dict(http_of or {}))
    ctx.clickhouse = open_clickhouse(settings)
    ch = ctx.clickhouse
    # one binding of each cluster to its clients and one observer per cluster, shared by every loop
    bindings = ClusterBindings(audit_topic=settings.analytics.audit_topic)
    rounds = RoundBoard()
    ctx.throttle = ThrottleService(store, throttle_config(settings.throttle), bind=round_binding(rounds, bindings),
                                   max_snapshot_age_s=settings.max_snapshot_age_s,
                                   lineage=LineageReader(ch) if ch is not None else None)
    if ch is not None:
        ctx.load_model = partial(partition_peaks, ch)
    rollups = RollupWriter(ctx.clickhouse) if ctx.clickhouse is not None else None
    collection = CollectionJob(on_collected=rollups, bindings=bindings, board=rounds)
    ctx.executor = ExecutorService(store, interval_s=settings.intervals.executor_s,
                                   bind=executor_binding(rounds, bindings),
                                   ingress=lambda cluster: partial(partition_ingress, ctx.snapshots, cluster),
                                   group=",".join(sorted({settings.raft.self_addr, *settings.raft.peers})))
    all_jobs = [Job("collect", settings.intervals.collect_s, collection),
                Job("auto_rebalance", settings.intervals.auto_rebalance_check_s, run_auto_rebalance),
                Job("throttle", settings.intervals.throttle_s, ctx.throttle.job),
                Job("executor", settings.intervals.executor_s, lambda c: c.executor.run_once()),
                *(jobs or [])]
    if settings.analytics.enabled:
        if ch is None:
            log.warning("[analytics] is enabled but ClickHouse is not available: no scheduled analytics")
        else:
            ctx.analytics = AnalyticsJob(ch, settings.analytics)
            all_jobs.append(Job("analytics", settings.analytics.interval_s, ctx.analytics))
    scheduler = LeaderScheduler(ctx, all_jobs)
    return Service(ctx=ctx, app=create_app(ctx), scheduler=scheduler, store=store, collection=collection,
                   rollups=rollups)


def serve(settings: Settings, *, http_of: dict[str, str] | None = None) -> None:
    """Run a node until interrupted: Raft, scheduler, then the HTTP server (blocking).

    A node that must not start (no Raft key in a multi-node group, damaged Raft files) exits with one
    line on stderr naming the setting or file and the remedy."""
    # The Raft thread shares the interpreter with the HTTP threads: a short switch interval bounds how long
    # it waits for the GIL when requests keep the others busy (heartbeats every 50 ms, elections after 200 ms).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        service = build_service(settings, http_of=http_of)
    except StartupRefused as exc:
        raise SystemExit(f"error: {exc}") from None
    service.scheduler.start()
    config = uvicorn.Config(service.app, host=settings.http.host, port=settings.http.port, log_level="warning",
                            access_log=False)
    server = uvicorn.Server(config)
    try:
        server.run()
    finally:
        service.close()


def token_path(settings: Settings) -> Path:
    """Where :func:`ensure_admin_token` keeps the generated admin token."""
    return settings.data_dir / "admin.token"
