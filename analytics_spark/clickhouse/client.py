"""ClickHouse adapter: one code path for embedded chdb and a ClickHouse server.

Everything goes through clickhouse-connect. ``connect(url=None, data_path=...)`` opens the
embedded engine (``interface="chdb"``) on a data directory; ``connect(url="http://...")`` opens
a server. Both return :class:`ClickHouse`, which runs the same SQL against either.

chdb hosts one engine per process and locks its data directory against other processes:
open it once in the process that owns it (the service, or the analytics CLI when the service
is not running) and share the :class:`ClickHouse` object.

Schema changes are versioned migrations (``MIGRATIONS``) applied by :meth:`ClickHouse.migrate`
at start-up; applied versions are recorded in ``schema_migrations`` so re-running is a no-op.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from analytics_spark.clickhouse.audit_rollups import rollup_statements
from domain.redaction import mask_url, redact, register_secret

if TYPE_CHECKING:  # pyarrow is the analytics extra's: arrow() and insert_arrow() need it, nothing else does
    import pyarrow as pa

log = logging.getLogger(__name__)

DEFAULT_DATABASE = "guardian"
DEFAULT_AUDIT_TTL_DAYS = 30
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class ClickHouseUnavailable(RuntimeError):
    """The ClickHouse engine or server could not be opened (locked data path, bad URL, ...)."""


class ClickHouseBusy(TimeoutError):
    """Another call (e.g. a long analytics run) held the client longer than the caller would wait."""


@dataclass(frozen=True)
class Migration:
    """One schema version: DDL statements run in order, each idempotent on its own."""

    version: int
    name: str
    statements: tuple[str, ...]


# {db} is the database, {ttl} the audit retention in days. Statements use IF NOT EXISTS so a
# migration interrupted half-way can be re-run safely.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "audit records and per-minute rollups",
        (
            """CREATE TABLE IF NOT EXISTS {db}.audit_records (
                ts DateTime64(3, 'UTC'),
                cluster LowCardinality(String),
                broker Int32,
                broker_idc LowCardinality(String),
                client_id String,
                user LowCardinality(String),
                client_ip String,
                client_idc LowCardinality(String),
                api Enum8('produce' = 1, 'fetch' = 2),
                topic LowCardinality(String),
                partition Int32,
                bytes UInt64,
                records UInt64,
                latency_ms Float32,
                src_topic LowCardinality(String) DEFAULT '',
                src_partition Int32 DEFAULT -1,
                src_offset Int64 DEFAULT -1,
                INDEX idx_client client_id TYPE bloom_filter(0.01) GRANULARITY 4,
                INDEX idx_src src_offset TYPE minmax GRANULARITY 4
            ) ENGINE = MergeTree
            PARTITION BY toDate(ts)
            ORDER BY (cluster, topic, api, client_id, ts)
            TTL toDateTime(ts) + INTERVAL {ttl} DAY""",
            """CREATE TABLE IF NOT EXISTS {db}.audit_partition_minute (
                minute DateTime('UTC'),
                cluster LowCardinality(String),
                topic LowCardinality(String),
                partition Int32,
                api Enum8('produce' = 1, 'fetch' = 2),
                bytes SimpleAggregateFunction(sum, UInt64),
                records SimpleAggregateFunction(sum, UInt64),
                requests SimpleAggregateFunction(sum, UInt64),
                latency_sum SimpleAggregateFunction(sum, Float64),
                latency_max SimpleAggregateFunction(max, Float32)
            ) ENGINE = AggregatingMergeTree
            PARTITION BY toDate(minute)
            ORDER BY (cluster, topic, partition, api, minute)
            TTL minute + INTERVAL {ttl} DAY""",
            """CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.audit_partition_minute_mv
            TO {db}.audit_partition_minute AS
            SELECT toStartOfMinute(ts) AS minute, cluster, topic, partition, api,
                   sum(bytes) AS bytes, sum(records) AS records, count() AS requests,
                   sum(toFloat64(latency_ms)) AS latency_sum, max(latency_ms) AS latency_max
            FROM {db}.audit_records
            GROUP BY minute, cluster, topic, partition, api""",
            """CREATE TABLE IF NOT EXISTS {db}.audit_client_minute (
                minute DateTime('UTC'),
                cluster LowCardinality(String),
                topic LowCardinality(String),
                api Enum8('produce' = 1, 'fetch' = 2),
                client_id String,
                user LowCardinality(String),
                client_idc LowCardinality(String),
                broker_idc LowCardinality(String),
                bytes SimpleAggregateFunction(sum, UInt64),
                records SimpleAggregateFunction(sum, UInt64),
                requests SimpleAggregateFunction(sum, UInt64)
            ) ENGINE = AggregatingMergeTree
            PARTITION BY toDate(minute)
            ORDER BY (cluster, topic, api, client_id, user, client_idc, broker_idc, minute)
            TTL minute + INTERVAL {ttl} DAY""",
            """CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.audit_client_minute_mv
            TO {db}.audit_client_minute AS
            SELECT toStartOfMinute(ts) AS minute, cluster, topic, api, client_id, user,
                   client_idc, broker_idc,
                   sum(bytes) AS bytes, sum(records) AS records, count() AS requests
            FROM {db}.audit_records
            GROUP BY minute, cluster, topic, api, client_id, user, client_idc, broker_idc""",
        ),
    ),
    Migration(
        2,
        "ingest offsets and rejected records",
        (
            """CREATE TABLE IF NOT EXISTS {db}.audit_ingest_offsets (
                src_topic String,
                src_partition Int32,
                next_offset Int64,
                accepted UInt64,
                rejected UInt64,
                committed_at DateTime64(3, 'UTC') DEFAULT now64(3)
            ) ENGINE = MergeTree ORDER BY (src_topic, src_partition, next_offset)""",
            """CREATE TABLE IF NOT EXISTS {db}.audit_rejects (
                src_topic String,
                src_partition Int32,
                src_offset Int64,
                reason String,
                raw String,
                rejected_at DateTime64(3, 'UTC') DEFAULT now64(3)
            ) ENGINE = ReplacingMergeTree ORDER BY (src_topic, src_partition, src_offset)""",
        ),
    ),
    Migration(
        3,
        "topic inventory and analytics results",
        (
            """CREATE TABLE IF NOT EXISTS {db}.topic_inventory (
                cluster String,
                topic String,
                pool String,
                tenant String,
                partitions UInt32,
                replication_factor UInt16,
                size_bytes UInt64,
                updated_at DateTime64(3, 'UTC') DEFAULT now64(3)
            ) ENGINE = ReplacingMergeTree(updated_at) ORDER BY (cluster, topic)""",
            """CREATE TABLE IF NOT EXISTS {db}.analytics_runs (
                run_id String,
                job String,
                window_start DateTime('UTC'),
                window_end DateTime('UTC'),
                input_rows UInt64,
                output_rows UInt64,
                seconds Float64,
                finished_at DateTime64(3, 'UTC') DEFAULT now64(3)
            ) ENGINE = MergeTree ORDER BY (job, finished_at)""",
            """CREATE TABLE IF NOT EXISTS {db}.traffic_profile (
                run_id String,
                cluster String,
                topic String,
                partition Int32,
                direction Enum8('in' = 1, 'out' = 2),
                hour_of_week UInt8,
                samples UInt32,
                p50_bps Float64,
                p95_bps Float64,
                max_bps Float64,
                mean_bps Float64
            ) ENGINE = MergeTree ORDER BY (run_id, cluster, topic, partition, direction, hour_of_week)""",
            """CREATE TABLE IF NOT EXISTS {db}.traffic_forecast (
                run_id String,
                cluster String,
                topic String,
                partition Int32,
                direction Enum8('in' = 1, 'out' = 2),
                days UInt16,
                mean_daily_bytes Float64,
                trend_bytes_per_day Float64,
                forecast_day Date,
                forecast_daily_bytes Float64,
                forecast_peak_bps Float64,
                forecast_peak_hour UInt8
            ) ENGINE = MergeTree ORDER BY (run_id, cluster, topic, partition, direction)""",
            """CREATE TABLE IF NOT EXISTS {db}.topic_lineage (
                run_id String,
                cluster String,
                topic String,
                role Enum8('producer' = 1, 'consumer' = 2),
                client_id String,
                user String,
                client_idc String,
                bytes UInt64,
                records UInt64,
                requests UInt64,
                first_seen DateTime('UTC'),
                last_seen DateTime('UTC')
            ) ENGINE = MergeTree ORDER BY (run_id, cluster, topic, role, client_id, user, client_idc)""",
            """CREATE TABLE IF NOT EXISTS {db}.tenant_cost (
                run_id String,
                cluster String,
                pool String,
                tenant String,
                topics UInt32,
                partitions UInt64,
                replicas UInt64,
                bytes_in UInt64,
                bytes_out UInt64,
                storage_bytes UInt64,
                cost Float64
            ) ENGINE = MergeTree ORDER BY (run_id, cluster, pool, tenant)""",
            """CREATE TABLE IF NOT EXISTS {db}.idle_topics (
                run_id String,
                cluster String,
                topic String,
                pool String,
                tenant String,
                last_produce Nullable(DateTime('UTC')),
                last_fetch Nullable(DateTime('UTC')),
                no_producer UInt8,
                no_consumer UInt8
            ) ENGINE = MergeTree ORDER BY (run_id, cluster, topic)""",
            """CREATE TABLE IF NOT EXISTS {db}.cross_idc_traffic (
                run_id String,
                cluster String,
                src_idc String,
                dst_idc String,
                bytes UInt64,
                records UInt64
            ) ENGINE = MergeTree ORDER BY (run_id, cluster, src_idc, dst_idc)""",
            """CREATE TABLE IF NOT EXISTS {db}.cross_idc_clients (
                run_id String,
                cluster String,
                src_idc String,
                dst_idc String,
                client_id String,
                user String,
                topic String,
                bytes UInt64,
                rank UInt32
            ) ENGINE = MergeTree ORDER BY (run_id, cluster, src_idc, dst_idc, rank)""",
        ),
    ),
    Migration(
        4,
        "1-minute metric rollups per disk and per partition (collector history that survives restarts)",
        (
            """CREATE TABLE IF NOT EXISTS {db}.disk_rollups (
                minute DateTime('UTC'),
                cluster LowCardinality(String),
                broker Int32,
                log_dir String,
                samples UInt32,
                util_avg Float64,
                util_max Float64,
                await_ms_avg Float64,
                read_bytes_per_s_avg Float64,
                write_bytes_per_s_avg Float64
            ) ENGINE = ReplacingMergeTree PARTITION BY toDate(minute)
            ORDER BY (cluster, broker, log_dir, minute) TTL minute + INTERVAL 90 DAY""",
            """CREATE TABLE IF NOT EXISTS {db}.partition_rollups (
                minute DateTime('UTC'),
                cluster LowCardinality(String),
                topic String,
                partition Int32,
                samples UInt32,
                bytes_in_per_s_avg Float64,
                bytes_in_per_s_max Float64,
                bytes_out_per_s_avg Float64,
                messages_in_per_s_avg Float64,
                disk_read_bytes_per_s_avg Float64
            ) ENGINE = ReplacingMergeTree PARTITION BY toDate(minute)
            ORDER BY (cluster, topic, partition, minute) TTL minute + INTERVAL 90 DAY""",
        ),
    ),
    Migration(
        5,
        "which engine (spark or clickhouse-sql) produced an analytics run",
        (
            """ALTER TABLE {db}.analytics_runs ADD COLUMN IF NOT EXISTS engine LowCardinality(String) DEFAULT ''""",
        ),
    ),
    Migration(
        6,
        "the client.rack a fetch carried (KIP-392 nearest-replica reads)",
        (
            """ALTER TABLE {db}.audit_records ADD COLUMN IF NOT EXISTS client_rack LowCardinality(String) DEFAULT ''""",
        ),
    ),
    Migration(
        7,
        "audit rollups recomputed from the raw table (exactly once across a killed ingest), read through FINAL views",
        (
            # the materialized views committed their part apart from the raw part: a killed insert lost rows
            "DROP VIEW IF EXISTS {db}.audit_partition_minute_mv",
            "DROP VIEW IF EXISTS {db}.audit_client_minute_mv",
            """CREATE TABLE IF NOT EXISTS {db}.audit_partition_rollup (
                minute DateTime('UTC'),
                cluster LowCardinality(String),
                topic LowCardinality(String),
                partition Int32,
                api Enum8('produce' = 1, 'fetch' = 2),
                bytes UInt64,
                records UInt64,
                requests UInt64,
                latency_sum Float64,
                latency_max Float32
            ) ENGINE = ReplacingMergeTree(requests)
            PARTITION BY toDate(minute)
            ORDER BY (cluster, topic, partition, api, minute)
            TTL minute + INTERVAL {ttl} DAY""",
            """CREATE TABLE IF NOT EXISTS {db}.audit_client_rollup (
                minute DateTime('UTC'),
                cluster LowCardinality(String),
                topic LowCardinality(String),
                api Enum8('produce' = 1, 'fetch' = 2),
                client_id String,
                user LowCardinality(String),
                client_idc LowCardinality(String),
                broker_idc LowCardinality(String),
                bytes UInt64,
                records UInt64,
                requests UInt64
            ) ENGINE = ReplacingMergeTree(requests)
            PARTITION BY toDate(minute)
            ORDER BY (cluster, topic, api, client_id, user, client_idc, broker_idc, minute)
            TTL minute + INTERVAL {ttl} DAY""",
            # the old aggregate tables go (a re-run finds the views here: DROP TABLE drops those too) ...
            "DROP TABLE IF EXISTS {db}.audit_partition_minute",
            "DROP TABLE IF EXISTS {db}.audit_client_minute",
            # ... and the rollups are rebuilt from the raw table, which also repairs rows the views had lost
            *rollup_statements("{db}", "1"),
            """CREATE VIEW IF NOT EXISTS {db}.audit_partition_minute AS
            SELECT minute, cluster, topic, partition, api, bytes, records, requests, latency_sum, latency_max
            FROM {db}.audit_partition_rollup FINAL""",
            """CREATE VIEW IF NOT EXISTS {db}.audit_client_minute AS
            SELECT minute, cluster, topic, api, client_id, user, client_idc, broker_idc, bytes, records, requests
            FROM {db}.audit_client_rollup FINAL""",
        ),
    ),
)


class ClickHouse:
    """A clickhouse-connect client bound to one Guardian database.

    Thread-safe: calls are serialised with a lock (a chdb handle must not interleave queries).
    """

    def __init__(self, client: Client, database: str = DEFAULT_DATABASE, *, embedded: bool = False):
        if not _IDENT.match(database):
            raise ValueError(f"invalid database name {database!r}")
        self.client = client
        self.database = database
        self.embedded = embedded
        self._lock = threading.RLock()

    # -- plumbing ---------------------------------------------------------------------------
    def table(self, name: str) -> str:
        """Fully qualified name of ``name`` in this database."""
        if not _IDENT.match(name):
            raise ValueError(f"invalid table name {name!r}")
        return f"{self.database}.{name}"

    def command(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        """Run a statement that returns no rows (DDL, INSERT ... SELECT)."""
        with self._lock:
            return self.client.command(sql, parameters=parameters)

    def rows(self, sql: str, parameters: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a query and return its rows as tuples."""
        with self._lock:
            return [tuple(r) for r in self.client.query(sql, parameters=parameters).result_rows]

    def records(self, sql: str, parameters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run a query and return its rows as dicts keyed by column name."""
        with self._lock:
            res = self.client.query(sql, parameters=parameters)
            return [dict(zip(res.column_names, row, strict=True)) for row in res.result_rows]

    def scalar(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        """Run a query returning one value."""
        rows = self.rows(sql, parameters)
        return rows[0][0] if rows else None

    def arrow(self, sql: str, parameters: dict[str, Any] | None = None) -> pa.Table:
        """Run a query and return an Arrow table (strings as str, not bytes)."""
        with self._lock:
            return self.client.query_arrow(sql, parameters=parameters, use_strings=True)

    def insert_rows(self, table: str, rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> None:
        """Insert ``rows`` (one insert, one block) into ``table`` of this database."""
        if not rows:
            return
        with self._lock:
            self.client.insert(table, list(rows), column_names=list(columns), database=self.database)

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Insert an Arrow table whose column names match ``table``'s."""
        if data.num_rows == 0:
            return
        with self._lock:
            self.client.insert_arrow(table, data, database=self.database)

    def close(self) -> None:
        """Close the client (for chdb: releases the engine once every client is closed)."""
        with self._lock:
            self.client.close()

    @contextmanager
    def waiting_at_most(self, seconds: float) -> Iterator[None]:
        """Hold the client for a block of calls, or raise :class:`ClickHouseBusy` if another call holds it
        longer than ``seconds`` (for loops that must not stall behind a long analytics query)."""
        if not self._lock.acquire(timeout=seconds):
            raise ClickHouseBusy(f"ClickHouse busy for more than {seconds:g} s")
        try:
            yield
        finally:
            self._lock.release()

    # -- schema -----------------------------------------------------------------------------
    def applied_versions(self) -> list[int]:
        """Schema versions already applied, ascending."""
        rows = self.rows(f"SELECT DISTINCT version FROM {self.table('schema_migrations')} ORDER BY version")
        return [int(r[0]) for r in rows]

    def migrate(
        self,
        migrations: Iterable[Migration] = MIGRATIONS,
        *,
        audit_ttl_days: int = DEFAULT_AUDIT_TTL_DAYS,
    ) -> list[int]:
        """Apply every migration not yet recorded; return the versions applied now.

        Idempotent: a second call applies nothing. A migration is recorded only after all its
        statements succeeded; its statements are themselves idempotent, so a crash half-way
        is repaired by the next call.
        """
        if audit_ttl_days < 1:
            raise ValueError("audit_ttl_days must be >= 1")
        self.command(f"CREATE DATABASE IF NOT EXISTS {self.database}")
        self.command(
            f"""CREATE TABLE IF NOT EXISTS {self.table('schema_migrations')} (
                version UInt32, name String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
            ) ENGINE = ReplacingMergeTree ORDER BY version"""
        )
        done = set(self.applied_versions())
        applied: list[int] = []
        ordered = sorted(migrations, key=lambda m: m.version)
        if len({m.version for m in ordered}) != len(ordered):
            raise ValueError("duplicate migration versions")
        for m in ordered:
            if m.version in done:
                continue
            for stmt in m.statements:
                self.command(stmt.format(db=self.database, ttl=int(audit_ttl_days)))
            self.insert_rows("schema_migrations", [(m.version, m.name)], ["version", "name"])
            applied.append(m.version)
            log.info("applied schema migration %d (%s) to %s", m.version, m.name, self.database)
        return applied


def connect(
    url: str | None = None,
    *,
    data_path: str | Path | None = None,
    database: str = DEFAULT_DATABASE,
    migrate: bool = True,
    audit_ttl_days: int = DEFAULT_AUDIT_TTL_DAYS,
) -> ClickHouse:
    """Open ClickHouse: a server when ``url`` is given (http(s)://user:pw@host:port), else chdb.

    With chdb, ``data_path`` is the engine's data directory (created if missing). Schema
    migrations are applied unless ``migrate`` is false. Raises :class:`ClickHouseUnavailable`
    with the reason when the engine or server cannot be opened.
    """
    if url:
        for form in _url_password_forms(url):  # whatever quotes the URL later (a driver error) is masked too
            register_secret(form)
    try:
        if url:
            client = clickhouse_connect.get_client(dsn=url)
            embedded = False
        else:
            if data_path is None:
                raise ClickHouseUnavailable("embedded chdb needs a data_path (or give a server url)")
            path = Path(data_path)
            path.mkdir(parents=True, exist_ok=True)
            try:
                client = clickhouse_connect.get_client(interface="chdb", path=str(path))
            except ImportError as exc:  # chdb ships with the analytics extra
                raise ClickHouseUnavailable(
                    f"embedded ClickHouse needs chdb ({exc}): pip install 'kafka-guardian[analytics]', "
                    "or set [clickhouse] mode = \"url\" or \"off\"") from exc
            embedded = True
    except ClickHouseUnavailable:
        raise
    except (ClickHouseError, OSError) as exc:
        where = mask_url(url) if url else f"chdb data path {data_path}"
        raise ClickHouseUnavailable(
            f"cannot open ClickHouse at {where}: {redact(str(exc))}. (chdb locks its data path: is another "
            "Guardian process using it?)"
        ) from exc
    ch = ClickHouse(client, database, embedded=embedded)
    if migrate:
        ch.migrate(audit_ttl_days=audit_ttl_days)
    return ch


def _url_password_forms(url: str) -> tuple[str, ...]:
    """The password of ``url``'s userinfo as written and percent-decoded (empty without one)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return ()
    return (password, unquote(password)) if password else ()
