"""Integration: ClickHouse adapter on real chdb — migrations, rollups, ingest idempotency."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta

import pytest

from analytics_spark.clickhouse.client import (
    MIGRATIONS,
    ClickHouse,
    ClickHouseUnavailable,
    Migration,
    connect,
)
from analytics_spark.clickhouse.ingest import (
    AuditIngestor,
    ClickHouseIngestStore,
    SourceRecord,
    ingest_status,
    records_as_json_lines,
)
from tests.support.chdb_session import chdb_path, fresh_database


@pytest.fixture()
def ch() -> Iterator[ClickHouse]:
    c = connect(data_path=chdb_path(), database=fresh_database("t_ch"))
    yield c
    c.command(f"DROP DATABASE IF EXISTS {c.database}")
    c.close()


def audit(i: int, base: datetime) -> dict[str, object]:
    return {
        "ts": (base + timedelta(seconds=7 * i)).isoformat(), "cluster": "c1", "broker": i % 3,
        "broker_idc": "idc-a", "client_id": f"app-{i % 4}", "user": "svc", "client_ip": "10.0.0.9",
        "client_idc": "idc-b" if i % 2 else "idc-a", "api": "fetch" if i % 3 else "produce",
        "topic": f"t{i % 2}", "partition": i % 5, "bytes": 1000 + i, "records": 1 + i % 7,
        "latency_ms": 0.5 + i % 11,
    }


class ListLog:
    topic = "__guardian_audit"

    def __init__(self, parts: dict[int, list[bytes]]):
        self.parts = parts
        self.pos: dict[int, int] = {}

    def partitions(self) -> list[int]:
        return sorted(self.parts)

    def seek(self, positions: Mapping[int, int | None]) -> None:
        self.pos = {p: o or 0 for p, o in positions.items()}

    def poll(self, max_records: int, timeout_s: float) -> list[SourceRecord]:
        out: list[SourceRecord] = []
        for p in sorted(self.pos):
            while self.pos[p] < len(self.parts[p]) and len(out) < max_records:
                out.append(SourceRecord(p, self.pos[p], self.parts[p][self.pos[p]]))
                self.pos[p] += 1
        return out

    def close(self) -> None:
        pass


def test_migrations_are_idempotent(ch: ClickHouse) -> None:
    assert ch.applied_versions() == [m.version for m in MIGRATIONS]
    assert ch.migrate() == []
    again = connect(data_path=chdb_path(), database=ch.database)  # a restart of the service
    assert again.migrate() == [] and again.applied_versions() == [m.version for m in MIGRATIONS]
    next_version = MIGRATIONS[-1].version + 1
    extra = Migration(next_version, "col", ("ALTER TABLE {db}.topic_inventory ADD COLUMN IF NOT EXISTS x UInt8",))
    assert ch.migrate([*MIGRATIONS, extra]) == [next_version]
    assert ch.migrate([*MIGRATIONS, extra]) == []
    assert ch.scalar(f"SELECT count() FROM system.columns WHERE database = '{ch.database}' "
                     "AND table = 'topic_inventory' AND name = 'x'") == 1


def test_bad_database_name_and_missing_path_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="invalid database"):
        connect(data_path=chdb_path(), database="x; DROP")
    with pytest.raises(ClickHouseUnavailable, match="data_path"):
        connect()


def test_schema_partitioning_order_and_ttl(ch: ClickHouse) -> None:
    ddl = ch.scalar(f"SHOW CREATE TABLE {ch.table('audit_records')}")
    assert "PARTITION BY toDate(ts)" in ddl and "TTL" in ddl
    assert "ORDER BY (cluster, topic, api, client_id, ts)" in ddl


def test_ingest_rollup_replay_and_rejects(ch: ClickHouse) -> None:
    base = datetime(2026, 11, 20, 23, 58, tzinfo=UTC)  # spans two days (two table partitions)
    values = records_as_json_lines(audit(i, base) for i in range(300))
    values[10] = b"garbage"
    values[20] = json.dumps({**audit(20, base), "bytes": -3}).encode()
    values[30] = json.dumps({**audit(30, base), "client_ip": "not-an-ip"}).encode()
    parts = {p: values[p::3] for p in range(3)}
    log = ListLog(parts)
    stats = AuditIngestor(log, ClickHouseIngestStore(ch), batch_size=40).run(idle_polls_before_exit=1)
    assert (stats.accepted, stats.rejected) == (297, 3)
    t = ch.table("audit_records")
    assert ch.scalar(f"SELECT count() FROM {t}") == 297
    assert ch.scalar(f"SELECT count() FROM {ch.table('audit_rejects')}") == 3
    assert ch.scalar(f"SELECT countIf(bytes > 1000000) FROM {t}") == 0
    # the minute rollups hold exactly the raw totals
    raw = ch.rows(f"SELECT topic, partition, api, sum(bytes), count() FROM {t} GROUP BY ALL ORDER BY ALL")
    roll = ch.rows(
        f"SELECT topic, partition, api, sum(bytes), sum(requests) FROM {ch.table('audit_partition_minute')} "
        "GROUP BY ALL ORDER BY ALL"
    )
    assert raw == roll
    assert ch.scalar(f"SELECT sum(bytes) FROM {ch.table('audit_client_minute')}") == ch.scalar(
        f"SELECT sum(bytes) FROM {t}"
    )
    # replay everything from offset 0 (restart with lost position): nothing added
    ing = AuditIngestor(ListLog(parts), ClickHouseIngestStore(ch), batch_size=25)
    ing.start()
    ing.source.seek(dict.fromkeys(parts, 0))
    ing.run(idle_polls_before_exit=1)
    assert ing.stats.accepted == 0 and ing.stats.duplicates_skipped == 300
    assert ch.scalar(f"SELECT count() FROM {t}") == 297
    # a crash after the records insert but before the commit: the restart skips them
    store = ClickHouseIngestStore(ch)
    parts[0].extend(records_as_json_lines(audit(1000 + i, base) for i in range(10)))
    store.write_records(log.topic, [])  # no-op insert is fine
    ing2 = AuditIngestor(ListLog(parts), store, batch_size=100)
    orig_commit = store.commit
    store.commit = lambda *a: (_ for _ in ()).throw(RuntimeError("crash"))  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        ing2.run_once()
    assert ch.scalar(f"SELECT count() FROM {t}") == 307
    store.commit = orig_commit  # type: ignore[method-assign]
    ing3 = AuditIngestor(ListLog(parts), ClickHouseIngestStore(ch), batch_size=100)
    ing3.run(idle_polls_before_exit=1)
    assert ing3.stats.duplicates_skipped == 10 and ing3.stats.accepted == 0
    assert ch.scalar(f"SELECT count() FROM {t}") == 307
    assert ch.scalar(f"SELECT uniqExact(src_partition, src_offset) FROM {t}") == 307
    status = ingest_status(ch, log.topic)
    assert [s["next_offset"] for s in status] == [len(parts[p]) for p in range(3)]
    assert sum(s["rejected"] for s in status) == 3
