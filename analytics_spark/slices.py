"""Time-sliced export of pre-aggregated audit data from ClickHouse to Parquet.

Why export rather than have executors query ClickHouse: the embedded engine (chdb) lives in
one process and locks its data directory, so Spark's Python workers cannot open it. The process
that owns ClickHouse (the service, or the analytics CLI) therefore runs one query per time
slice (one UTC day), with the aggregation pushed down to ClickHouse (the per-minute rollups,
finalised with GROUP BY), and writes each slice to its own Parquet file; Spark reads one file
per task. Against a ClickHouse server the same export runs unchanged (Arrow over HTTP).

Datasets per slice:

``series_minute``  sid, minute (epoch s), bytes — bytes per minute of every traffic series
                   (cluster, topic, partition, direction), the whole-topic series (partition -1)
                   included: that sum over partitions is pushed down too (ARRAY JOIN)
``client_hour``    cluster, topic, api, client_id, user, client_idc, broker_idc, hour (epoch s),
                   bytes, records, requests, first_minute, last_minute (epoch s)

plus, once per window, ``series_keys`` (sid → cluster, topic, partition, direction; ``sid`` is
a 64-bit hash of the key, checked collision-free at export) and ``inventory`` (latest row per
cluster/topic of ``topic_inventory``). Narrow integer rows keep Spark's shuffles cheap.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq

from analytics_spark.clickhouse import ClickHouse

DATASETS = ("series_minute", "client_hour")
_SERIES = """FROM {pm} ARRAY JOIN [partition, -1] AS p
            WHERE minute >= toDateTime({{s:UInt32}}, 'UTC') AND minute < toDateTime({{e:UInt32}}, 'UTC')
            GROUP BY cluster, topic, p, if(api = 'produce', 'in', 'out') AS direction"""
_SID = "reinterpretAsInt64(cityHash64(cluster, topic, p, direction))"


class ExportError(RuntimeError):
    """The export cannot be trusted (e.g. a series id collision)."""


@dataclass(frozen=True)
class Window:
    """The analysed interval [start, end), whole UTC hours, ``days`` long."""

    start: datetime
    end: datetime

    @property
    def days(self) -> int:
        return round((self.end - self.start).total_seconds() / 86400)

    @staticmethod
    def ending(end: datetime, days: int) -> Window:
        """The ``days``-day window ending at ``end`` floored to the hour (UTC)."""
        if days < 1:
            raise ValueError("days must be >= 1")
        end = end.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        return Window(end - timedelta(days=days), end)

    def slices(self) -> list[tuple[datetime, datetime]]:
        """One-day slices covering the window (the last may be shorter)."""
        out = []
        s = self.start
        while s < self.end:
            e = min(s + timedelta(days=1), self.end)
            out.append((s, e))
            s = e
        return out


@dataclass
class ExportResult:
    """Where the slices went and what they hold."""

    root: Path
    files: dict[str, list[Path]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _sql(ch: ClickHouse, dataset: str) -> str:
    where = "WHERE minute >= toDateTime({s:UInt32}, 'UTC') AND minute < toDateTime({e:UInt32}, 'UTC')"
    if dataset == "series_minute":
        body = _SERIES.format(pm=ch.table("audit_partition_minute"))
        return f"""SELECT {_SID} AS sid, toInt64(toUnixTimestamp(minute)) AS minute,
                toInt64(sum(bytes)) AS bytes {body}, minute"""
    if dataset == "client_hour":
        return f"""SELECT cluster, topic, toString(api) AS api, client_id, user, client_idc, broker_idc,
                toInt64(toUnixTimestamp(toStartOfHour(minute))) AS hour,
                toInt64(sum(bytes)) AS bytes, toInt64(sum(records)) AS records,
                toInt64(sum(requests)) AS requests,
                toInt64(toUnixTimestamp(min(minute))) AS first_minute,
                toInt64(toUnixTimestamp(max(minute))) AS last_minute
            FROM {ch.table('audit_client_minute')} {where}
            GROUP BY cluster, topic, api, client_id, user, client_idc, broker_idc, hour"""
    raise ValueError(f"unknown dataset {dataset!r}")


def inventory_sql(ch: ClickHouse) -> str:
    """Latest inventory row per (cluster, topic)."""
    return f"""SELECT cluster, topic, argMax(pool, updated_at) AS pool, argMax(tenant, updated_at) AS tenant,
            toInt64(argMax(partitions, updated_at)) AS partitions,
            toInt64(argMax(replication_factor, updated_at)) AS replication_factor,
            toInt64(argMax(size_bytes, updated_at)) AS size_bytes
        FROM {ch.table('topic_inventory')} GROUP BY cluster, topic"""


def export_slices(
    ch: ClickHouse,
    window: Window,
    root: Path,
    datasets: tuple[str, ...] = DATASETS,
) -> ExportResult:
    """Write each dataset's day slices (and the inventory) as Parquet under ``root``.

    ``root`` is emptied first. Every slice file exists even when empty, so Spark sees the
    schema. Guarantees: slice files partition the window; nothing outside it is exported.
    """
    t0 = time.perf_counter()
    if root.exists():
        shutil.rmtree(root)
    res = ExportResult(root)
    for ds in datasets:
        (root / ds).mkdir(parents=True)
        res.files[ds] = []
        res.rows[ds] = 0
        sql = _sql(ch, ds)
        for s, e in window.slices():
            table = ch.arrow(sql, {"s": int(s.timestamp()), "e": int(e.timestamp())})
            path = root / ds / f"slice-{s:%Y%m%dT%H}.parquet"
            pq.write_table(table, path)
            res.files[ds].append(path)
            res.rows[ds] += table.num_rows
    if "series_minute" in datasets:
        body = _SERIES.format(pm=ch.table("audit_partition_minute"))
        keys = ch.arrow(
            f"SELECT {_SID} AS sid, cluster, topic, toInt32(p) AS part, direction {body}",
            {"s": int(window.start.timestamp()), "e": int(window.end.timestamp())},
        ).rename_columns(["sid", "cluster", "topic", "partition", "direction"])
        if len(set(keys.column("sid").to_pylist())) != keys.num_rows:
            raise ExportError("series id hash collision; cannot export traffic series")
        pq.write_table(keys, root / "series_keys.parquet")
        res.rows["series_keys"] = keys.num_rows
    inv = ch.arrow(inventory_sql(ch))
    pq.write_table(inv, root / "inventory.parquet")
    res.rows["inventory"] = inv.num_rows
    res.seconds = time.perf_counter() - t0
    return res
