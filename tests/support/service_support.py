"""Shared setup for tests of the service: a one-node controller in this process (optionally with its REST API
served), clusters registered as an operator registers them, a group of real ``guardian serve`` processes,
and polling until a condition holds."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from controlplane.bootstrap import Service, build_service
from controlplane.config import ClickHouseConf, RaftConf, Settings
from controlplane.launcher import ServiceCluster
from controlplane.state.commands import meta
from domain import ClusterSnapshot
from raft.localcluster import free_ports
from tests.support.kafkasim_support import register_fields


def service_settings(data_dir: Path, **overrides: Any) -> Settings:
    """One node on a free loopback Raft port, ClickHouse off; ``overrides`` are other Settings fields."""
    (port,) = free_ports(1)
    fields: dict[str, Any] = {"clickhouse": ClickHouseConf(mode="off")}
    return Settings(data_dir=data_dir, raft=RaftConf(self_addr=f"127.0.0.1:{port}"), **{**fields, **overrides})


def open_service(data_dir: Path, **overrides: Any) -> Service:
    """A ready one-node controller (see :func:`service_settings`); the caller closes it."""
    svc = build_service(service_settings(data_dir, **overrides))
    try:
        assert svc.store.node.wait_ready(10)
    except BaseException:
        svc.close()
        raise
    return svc


@contextlib.contextmanager
def local_service(data_dir: Path, **overrides: Any) -> Iterator[Service]:
    """:func:`open_service` for the ``with`` block (a fixture body: ``with local_service(tmp_path) as s: yield s``)."""
    svc = open_service(data_dir, **overrides)
    try:
        yield svc
    finally:
        svc.close()


@contextlib.contextmanager
def service_cluster(root: Path, **intervals: float) -> Iterator[ServiceCluster]:
    """Three ``guardian serve`` processes started under ``root`` with these ``[intervals]``; all closed after."""
    c = ServiceCluster(root, intervals=dict(intervals))
    try:
        c.start_all()
        yield c
    finally:
        c.close()


def wait_for(what: str, probe: Any, timeout: float, interval: float = 0.2) -> Any:
    """Poll ``probe()`` until it returns something truthy (returned); fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@contextlib.contextmanager
def served_app(app: Any) -> Iterator[str]:
    """``app`` served on a free loopback port (uvicorn in a thread) for the ``with`` block; yields its base URL."""
    (http_port,) = free_ports(1)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=http_port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    try:
        thread.start()
        wait_for("the HTTP server", lambda: server.started, 10)
        yield f"http://127.0.0.1:{http_port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def served_service(data_dir: Path, **overrides: Any) -> Iterator[tuple[Service, str]]:
    """:func:`open_service` with its REST API served (:func:`served_app`) for the ``with`` block; yields the
    service and the API's base URL."""
    svc = open_service(data_dir, **overrides)
    try:
        with served_app(svc.app) as url:  # its port taken after the Raft port is bound, so the two differ
            yield svc, url
    finally:
        svc.close()


def register_and_observe(svc: Service, endpoints: dict[str, Any], names: tuple[str, ...],
                         timeout: float = 40) -> dict[str, ClusterSnapshot]:
    """Register clusters ``names`` of an endpoints document as an operator would, start the service's loops and
    wait for a usable round of each; returns the first snapshot of each."""
    ctx = svc.ctx
    for name in names:
        ctx.store.propose({"type": "cluster.register", "meta": meta("admin"), "name": name,
                           **register_fields(endpoints["clusters"][name])})
    svc.scheduler.start()
    return {name: wait_for(f"a usable round of {name}", lambda n=name: ctx.snapshots.get(n), timeout)
            for name in names}
