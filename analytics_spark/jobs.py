"""Analytics jobs: export slices from ClickHouse, run the Spark transforms, write results back.

Runnable three ways, one code path: ``guardian analytics run JOB``, ``python -m
analytics_spark.jobs --job all ...`` and ``spark-submit analytics_spark/jobs.py --job all ...``
(under spark-submit the master comes from ``--master``).

Each run of a job gets a ``run_id``; its rows in the result tables carry it and one row in
``analytics_runs`` marks it finished, so readers take the latest finished run (see
:func:`latest_run_id`) and never see a half-written one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from analytics_spark import transforms as T
from analytics_spark.clickhouse import ClickHouse, connect
from analytics_spark.clickhouse.store import RESULT_TABLES, latest_run_id, prune_runs
from analytics_spark.slices import ExportResult, Window, export_slices

__all__ = ["JOBS", "JobSettings", "latest_run_id", "resolve_jobs", "run", "spark_session"]

JOBS: tuple[str, ...] = ("traffic", "lineage", "cost", "idle", "cross_idc")
OUTPUT_TABLES: Mapping[str, tuple[str, ...]] = RESULT_TABLES
_DATETIME_COLUMNS = ("first_seen", "last_seen", "last_produce", "last_fetch")

@dataclass(frozen=True)
class JobSettings:
    """Parameters of a run. ``end`` defaults to the start of the current UTC day."""

    days: int = 14
    end: datetime | None = None
    idle_days: int = 7
    top_k: int = 10
    keep_runs: int = 3
    prices: Mapping[str, float] = field(default_factory=lambda: dict(T.DEFAULT_PRICES))

    def window(self) -> Window:
        """The analysed window."""
        if self.idle_days < 1 or self.top_k < 1 or self.keep_runs < 1:
            raise ValueError("idle_days, top_k and keep_runs must be >= 1")
        end = self.end or datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return Window.ending(end, self.days)


@dataclass
class JobReport:
    """What one job run produced."""

    job: str
    run_id: str
    output_rows: dict[str, int]
    seconds: float


@dataclass
class RunReport:
    """A whole invocation: the export and every job."""

    window: Window
    export: ExportResult
    jobs: list[JobReport]
    seconds: float


def spark_session(master: str | None = "local[2]", shuffle_partitions: int = 4,
                  driver_memory: str = "2g", conf: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession for the jobs (SPARK_LOCAL_IP defaults to 127.0.0.1; no UI).

    Each input file (one time slice) becomes its own task: openCostInBytes equals
    maxPartitionBytes, so Spark never packs two slices into one split. ``conf``: more Spark settings
    (e.g. ``spark.executor.memory`` on a standalone cluster).
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    b = SparkSession.builder.appName("guardian-analytics")
    if master:
        b = b.master(master)
    for key, value in (conf or {}).items():
        b = b.config(key, value)
    return (
        b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.files.openCostInBytes", str(128 * 1024 * 1024))
        .config("spark.sql.adaptive.enabled", "true")
        .getOrCreate()
    )


def _to_clickhouse_arrow(table: pa.Table, run_id: str) -> pa.Table:
    cols = {name: table.column(name) for name in table.column_names}
    for name in _DATETIME_COLUMNS:
        if name in cols:
            cols[name] = pc.cast(cols[name], pa.int64()).cast(pa.timestamp("s", tz="UTC"))
    out = pa.table({"run_id": pa.array([run_id] * table.num_rows, pa.string()), **cols})
    return out


def compute(job: str, spark: SparkSession, inputs: dict[str, DataFrame], window: Window,
            settings: JobSettings) -> dict[str, DataFrame]:
    """The output DataFrames of ``job`` (keyed by result table) from the slice inputs."""
    chh, inv = inputs["client_hour"], inputs["inventory"]
    if job == "traffic":
        series, keys = inputs["series_minute"], inputs["series_keys"]
        profile = T.traffic_profile(spark, series, window.start, window.end).cache()
        inputs["profile"] = profile
        forecast = T.traffic_forecast(spark, series, profile, window.start, window.end)
        return {"traffic_profile": T.with_keys(profile, keys),
                "traffic_forecast": T.with_keys(forecast, keys)}
    if job == "lineage":
        return {"topic_lineage": T.lineage(chh)}
    if job == "cost":
        return {"tenant_cost": T.tenant_cost(chh, inv, settings.prices)}
    if job == "idle":
        return {"idle_topics": T.idle_topics(chh, inv, window.end, settings.idle_days)}
    if job == "cross_idc":
        return {"cross_idc_traffic": T.cross_idc_traffic(chh),
                "cross_idc_clients": T.cross_idc_clients(chh, settings.top_k)}
    raise ValueError(f"unknown job {job!r}; choose from {', '.join(JOBS)} or all")


def resolve_jobs(names: Sequence[str]) -> list[str]:
    """Expand 'all' and check names; raise ValueError naming an unknown job."""
    out: list[str] = []
    for n in names:
        for j in JOBS if n == "all" else [n.replace("-", "_")]:
            if j not in JOBS:
                raise ValueError(f"unknown job {n!r}; choose from {', '.join(JOBS)} or all")
            if j not in out:
                out.append(j)
    return out


def run(
    ch: ClickHouse,
    jobs: Sequence[str],
    settings: JobSettings | None = None,
    *,
    spark: SparkSession | None = None,
    work_dir: Path | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> RunReport:
    """Export the window's slices once, run ``jobs`` on them, write results; return the report.

    ``work_dir`` receives the Parquet slices (a temp dir by default). On a multi-host Spark
    cluster it must be storage every executor can read (a shared mount).
    """
    t0 = time.perf_counter()
    settings = settings or JobSettings()
    names = resolve_jobs(jobs)
    window = settings.window()
    own_tmp = None
    if work_dir is None:
        own_tmp = tempfile.TemporaryDirectory(prefix="guardian-analytics-")
        work_dir = Path(own_tmp.name)
    try:
        export = export_slices(ch, window, work_dir / "slices")
        log(f"exported {export.rows} in {export.seconds:.2f}s to {export.root}")
        session = spark if spark is not None else spark_session()
        root = export.root
        read = session.read
        inputs: dict[str, DataFrame] = {
            "series_minute": read.parquet(str(root / "series_minute")),
            "series_keys": read.parquet(str(root / "series_keys.parquet")),
            "client_hour": read.parquet(str(root / "client_hour")).cache(),
            "inventory": read.parquet(str(root / "inventory.parquet")),
        }
        reports = []
        for job in names:
            tj = time.perf_counter()
            run_id = f"{job}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
            rows: dict[str, int] = {}
            for table, df in compute(job, session, inputs, window, settings).items():
                arrow = _to_clickhouse_arrow(df.toArrow(), run_id)
                ch.insert_arrow(table, arrow)
                rows[table] = arrow.num_rows
            secs = time.perf_counter() - tj
            ch.insert_rows(
                "analytics_runs",
                [(run_id, job, window.start, window.end,
                  export.rows.get("series_minute" if job == "traffic" else "client_hour", 0),
                  sum(rows.values()), secs, "spark")],
                ["run_id", "job", "window_start", "window_end", "input_rows", "output_rows", "seconds", "engine"],
            )
            prune_runs(ch, job, keep=settings.keep_runs)
            reports.append(JobReport(job, run_id, rows, secs))
            log(f"{job}: {rows} in {secs:.2f}s (run {run_id})")
        for df in inputs.values():
            df.unpersist()
        return RunReport(window, export, reports, time.perf_counter() - t0)
    finally:
        if own_tmp is not None:
            own_tmp.cleanup()


def _parse_end(s: str | None) -> datetime | None:
    if not s:
        return None
    d = datetime.fromisoformat(s.replace("Z", "+00:00"))
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``python -m analytics_spark.jobs`` and spark-submit."""
    p = argparse.ArgumentParser(prog="analytics_spark.jobs", description=__doc__)
    p.add_argument("--job", action="append", default=[], help=f"{', '.join(JOBS)} or all (repeatable)")
    p.add_argument("--clickhouse-url", default=os.environ.get("GUARDIAN_CLICKHOUSE_URL"))
    p.add_argument("--chdb-path", default=os.environ.get("GUARDIAN_CHDB_PATH", "data/chdb"))
    p.add_argument("--database", default="guardian")
    p.add_argument("--days", type=int, default=14)
    p.add_argument("--end", help="window end, ISO-8601 UTC (default: start of today)")
    p.add_argument("--idle-days", type=int, default=7)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[2])")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="where slices are exported (must be readable by every executor); default: temp dir")
    a = p.parse_args(argv)
    try:
        jobs = resolve_jobs(a.job or ["all"])
        settings = JobSettings(days=a.days, end=_parse_end(a.end), idle_days=a.idle_days, top_k=a.top_k)
        settings.window()
    except ValueError as exc:
        p.error(str(exc))
    ch = connect(a.clickhouse_url, data_path=a.chdb_path, database=a.database)
    # under spark-submit the JVM already runs (PYSPARK_GATEWAY_PORT) and owns the master setting
    master = a.master or (None if "PYSPARK_GATEWAY_PORT" in os.environ else "local[2]")
    spark = spark_session(master)
    spark.sparkContext.setLogLevel("WARN")
    report = run(ch, jobs, settings, spark=spark, work_dir=a.work_dir, log=print)
    print(f"done in {report.seconds:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
