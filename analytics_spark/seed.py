"""Deterministic synthetic audit data set (for demos, tests and benchmarks).

The catalogue (clusters, topics, pools, tenants, clients, IDCs) comes from ``random.Random(seed)``;
the rows are generated inside ClickHouse by one ``INSERT ... SELECT FROM numbers(N)`` whose
values are hashes of the row number, so the same (seed, rows, days, end) always gives the same
data set, and 10 M rows take seconds. Rows go into ``audit_records`` and the minute rollups of the
window are then rebuilt from them (:func:`analytics_spark.clickhouse.audit_rollups.rebuild`, what the
ingest does per batch); the catalogue goes into ``topic_inventory``.

Traffic shape: a diurnal curve (peak mid-afternoon UTC), weekends at 60 %, a per-topic linear
trend, per-partition skew and noise. Special topics exercise the idle-topic job:
``*-nocons`` topics are produced but never consumed, ``*-stopped`` topics go silent after the
first third of the window, ``*-unused`` topics exist only in the inventory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from analytics_spark.clickhouse import ClickHouse, audit_rollups

IDCS = ("idc-a", "idc-b", "idc-c")
BROKERS_PER_CLUSTER = 6
LOOKUP = 4096  # client pick table size (weights quantised to 1/4096)


@dataclass(frozen=True)
class SeedTopic:
    """A topic of the synthetic catalogue."""

    cluster: str
    name: str
    pool: str
    tenant: str
    partitions: int
    replication_factor: int
    size_bytes: int
    weight: float
    kind: str  # normal | nocons | stopped | unused
    trend: float  # relative growth per day


@dataclass(frozen=True)
class SeedClient:
    """A producing or consuming client of one topic."""

    topic_index: int
    client_id: str
    user: str
    idc: str
    api: str
    weight: float


@dataclass(frozen=True)
class SeedCatalogue:
    """Everything the generator draws from."""

    topics: tuple[SeedTopic, ...]
    clients: tuple[SeedClient, ...]


def catalogue(seed: int = 7, topics_per_cluster: int = 12) -> SeedCatalogue:
    """Build the deterministic catalogue for ``seed``."""
    rng = random.Random(seed)
    tenants = {"payments": "pool-pay", "search": "pool-search", "ads": "shared", "infra": "shared"}
    tlist: list[SeedTopic] = []
    for cluster in ("c1", "c2"):
        n = topics_per_cluster if cluster == "c1" else max(3, topics_per_cluster // 3)
        for i in range(n):
            tenant = sorted(tenants)[rng.randrange(len(tenants))]
            kind = "normal"
            if cluster == "c1" and i == 1:
                kind = "nocons"
            elif cluster == "c1" and i == 2:
                kind = "stopped"
            elif i == n - 1:
                kind = "unused"
            name = f"{tenant}-t{i:02d}" + ("" if kind == "normal" else f"-{kind}")
            parts = rng.choice((1, 2, 3, 4, 6, 8))
            tlist.append(
                SeedTopic(
                    cluster=cluster, name=name, pool=tenants[tenant], tenant=tenant, partitions=parts,
                    replication_factor=rng.choice((2, 3, 3)),
                    size_bytes=rng.randrange(10**8, 10**11),
                    weight=0.0 if kind == "unused" else round(rng.paretovariate(1.3), 3),
                    kind=kind, trend=round(rng.uniform(-0.02, 0.06), 4),
                )
            )
    clients: list[SeedClient] = []
    for ti, t in enumerate(tlist):
        if t.kind == "unused":
            continue
        n_prod = rng.randint(1, 3)
        n_cons = 0 if t.kind == "nocons" else rng.randint(1, 4)
        home = rng.choice(IDCS)
        for j in range(n_prod):
            idc = home if rng.random() < 0.7 else rng.choice(IDCS)
            clients.append(SeedClient(ti, f"{t.name}-writer-{j}", f"svc-{t.tenant}", idc, "produce",
                                      t.weight * 0.4 / n_prod))
        for j in range(n_cons):
            user = f"svc-{sorted(tenants)[rng.randrange(len(tenants))]}"
            idc = rng.choice(IDCS)
            clients.append(SeedClient(ti, f"{t.name}-reader-{j}", user, idc, "fetch",
                                      t.weight * 0.6 / n_cons))
    return SeedCatalogue(tuple(tlist), tuple(clients))


def _lookup_table(clients: tuple[SeedClient, ...]) -> list[int]:
    """Client indices (1-based) laid out proportionally to weight over LOOKUP slots."""
    total = sum(c.weight for c in clients)
    table: list[int] = []
    acc = 0.0
    for i, c in enumerate(clients):
        acc += c.weight
        upto = round(acc / total * LOOKUP)
        table.extend([i + 1] * (upto - len(table)))
    table.extend([len(clients)] * (LOOKUP - len(table)))
    return table


def _arr(values: list[str] | list[int] | list[float]) -> str:
    if values and isinstance(values[0], str):
        return "[" + ",".join("'" + str(v).replace("'", "") + "'" for v in values) + "]"
    return "[" + ",".join(repr(v) for v in values) + "]"


def default_end(now: datetime | None = None) -> datetime:
    """Start of the current UTC day (the default window end)."""
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def seed_audit(
    ch: ClickHouse,
    *,
    rows: int = 200_000,
    days: int = 14,
    end: datetime | None = None,
    seed: int = 7,
    topics_per_cluster: int = 12,
) -> SeedCatalogue:
    """Insert ``rows`` audit records spread evenly over ``[end - days, end)`` plus the inventory.

    Returns the catalogue used. Deterministic for equal arguments.
    """
    if rows < 1 or days < 1:
        raise ValueError("rows and days must be >= 1")
    end = default_end() if end is None else end.astimezone(UTC)
    start = end - timedelta(days=days)
    cat = catalogue(seed, topics_per_cluster)
    ts, cs = cat.topics, cat.clients
    span_ms = days * 86_400_000
    stopped_after = int(start.timestamp()) + days * 86_400 // 3
    fallback = next(i + 1 for i, c in enumerate(cs) if ts[c.topic_index].kind == "normal")
    sql = f"""
    INSERT INTO {ch.table('audit_records')}
        (ts, cluster, broker, broker_idc, client_id, user, client_ip, client_idc, api, topic,
         partition, bytes, records, latency_ms)
    WITH
        {_arr([c.topic_index + 1 for c in cs])} AS c_topic,
        {_arr([c.client_id for c in cs])} AS c_id,
        {_arr([c.user for c in cs])} AS c_user,
        {_arr([c.idc for c in cs])} AS c_idc,
        {_arr([c.api for c in cs])} AS c_api,
        {_arr(_lookup_table(cs))} AS pick,
        {_arr([t.cluster for t in ts])} AS t_cluster,
        {_arr([t.name for t in ts])} AS t_name,
        {_arr([t.partitions for t in ts])} AS t_parts,
        {_arr([t.kind for t in ts])} AS t_kind,
        {_arr([t.trend for t in ts])} AS t_trend,
        {_arr([max(t.weight, 0.001) for t in ts])} AS t_weight,
        {_arr(list(IDCS))} AS idcs,
        toInt64({int(start.timestamp() * 1000)}) AS start_ms,
        toInt64(least(start_ms + intDiv(number * {span_ms}, {rows})
                      + (cityHash64(number, {seed}, 1) % 997), start_ms + {span_ms} - 1)) AS t_ms,
        pick[1 + cityHash64(number, {seed}, 2) % {LOOKUP}] AS ci0,
        if(t_kind[c_topic[ci0]] = 'stopped' AND intDiv(t_ms, 1000) >= {stopped_after},
           {fallback}, ci0) AS ci,
        c_topic[ci] AS ti,
        toInt32(cityHash64(number, {seed}, 3) % t_parts[ti]) AS part,
        toInt32(1 + (ti * 7 + part) % {BROKERS_PER_CLUSTER}) AS brk,
        intDiv(t_ms, 1000) AS t_s,
        toHour(toDateTime(t_s, 'UTC')) AS hr,
        toDayOfWeek(toDateTime(t_s, 'UTC')) AS dow,
        (t_ms - start_ms) / 86400000.0 AS day_f,
        (1.0 + 0.8 * sin(2 * pi() * (hr - 9) / 24.0)) * if(dow >= 6, 0.6, 1.0)
            * greatest(0.05, 1.0 + t_trend[ti] * day_f)
            * (1.0 + 0.5 * (part % 3))
            * (0.5 + (cityHash64(number, {seed}, 4) % 1000) / 1000.0) AS shape
    SELECT
        fromUnixTimestamp64Milli(t_ms, 'UTC') AS ts,
        t_cluster[ti] AS cluster,
        brk AS broker,
        idcs[1 + brk % 3] AS broker_idc,
        c_id[ci] AS client_id,
        c_user[ci] AS user,
        concat('10.', toString(indexOf(idcs, c_idc[ci])), '.', toString(intDiv(ci, 250)), '.',
               toString(ci % 250 + 1)) AS client_ip,
        c_idc[ci] AS client_idc,
        c_api[ci] AS api,
        t_name[ti] AS topic,
        part AS partition,
        toUInt64(1000 + 20000 * least(t_weight[ti], 20.0) * shape) AS bytes,
        toUInt64(1 + intDiv(bytes, 700)) AS records,
        toFloat32(if(api = 'produce', 2, 1) + (cityHash64(number, {seed}, 5) % 4000) / 100.0)
            AS latency_ms
    FROM numbers({rows})
    """
    ch.command(sql)
    audit_rollups.rebuild(ch, start, end)
    ch.insert_rows(
        "topic_inventory",
        [(t.cluster, t.name, t.pool, t.tenant, t.partitions, t.replication_factor, t.size_bytes) for t in ts],
        ["cluster", "topic", "pool", "tenant", "partitions", "replication_factor", "size_bytes"],
    )
    return cat
