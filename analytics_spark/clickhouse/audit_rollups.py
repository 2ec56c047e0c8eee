"""The audit rollups the models read — per partition and per client, per minute — derived from the raw table.

Goal: ``audit_partition_minute`` and ``audit_client_minute`` hold exactly the totals of ``audit_records``, also
after the ingest process is killed (-9) at any point and rerun.

Method: a rollup row is never an increment. For every (cluster, minute) a batch touches, :func:`roll_up` recomputes
that minute's groups *whole* from ``audit_records`` (``INSERT … SELECT … GROUP BY``) into a ``ReplacingMergeTree``
whose version is the group's raw row count (``requests``); the names the models read are views with ``FINAL``.
Raw rows are only ever added to a minute (TTL drops whole old days), so of two computations of a group the one
that saw more rows has the larger version and wins: a re-run, a race between two ingestors or a partial insert
of the rollup itself can only be replaced by a more complete row, never double-count. The ingest calls
:func:`roll_up` after storing a batch and before committing its offsets, and on start for every stored but
uncommitted row (:func:`roll_up_stored`); so a kill anywhere leaves rows whose minutes are recomputed on rerun.

Why not what ClickHouse offers for increments: materialized views commit the raw part and the view's part
separately — a kill between them (measured on chdb: a killed 20,000-row insert left the raw table 40,000 rows
ahead of both rollups) loses the rows from the rollups for good, as the rerun skips the stored raw rows. Insert
deduplication tokens (``non_replicated_deduplication_window`` + ``deduplicate_blocks_in_dependent_materialized_views``)
only help when the retry sends the *same* blocks, while a rerun polls different batch boundaries, and only within
a window of recent blocks; recomputation from the raw table needs neither.

Guarantee: after a batch is committed, each group's row with the largest version equals the raw totals of its
(cluster, minute). Cost: one ``INSERT … SELECT`` per batch, reading the raw rows of the touched clusters and
minutes (the ts range and the table's day partitions bound the scan); ``FINAL`` on read merges the few
replaced rows of recent minutes.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the client's migrations build on this module's statements
    from analytics_spark.clickhouse.client import ClickHouse

PARTITION_ROLLUP = "audit_partition_rollup"
CLIENT_ROLLUP = "audit_client_rollup"

# (table, its columns, the SELECT list over audit_records, GROUP BY); {db} is the database
PARTITION_SQL = ("minute, cluster, topic, partition, api, bytes, records, requests, latency_sum, latency_max",
                 "toStartOfMinute(toDateTime(ts, 'UTC')) AS m, cluster, topic, partition, api, sum(bytes), "
                 "sum(records), count(), sum(toFloat64(latency_ms)), max(latency_ms)",
                 "m, cluster, topic, partition, api")
CLIENT_SQL = ("minute, cluster, topic, api, client_id, user, client_idc, broker_idc, bytes, records, requests",
              "toStartOfMinute(toDateTime(ts, 'UTC')) AS m, cluster, topic, api, client_id, user, client_idc, "
              "broker_idc, sum(bytes), sum(records), count()",
              "m, cluster, topic, api, client_id, user, client_idc, broker_idc")


def rollup_statements(db: str, where: str) -> tuple[str, str]:
    """The two ``INSERT … SELECT`` statements recomputing every group of the raw rows matching ``where``."""
    out = []
    for table, (columns, select, group) in ((PARTITION_ROLLUP, PARTITION_SQL), (CLIENT_ROLLUP, CLIENT_SQL)):
        out.append(f"INSERT INTO {db}.{table} ({columns}) SELECT {select} FROM {db}.audit_records "
                   f"WHERE {where} GROUP BY {group}")
    return out[0], out[1]


def roll_up(ch: ClickHouse, keys: Iterable[tuple[str, datetime]]) -> int:
    """Recompute the rollups of every (cluster, minute) in ``keys`` (ts of any moment in the minute); return how
    many minutes. A no-op for no keys."""
    clusters: set[str] = set()
    minutes: set[int] = set()
    for cluster, ts in keys:
        clusters.add(cluster)
        minutes.add(int(ts.timestamp()) // 60)
    if not minutes:
        return 0
    # 64-bit epoch arithmetic: a valid record may lie past 2106, where 32-bit seconds end
    where = ("cluster IN {c:Array(String)} AND ts >= fromUnixTimestamp64Milli({lo:Int64}, 'UTC') "
             "AND ts < fromUnixTimestamp64Milli({hi:Int64}, 'UTC') "
             "AND intDiv(toUnixTimestamp64Milli(ts), 60000) IN {m:Array(Int64)}")
    params = {"c": sorted(clusters), "lo": min(minutes) * 60_000, "hi": (max(minutes) + 1) * 60_000,
              "m": sorted(minutes)}
    for sql in rollup_statements(ch.database, where):
        ch.command(sql, params)
    return len(minutes)


def roll_up_stored(ch: ClickHouse, src_topic: str, src_partition: int, from_offset: int) -> int:
    """Recompute the rollups of every minute holding a stored record of ``src_partition`` at ``from_offset`` or
    later (the rows a killed ingest stored but did not commit); return how many (cluster, minute) pairs."""
    keys = ch.rows(
        f"SELECT DISTINCT cluster, toStartOfMinute(toDateTime(ts, 'UTC')) FROM {ch.table('audit_records')} "
        "WHERE src_topic = {t:String} AND src_partition = {p:Int32} AND src_offset >= {o:Int64}",
        {"t": src_topic, "p": src_partition, "o": from_offset},
    )
    return roll_up(ch, ((str(c), m) for c, m in keys))


def rebuild(ch: ClickHouse, start: datetime | None = None, end: datetime | None = None) -> None:
    """Recompute the rollups of every raw row with ``start <= ts < end`` (all rows without bounds): after a bulk
    load that wrote ``audit_records`` directly (the seed, tests). The bounds widen to whole minutes, so no group
    is recomputed from part of its rows."""
    where, params = "1", dict[str, Any]()
    if start is not None:
        where += " AND ts >= fromUnixTimestamp64Milli({lo:Int64}, 'UTC')"
        params["lo"] = int(start.timestamp()) // 60 * 60_000
    if end is not None:
        where += " AND ts < fromUnixTimestamp64Milli({hi:Int64}, 'UTC')"
        params["hi"] = -(-int(end.timestamp()) // 60) * 60_000
    for sql in rollup_statements(ch.database, where):
        ch.command(sql, params)
