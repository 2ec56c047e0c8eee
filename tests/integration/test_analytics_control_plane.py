"""The control plane using the audit analytics, with a real chdb: balancing on the modelled peak
(``load_basis``), the throttle's client ids from the lineage run, and the SQL engine those read from.

The models are computed from audit rows by the ClickHouse-SQL engine (the one the service schedules);
its equality with the Spark jobs is checked in ``test_analytics_spark.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from analytics_spark.clickhouse import ClickHouse, audit_rollups, connect
from analytics_spark.clickhouse.store import LineageReader, cluster_lineage, partition_peaks
from analytics_spark.jobs import JobSettings
from analytics_spark.sql.engine import ENGINE, run_sql
from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.service.planning import PlanRequestError, make_plan
from controlplane.service.protection import ClusterBinding, ProtectionService
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain import check_plan, parse_plan, plan_to_dict
from domain.throttles import CONSUMER_QUOTA, Lever
from planners.load_basis import apply_load_basis
from planners.protection import ClientShare, Lineage, Observation
from planners.registry import PLANNERS
from tests.support.chdb_session import chdb_path, fresh_database
from tests.support.service_ports import RecordingExecutor
from tests.support.throttle_support import MB, disk, hot_snapshot, part, snapshot

COLS = ["ts", "cluster", "broker", "broker_idc", "client_id", "user", "client_ip", "client_idc", "api", "topic",
        "partition", "bytes", "records", "latency_ms"]
DAYS = 7
END = datetime(2026, 11, 16, tzinfo=UTC)  # a Monday 00:00: the forecast is for that day
PEAK = 60 * MB


@pytest.fixture()
def ch() -> Iterator[ClickHouse]:
    c = connect(data_path=chdb_path(), database=fresh_database("t_cp"))
    yield c
    c.command(f"DROP DATABASE IF EXISTS {c.database}")
    c.close()


def insert_audit(ch: ClickHouse, rows: list[tuple[Any, ...]]) -> None:
    """Audit rows straight into the raw table, then their rollups (what the ingest does per batch)."""
    ch.insert_rows("audit_records", rows, COLS)
    audit_rollups.rebuild(ch)


def evening_rows(topic: str, partitions: int, rate: float) -> list[tuple[Any, ...]]:
    """Every day of the window, 18:00-19:00 UTC: ``rate`` bytes/s produced into each partition."""
    rows = []
    for day in range(DAYS):
        start = END - timedelta(days=DAYS - day) + timedelta(hours=18)
        for minute in range(60):
            for p in range(partitions):
                rows.append((start + timedelta(minutes=minute), "c1", 1, "idc-a", "batch-loader", "etl",
                             "10.0.0.9", "idc-a", "produce", topic, p, int(rate * 60), 1000, 2.0))
    return rows


def balanced_snapshot() -> Any:
    """4 brokers x 1 disk, each writing 40 MB/s now; ``evening`` (2 partitions on brokers 1 and 2) is
    quiet in this window (0.1 MB/s) but peaks at 60 MB/s every evening."""
    steady = [part("steady", i, [1 + i % 4, 1 + (i + 1) % 4], ["/d1", "/d1"], bytes_in=10 * MB)
              for i in range(8)]
    evening = [part("evening", i, [1, 2] if i == 0 else [2, 1], ["/d1", "/d1"], bytes_in=0.1 * MB)
               for i in range(2)]
    return snapshot({b: [disk("/d1")] for b in (1, 2, 3, 4)}, steady + evening)


def test_modelled_peak_plan_moves_the_quiet_partition_the_window_plan_leaves(ch: ClickHouse) -> None:
    insert_audit(ch, evening_rows("evening", 2, PEAK))
    report = run_sql(ch, ["traffic"], JobSettings(days=DAYS, end=END))
    assert report.jobs[0].output_rows["traffic_forecast"] > 0
    model = partition_peaks(ch, "c1")
    assert model is not None and model.source == f"traffic run {report.jobs[0].run_id}"
    assert model.bytes_in[("evening", 0)] == pytest.approx(PEAK, rel=1e-6)  # constant daily: growth 1

    snap = balanced_snapshot()
    window = make_plan(snap, "rebalance", {"load_basis": "window"}, load_model=lambda c: partition_peaks(ch, c))
    peak = make_plan(snap, "rebalance", {"load_basis": "modelled_peak"},
                     load_model=lambda c: partition_peaks(ch, c))
    assert window.moves == () and window.load_basis is not None and window.load_basis.basis == "window"
    assert peak.moves, "at the modelled peak brokers 1 and 2 carry 160 MB/s against 40: the plan must move"
    sources = {b for m in peak.moves for b in snap.index.partition_by_id[m.id].replicas if b not in m.replicas}
    targets = {b for m in peak.moves for b in m.replicas if b not in snap.index.partition_by_id[m.id].replicas}
    assert sources <= {1, 2} and targets <= {3, 4} and targets
    assert peak.summary is not None and peak.summary.after.max_util < peak.summary.before.max_util
    assert check_plan(snap, peak) == [] and check_plan(snap, window) == []
    # recorded in the plan: basis, model run, every overridden rate; the file round-trips it
    basis = peak.load_basis
    assert basis is not None and basis.basis == "modelled_peak" and basis.source == model.source
    assert {(o.topic, o.partition) for o in basis.overrides} == {("evening", 0), ("evening", 1)}
    assert all(o.window_bytes_in_per_s == 0.1 * MB for o in basis.overrides)
    assert any("modelled_peak" in n for n in peak.notes)
    parsed = parse_plan(json.dumps(plan_to_dict(peak)))
    assert parsed.load_basis == basis
    # reproducible without ClickHouse: the recorded overrides on the same snapshot give the same plan
    again = PLANNERS["rebalance"](apply_load_basis(snap, parsed.load_basis), {})
    assert again.moves == peak.moves


def test_modelled_peak_without_a_model_or_with_a_bad_basis_is_a_clear_error(ch: ClickHouse) -> None:
    snap = balanced_snapshot()
    with pytest.raises(PlanRequestError, match="no traffic model"):
        make_plan(snap, "rebalance", {"load_basis": "modelled_peak"}, load_model=lambda c: partition_peaks(ch, c))
    with pytest.raises(PlanRequestError, match="no traffic model"):
        make_plan(snap, "rebalance", {"load_basis": "modelled_peak"})
    with pytest.raises(PlanRequestError, match="load_basis"):
        make_plan(snap, "rebalance", {"load_basis": "yesterday"})
    with pytest.raises(PlanRequestError, match="load_basis"):
        make_plan(snap, "rebalance", {"load_basis": 3})


def test_api_plans_on_the_modelled_peak(ch: ClickHouse, tmp_path: Any) -> None:
    insert_audit(ch, evening_rows("evening", 2, PEAK))
    run_sql(ch, ["traffic"], JobSettings(days=DAYS, end=END))
    token = TokenConf(name="op", role="operator", sha256=hash_token("op-token"))
    ctx = ServiceContext(settings=Settings(data_dir=tmp_path, tokens=[token]), store=LocalStateStore())
    ctx.clickhouse = ch
    ctx.load_model = lambda c: partition_peaks(ch, c)
    ctx.store.propose({"type": "cluster.register", "meta": meta("t"), "name": "c1",
                       "bootstrap_servers": ["127.0.0.1:9"]})
    ctx.snapshots.put(replace(balanced_snapshot(), taken_at=datetime.now(UTC)))
    h = {"Authorization": "Bearer op-token"}
    with TestClient(create_app(ctx)) as client:
        r = client.post("/api/v1/plans", headers=h, json={"cluster": "c1", "params": {"load_basis": "modelled_peak"}})
        assert r.status_code == 201, r.text
        plan = client.get(f"/api/v1/plans/{r.json()['plan_id']}", headers=h).json()["plan"]
        assert plan["load_basis"]["basis"] == "modelled_peak" and len(plan["load_basis"]["overrides"]) == 2
        assert plan["reassignment"]["partitions"]
        bad = client.post("/api/v1/plans", headers=h, json={"cluster": "c1", "params": {"load_basis": "nope"}})
        assert bad.status_code == 400 and "load_basis" in bad.json()["detail"]


# --------------------------------------------------------------------------- throttle lineage
def lineage_rows(cluster: str, topic: str) -> list[tuple[Any, ...]]:
    t = END - timedelta(hours=3)
    return [(t + timedelta(minutes=i), cluster, 1, "idc-a", client, "u", "10.0.0.1", "idc-a", api, topic, 0, n, 10, 1.0)
            for i in range(10)
            for client, api, n in (("billing", "fetch", 9_000_000), ("reports", "fetch", 1_000_000),
                                   ("orders-writer", "produce", 5_000_000))]


class Source:
    """The observation port: the hot snapshot, optionally with topic clients from the audit topic."""

    def __init__(self, lineage: Lineage | None = None) -> None:
        self.lineage = lineage or Lineage()

    def observe(self) -> Observation:
        return Observation(snapshot=replace(hot_snapshot(), taken_at=datetime.now(UTC)), lineage=self.lineage,
                           partition_throttle=False)


class Actuator:
    def __init__(self) -> None:
        self.applied: dict[str, float] = {}

    def apply(self, lever: Lever) -> None:
        assert lever.rate is not None
        self.applied[f"{lever.kind}:{lever.target.get('client_id')}"] = lever.rate

    def remove(self, lever: Lever) -> None:
        self.applied.pop(f"{lever.kind}:{lever.target.get('client_id')}", None)


def throttle_with(lineage_port: Any, observed: Lineage | None = None) -> tuple[ProtectionService, Actuator]:
    store = LocalStateStore()
    store.propose({"type": "cluster.register", "meta": meta("t"), "name": "c1", "bootstrap_servers": ["127.0.0.1:9"]})
    service = ProtectionService(store, lineage=lineage_port)
    actuator = Actuator()
    service.bind("c1", ClusterBinding(Source(observed), actuator))
    return service, actuator


def test_throttle_quotes_the_clients_of_the_clickhouse_lineage_run(ch: ClickHouse) -> None:
    insert_audit(ch, lineage_rows("c1", "orders"))
    rid = run_sql(ch, ["lineage"], JobSettings(days=DAYS, end=END)).jobs[0].run_id
    lineage = cluster_lineage(ch, "c1")
    assert lineage is not None and lineage.topic_source == f"ClickHouse lineage run {rid}"
    seconds = DAYS * 86400
    assert lineage.topic_consumers["orders"] == (ClientShare("billing", 90_000_000 / seconds),
                                                 ClientShare("reports", 10_000_000 / seconds))
    assert lineage.topic_producers["orders"] == (ClientShare("orders-writer", 50_000_000 / seconds),)
    # the audit topic knows another client: the lineage run wins for topic -> client ids
    observed = Lineage(topic_consumers={"orders": (ClientShare("stale-client", 1.0),)})
    service, actuator = throttle_with(LineageReader(ch), observed)
    service.job()
    result = service.job()[0]
    quotas = {d["key"]: d for d in result["decisions"] if d["kind"] == CONSUMER_QUOTA}
    assert set(quotas) == {"consumer-quota:billing", "consumer-quota:reports"}
    assert f"ClickHouse lineage run {rid}" in quotas["consumer-quota:billing"]["target"]["lineage"]
    # billing read 9x what reports did: each is quoted on its share of the topic's fetch bytes (9:1)
    billing, reports = actuator.applied[f"{CONSUMER_QUOTA}:billing"], actuator.applied[f"{CONSUMER_QUOTA}:reports"]
    assert billing / reports == pytest.approx(9.0) and billing + reports < 160 * MB
    explained = service.explain("c1")["lineage"]
    assert explained["topic_clients"] == f"ClickHouse lineage run {rid}" and "fallback_reason" not in explained
    state = service.store.read(lambda s: dict(s["throttles"]["c1"]))
    assert f"lineage run {rid}" in state["consumer-quota:billing"]["target"]["lineage"]


def test_throttle_falls_back_to_the_audit_topic_without_lineage_rows(ch: ClickHouse) -> None:
    observed = Lineage(topic_consumers={"orders": (ClientShare("tail-reader", 5.0),)})
    service, _ = throttle_with(LineageReader(ch), observed)  # no lineage run yet
    service.job()
    (decision,) = service.job()[0]["decisions"]
    assert decision["key"] == "consumer-quota:tail-reader"
    assert "from the audit topic" in decision["target"]["lineage"]
    explained = service.explain("c1")["lineage"]
    assert explained["topic_clients"] == "the audit topic"
    assert explained["fallback_reason"] == "no lineage run yet"
    # a lineage run that only knows another cluster: still the audit topic for c1
    insert_audit(ch, lineage_rows("c2", "orders"))
    run_sql(ch, ["lineage"], JobSettings(days=DAYS, end=END))
    service.job()
    explained = service.explain("c1")["lineage"]
    assert explained["topic_clients"] == "the audit topic" and "no rows" in explained["fallback_reason"]

    def broken(cluster: str) -> Lineage | None:
        raise ConnectionError("ClickHouse went away")

    service.lineage = broken  # a failing port never stops the protection
    assert "skipped" not in service.job()[0]
    assert "went away" in service.explain("c1")["lineage"]["fallback_reason"]


def test_sql_engine_records_its_runs(ch: ClickHouse) -> None:
    insert_audit(ch, lineage_rows("c1", "orders"))
    report = run_sql(ch, ["all"], JobSettings(days=DAYS, end=END))
    runs = {r[0]: r[1:] for r in ch.rows(
        f"SELECT job, engine, input_rows, output_rows FROM {ch.table('analytics_runs')}")}
    assert set(runs) == {"traffic", "lineage", "cost", "idle", "cross_idc"}
    assert all(engine == ENGINE for engine, _, _ in runs.values())
    assert runs["lineage"][1] == 30 and runs["lineage"][2] == 3  # 30 client-minutes in, 3 lineage rows out
    assert {j.job: sum(j.output_rows.values()) for j in report.jobs}["lineage"] == 3


def test_cli_runs_the_sql_engine(ch: ClickHouse) -> None:
    import typer
    from typer.testing import CliRunner

    from analytics_spark.cli import register

    insert_audit(ch, lineage_rows("c1", "orders"))
    app = typer.Typer()
    register(app)
    common = ["--chdb-path", str(chdb_path()), "--database", ch.database]
    r = CliRunner().invoke(app, ["run", "lineage", "--engine", "hadoop", *common])
    assert r.exit_code == 2 and "unknown engine" in r.output
    r = CliRunner().invoke(app, ["run", "lineage", "--engine", "sql", "--days", str(DAYS), "--end", END.isoformat(),
                                 *common])
    assert r.exit_code == 0, r.output
    assert "clickhouse-sql" in r.output
    lineage = cluster_lineage(ch, "c1")
    assert lineage is not None
    assert {c.client_id for c in lineage.topic_consumers["orders"]} == {"billing", "reports"}


def test_auto_rebalance_judges_and_plans_on_the_policy_load_basis(ch: ClickHouse, tmp_path: Any) -> None:
    from controlplane.service.auto_rebalance import run_auto_rebalance

    ctx = ServiceContext(settings=Settings(data_dir=tmp_path), store=LocalStateStore())
    recording = RecordingExecutor()
    ctx.executor = recording
    ctx.load_model = lambda c: partition_peaks(ch, c)
    ctx.store.propose({"type": "cluster.register", "meta": meta("t"), "name": "c1",
                       "bootstrap_servers": ["127.0.0.1:9"]})
    ctx.snapshots.put(replace(balanced_snapshot(), taken_at=datetime.now(UTC)))

    def policy(basis: str) -> None:
        ctx.store.propose({"type": "cluster.auto_rebalance", "meta": meta("t"), "name": "c1", "enabled": True,
                           "window_cron": "* * * * *", "window_minutes": 1440, "load_basis": basis})

    policy("window")
    (d,) = run_auto_rebalance(ctx)
    assert d["action"] == "skip" and "within threshold" in d["why"]  # quiet now: balanced
    policy("modelled_peak")
    (d,) = run_auto_rebalance(ctx)
    assert d["action"] == "skip" and "no traffic model" in d["why"]
    insert_audit(ch, evening_rows("evening", 2, PEAK))
    run_sql(ch, ["traffic"], JobSettings(days=DAYS, end=END))
    (d,) = run_auto_rebalance(ctx)
    assert d["action"] == "skip" and "acting if the next one confirms it" in d["why"], d
    ctx.snapshots.put(replace(balanced_snapshot(), taken_at=datetime.now(UTC)))  # the next snapshot
    (d,) = run_auto_rebalance(ctx)
    assert d["action"] == "execute", d
    plan = ctx.store.read(lambda s: s["plans"][str(d["plan_id"])])
    assert plan["plan"]["load_basis"]["basis"] == "modelled_peak" and plan["status"] == "approved"
    assert recording.started == [d["plan_id"]]


def test_lineage_reader_never_waits_behind_a_long_query(ch: ClickHouse) -> None:
    import threading
    import time

    insert_audit(ch, lineage_rows("c1", "orders"))
    run_sql(ch, ["lineage"], JobSettings(days=DAYS, end=END))
    reader = LineageReader(ch, wait_s=0.2)
    first = reader("c1")
    assert first is not None and first.topic_consumers["orders"]
    slow = threading.Thread(target=ch.rows, args=("SELECT sum(sleepEachRow(0.5)) FROM numbers(5)",))
    slow.start()  # a 2.5 s query holds the client, as a long analytics run would
    time.sleep(0.3)
    t0 = time.perf_counter()
    assert reader("c1") is first and reader("c9") is None  # the last read, not a stall
    assert time.perf_counter() - t0 < 1.0 and slow.is_alive()
    slow.join()
    assert reader("c1") is first  # same run: served from the cache
