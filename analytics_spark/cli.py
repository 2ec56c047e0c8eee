"""``guardian analytics …`` commands: seed, run, plot, ingest, status.

The lead mounts these with ``register(analytics_app)``. Every command opens ClickHouse itself:
``--clickhouse-url`` (or GUARDIAN_CLICKHOUSE_URL) for a server, else embedded chdb on
``--chdb-path`` (or GUARDIAN_CHDB_PATH, default ``data/chdb``). chdb locks its directory, so
these commands cannot share it with a running Guardian service: point them at a server then.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import typer

from analytics_spark.clickhouse import ClickHouse, ClickHouseUnavailable, connect

_URL = typer.Option(None, "--clickhouse-url", envvar="GUARDIAN_CLICKHOUSE_URL",
                    help="ClickHouse server DSN (http://user:pw@host:8123); default: embedded chdb")
_PATH = typer.Option(Path("data/chdb"), "--chdb-path", envvar="GUARDIAN_CHDB_PATH",
                     help="chdb data directory (embedded mode)")
_DB = typer.Option("guardian", "--database", help="ClickHouse database")


def _open(url: str | None, path: Path, database: str) -> ClickHouse:
    try:
        return connect(url, data_path=path, database=database)
    except (ClickHouseUnavailable, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _end(s: str | None) -> datetime | None:
    if not s:
        return None
    try:
        d = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        typer.echo(f"error: --end {s!r} is not an ISO-8601 time", err=True)
        raise typer.Exit(2) from None
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def register(app: typer.Typer) -> None:
    """Add the analytics commands to ``app`` (mounted as ``guardian analytics``)."""

    @app.command("seed")
    def seed(
        rows: int = typer.Option(200_000, min=1, help="audit records to generate"),
        days: int = typer.Option(14, min=1, help="window length in days"),
        end: str | None = typer.Option(None, help="window end, ISO-8601 UTC (default: start of today)"),
        seed: int = typer.Option(7, help="catalogue seed"),
        clickhouse_url: str | None = _URL, chdb_path: Path = _PATH, database: str = _DB,
    ) -> None:
        """Generate a deterministic synthetic audit data set (and topic inventory)."""
        from analytics_spark.seed import seed_audit

        ch = _open(clickhouse_url, chdb_path, database)
        import time

        t0 = time.perf_counter()
        cat = seed_audit(ch, rows=rows, days=days, end=_end(end), seed=seed)
        typer.echo(f"seeded {rows} audit rows over {days} days, {len(cat.topics)} topics, "
                   f"{len(cat.clients)} clients in {time.perf_counter() - t0:.1f}s")

    @app.command("run")
    def run_cmd(
        jobs: list[str] = typer.Argument(..., help="traffic, lineage, cost, idle, cross_idc or all"),
        days: int = typer.Option(14, min=1), end: str | None = typer.Option(None),
        idle_days: int = typer.Option(7, min=1), top_k: int = typer.Option(10, min=1),
        master: str = typer.Option("local[2]", help="Spark master"),
        shuffle_partitions: int = typer.Option(4, min=1),
        work_dir: Path | None = typer.Option(None, help="slice export dir, readable by every executor"),
        keep_runs: int = typer.Option(3, min=1, help="result runs kept per job"),
        engine: str = typer.Option("spark", help="spark (local or --master) or sql (ClickHouse alone, "
                                                 "what the service's scheduled job runs)"),
        clickhouse_url: str | None = _URL, chdb_path: Path = _PATH, database: str = _DB,
    ) -> None:
        """Run analytics jobs over the last DAYS days and write their results to ClickHouse."""
        from analytics_spark.jobs import JobSettings, resolve_jobs, run, spark_session

        try:
            names = resolve_jobs(jobs)
            if engine not in ("spark", "sql"):
                raise ValueError(f"unknown engine {engine!r}; choose spark or sql")
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        ch = _open(clickhouse_url, chdb_path, database)
        settings = JobSettings(days=days, end=_end(end), idle_days=idle_days, top_k=top_k,
                               keep_runs=keep_runs)
        if engine == "sql":
            from analytics_spark.sql.engine import run_sql

            sql_report = run_sql(ch, names, settings, log=typer.echo)
            typer.echo(f"window {sql_report.window.start:%Y-%m-%d %H:%M} – {sql_report.window.end:%Y-%m-%d %H:%M} "
                       f"UTC; total {sql_report.seconds:.1f}s (clickhouse-sql)")
            return
        spark = spark_session(master, shuffle_partitions)
        spark.sparkContext.setLogLevel("ERROR")
        report = run(ch, names, settings, spark=spark, work_dir=work_dir, log=typer.echo)
        typer.echo(f"window {report.window.start:%Y-%m-%d %H:%M} – {report.window.end:%Y-%m-%d %H:%M} UTC; "
                   f"total {report.seconds:.1f}s")

    @app.command("plot")
    def plot_cmd(
        topic: str = typer.Argument(...), cluster: str = typer.Option("c1"),
        partition: int = typer.Option(-1, help="-1: the whole topic"),
        direction: str = typer.Option("in", help="in (produce) or out (fetch)"),
        out: Path = typer.Option(Path("out/analytics/profile.png")),
        clickhouse_url: str | None = _URL, chdb_path: Path = _PATH, database: str = _DB,
    ) -> None:
        """PNG of a topic's modelled weekly profile against its observed traffic."""
        from analytics_spark.plot import plot_profile

        ch = _open(clickhouse_url, chdb_path, database)
        try:
            s = plot_profile(ch, cluster=cluster, topic=topic, partition=partition, direction=direction,
                             out=out)
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"wrote {s.path} (model run {s.run_id}, {s.observed_minutes} observed minutes)")

    @app.command("ingest")
    def ingest_cmd(
        bootstrap: str | None = typer.Option(None, help="Kafka bootstrap servers host:port[,...]"),
        endpoints_file: Path | None = typer.Option(None, help="endpoints document: the --cluster's bootstrap "
                                                               "servers and `security` object"),
        cluster: str | None = typer.Option(None, help="cluster of --endpoints-file"),
        security_protocol: str | None = typer.Option(None, help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
        sasl_mechanism: str | None = typer.Option(None, help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
        sasl_username: str | None = typer.Option(None),
        sasl_password_file: str | None = typer.Option(None, help="file holding the SASL password"),
        ssl_cafile: str | None = typer.Option(None, help="CA certificate file (PEM)"),
        topic: str = typer.Option("__guardian_audit", help="audit topic"),
        batch_size: int = typer.Option(5000, min=1),
        idle_polls: int = typer.Option(0, min=0, help="exit after N empty polls (0: never)"),
        duration: float = typer.Option(0.0, min=0.0, help="exit after this many seconds (0: never)"),
        snapshot: list[Path] = typer.Option([], "--snapshot",
                                            help="guardian.snapshot/v1 files giving each broker's IDC, "
                                                 "for records without broker_idc (repeatable)"),
        clickhouse_url: str | None = _URL, chdb_path: Path = _PATH, database: str = _DB,
    ) -> None:
        """Consume the audit topic into ClickHouse (exactly once across restarts)."""
        from analytics_spark.clickhouse.ingest import (
            AuditIngestor,
            ClickHouseIngestStore,
            KafkaAuditSource,
            broker_idc_from_snapshots,
        )

        try:
            lookup = broker_idc_from_snapshots(snapshot) if snapshot else None
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        from kafkaio.endpoints import EndpointsError, load_endpoints_file
        from kafkaio.security import SecurityError, security_from_options

        try:
            if endpoints_file is not None:
                if bootstrap or not cluster:
                    raise EndpointsError("--endpoints-file needs --cluster and no --bootstrap")
                eps = load_endpoints_file(endpoints_file, cluster)
                bootstrap, security = eps.bootstrap_servers, eps.security
            elif not bootstrap:
                raise EndpointsError("give --bootstrap (with the security flags your cluster needs) or "
                                     "--endpoints-file and --cluster")
            else:
                security = security_from_options(security_protocol, sasl_mechanism, sasl_username,
                                                 sasl_password_file, ssl_cafile=ssl_cafile)
        except (EndpointsError, SecurityError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        ch = _open(clickhouse_url, chdb_path, database)
        src = KafkaAuditSource(bootstrap, topic, **security.client_kwargs())
        ing = AuditIngestor(src, ClickHouseIngestStore(ch), batch_size=batch_size, broker_idc=lookup)
        import signal
        import time

        stopping: list[bool] = []
        deadline = time.monotonic() + duration if duration else None
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        try:
            stats = ing.run(
                idle_polls_before_exit=idle_polls or None,
                stop=lambda: bool(stopping) or (deadline is not None and time.monotonic() >= deadline),
            )
        except KeyboardInterrupt:
            stats = ing.stats
        finally:
            src.close()
        typer.echo(f"accepted {stats.accepted}, rejected {stats.rejected}, "
                   f"duplicates skipped {stats.duplicates_skipped} in {stats.batches} batches")

    @app.command("model")
    def model_cmd(
        out: Path = typer.Option(..., help="JSON file: topic -> expected peak bytes/s in"),
        cluster: str | None = typer.Option(None, help="only this cluster's topics"),
        clickhouse_url: str | None = _URL, chdb_path: Path = _PATH, database: str = _DB,
    ) -> None:
        """Write the traffic model for `guardian plan preallocate --model` (latest traffic run)."""
        from analytics_spark.clickhouse.store import traffic_model

        ch = _open(clickhouse_url, chdb_path, database)
        model = traffic_model(ch, cluster)
        if not model:
            typer.echo("error: no traffic model yet: run `guardian analytics run traffic` first", err=True)
            raise typer.Exit(1)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(model, indent=2, sort_keys=True))
        typer.echo(f"wrote {out}: {len(model)} topics")

    @app.command("status")
    def status_cmd(
        topic: str = typer.Option("__guardian_audit", help="audit topic"),
        clickhouse_url: str | None = _URL, chdb_path: Path = _PATH, database: str = _DB,
    ) -> None:
        """Latest run of every job, audit row count and ingest progress, as JSON."""
        from analytics_spark.clickhouse.ingest import ingest_status

        ch = _open(clickhouse_url, chdb_path, database)
        runs = ch.rows(
            f"SELECT job, argMax(run_id, finished_at), toString(max(finished_at)), argMax(output_rows, "
            f"finished_at) FROM {ch.table('analytics_runs')} GROUP BY job ORDER BY job"
        )
        typer.echo(json.dumps({
            "database": ch.database,
            "audit_rows": int(ch.scalar(f"SELECT count() FROM {ch.table('audit_records')}")),
            "runs": [{"job": j, "run_id": r, "finished_at": f, "output_rows": int(n)} for j, r, f, n in runs],
            "ingest": ingest_status(ch, topic),
        }, indent=2))


def main() -> None:  # pragma: no cover - convenience entry point before the lead mounts it
    """Run the analytics commands standalone: ``python -m analytics_spark.cli``."""
    app = typer.Typer(help="Guardian audit analytics", no_args_is_help=True)
    register(app)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
