"""Integration: seeded audit data in real chdb → real local Spark jobs → results in ClickHouse.

Every expectation is computed independently here, with pandas/numpy on the raw audit rows
(not the rollups, not the exported slices): exact for lineage, cost, idle and cross-IDC,
within float tolerance for percentiles and the forecast.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analytics_spark.clickhouse import ClickHouse, audit_rollups, connect
from analytics_spark.jobs import JobSettings, latest_run_id, run, spark_session
from analytics_spark.seed import SeedCatalogue, default_end, seed_audit
from tests.support.chdb_session import chdb_path, fresh_database

pytestmark = pytest.mark.slow

DAYS = 10
IDLE_DAYS = 4
TOP_K = 3
PRICES = {"in_per_gb": 0.5, "out_per_gb": 0.25, "storage_per_gb": 0.125}


class Env:
    ch: ClickHouse
    cat: SeedCatalogue
    end: datetime
    raw: pd.DataFrame
    runs: dict[str, str]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    s = spark_session("local[2]", shuffle_partitions=2, driver_memory="1g")
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def env(spark: Any) -> Iterator[Env]:
    e = Env()
    e.ch = connect(data_path=chdb_path(), database=fresh_database("t_spark"))
    # window end mid-day: not aligned to days or weeks, so slot sample counts differ
    e.end = default_end() - timedelta(hours=5)
    e.cat = seed_audit(e.ch, rows=60_000, days=DAYS, end=e.end, seed=11, topics_per_cluster=8)
    # traffic of a topic missing from the inventory, and rows outside the window (ignored)
    orphan = [
        (e.end - timedelta(minutes=90 + i), "c1", 1, "idc-a", "ghost", "nobody", "10.9.9.9", "idc-b",
         "produce", "orphan", 0, 5000 + i, 3, 1.0)
        for i in range(5)
    ]
    outside = [
        (e.end + timedelta(minutes=1), "c1", 1, "idc-a", "late", "u", "10.9.9.8", "idc-a",
         "fetch", "orphan", 0, 777, 1, 1.0),
        (e.end - timedelta(days=DAYS, minutes=1), "c1", 1, "idc-a", "early", "u", "10.9.9.7",
         "idc-c", "fetch", "orphan", 0, 888, 1, 1.0),
    ]
    cols = ["ts", "cluster", "broker", "broker_idc", "client_id", "user", "client_ip", "client_idc",
            "api", "topic", "partition", "bytes", "records", "latency_ms"]
    e.ch.insert_rows("audit_records", orphan + outside, cols)
    audit_rollups.rebuild(e.ch)  # as the ingest does for the rows it stores
    start = e.end - timedelta(days=DAYS)
    e.raw = e.ch.arrow(
        f"SELECT toUnixTimestamp64Milli(ts) AS ts_ms, cluster, broker_idc, client_id, user, client_idc, "
        f"toString(api) AS api, topic, partition, bytes, records FROM {e.ch.table('audit_records')} "
        f"WHERE ts >= fromUnixTimestamp64Milli({int(start.timestamp() * 1000)}) "
        f"AND ts < fromUnixTimestamp64Milli({int(e.end.timestamp() * 1000)})"
    ).to_pandas()
    settings = JobSettings(days=DAYS, end=e.end, idle_days=IDLE_DAYS, top_k=TOP_K, prices=PRICES)
    report = run(e.ch, ["all"], settings, spark=spark)
    e.runs = {j.job: j.run_id for j in report.jobs}
    yield e
    e.ch.command(f"DROP DATABASE IF EXISTS {e.ch.database}")
    e.ch.close()


def result(env: Env, table: str, job: str, order: str) -> pd.DataFrame:
    """Rows of one run; enums and dates as strings, DateTimes as epoch seconds; sorted by ``order``."""
    cols = env.ch.rows(
        "SELECT name, type FROM system.columns WHERE database = {d:String} AND table = {t:String} "
        "AND name != 'run_id' ORDER BY position", {"d": env.ch.database, "t": table},
    )
    sel = []
    for name, typ in cols:
        if "Enum" in typ or typ == "Date":
            sel.append(f"toString({name}) AS {name}")
        elif "DateTime" in typ:
            sel.append(f"toInt64(toUnixTimestamp({name})) AS {name}")
        else:
            sel.append(name)
    df = env.ch.arrow(
        f"SELECT {', '.join(sel)} FROM {env.ch.table(table)} WHERE run_id = {{r:String}}",
        {"r": env.runs[job]},
    ).to_pandas()
    keys = [c.strip() for c in order.split(",")]
    return df.sort_values(keys).reset_index(drop=True)


def test_all_jobs_recorded_as_latest_runs(env: Env) -> None:
    for job in ("traffic", "lineage", "cost", "idle", "cross_idc"):
        assert latest_run_id(env.ch, job) == env.runs[job]
    assert len(env.raw) == 60_005


def test_lineage_exact(env: Env) -> None:
    r = env.raw.assign(role=np.where(env.raw.api == "produce", "producer", "consumer"))
    exp = r.groupby(["cluster", "topic", "role", "client_id", "user", "client_idc"], as_index=False).agg(
        bytes=("bytes", "sum"), records=("records", "sum"), requests=("bytes", "size"),
        first_seen=("ts_ms", "min"), last_seen=("ts_ms", "max"),
    )
    exp["first_seen"] = exp.first_seen // 60000 * 60
    exp["last_seen"] = exp.last_seen // 60000 * 60
    got = result(env, "topic_lineage", "lineage", "cluster, topic, role, client_id, user, client_idc")
    keys = ["cluster", "topic", "role", "client_id", "user", "client_idc"]
    exp = exp.sort_values(keys).reset_index(drop=True)
    assert got.to_dict("records") == exp.to_dict("records")
    assert "ghost" in set(got.client_id) and "late" not in set(got.client_id)


def test_tenant_cost_exact(env: Env) -> None:
    inv = pd.DataFrame([t.__dict__ for t in env.cat.topics]).rename(columns={"name": "topic"})
    traffic = env.raw.groupby(["cluster", "topic"], as_index=False).apply(
        lambda g: pd.Series({"bytes_in": int(g.bytes[g.api == "produce"].sum()),
                             "bytes_out": int(g.bytes[g.api == "fetch"].sum())}),
        include_groups=False,
    )
    m = inv.merge(traffic, on=["cluster", "topic"], how="outer")
    m[["pool", "tenant"]] = m[["pool", "tenant"]].fillna("unknown")
    m = m.fillna({"partitions": 0, "replication_factor": 0, "size_bytes": 0, "bytes_in": 0, "bytes_out": 0})
    m["replicas"] = m.partitions * m.replication_factor
    m["storage"] = m.size_bytes * m.replication_factor
    exp = m.groupby(["cluster", "pool", "tenant"]).agg(
        topics=("topic", "size"), partitions=("partitions", "sum"), replicas=("replicas", "sum"),
        bytes_in=("bytes_in", "sum"), bytes_out=("bytes_out", "sum"), storage_bytes=("storage", "sum"),
    ).reset_index()
    got = result(env, "tenant_cost", "cost", "cluster, pool, tenant")
    ints = ["topics", "partitions", "replicas", "bytes_in", "bytes_out", "storage_bytes"]
    assert [tuple(x) for x in got[["cluster", "pool", "tenant"]].values] == [
        tuple(x) for x in exp[["cluster", "pool", "tenant"]].values
    ]
    assert got[ints].astype("int64").values.tolist() == exp[ints].astype("int64").values.tolist()
    cost = (exp.bytes_in * 0.5 + exp.bytes_out * 0.25 + exp.storage_bytes * 0.125) / 1e9
    assert np.allclose(got.cost.values, cost.values, rtol=1e-12)
    assert "unknown" in set(got.pool)  # the orphan topic


def test_idle_topics_exact(env: Env) -> None:
    since_ms = int((env.end - timedelta(days=IDLE_DAYS)).timestamp() * 1000)
    topics = {(t.cluster, t.name) for t in env.cat.topics} | set(
        map(tuple, env.raw[["cluster", "topic"]].drop_duplicates().values)
    )
    exp = set()
    for cl, tp in topics:
        g = env.raw[(env.raw.cluster == cl) & (env.raw.topic == tp)]
        no_p = int(not (g.ts_ms[g.api == "produce"] >= since_ms).any())
        no_c = int(not (g.ts_ms[g.api == "fetch"] >= since_ms).any())
        if no_p or no_c:
            exp.add((cl, tp, no_p, no_c))
    got = result(env, "idle_topics", "idle", "cluster, topic")
    assert set(map(tuple, got[["cluster", "topic", "no_producer", "no_consumer"]].values.tolist())) == exp
    kinds = {t.name: t.kind for t in env.cat.topics}
    flagged = {tp: (p, c) for _cl, tp, p, c in exp}
    for name, kind in kinds.items():
        if kind == "nocons":
            assert flagged[name] == (0, 1)
        if kind in ("stopped", "unused"):
            assert flagged[name] == (1, 1)
    assert flagged["orphan"] == (0, 1)


def test_cross_idc_exact(env: Env) -> None:
    r = env.raw
    prod = r.api == "produce"
    f = r.assign(src=np.where(prod, r.client_idc, r.broker_idc),
                 dst=np.where(prod, r.broker_idc, r.client_idc))
    f = f[(f.src != f.dst) & (f.src != "") & (f.dst != "")]
    pairs = f.groupby(["cluster", "src", "dst"], as_index=False).agg(
        bytes=("bytes", "sum"), records=("records", "sum"))
    got = result(env, "cross_idc_traffic", "cross_idc", "cluster, src_idc, dst_idc")
    assert got.values.tolist() == pairs.values.tolist()
    per = f.groupby(["cluster", "src", "dst", "client_id", "user", "topic"], as_index=False).agg(
        bytes=("bytes", "sum"))
    per = per.sort_values(["cluster", "src", "dst", "bytes", "client_id", "user", "topic"],
                          ascending=[True, True, True, False, True, True, True])
    per["rank"] = per.groupby(["cluster", "src", "dst"]).cumcount() + 1
    per = per[per["rank"] <= TOP_K]
    got_c = result(env, "cross_idc_clients", "cross_idc", "cluster, src_idc, dst_idc, rank")
    assert got_c.values.tolist() == per.values.tolist()
    assert len(got) >= 3


def _dense(env: Env) -> tuple[dict[tuple[Any, ...], np.ndarray], np.ndarray]:
    """Per series a zero-filled bytes/s array over every minute of the window; and each minute's slot."""
    start = env.end - timedelta(days=DAYS)
    n = DAYS * 1440
    minutes = pd.date_range(start, periods=n, freq="min", tz=UTC)
    slot = (minutes.dayofweek * 24 + minutes.hour).to_numpy()
    r = env.raw.assign(idx=(env.raw.ts_ms - int(start.timestamp() * 1000)) // 60000,
                       direction=np.where(env.raw.api == "produce", "in", "out"))
    out: dict[tuple[Any, ...], np.ndarray] = {}
    for (cl, tp, d), g in r.groupby(["cluster", "topic", "direction"]):
        topic_arr = np.zeros(n)
        for p, gp in g.groupby("partition"):
            arr = np.zeros(n)
            np.add.at(arr, gp.idx.to_numpy(), gp.bytes.to_numpy() / 60.0)
            out[(cl, tp, int(p), d)] = arr
            topic_arr += arr
        out[(cl, tp, -1, d)] = topic_arr
    return out, slot


def test_traffic_profile_matches_numpy(env: Env) -> None:
    dense, slot = _dense(env)
    got = result(env, "traffic_profile", "traffic", "cluster, topic, partition, direction, hour_of_week")
    assert len(got) == 168 * len(dense)
    series = got[["cluster", "topic", "partition", "direction"]].drop_duplicates().values
    assert set(map(tuple, series)) == set(dense)
    g = got.set_index(["cluster", "topic", "partition", "direction", "hour_of_week"])
    checked = 0
    for key, arr in dense.items():
        for s in range(168):
            vals = arr[slot == s]
            row = g.loc[(*key, s)]
            assert row.samples == len(vals)
            assert math.isclose(row.p50_bps, np.percentile(vals, 50, method="inverted_cdf"), rel_tol=1e-9)
            assert math.isclose(row.p95_bps, np.percentile(vals, 95, method="inverted_cdf"), rel_tol=1e-9)
            assert math.isclose(row.max_bps, vals.max(), rel_tol=1e-9)
            assert math.isclose(row.mean_bps, vals.mean(), rel_tol=1e-9, abs_tol=1e-9)
            checked += 1
    assert checked > 10_000
    assert (got.p95_bps > 0).sum() > 1000  # the data really has shape, not all zeros


def test_traffic_forecast_matches_numpy(env: Env) -> None:
    dense, slot = _dense(env)
    got = result(env, "traffic_forecast", "traffic", "cluster, topic, partition, direction")
    g = got.set_index(["cluster", "topic", "partition", "direction"])
    assert len(got) == len(dense)
    next_slots = [((env.end + timedelta(hours=h)).weekday() * 24 + (env.end + timedelta(hours=h)).hour)
                  for h in range(24)]
    for key, arr in dense.items():
        daily = arr.reshape(DAYS, 1440).sum(axis=1) * 60.0
        b, a = np.polyfit(np.arange(DAYS), daily, 1)
        fd = max(0.0, a + b * DAYS)
        mean = daily.mean()
        gr = fd / mean if mean > 0 else 0.0
        p95 = [np.percentile(arr[slot == s], 95, method="inverted_cdf") for s in next_slots]
        row = g.loc[key]
        assert math.isclose(row.trend_bytes_per_day, b, rel_tol=1e-6, abs_tol=1e-3)
        assert math.isclose(row.mean_daily_bytes, mean, rel_tol=1e-9)
        assert math.isclose(row.forecast_daily_bytes, fd, rel_tol=1e-6, abs_tol=1e-3)
        assert math.isclose(row.forecast_peak_bps, max(p95) * gr, rel_tol=1e-6, abs_tol=1e-6)
        if max(p95) > 0 and gr > 0:
            assert row.forecast_peak_hour == int(np.argmax(p95))
        assert str(row.forecast_day) == str(env.end.date())


def test_rerun_supersedes_previous_run(env: Env, spark: Any) -> None:
    before = latest_run_id(env.ch, "lineage")
    rep = run(env.ch, ["lineage"], JobSettings(days=DAYS, end=env.end), spark=spark)
    assert latest_run_id(env.ch, "lineage") == rep.jobs[0].run_id != before
    n_new = env.ch.scalar(f"SELECT count() FROM {env.ch.table('topic_lineage')} WHERE run_id = {{r:String}}",
                          {"r": rep.jobs[0].run_id})
    assert n_new == rep.jobs[0].output_rows["topic_lineage"] > 0


def test_unknown_job_is_a_clear_error(env: Env, spark: Any) -> None:
    with pytest.raises(ValueError, match="unknown job 'bogus'"):
        run(env.ch, ["bogus"], JobSettings(days=DAYS, end=env.end), spark=spark)


def test_cli_seed_run_status_plot(spark: Any, tmp_path: Any) -> None:
    import json as _json

    import typer
    from typer.testing import CliRunner

    from analytics_spark.cli import register

    app = typer.Typer()
    register(app)
    db = fresh_database("t_cli")
    common = ["--chdb-path", str(chdb_path()), "--database", db]
    end = default_end().isoformat()
    runner = CliRunner()
    r = runner.invoke(app, ["seed", "--rows", "5000", "--days", "7", "--end", end, *common])
    assert r.exit_code == 0, r.output
    assert "seeded 5000 audit rows" in r.output
    r = runner.invoke(app, ["run", "nonsense", *common])
    assert r.exit_code == 2 and "unknown job 'nonsense'" in r.output
    r = runner.invoke(app, ["run", "traffic", "lineage", "--days", "7", "--end", end, *common])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["status", *common])
    assert r.exit_code == 0, r.output
    st = _json.loads(r.output)
    assert st["audit_rows"] == 5000 and {x["job"] for x in st["runs"]} == {"traffic", "lineage"}
    png = tmp_path / "p.png"
    r = runner.invoke(app, ["plot", "payments-t10", "--out", str(png), *common])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    r = runner.invoke(app, ["plot", "no-such-topic", "--out", str(png), *common])
    assert r.exit_code == 1 and "no traffic model" in r.output
    mfile = tmp_path / "model.json"
    r = runner.invoke(app, ["model", "--out", str(mfile), "--cluster", "c1", *common])
    assert r.exit_code == 0, r.output
    model = _json.loads(mfile.read_text())
    ch0 = connect(data_path=chdb_path(), database=db)
    exp = dict(ch0.rows(f"SELECT topic, forecast_peak_bps FROM {db}.traffic_forecast WHERE cluster = 'c1' "
                        "AND partition = -1 AND direction = 'in'"))
    assert model == pytest.approx(exp) and "payments-t10" in model
    # the pre-allocation planner takes the model as is: a re-created topic gets its modelled peak
    from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
    from planners import NewTopic, PreallocateOptions, plan_preallocation

    snap = generate_snapshot(GeneratorSpec(brokers=6, disks_per_broker=2, partitions=20, seed=1))
    res = plan_preallocation(snap, NewTopic(name="payments-t10", partitions=3, replication_factor=2),
                             PreallocateOptions(traffic_model=model))
    assert len(res.topic.partitions) == 3
    per_partition = [p.bytes_in_per_s for p in res.topic.partitions]
    assert sum(per_partition) == pytest.approx(model["payments-t10"])
    ch = connect(data_path=chdb_path(), database=db)
    ch.command(f"DROP DATABASE IF EXISTS {db}")


def test_store_readers_serve_latest_results(env: Env) -> None:
    from analytics_spark.clickhouse import store as S

    big = env.raw.groupby(["cluster", "topic"]).bytes.sum().idxmax()
    peaks = S.expected_peaks(env.ch, *big)
    assert -1 in peaks and set(peaks[-1]) == {"in", "out"} and peaks[-1]["in"] > 0
    prof = S.weekly_profile(env.ch, *big)
    assert [r["hour_of_week"] for r in prof] == list(range(168))
    clients = S.topic_clients(env.ch, big[0], big[1], role="consumer")
    exp = env.raw[(env.raw.cluster == big[0]) & (env.raw.topic == big[1]) & (env.raw.api == "fetch")]
    assert {c["client_id"] for c in clients} == set(exp.client_id)
    assert [c["bytes"] for c in clients] == sorted((c["bytes"] for c in clients), reverse=True)
    assert sum(c["bytes"] for c in clients) == exp.bytes.sum()
    assert len(S.tenant_costs(env.ch)) == len(result(env, "tenant_cost", "cost", "cluster"))
    assert {r["topic"] for r in S.idle_topics(env.ch)} >= {"orphan"}
    x = S.cross_idc(env.ch)
    assert x["pairs"] and x["clients"] and all(c["rank"] <= TOP_K for c in x["clients"])
    assert S.topic_clients(env.ch, "c1", "no-such-topic") == []


def test_spark_side_series_derivation_matches_pushed_down_export(env: Env, spark: Any) -> None:
    from analytics_spark import transforms as T

    r = env.raw.assign(minute=env.raw.ts_ms // 60000 * 60)
    pm = r.groupby(["cluster", "topic", "partition", "api", "minute"], as_index=False).bytes.sum()
    pm["bytes"] = pm.bytes.astype("int64")
    series, keys = T.series_from_partition_minute(spark.createDataFrame(pm))
    start = env.end - timedelta(days=DAYS)
    prof: Any = T.with_keys(T.traffic_profile(spark, series, start, env.end), keys).toPandas()
    got = result(env, "traffic_profile", "traffic", "cluster, topic, partition, direction, hour_of_week")
    cols = ["cluster", "topic", "partition", "direction", "hour_of_week"]
    prof = prof.sort_values(cols).reset_index(drop=True)
    assert len(prof) == len(got)
    assert (prof[cols].values == got[cols].values).all()
    assert np.allclose(prof.p95_bps.values, got.p95_bps.values, rtol=1e-12)
    assert np.allclose(prof.mean_bps.values, got.mean_bps.values, rtol=1e-12)


def test_prune_keeps_only_latest_runs(env: Env, spark: Any) -> None:
    from analytics_spark.clickhouse.store import prune_runs

    t = env.ch.table("topic_lineage")
    run(env.ch, ["lineage"], JobSettings(days=DAYS, end=env.end), spark=spark)
    assert env.ch.scalar(f"SELECT uniqExact(run_id) FROM {t}") >= 2
    latest = latest_run_id(env.ch, "lineage")
    pruned = prune_runs(env.ch, "lineage", keep=1)
    assert pruned and latest not in pruned
    assert env.ch.rows(f"SELECT DISTINCT run_id FROM {t}") == [(latest,)]
    assert prune_runs(env.ch, "lineage", keep=1) == []
    with pytest.raises(ValueError):
        prune_runs(env.ch, "lineage", keep=0)


def test_sql_engine_writes_the_same_results_as_the_spark_jobs(env: Env) -> None:
    """The service's ClickHouse-SQL engine on a copy of the same audit data: every result table equals the
    Spark run's (exactly for integers and strings, to 1e-9 relative for floats)."""
    from analytics_spark.sql.engine import ENGINE, run_sql

    ch = connect(data_path=chdb_path(), database=fresh_database("t_sqleng"))
    try:
        for table in ("audit_records", "topic_inventory"):
            ch.command(f"INSERT INTO {ch.table(table)} SELECT * FROM {env.ch.table(table)}")
        audit_rollups.rebuild(ch)  # a direct write to the raw table: its rollups, as the ingest makes them
        settings = JobSettings(days=DAYS, end=env.end, idle_days=IDLE_DAYS, top_k=TOP_K, prices=PRICES)
        report = run_sql(ch, ["all"], settings)
        sql_runs = {j.job: j.run_id for j in report.jobs}
        assert ch.scalar(f"SELECT uniqExact(engine) = 1 AND any(engine) = '{ENGINE}' "
                         f"FROM {ch.table('analytics_runs')}") == 1
        spark_env = Env()  # the latest Spark run of each job (earlier tests re-ran and pruned lineage)
        spark_env.ch, spark_env.runs = env.ch, {j: str(latest_run_id(env.ch, j)) for j in sql_runs}
        assert {r[0] for r in env.ch.rows(f"SELECT DISTINCT engine FROM {env.ch.table('analytics_runs')}")} == {"spark"}
        tables = {"traffic_profile": ("traffic", "cluster, topic, partition, direction, hour_of_week"),
                  "traffic_forecast": ("traffic", "cluster, topic, partition, direction"),
                  "topic_lineage": ("lineage", "cluster, topic, role, client_id, user, client_idc"),
                  "tenant_cost": ("cost", "cluster, pool, tenant"),
                  "idle_topics": ("idle", "cluster, topic"),
                  "cross_idc_traffic": ("cross_idc", "cluster, src_idc, dst_idc"),
                  "cross_idc_clients": ("cross_idc", "cluster, src_idc, dst_idc, rank")}
        for table, (job, order) in tables.items():
            want = result(spark_env, table, job, order)
            sql_env = Env()
            sql_env.ch, sql_env.runs = ch, sql_runs
            got = result(sql_env, table, job, order)
            assert len(got) == len(want) > 0, table
            pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-9, atol=1e-6,
                                          check_dtype=False, obj=table)
    finally:
        ch.command(f"DROP DATABASE IF EXISTS {ch.database}")
        ch.close()


def test_scheduled_job_with_the_spark_engine(env: Env, spark: Any, tmp_path: Any) -> None:
    """``[analytics] engine = "spark"``: the service's job runs the Spark jobs (its session reused)."""
    from controlplane.config import AnalyticsConf, Settings
    from controlplane.service.analytics_job import AnalyticsJob
    from controlplane.service.context import ServiceContext
    from controlplane.state.store import LocalStateStore

    job = AnalyticsJob(env.ch, AnalyticsConf(enabled=True, engine="spark", ingest=False, jobs=["lineage"],
                                             days=DAYS))
    job._spark = spark  # the module's session (getOrCreate would return it anyway)
    ctx = ServiceContext(settings=Settings(data_dir=tmp_path), store=LocalStateStore())
    record = job(ctx)
    (lineage,) = record["jobs"]
    assert record["engine"] == "spark" and record["error"] == "" and lineage["output_rows"]["topic_lineage"] > 0
    assert latest_run_id(env.ch, "lineage") == lineage["run_id"]
    assert env.ch.scalar(f"SELECT engine FROM {env.ch.table('analytics_runs')} WHERE run_id = {{r:String}}",
                         {"r": lineage["run_id"]}) == "spark"
    # the window ends at the newest audit minute (+1 h, floored): the late row just after env.end
    assert record["window"]["end"] == (env.end + timedelta(hours=1)).replace(minute=0, second=0).isoformat()
