"""The analytics jobs computed by ClickHouse SQL alone, written exactly like the Spark jobs' runs.

Same models (the SQL of :mod:`analytics_spark.sql.baseline`, same definitions as
:mod:`analytics_spark.transforms`), same result tables, run ids, ``analytics_runs`` rows (with
``engine = 'clickhouse-sql'``) and pruning as :func:`analytics_spark.jobs.run`, so every reader —
the API, pre-allocation, modelled-peak balancing, the throttle — serves a run of either engine alike.

Why a second engine: it is what the service's scheduled analytics job runs. A local Spark session in
the service process costs a JVM (seconds to start, hundreds of MB resident) on the node that also runs
Raft and the loops, while ClickHouse already holds the rollups and aggregates them in-process
(measured figures: README "Scheduled analytics"). Spark stays the engine for large windows and for
clusters of executors (``guardian analytics run --engine spark``, ``spark-submit``).

Each job is ``INSERT INTO <result> SELECT '<run id>', ... FROM (<model SQL>)`` — the work happens
inside ClickHouse; nothing but the row counts comes back to Python.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from analytics_spark.clickhouse import ClickHouse
from analytics_spark.clickhouse.store import RESULT_TABLES, prune_runs
from analytics_spark.jobs import JobReport, JobSettings, resolve_jobs
from analytics_spark.slices import Window
from analytics_spark.sql.baseline import baseline_sql

ENGINE = "clickhouse-sql"

# result table -> (column list of the table, matching select list over the model's SELECT)
_COLUMNS: dict[str, tuple[str, str]] = {
    "traffic_profile": ("cluster, topic, partition, direction, hour_of_week, samples, p50_bps, p95_bps, "
                        "max_bps, mean_bps", ""),
    "traffic_forecast": ("cluster, topic, partition, direction, days, mean_daily_bytes, trend_bytes_per_day, "
                         "forecast_day, forecast_daily_bytes, forecast_peak_bps, forecast_peak_hour",
                         "cluster, topic, partition, direction, {days}, mean_daily_bytes, b, "
                         "toDate('{day}'), forecast_daily_bytes, forecast_peak_bps, forecast_peak_hour"),
    "topic_lineage": ("cluster, topic, role, client_id, user, client_idc, bytes, records, requests, first_seen, "
                      "last_seen", ""),
    "tenant_cost": ("cluster, pool, tenant, topics, partitions, replicas, bytes_in, bytes_out, storage_bytes, "
                    "cost", ""),
    "idle_topics": ("cluster, topic, pool, tenant, last_produce, last_fetch, no_producer, no_consumer", ""),
    "cross_idc_traffic": ("cluster, src_idc, dst_idc, bytes, records", ""),
    "cross_idc_clients": ("cluster, src_idc, dst_idc, client_id, user, topic, bytes, rank", ""),
}


@dataclass
class SqlRunReport:
    """One invocation of the SQL engine."""

    window: Window
    jobs: list[JobReport]
    seconds: float
    engine: str = ENGINE


def _input_rows(ch: ClickHouse, table: str, window: Window) -> int:
    return int(ch.scalar(
        f"SELECT count() FROM {ch.table(table)} WHERE minute >= toDateTime({{s:UInt32}}, 'UTC') "
        "AND minute < toDateTime({e:UInt32}, 'UTC')",
        {"s": int(window.start.timestamp()), "e": int(window.end.timestamp())}))


def run_sql(ch: ClickHouse, jobs: Sequence[str], settings: JobSettings | None = None, *,
            log: Callable[[str], None] = lambda s: None) -> SqlRunReport:
    """Run ``jobs`` as ClickHouse SQL over the settings' window, record each as a finished run; report."""
    t0 = time.perf_counter()
    settings = settings or JobSettings()
    names = resolve_jobs(jobs)
    window = settings.window()
    reports = []
    for job in names:
        tj = time.perf_counter()
        run_id = f"{job}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        profile = (f"(SELECT cluster, topic, partition, toString(direction) AS direction, hour_of_week, p95_bps "
                   f"FROM {ch.table('traffic_profile')} WHERE run_id = '{run_id}')")
        sqls = baseline_sql(ch, window.start, window.end, idle_days=settings.idle_days, top_k=settings.top_k,
                            prices=settings.prices, profile_source=profile)
        rows: dict[str, int] = {}
        for table in RESULT_TABLES[job]:  # traffic: the profile first, the forecast reads it
            columns, select = _COLUMNS[table]
            select = (select or columns).format(days=window.days, day=window.end.date().isoformat())
            ch.command(f"INSERT INTO {ch.table(table)} (run_id, {columns}) "
                       f"SELECT '{run_id}', {select} FROM ({sqls[table]})")
            rows[table] = int(ch.scalar(f"SELECT count() FROM {ch.table(table)} WHERE run_id = {{r:String}}",
                                        {"r": run_id}))
        secs = time.perf_counter() - tj
        source = "audit_partition_minute" if job == "traffic" else "audit_client_minute"
        ch.insert_rows(
            "analytics_runs",
            [(run_id, job, window.start, window.end, _input_rows(ch, source, window), sum(rows.values()), secs,
              ENGINE)],
            ["run_id", "job", "window_start", "window_end", "input_rows", "output_rows", "seconds", "engine"],
        )
        prune_runs(ch, job, keep=settings.keep_runs)
        reports.append(JobReport(job, run_id, rows, secs))
        log(f"{job}: {rows} in {secs:.2f}s (run {run_id}, {ENGINE})")
    return SqlRunReport(window, reports, time.perf_counter() - t0)
