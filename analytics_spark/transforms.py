"""Pure DataFrame transforms of the audit models (no I/O; inputs are the exported slices).

Definitions (the tests check these exactly, or within float tolerance):

* **series**: (cluster, topic, partition, direction) with direction ``in`` = produce bytes and
  ``out`` = fetch bytes; partition -1 is the whole topic (sum over its partitions).
* **hour of week**: 0 = Monday 00:00–01:00 UTC … 167 = Sunday 23:00–24:00.
* **profile** per series and hour-of-week slot over the window: the samples are the slot's
  minutes in the window (``samples`` = M), each minute's rate in bytes/s = bytes / 60, minutes
  without records counting as 0. p50/p95 are nearest-rank percentiles of the M samples
  (k = ceil(q·M), the k-th smallest); ``max`` and ``mean`` are over the same M samples.
* **trend**: least-squares slope of daily bytes (day 0 … D-1 of the window, absent days = 0).
* **forecast** for the day after the window: daily bytes = max(0, a + b·D); growth
  g = forecast daily / mean daily (0 when the mean is 0); peak = max over that day's 24 hours of
  p95(slot) · g, ``forecast_peak_hour`` = the first hour (0–23, UTC) reaching it.
* **lineage**: per topic, role (producer/consumer), client id, user and client IDC: bytes,
  records, requests, first/last minute seen.
* **cost** per (cluster, pool, tenant) from the inventory joined with the window's traffic:
  replicas = Σ partitions·RF, storage = Σ size·RF, cost = Σ bytes·price / 1e9 (prices per GB).
  Topics with traffic but absent from the inventory count under pool/tenant ``unknown``.
* **idle** topics: no produce (resp. fetch) since ``end - idle_days``; inventory topics with no
  traffic at all are idle on both counts.
* **cross-IDC**: produce flows client IDC → broker IDC, fetch flows broker IDC → client IDC;
  only pairs of two different, known IDCs; the top-K clients per pair by bytes (ties by
  client id, user, topic).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

HOURS_PER_WEEK = 168
EPOCH_HOW_OFFSET = 72  # 1970-01-01 00:00 UTC was a Thursday = hour-of-week 72
TOPIC_PARTITION = -1
DEFAULT_PRICES: Mapping[str, float] = {"in_per_gb": 0.01, "out_per_gb": 0.005, "storage_per_gb": 0.02}
KEY = ["cluster", "topic", "partition", "direction"]


def hour_of_week(epoch_s: int) -> int:
    """Hour-of-week slot (0 = Monday 00h UTC) of an epoch second."""
    return (epoch_s // 3600 + EPOCH_HOW_OFFSET) % HOURS_PER_WEEK


def how_col(epoch_s: Column) -> Column:
    """:func:`hour_of_week` as a Column expression."""
    return ((F.floor(epoch_s / 3600) + EPOCH_HOW_OFFSET) % HOURS_PER_WEEK).cast("int")


def slot_minutes(start: datetime, end: datetime) -> dict[int, int]:
    """Minutes of [start, end) (whole hours) falling in each hour-of-week slot."""
    out: Counter[int] = Counter()
    t = int(start.timestamp())
    stop = int(end.timestamp())
    while t < stop:
        out[hour_of_week(t)] += 60
        t += 3600
    return dict(out)


def rank_k(q: float, m: int) -> int:
    """Nearest-rank index (1-based) of quantile q among m samples."""
    return max(1, min(m, math.ceil(q * m - 1e-9)))


def series_from_partition_minute(partition_minute: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(series, keys) from rows of (cluster, topic, partition, api, minute, bytes).

    The Spark equivalent of the ``series_minute``/``series_keys`` export (which ClickHouse
    computes when it is the source): partition series plus the whole-topic series (partition
    -1), each with a 64-bit ``sid``.
    """
    base = partition_minute.select(
        "cluster", "topic", F.col("partition").cast("int").alias("partition"),
        F.when(F.col("api") == "produce", F.lit("in")).otherwise(F.lit("out")).alias("direction"),
        "minute", F.col("bytes").cast("long").alias("bytes"),
    )
    topic = base.groupBy("cluster", "topic", "direction", "minute").agg(F.sum("bytes").alias("bytes"))
    both = base.unionByName(topic.withColumn("partition", F.lit(TOPIC_PARTITION)))
    both = both.withColumn("sid", F.xxhash64(*KEY))
    return both.select("sid", "minute", "bytes"), both.select("sid", *KEY).distinct()


def _quantile(arr: Column, m: Column, n: Column, q: float) -> Column:
    k = F.greatest(F.lit(1), F.least(m, F.ceil(m * F.lit(q) - F.lit(1e-9)))).cast("int")
    z = m - n
    return F.when(k <= z, F.lit(0.0)).otherwise(F.element_at(arr, (k - z).cast("int")))


def traffic_profile(spark: SparkSession, series: DataFrame, start: datetime, end: datetime) -> DataFrame:
    """Hour-of-week profile of every series (rows: sid, minute, bytes): 168 rows per sid with
    samples, p50/p95/max/mean bytes/s (see the module docstring for the definitions)."""
    slots = spark.createDataFrame(
        sorted(slot_minutes(start, end).items()), "hour_of_week int, samples int"
    )
    obs = (
        series.withColumn("hour_of_week", how_col(F.col("minute")))
        .withColumn("bps", F.col("bytes") / F.lit(60.0))
        .groupBy("sid", "hour_of_week")
        .agg(F.sort_array(F.collect_list("bps")).alias("vals"), F.count("*").alias("n"),
             F.sum("bps").alias("sum_bps"), F.max("bps").alias("max_obs"))
    )
    sids = obs.select("sid").distinct()
    full = sids.crossJoin(F.broadcast(slots)).join(obs, ["sid", "hour_of_week"], "left")
    m, n = F.col("samples"), F.coalesce(F.col("n"), F.lit(0))
    return full.select(
        "sid", F.col("hour_of_week").cast("int").alias("hour_of_week"), F.col("samples").cast("int"),
        F.coalesce(_quantile(F.col("vals"), m, n, 0.50), F.lit(0.0)).alias("p50_bps"),
        F.coalesce(_quantile(F.col("vals"), m, n, 0.95), F.lit(0.0)).alias("p95_bps"),
        F.coalesce(F.col("max_obs"), F.lit(0.0)).alias("max_bps"),
        (F.coalesce(F.col("sum_bps"), F.lit(0.0)) / m).alias("mean_bps"),
    )


def traffic_forecast(
    spark: SparkSession, series: DataFrame, profile: DataFrame, start: datetime, end: datetime
) -> DataFrame:
    """Trend of daily bytes and next-day peak forecast per sid (see the module docstring)."""
    d = round((end - start).total_seconds() / 86400)
    start_s = int(start.timestamp())
    daily = series.groupBy("sid", F.floor((F.col("minute") - start_s) / 86400).alias("x")).agg(
        F.sum("bytes").cast("double").alias("y")
    )
    sx = d * (d - 1) / 2.0
    sxx = (d - 1) * d * (2 * d - 1) / 6.0
    denom = d * sxx - sx * sx
    fit = daily.groupBy("sid").agg(F.sum("y").alias("sy"), F.sum(F.col("x") * F.col("y")).alias("sxy"))
    slope = (F.lit(d) * F.col("sxy") - F.lit(sx) * F.col("sy")) / F.lit(denom) if denom > 0 else F.lit(0.0)
    fit = fit.withColumn("b", slope).withColumn("a", (F.col("sy") - F.col("b") * F.lit(sx)) / F.lit(d))
    fit = fit.withColumn("mean_daily_bytes", F.col("sy") / F.lit(d)).withColumn(
        "forecast_daily_bytes", F.greatest(F.lit(0.0), F.col("a") + F.col("b") * F.lit(d))
    )
    fit = fit.withColumn(
        "g", F.when(F.col("mean_daily_bytes") > 0, F.col("forecast_daily_bytes") / F.col("mean_daily_bytes"))
        .otherwise(F.lit(0.0))
    )
    end_s = int(end.timestamp())
    hours = spark.createDataFrame(
        [(h, hour_of_week(end_s + 3600 * h)) for h in range(24)], "hour int, hour_of_week int"
    )
    nextday = profile.join(F.broadcast(hours), "hour_of_week").groupBy("sid").agg(
        F.max(F.struct(F.col("p95_bps"), (-F.col("hour")).alias("neg_hour"))).alias("best")
    )
    forecast_day = end.date()  # the day starting at the window end
    return fit.join(nextday, "sid", "left").select(
        "sid", F.lit(d).cast("int").alias("days"), "mean_daily_bytes",
        F.col("b").alias("trend_bytes_per_day"), F.lit(forecast_day).alias("forecast_day"),
        "forecast_daily_bytes",
        (F.coalesce(F.col("best.p95_bps"), F.lit(0.0)) * F.col("g")).alias("forecast_peak_bps"),
        (-F.coalesce(F.col("best.neg_hour"), F.lit(0))).cast("int").alias("forecast_peak_hour"),
    )


def with_keys(df: DataFrame, keys: DataFrame) -> DataFrame:
    """Replace ``sid`` by the series key columns (cluster, topic, partition, direction)."""
    rest = [c for c in df.columns if c != "sid"]
    return df.join(F.broadcast(keys), "sid").select(*KEY, *rest)


def lineage(client_hour: DataFrame) -> DataFrame:
    """Who writes and who reads each topic, with volumes and first/last minute seen."""
    return client_hour.groupBy(
        "cluster", "topic",
        F.when(F.col("api") == "produce", F.lit("producer")).otherwise(F.lit("consumer")).alias("role"),
        "client_id", "user", "client_idc",
    ).agg(
        F.sum("bytes").alias("bytes"), F.sum("records").alias("records"),
        F.sum("requests").alias("requests"),
        F.min("first_minute").alias("first_seen"), F.max("last_minute").alias("last_seen"),
    )


def _inventory_with_traffic(client_hour: DataFrame, inventory: DataFrame) -> DataFrame:
    traffic = client_hour.groupBy("cluster", "topic").agg(
        F.sum(F.when(F.col("api") == "produce", F.col("bytes")).otherwise(0)).alias("bytes_in"),
        F.sum(F.when(F.col("api") == "fetch", F.col("bytes")).otherwise(0)).alias("bytes_out"),
        F.max(F.when(F.col("api") == "produce", F.col("last_minute"))).alias("last_produce"),
        F.max(F.when(F.col("api") == "fetch", F.col("last_minute"))).alias("last_fetch"),
    )
    return inventory.join(traffic, ["cluster", "topic"], "full_outer").select(
        "cluster", "topic",
        F.coalesce("pool", F.lit("unknown")).alias("pool"),
        F.coalesce("tenant", F.lit("unknown")).alias("tenant"),
        F.coalesce("partitions", F.lit(0)).cast("long").alias("partitions"),
        F.coalesce("replication_factor", F.lit(0)).cast("long").alias("replication_factor"),
        F.coalesce("size_bytes", F.lit(0)).cast("long").alias("size_bytes"),
        F.coalesce("bytes_in", F.lit(0)).cast("long").alias("bytes_in"),
        F.coalesce("bytes_out", F.lit(0)).cast("long").alias("bytes_out"),
        "last_produce", "last_fetch",
    )


def tenant_cost(
    client_hour: DataFrame, inventory: DataFrame, prices: Mapping[str, float] = DEFAULT_PRICES
) -> DataFrame:
    """Bytes in/out, storage, replicas and cost per (cluster, pool, tenant)."""
    t = _inventory_with_traffic(client_hour, inventory)
    out = t.groupBy("cluster", "pool", "tenant").agg(
        F.count("*").cast("int").alias("topics"),
        F.sum("partitions").alias("partitions"),
        F.sum(F.col("partitions") * F.col("replication_factor")).alias("replicas"),
        F.sum("bytes_in").alias("bytes_in"), F.sum("bytes_out").alias("bytes_out"),
        F.sum(F.col("size_bytes") * F.col("replication_factor")).alias("storage_bytes"),
    )
    return out.withColumn(
        "cost",
        (F.col("bytes_in") * F.lit(prices["in_per_gb"]) + F.col("bytes_out") * F.lit(prices["out_per_gb"])
         + F.col("storage_bytes") * F.lit(prices["storage_per_gb"])) / F.lit(1e9),
    )


def idle_topics(client_hour: DataFrame, inventory: DataFrame, end: datetime, idle_days: int) -> DataFrame:
    """Topics with no producer or no consumer since ``end - idle_days``."""
    since = int((end - timedelta(days=idle_days)).timestamp())
    t = _inventory_with_traffic(client_hour, inventory)
    no_p = F.col("last_produce").isNull() | (F.col("last_produce") < since)
    no_c = F.col("last_fetch").isNull() | (F.col("last_fetch") < since)
    return t.select(
        "cluster", "topic", "pool", "tenant", "last_produce", "last_fetch",
        no_p.cast("int").alias("no_producer"), no_c.cast("int").alias("no_consumer"),
    ).where(no_p | no_c)


def _flows(client_hour: DataFrame) -> DataFrame:
    produce = F.col("api") == "produce"
    return client_hour.select(
        "cluster", "topic", "client_id", "user", "bytes", "records",
        F.when(produce, F.col("client_idc")).otherwise(F.col("broker_idc")).alias("src_idc"),
        F.when(produce, F.col("broker_idc")).otherwise(F.col("client_idc")).alias("dst_idc"),
    ).where((F.col("src_idc") != F.col("dst_idc")) & (F.col("src_idc") != "") & (F.col("dst_idc") != ""))


def cross_idc_traffic(client_hour: DataFrame) -> DataFrame:
    """Bytes and records per (cluster, source IDC, destination IDC), different IDCs only."""
    return _flows(client_hour).groupBy("cluster", "src_idc", "dst_idc").agg(
        F.sum("bytes").alias("bytes"), F.sum("records").alias("records")
    )


def cross_idc_clients(client_hour: DataFrame, top_k: int = 10) -> DataFrame:
    """The ``top_k`` (client, user, topic) per IDC pair by bytes, ranked from 1."""
    per = _flows(client_hour).groupBy("cluster", "src_idc", "dst_idc", "client_id", "user", "topic").agg(
        F.sum("bytes").alias("bytes")
    )
    w = Window.partitionBy("cluster", "src_idc", "dst_idc").orderBy(
        F.col("bytes").desc(), "client_id", "user", "topic"
    )
    return per.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= top_k)
