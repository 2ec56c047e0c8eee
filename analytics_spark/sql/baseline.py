"""The analytics models computed by ClickHouse SQL alone (the benchmark's baseline).

Same inputs (the per-minute rollups), same definitions as :mod:`analytics_spark.transforms`;
each model is materialised into a ``bl_*`` Memory table so the work is really done. Used to
compare wall time and to cross-check the Spark results.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime

from analytics_spark.clickhouse import ClickHouse
from analytics_spark.transforms import DEFAULT_PRICES, hour_of_week, slot_minutes


def _window_where(start: datetime, end: datetime) -> str:
    return (f"minute >= toDateTime({int(start.timestamp())}, 'UTC') "
            f"AND minute < toDateTime({int(end.timestamp())}, 'UTC')")


def baseline_sql(
    ch: ClickHouse, start: datetime, end: datetime, *, idle_days: int = 7, top_k: int = 10,
    prices: Mapping[str, float] = DEFAULT_PRICES, profile_source: str | None = None,
) -> dict[str, str]:
    """SELECT statement per model (keys: the result table names).

    The forecast reads the profile from ``profile_source`` (a table or parenthesised subquery with
    cluster, topic, partition, direction as String, hour_of_week and p95_bps), by default the
    materialised ``bl_traffic_profile``.
    """
    w = _window_where(start, end)
    pm, cm = ch.table("audit_partition_minute"), ch.table("audit_client_minute")
    d = round((end - start).total_seconds() / 86400)
    slots = ", ".join(f"({h}, {m})" for h, m in sorted(slot_minutes(start, end).items()))
    end_s = int(end.timestamp())
    next_hours = ", ".join(f"({h}, {hour_of_week(end_s + 3600 * h)})" for h in range(24))
    sx, sxx = d * (d - 1) / 2.0, (d - 1) * d * (2 * d - 1) / 6.0
    denom = d * sxx - sx * sx
    series = f"""(SELECT cluster, topic, partition, if(api = 'produce', 'in', 'out') AS direction,
                         minute, sum(bytes) AS bytes
                  FROM {pm} WHERE {w} GROUP BY cluster, topic, partition, direction, minute
                  UNION ALL
                  SELECT cluster, topic, -1 AS partition, if(api = 'produce', 'in', 'out') AS direction,
                         minute, sum(bytes) AS bytes
                  FROM {pm} WHERE {w} GROUP BY cluster, topic, direction, minute)"""
    profile = f"""
        SELECT k.cluster AS cluster, k.topic AS topic, k.partition AS partition, k.direction AS direction,
               s.how AS hour_of_week, s.samples AS samples,
               greatest(1, least(s.samples, toInt64(ceil(0.50 * s.samples - 1e-9)))) AS k50,
               greatest(1, least(s.samples, toInt64(ceil(0.95 * s.samples - 1e-9)))) AS k95,
               s.samples - toInt64(o.n) AS z,
               if(k50 <= z, 0., o.vals[k50 - z]) AS p50_bps,
               if(k95 <= z, 0., o.vals[k95 - z]) AS p95_bps,
               o.mx AS max_bps, o.s / s.samples AS mean_bps
        FROM (SELECT DISTINCT cluster, topic, partition, direction FROM {series}) AS k
        CROSS JOIN (SELECT c1 AS how, c2 AS samples FROM values({slots})) AS s
        LEFT JOIN (
            SELECT cluster, topic, partition, direction,
                   toUInt8((intDiv(toUnixTimestamp(minute), 3600) + 72) % 168) AS how,
                   arraySort(groupArray(bytes / 60.)) AS vals, count() AS n,
                   sum(bytes / 60.) AS s, max(bytes / 60.) AS mx
            FROM {series} GROUP BY cluster, topic, partition, direction, how
        ) AS o ON k.cluster = o.cluster AND k.topic = o.topic AND k.partition = o.partition
              AND k.direction = o.direction AND s.how = o.how"""
    forecast = f"""
        SELECT f.cluster AS cluster, f.topic AS topic, f.partition AS partition, f.direction AS direction,
               f.sy / {d} AS mean_daily_bytes,
               {f"({d} * f.sxy - {sx} * f.sy) / {denom}" if denom > 0 else "0."} AS b,
               (f.sy - b * {sx}) / {d} AS a,
               greatest(0., a + b * {d}) AS forecast_daily_bytes,
               if(mean_daily_bytes > 0, forecast_daily_bytes / mean_daily_bytes, 0.) AS g,
               tupleElement(p.best, 1) * g AS forecast_peak_bps,
               -tupleElement(p.best, 2) AS forecast_peak_hour
        FROM (SELECT cluster, topic, partition, direction, sum(y) AS sy, sum(x * y) AS sxy
              FROM (SELECT cluster, topic, partition, direction,
                           intDiv(toUnixTimestamp(minute) - {int(start.timestamp())}, 86400) AS x,
                           toFloat64(sum(bytes)) AS y
                    FROM {series} GROUP BY cluster, topic, partition, direction, x)
              GROUP BY cluster, topic, partition, direction) AS f
        LEFT JOIN (SELECT cluster, topic, partition, direction, max((p95_bps, -h.hour)) AS best
                   FROM {profile_source or ch.table('bl_traffic_profile')} AS pr
                   INNER JOIN (SELECT c1 AS hour, c2 AS how FROM values({next_hours})) AS h
                   ON pr.hour_of_week = h.how
                   GROUP BY cluster, topic, partition, direction) AS p
        ON f.cluster = p.cluster AND f.topic = p.topic AND f.partition = p.partition
           AND f.direction = p.direction"""
    lineage = f"""
        SELECT cluster, topic, if(api = 'produce', 'producer', 'consumer') AS role, client_id, user,
               client_idc, sum(bytes) AS bytes, sum(records) AS records, sum(requests) AS requests,
               min(minute) AS first_seen, max(minute) AS last_seen
        FROM {cm} WHERE {w} GROUP BY cluster, topic, role, client_id, user, client_idc"""
    inv = f"""(SELECT cluster, topic, argMax(pool, updated_at) AS pool, argMax(tenant, updated_at) AS tenant,
                      argMax(partitions, updated_at) AS partitions,
                      argMax(replication_factor, updated_at) AS rf, argMax(size_bytes, updated_at) AS size
               FROM {ch.table('topic_inventory')} GROUP BY cluster, topic)"""
    per_topic = f"""(SELECT cluster, topic, sumIf(bytes, api = 'produce') AS bytes_in,
                            sumIf(bytes, api = 'fetch') AS bytes_out,
                            maxIf(minute, api = 'produce') AS lp, countIf(api = 'produce') > 0 AS hp,
                            maxIf(minute, api = 'fetch') AS lf, countIf(api = 'fetch') > 0 AS hf
                     FROM {cm} WHERE {w} GROUP BY cluster, topic)"""
    joined = f"""(SELECT if(i.cluster != '', i.cluster, t.cluster) AS cluster,
                         if(i.topic != '', i.topic, t.topic) AS topic,
                         if(i.topic != '', i.pool, 'unknown') AS pool,
                         if(i.topic != '', i.tenant, 'unknown') AS tenant,
                         toUInt64(i.partitions) AS parts, toUInt64(i.rf) AS rf, i.size AS size,
                         t.bytes_in AS b_in, t.bytes_out AS b_out,
                         if(t.hp, t.lp, NULL) AS last_produce, if(t.hf, t.lf, NULL) AS last_fetch
                  FROM {inv} AS i FULL OUTER JOIN {per_topic} AS t
                  ON i.cluster = t.cluster AND i.topic = t.topic)"""
    cost = f"""
        SELECT cluster, pool, tenant, count() AS topics, sum(parts) AS partitions,
               sum(parts * rf) AS replicas, sum(b_in) AS bytes_in, sum(b_out) AS bytes_out,
               sum(size * rf) AS storage_bytes,
               (bytes_in * {prices['in_per_gb']} + bytes_out * {prices['out_per_gb']}
                + storage_bytes * {prices['storage_per_gb']}) / 1e9 AS cost
        FROM {joined} GROUP BY cluster, pool, tenant"""
    since = end_s - idle_days * 86400
    idle = f"""
        SELECT cluster, topic, pool, tenant, last_produce, last_fetch,
               last_produce IS NULL OR toUnixTimestamp(last_produce) < {since} AS no_producer,
               last_fetch IS NULL OR toUnixTimestamp(last_fetch) < {since} AS no_consumer
        FROM {joined} WHERE no_producer OR no_consumer"""
    flows = f"""(SELECT cluster, topic, client_id, user, bytes, records,
                        if(api = 'produce', client_idc, broker_idc) AS src_idc,
                        if(api = 'produce', broker_idc, client_idc) AS dst_idc
                 FROM {cm} WHERE {w} AND src_idc != dst_idc AND src_idc != '' AND dst_idc != '')"""
    pairs = f"""SELECT cluster, src_idc, dst_idc, sum(bytes) AS bytes, sum(records) AS records
                FROM {flows} GROUP BY cluster, src_idc, dst_idc"""
    clients = f"""
        SELECT * FROM (
            SELECT cluster, src_idc, dst_idc, client_id, user, topic, sum(bytes) AS bytes,
                   row_number() OVER (PARTITION BY cluster, src_idc, dst_idc
                                      ORDER BY bytes DESC, client_id, user, topic) AS rank
            FROM {flows} GROUP BY cluster, src_idc, dst_idc, client_id, user, topic)
        WHERE rank <= {top_k}"""
    return {"traffic_profile": profile, "traffic_forecast": forecast, "topic_lineage": lineage,
            "tenant_cost": cost, "idle_topics": idle, "cross_idc_traffic": pairs,
            "cross_idc_clients": clients}


def run_baseline(
    ch: ClickHouse, start: datetime, end: datetime, *, idle_days: int = 7, top_k: int = 10,
    prices: Mapping[str, float] = DEFAULT_PRICES,
) -> dict[str, dict[str, float]]:
    """Materialise every baseline model into ``bl_<table>``; return rows and seconds per model."""
    out: dict[str, dict[str, float]] = {}
    sqls = baseline_sql(ch, start, end, idle_days=idle_days, top_k=top_k, prices=prices)
    for name, sql in sqls.items():
        t0 = time.perf_counter()
        ch.command(f"DROP TABLE IF EXISTS {ch.table('bl_' + name)}")
        ch.command(f"CREATE TABLE {ch.table('bl_' + name)} ENGINE = Memory AS {sql}")
        rows = int(ch.scalar(f"SELECT count() FROM {ch.table('bl_' + name)}"))
        out[name] = {"rows": rows, "seconds": time.perf_counter() - t0}
    return out
