"""The leader's scheduled audit analytics: ingest, then models, then a record of the run.

One pass (``[analytics] interval_s``, leader-only through :class:`~controlplane.service.scheduler.LeaderScheduler`):

0. **inventory** — one ``topic_inventory`` row per topic of every cluster's latest snapshot (pool, tenant
   from ``tenant_pattern``, partitions, replication factor, storage bytes), so cost and idle-topic models
   work on a real cluster (:mod:`analytics_spark.clickhouse.inventory`);
1. **ingest** — for every registered cluster, with the cluster's Kafka security settings, consume its audit
   topic into ClickHouse from the committed offsets until it is drained (two empty polls) or ``ingest_max_s``
   passes; offsets are kept per cluster (``cluster/topic``), so a restart or a new leader neither loses nor
   duplicates records. Broker IDCs missing from records are filled from the cluster's latest snapshot. A
   cluster whose audit topic cannot be read is recorded and skipped; the models still run;
2. **models** — the configured jobs over the ``days``-day window ending at the newest ingested audit
   minute (capped at one day past this node's clock; the current time when nothing was ingested yet:
   audit time is the brokers' clock, and kafkasim's runs ahead of the wall clock), with the ClickHouse
   SQL engine (default) or a local Spark session kept for the process;
3. **record** — the run (start, duration per phase, records ingested, rows written per job, run ids) is
   kept as :attr:`AnalyticsJob.last`, exported on ``/metrics`` (``guardian_analytics_*``) and served by
   ``GET /api/v1/analytics/runs`` beside the ``analytics_runs`` table.

A pass that fails is recorded with its error (and counted as ``status="failed"``), then re-raised so the
scheduler counts it as a loop error too.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from analytics_spark.clickhouse.ingest import AuditIngestor, ClickHouseIngestStore, KafkaAuditSource
from analytics_spark.clickhouse.inventory import write_inventory
from controlplane.config import AnalyticsConf
from controlplane.service.context import ServiceContext
from controlplane.state.registration import endpoints_of
from kafkaio.endpoints import ClusterEndpoints

log = logging.getLogger(__name__)
MAX_CLOCK_AHEAD = timedelta(days=1)

SourceFactory = Callable[[ClusterEndpoints, str], Any]
"""(the cluster's endpoints, audit topic) -> an ``AuditSource`` (default: kafka-python's consumer connecting
with the cluster's security settings)."""


def _kafka_source(endpoints: ClusterEndpoints, topic: str) -> Any:
    return KafkaAuditSource(endpoints.bootstrap_servers, topic, client_id="guardian-analytics-ingest",
                            metadata_timeout_s=2.0, **endpoints.security.client_kwargs())


class AnalyticsJob:
    """The scheduler's ``Job.run`` for ``analytics``; one pass at a time (thread-safe)."""

    def __init__(self, ch: Any, conf: AnalyticsConf, *, source: SourceFactory | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.ch = ch
        self.conf = conf
        self.source = source or _kafka_source
        self.clock = clock or (lambda: datetime.now(UTC))
        self.last: dict[str, Any] | None = None
        self.runs = 0
        self._spark: Any = None
        self._lock = threading.Lock()

    def __call__(self, ctx: ServiceContext) -> dict[str, Any]:
        """One pass: ingest every cluster, run the models, record the run; returns the record."""
        with self._lock:
            started = self.clock()
            t0 = time.perf_counter()
            record: dict[str, Any] = {"started_at": started.isoformat(), "engine": self.conf.engine,
                                      "ingest": {}, "jobs": [], "error": ""}
            try:
                record["inventory_rows"] = self._inventory(ctx)
                if self.conf.ingest:
                    record["ingest"] = self._ingest_all(ctx)
                record["ingest_seconds"] = round(time.perf_counter() - t0, 3)
                t1 = time.perf_counter()
                record.update(self._models())
                record["models_seconds"] = round(time.perf_counter() - t1, 3)
            except Exception as exc:
                record["error"] = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                record["seconds"] = round(time.perf_counter() - t0, 3)
                record["finished_at"] = self.clock().isoformat()
                self.last = record
                self.runs += 1
                self._export(ctx, record)
            log.info("analytics: ingested %d records, %d result rows in %.1f s",
                     sum(i.get("accepted", 0) for i in record["ingest"].values()), record["output_rows"],
                     record["seconds"])
            return record

    # ------------------------------------------------------------------ inventory
    def _inventory(self, ctx: ServiceContext) -> int:
        """Topic inventory rows of every cluster's latest snapshot (:mod:`analytics_spark.clickhouse.inventory`)."""
        names = ctx.store.read(lambda s: sorted(s["clusters"]))
        snapshots = [s for s in (ctx.snapshots.get(n) for n in names) if s is not None]
        return write_inventory(self.ch, snapshots, re.compile(self.conf.tenant_pattern))

    # ------------------------------------------------------------------ ingest
    def _ingest_all(self, ctx: ServiceContext) -> dict[str, dict[str, Any]]:
        clusters = ctx.store.read(lambda s: {n: dict(c) for n, c in s["clusters"].items()})
        out: dict[str, dict[str, Any]] = {}
        for name, record in sorted(clusters.items()):
            t0 = time.perf_counter()
            try:
                src = self.source(endpoints_of(name, record), self.conf.audit_topic)
            except Exception as exc:
                out[name] = {"error": f"cannot open the audit topic: {exc}"}
                continue
            ing = AuditIngestor(src, ClickHouseIngestStore(self.ch, namespace=name), batch_size=5000,
                                poll_timeout_s=0.2, broker_idc=_broker_idc(ctx))
            deadline = time.monotonic() + self.conf.ingest_max_s

            def past(d: float = deadline) -> bool:
                return time.monotonic() >= d

            try:
                stats = ing.run(idle_polls_before_exit=2, stop=past)
                out[name] = {"accepted": stats.accepted, "rejected": stats.rejected,
                             "duplicates_skipped": stats.duplicates_skipped, "batches": stats.batches}
            except Exception as exc:  # one unreachable cluster must not stop the others or the models
                log.warning("analytics: ingest of %s failed: %s", name, exc)
                out[name] = {"accepted": ing.stats.accepted, "rejected": ing.stats.rejected,
                             "error": f"{type(exc).__name__}: {exc}"}
            finally:
                try:
                    src.close()
                except Exception:
                    log.debug("closing the audit source failed", exc_info=True)
            out[name]["seconds"] = round(time.perf_counter() - t0, 3)
        return out

    # ------------------------------------------------------------------ models
    def window_end(self) -> datetime:
        """The newest rolled-up audit minute + 1 h (the window floors it to the hour), at most one day
        past this node's clock; the clock when there is no audit data."""
        now = self.clock()
        newest = self.ch.scalar(f"SELECT toUnixTimestamp(max(minute)) FROM {self.ch.table('audit_partition_minute')}")
        if not newest:
            return now
        end = datetime.fromtimestamp(int(newest), tz=UTC) + timedelta(hours=1)
        return min(end, now + MAX_CLOCK_AHEAD)

    def _models(self) -> dict[str, Any]:
        from analytics_spark.jobs import JobSettings, resolve_jobs

        c = self.conf
        settings = JobSettings(days=c.days, end=self.window_end(), idle_days=c.idle_days, top_k=c.top_k,
                               keep_runs=c.keep_runs)
        names = resolve_jobs(list(c.jobs))
        if c.engine == "spark":
            from analytics_spark.jobs import run, spark_session

            if self._spark is None:
                self._spark = spark_session(c.spark_master, shuffle_partitions=2, driver_memory="1g")
                self._spark.sparkContext.setLogLevel("ERROR")
            report: Any = run(self.ch, names, settings, spark=self._spark)
        else:
            from analytics_spark.sql.engine import run_sql

            report = run_sql(self.ch, names, settings)
        jobs = [{"job": j.job, "run_id": j.run_id, "output_rows": dict(j.output_rows), "seconds": round(j.seconds, 3)}
                for j in report.jobs]
        return {"window": {"start": report.window.start.isoformat(), "end": report.window.end.isoformat()},
                "jobs": jobs, "output_rows": sum(sum(j["output_rows"].values()) for j in jobs)}

    def _export(self, ctx: ServiceContext, record: dict[str, Any]) -> None:
        m = ctx.metrics
        m.analytics_runs.labels("failed" if record["error"] else "ok").inc()
        m.analytics_last_run.set(self.clock().timestamp())
        m.analytics_last_seconds.labels("total").set(record["seconds"])
        for phase in ("ingest", "models"):
            if f"{phase}_seconds" in record:
                m.analytics_last_seconds.labels(phase).set(record[f"{phase}_seconds"])
        for stats in record["ingest"].values():
            m.analytics_ingested.labels("accepted").inc(stats.get("accepted", 0))
            m.analytics_ingested.labels("rejected").inc(stats.get("rejected", 0))
        for j in record["jobs"]:
            m.analytics_output_rows.labels(j["job"]).set(sum(j["output_rows"].values()))
        record.setdefault("output_rows", 0)

    def close(self) -> None:
        """Stop the Spark session if this job started one."""
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


def _broker_idc(ctx: ServiceContext) -> Callable[[str, int], str | None]:
    """(cluster, broker) -> IDC from the latest snapshot of the cluster (None when unknown)."""

    def lookup(cluster: str, broker: int) -> str | None:
        snap = ctx.snapshots.get(cluster)
        b = snap.index.broker_by_id.get(broker) if snap is not None else None
        return b.idc if b is not None and b.idc else None

    return lookup
