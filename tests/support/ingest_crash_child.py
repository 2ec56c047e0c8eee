"""A real audit-ingest process for the kill -9 tests (``python -m tests.support.ingest_crash_child``).

It ingests a deterministic audit log (:func:`audit_log`: a pure function of its arguments, the stand-in for a
Kafka topic that is still there after the crash) into embedded ClickHouse (chdb) on ``--data`` with the product's
:class:`AuditIngestor` and :class:`ClickHouseIngestStore`, and can kill itself with SIGKILL:

- ``--kill-after STEP:N``: right after the N-th call of a store step returns (STEP is ``records``, ``rejects``,
  ``rollup`` or ``commit``: between two of the ingest's writes);
- ``--kill-during STEP:N:MS``: MS milliseconds after the N-th call of a step starts, from another thread, while
  the main thread is inside ClickHouse (mid-insert).

It prints ``STEP N`` lines as it goes (the parent also kills it from outside at random moments), and with
``--verify`` prints one JSON object with the raw table, the rejects and both audit rollups as the models read
them, next to the same totals computed from the raw table and from the log itself.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from analytics_spark.clickhouse.client import ClickHouse, connect
from analytics_spark.clickhouse.ingest import AuditIngestor, ClickHouseIngestStore, SourceRecord

BASE = datetime(2026, 11, 20, 23, 55, tzinfo=UTC)  # the log spans midnight: two table partitions


def audit_value(p: int, o: int) -> bytes:
    """The record at (partition, offset): every 97th is malformed (a reject)."""
    if (p * 31 + o) % 97 == 0:
        return b'{"not": "an audit record"'
    i = p * 1_000_003 + o
    rec = {
        "ts": (BASE + timedelta(milliseconds=200 * o + 11 * p)).isoformat(), "cluster": f"c{i % 2}",
        "broker": i % 3, "broker_idc": "idc-a", "client_id": f"app-{i % 7}", "user": f"svc{i % 2}",
        "client_ip": "10.0.0.9", "client_idc": "idc-b" if i % 5 else "idc-a",
        "api": "fetch" if i % 3 else "produce", "topic": f"t{i % 4}", "partition": i % 6,
        "bytes": 1000 + i % 5000, "records": 1 + i % 7, "latency_ms": 0.5 + i % 11,
    }
    return json.dumps(rec, separators=(",", ":")).encode()


def audit_log(partitions: int, per_partition: int) -> dict[int, list[bytes]]:
    """The whole log: partition -> values by offset."""
    return {p: [audit_value(p, o) for o in range(per_partition)] for p in range(partitions)}


class LogSource:
    """An :class:`AuditSource` over :func:`audit_log`, polling the partitions round-robin like a consumer."""

    topic = "__guardian_audit"

    def __init__(self, parts: dict[int, list[bytes]]):
        self.parts = parts
        self.pos: dict[int, int] = {}

    def partitions(self) -> list[int]:
        return sorted(self.parts)

    def seek(self, positions: Any) -> None:
        self.pos = {p: o or 0 for p, o in positions.items()}

    def poll(self, max_records: int, timeout_s: float) -> list[SourceRecord]:
        out: list[SourceRecord] = []
        share = max(1, max_records // max(1, len(self.pos)))
        for p in sorted(self.pos):
            end = min(len(self.parts[p]), self.pos[p] + share)
            out.extend(SourceRecord(p, o, self.parts[p][o]) for o in range(self.pos[p], end))
            self.pos[p] = end
        return out

    def close(self) -> None:
        pass


class KillingStore(ClickHouseIngestStore):
    """The product's store, announcing each step and killing the process at the chosen one."""

    def __init__(self, ch: ClickHouse, after: tuple[str, int] | None, during: tuple[str, int, float] | None):
        super().__init__(ch)
        self.after, self.during = after, during
        self.calls: Counter[str] = Counter()

    def _step(self, name: str, call: Any, *args: Any) -> Any:
        self.calls[name] += 1
        n = self.calls[name]
        print(f"{name} {n}", flush=True)
        if self.during and self.during[:2] == (name, n):
            threading.Timer(self.during[2] / 1000.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
        out = call(*args)
        if self.after == (name, n):
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    def write_records(self, topic: str, rows: list[tuple[Any, ...]]) -> None:
        self._step("records", super().write_records, topic, rows)

    def write_rejects(self, topic: str, rows: list[tuple[int, int, str, str]]) -> None:
        self._step("rejects", super().write_rejects, topic, rows)

    def roll_up(self, topic: str, rows: list[tuple[Any, ...]]) -> None:
        self._step("rollup", super().roll_up, topic, rows)

    def commit(self, topic: str, commits: Any) -> None:
        self._step("commit", super().commit, topic, commits)


def expected(parts: dict[int, list[bytes]]) -> dict[str, Any]:
    """What an exactly-once ingest of the whole log must hold (from the log, not from ClickHouse)."""
    from analytics_spark.clickhouse.audit_records import parse_audit

    raw: Counter[str] = Counter()
    part_roll: Counter[str] = Counter()
    client_roll: Counter[str] = Counter()
    rejects = 0
    for values in parts.values():
        for v in values:
            try:
                r = parse_audit(v)
            except ValueError:
                rejects += 1
                continue
            raw["rows"] += 1
            raw["bytes"] += r.bytes
            minute = r.ts.replace(second=0, microsecond=0).strftime("%Y-%m-%d %H:%M:%S")
            part_roll["|".join(map(str, (minute, r.cluster, r.topic, r.partition, r.api)))] += r.bytes
            client_roll["|".join(map(str, (minute, r.cluster, r.topic, r.api, r.client_id, r.user, r.client_idc,
                                           r.broker_idc)))] += r.bytes
    return {"rows": raw["rows"], "bytes": raw["bytes"], "rejects": rejects,
            "partition_minute": dict(part_roll), "client_minute": dict(client_roll)}


def observed(ch: ClickHouse) -> dict[str, Any]:
    """The raw table, the rejects and both rollups as stored (the rollups read as the models read them)."""
    t = ch.table("audit_records")
    pm, cm = ch.table("audit_partition_minute"), ch.table("audit_client_minute")

    def keyed(sql: str) -> dict[str, int]:
        return {"|".join(map(str, row[:-1])): int(row[-1]) for row in ch.rows(sql)}

    return {
        "rows": int(ch.scalar(f"SELECT count() FROM {t}")),
        "distinct_offsets": int(ch.scalar(f"SELECT uniqExact(src_partition, src_offset) FROM {t}")),
        "bytes": int(ch.scalar(f"SELECT sum(bytes) FROM {t}")),
        "rejects": int(ch.scalar(f"SELECT uniqExact(src_partition, src_offset) FROM {ch.table('audit_rejects')}")),
        "partition_minute": keyed(
            f"SELECT toString(minute), cluster, topic, partition, toString(api), sum(bytes) FROM {pm} GROUP BY ALL"),
        "partition_requests": int(ch.scalar(f"SELECT sum(requests) FROM {pm}")),
        "client_minute": keyed(
            f"SELECT toString(minute), cluster, topic, toString(api), client_id, user, client_idc, broker_idc, "
            f"sum(bytes) FROM {cm} GROUP BY ALL"),
        "client_requests": int(ch.scalar(f"SELECT sum(requests) FROM {cm}")),
    }


def _pair(text: str | None, n: int) -> Any:
    if not text:
        return None
    parts = text.split(":")
    if len(parts) != n:
        raise SystemExit(f"expected {n} colon-separated fields in {text!r}")
    return (parts[0], int(parts[1]), *(float(x) for x in parts[2:]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--per-partition", type=int, default=8000)
    ap.add_argument("--batch-size", type=int, default=3000)
    ap.add_argument("--kill-after")
    ap.add_argument("--kill-during")
    ap.add_argument("--verify", action="store_true")
    a = ap.parse_args(argv)
    ch = connect(data_path=a.data)
    parts = audit_log(a.partitions, a.per_partition)
    store = KillingStore(ch, _pair(a.kill_after, 2), _pair(a.kill_during, 3))
    print("ready", flush=True)
    stats = AuditIngestor(LogSource(parts), store, batch_size=a.batch_size).run(idle_polls_before_exit=1)
    print(f"done accepted={stats.accepted} rejected={stats.rejected} skipped={stats.duplicates_skipped}",
          flush=True)
    if a.verify:
        print(json.dumps({"expected": expected(parts), "observed": observed(ch)}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # no chdb teardown races at exit


if __name__ == "__main__":
    main()
