"""The service's collection job against kafkasim over TCP: snapshots land in the cache with the
replicated policies applied; an unreachable cluster is skipped and counted, never raised."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.bootstrap import Service
from controlplane.config import ClickHouseConf
from controlplane.state.commands import meta
from domain import BrokerState
from kafkasim.broker.server import SimRunner
from raft.localcluster import free_ports
from tests.support.chdb_session import chdb_path, fresh_database
from tests.support.kafkasim_support import register_fields, start_sim
from tests.support.service_support import local_service


@pytest.fixture()
def sim() -> Iterator[SimRunner]:
    with start_sim() as runner:
        yield runner


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    clickhouse = ClickHouseConf(path=chdb_path(), database=fresh_database("collect"))
    with local_service(tmp_path, clickhouse=clickhouse) as svc:
        yield svc


def register(service: Service, name: str, cluster: dict[str, Any]) -> None:
    service.ctx.store.propose({
        "type": "cluster.register", "meta": meta("test"), "name": name, **register_fields(cluster)})


def test_collection_job_fills_the_cache_with_policies_applied(sim: SimRunner, service: Service) -> None:
    east = sim.endpoints["clusters"]["east"]
    register(service, "east", east)
    service.ctx.store.propose({"type": "maintenance.set", "meta": meta("test"), "cluster": "east", "broker": 2,
                               "enabled": True})
    service.ctx.store.propose({"type": "pool.assign", "meta": meta("test"), "cluster": "east", "pool": "pay",
                               "brokers": [4]})
    service.ctx.store.propose({"type": "placement.set", "meta": meta("test"), "cluster": "east", "topic": "orders",
                               "placement": {"idc-a": 2, "idc-b": 1}})
    job = service.collection
    for _ in range(3):
        job(service.ctx)
        time.sleep(1.2)
    snap = service.ctx.snapshots.fresh("east", 60)
    assert {b.id for b in snap.brokers} == {1, 2, 3, 4}
    states = {b.id: b.state for b in snap.brokers}
    assert states[2] is BrokerState.MAINTENANCE and states[1] is BrokerState.ALIVE
    assert {b.id: b.pool for b in snap.brokers}[4] == "pay"
    orders = snap.index.topic_by_name["orders"]
    assert orders.placement == {"idc-a": 2, "idc-b": 1}
    assert sum(p.bytes_in_per_s for p in orders.partitions) > 0
    assert job.last_refusal["east"] == []
    assert service.rollups is not None and service.ctx.clickhouse is not None
    service.rollups.flush()  # the current minute; completed minutes are written as they close
    ch = service.ctx.clickhouse
    disks = ch.rows(f"SELECT count(), uniqExact(broker, log_dir), uniqExact(minute), max(util_max) "
                    f"FROM {ch.table('disk_rollups')} WHERE cluster = 'east'")
    rows, disk_count, minutes, util_max = disks[0]
    assert disk_count == 12 and rows == 12 * minutes  # 4 brokers x 3 log dirs, one row each per minute
    assert 0 < util_max <= 1
    parts = ch.rows(f"SELECT count(), uniqExact(topic, partition), uniqExact(minute) "
                    f"FROM {ch.table('partition_rollups')}")
    assert parts[0][1] == 4 and parts[0][0] == 4 * parts[0][2]


def test_unreachable_cluster_is_skipped_and_counted(service: Service) -> None:
    (dead_port,) = free_ports(1)
    service.ctx.store.propose({"type": "cluster.register", "meta": meta("test"), "name": "ghost",
                               "bootstrap_servers": [f"127.0.0.1:{dead_port}"]})
    service.collection(service.ctx)  # must not raise
    assert service.ctx.snapshots.get("ghost") is None
    errors = service.ctx.metrics.registry.get_sample_value("guardian_loop_errors_total", {"loop": "collect"})
    assert errors == 1.0
