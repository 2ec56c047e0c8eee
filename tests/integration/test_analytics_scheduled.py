"""The service's scheduled analytics job: kafkasim publishes its audit stream over TCP, one leader tick
ingests it into chdb and runs the models, the API and /metrics serve the results and the run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.bootstrap import Service, token_path
from controlplane.config import AnalyticsConf, ClickHouseConf, Settings, load_settings
from controlplane.state.commands import meta
from domain import ContractError
from kafkasim.broker.server import SimRunner
from tests.support.chdb_session import chdb_path, fresh_database
from tests.support.kafkasim_support import register_fields, start_sim
from tests.support.service_support import local_service

SPEC: dict[str, Any] = {
    "seed": 4, "speed": 30.0, "tick_seconds": 1.0,
    "audit": {"enabled": True, "interval_s": 10, "topic": "__guardian_audit"},
    "clusters": [{
        "name": "east",
        "brokers": [{"count": 3, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 1, "memory_gb": 4,
                     "disks": [{"count": 1, "kind": "ssd"}]}],
        "topics": [{"name": "orders", "partitions": 2, "rf": 2, "bytes_in_per_s": 400_000, "size_gb": 1,
                    "tail_groups": 1, "producer": {"client_id": "orders-svc", "user": "orders", "idc": "idc-a"},
                    "consumer": {"client_id": "billing", "user": "finance", "idc": "idc-b"}}]}],
}


@pytest.fixture()
def sim() -> Iterator[SimRunner]:
    with start_sim(SPEC) as runner:
        yield runner


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    with local_service(tmp_path, clickhouse=ClickHouseConf(path=chdb_path(), database=fresh_database("sched")),
                       analytics=AnalyticsConf(enabled=True, interval_s=3600, days=1, ingest_max_s=2,
                                               tenant_pattern=r"^(?P<tenant>[a-z]+)")) as svc:
        yield svc


def test_one_tick_ingests_models_and_the_api_serves_the_run(sim: SimRunner, service: Service) -> None:
    east = sim.endpoints["clusters"]["east"]
    service.ctx.store.propose({"type": "cluster.register", "meta": meta("test"), "name": "east",
                               **register_fields(east)})
    for _ in range(4):  # a snapshot (rates need two scrapes): the broker IDCs the audit records lack
        service.collection(service.ctx)
        if service.ctx.snapshots.get("east") is not None:
            break
        time.sleep(0.6)
    assert service.ctx.snapshots.get("east") is not None
    deadline = time.monotonic() + 15
    while "__guardian_audit" not in sim.server.fed.clusters["east"].topics and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # a few more audit intervals (10 simulated s = 1/3 s)
    assert service.scheduler.jobs["analytics"].interval_s == 3600
    t0 = time.perf_counter()
    service.scheduler.run_now("analytics")
    tick_s = time.perf_counter() - t0
    assert service.scheduler.runs["analytics"] == 1, "the tick failed (see the log)"
    analytics = service.ctx.analytics
    assert analytics is not None
    last = analytics.last
    assert last is not None
    assert last["error"] == "" and last["engine"] == "sql" and last["ingest"]["east"]["accepted"] > 0
    assert last["ingest"]["east"]["rejected"] == 0 and {j["job"] for j in last["jobs"]} == {
        "traffic", "lineage", "cost", "idle", "cross_idc"}
    assert last["seconds"] < tick_s + 0.1 and last["output_rows"] > 0

    token = token_path(service.ctx.settings).read_text().strip()
    h = {"Authorization": f"Bearer {token}"}
    with TestClient(service.app) as client:
        runs = client.get("/api/v1/analytics/runs", headers=h).json()
        assert runs["scheduled"]["started_at"] == last["started_at"] and runs["schedule"]["engine"] == "sql"
        by_job = {r["job"]: r for r in runs["jobs"]}
        assert {j["run_id"] for j in last["jobs"]} == {r["run_id"] for r in by_job.values()}
        assert all(r["engine"] == "clickhouse-sql" for r in by_job.values())
        lineage = client.get("/api/v1/analytics/lineage/east/orders", headers=h).json()
        assert {(r["role"], r["client_id"]) for r in lineage} >= {("producer", "orders-svc"), ("consumer", "billing")}
        model = client.get("/api/v1/analytics/traffic-model?cluster=east", headers=h).json()
        assert set(model) == {"orders"}  # its peak is 0 until a week of history fills the next day's slots
        ch = service.ctx.clickhouse
        assert ch is not None
        assert ch.scalar(f"SELECT max(max_bps) FROM {ch.table('traffic_profile')} WHERE topic = 'orders'") > 0
        # the inventory comes from the live cluster: cost per tenant has its partitions, replicas and bytes
        inv = ch.rows(f"SELECT pool, tenant, partitions, replication_factor, size_bytes FROM "
                      f"{ch.table('topic_inventory')} FINAL WHERE cluster = 'east' AND topic = 'orders'")
        assert last["inventory_rows"] >= 1 and len(inv) == 1
        pool, tenant, parts, rf, size = inv[0]
        assert (tenant, parts, rf) == ("orders", 2, 2) and size > 0 and pool
        cost = ch.rows(f"SELECT tenant, partitions, replicas, storage_bytes FROM {ch.table('tenant_cost')} "
                       "WHERE cluster = 'east' AND tenant = 'orders'")
        assert cost and cost[0][1:3] == (2, 4) and cost[0][3] == size * rf
        metrics = client.get("/metrics").text
        assert 'guardian_analytics_runs_total{status="ok"} 1.0' in metrics
        accepted = last["ingest"]["east"]["accepted"]
        assert f'guardian_analytics_audit_records_total{{outcome="accepted"}} {float(accepted)}' in metrics
        assert 'guardian_loop_duration_seconds_count{loop="analytics"} 1.0' in metrics

    # the next tick resumes at the committed offsets: nothing twice, broker IDCs filled from nothing else
    service.scheduler.run_now("analytics")
    second = analytics.last
    assert second is not None
    assert second["ingest"]["east"]["duplicates_skipped"] == 0
    total = accepted + second["ingest"]["east"]["accepted"]
    assert ch.scalar(f"SELECT count() FROM {ch.table('audit_records')}") == total
    assert ch.scalar(f"SELECT uniqExact(src_topic) FROM {ch.table('audit_records')}") == 1
    assert ch.scalar(f"SELECT any(src_topic) FROM {ch.table('audit_records')}") == "east/__guardian_audit"
    # kafkasim's records carry no broker IDC: filled from the latest snapshot of the cluster
    snap = service.ctx.snapshots.get("east")
    assert snap is not None
    idc_of = {b.id: b.idc for b in snap.brokers}
    stored = ch.rows(f"SELECT DISTINCT broker, broker_idc FROM {ch.table('audit_records')}")
    assert stored and all(idc == idc_of[broker] != "" for broker, idc in stored)
    # ... so the clients' IDCs against the brokers' make leased-line pairs
    pairs = {(r["src_idc"], r["dst_idc"]) for r in ch.records(
        f"SELECT src_idc, dst_idc FROM {ch.table('cross_idc_traffic')} WHERE run_id = {{r:String}}",
        {"r": next(j["run_id"] for j in second["jobs"] if j["job"] == "cross_idc")})}
    assert pairs and all(set(p) & set(idc_of.values()) for p in pairs)


def test_analytics_is_off_by_default_and_its_settings_are_validated(tmp_path: Path) -> None:
    assert Settings().analytics.enabled is False
    conf = tmp_path / "g.toml"
    conf.write_text('[analytics]\nenabled = true\nengine = "hadoop"\ninterval_s = -1\n')
    with pytest.raises(ContractError) as err:
        load_settings(conf)
    assert "$.analytics.engine" in str(err.value) and "$.analytics.interval_s" in str(err.value)
