"""Shared setup for tests of the service: a one-node controller in this process, a group of real
``guardian serve`` processes, and polling until a condition holds."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from controlplane.bootstrap import Service, build_service
from controlplane.config import ClickHouseConf, RaftConf, Settings
from controlplane.launcher import ServiceCluster
from raft.localcluster import free_ports


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
