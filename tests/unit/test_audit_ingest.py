"""Unit tests: audit validation and the exactly-once ingest logic, with a fake log and store."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from analytics_spark.clickhouse.audit_records import AUDIT_COLUMNS, parse_audit
from analytics_spark.clickhouse.ingest import AuditIngestor, Commit, SourceRecord


def rec(i: int, **over: Any) -> dict[str, Any]:
    r = {
        "ts": 1_763_719_200_000 + 7_000 * i, "cluster": "c1", "broker": 1, "broker_idc": "idc-a",
        "client_id": f"cli-{i % 3}", "user": "u", "client_ip": "10.0.0.1", "client_idc": "idc-b",
        "api": "produce" if i % 2 else "fetch", "topic": "orders", "partition": i % 4,
        "bytes": 100 + i, "records": 1, "latency_ms": 1.5,
    }
    r.update(over)
    return r


class FakeLog:
    """An in-memory partitioned log with Kafka's delivery semantics (replays from the seek)."""

    topic = "__audit"

    def __init__(self, parts: dict[int, list[bytes | None]]):
        self.parts = parts
        self.pos: dict[int, int] = {}

    def partitions(self) -> list[int]:
        return sorted(self.parts)

    def seek(self, positions: Mapping[int, int | None]) -> None:
        self.pos = {p: (o or 0) for p, o in positions.items()}

    def poll(self, max_records: int, timeout_s: float) -> list[SourceRecord]:
        out: list[SourceRecord] = []
        while len(out) < max_records:
            progressed = False
            for p in sorted(self.pos):
                o = self.pos[p]
                if o < len(self.parts[p]) and len(out) < max_records:
                    out.append(SourceRecord(p, o, self.parts[p][o]))
                    self.pos[p] = o + 1
                    progressed = True
            if not progressed:
                break
        return out

    def close(self) -> None:
        pass


class Crash(Exception):
    pass


class MemStore:
    """IngestStore in memory; `crash_at` names a step at which the next batch dies."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, ...]] = []
        self.rejects: dict[tuple[int, int], str] = {}
        self.commits: list[Commit] = []
        self.crash_at: str | None = None
        # (cluster, minute) -> (rows, bytes) as last recomputed from `records` (what the rollup tables hold)
        self.rollup: dict[tuple[str, int], tuple[int, int]] = {}

    def _maybe(self, step: str) -> None:
        if self.crash_at == step:
            self.crash_at = None
            raise Crash(step)

    def committed(self, topic: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for c in self.commits:
            out[c.src_partition] = max(out.get(c.src_partition, 0), c.next_offset)
        return out

    def present_offsets(self, topic: str, partition: int, from_offset: int) -> set[int]:
        s = {r[-1] for r in self.records if r[-2] == partition and r[-1] >= from_offset}
        return s | {o for (p, o) in self.rejects if p == partition and o >= from_offset}

    def write_records(self, topic: str, rows: list[tuple[Any, ...]]) -> None:
        self._maybe("records")
        self.records.extend(rows)

    def write_rejects(self, topic: str, rows: list[tuple[int, int, str, str]]) -> None:
        self._maybe("rejects")
        for p, o, reason, _raw in rows:
            self.rejects[(p, o)] = reason

    def _recompute(self, minutes: set[tuple[str, int]]) -> None:
        for key in minutes:
            rows = [r for r in self.records if (r[1], int(r[0].timestamp()) // 60) == key]
            self.rollup[key] = (len(rows), sum(r[AUDIT_COLUMNS.index("bytes")] for r in rows))

    def roll_up(self, topic: str, rows: list[tuple[Any, ...]]) -> None:
        self._maybe("rollup")
        self._recompute({(r[1], int(r[0].timestamp()) // 60) for r in rows})

    def roll_up_stored(self, topic: str, partition: int, from_offset: int) -> None:
        self._recompute({(r[1], int(r[0].timestamp()) // 60) for r in self.records
                         if r[-2] == partition and r[-1] >= from_offset})

    def exact_rollup(self) -> dict[tuple[str, int], tuple[int, int]]:
        """What the rollups must hold: the totals of every stored record's minute."""
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for r in self.records:
            key = (r[1], int(r[0].timestamp()) // 60)
            n, b = out.get(key, (0, 0))
            out[key] = (n + 1, b + r[AUDIT_COLUMNS.index("bytes")])
        return out

    def commit(self, topic: str, commits: list[Commit]) -> None:
        self._maybe("commit")
        self.commits.extend(commits)


def make_log(n: int, bad_every: int = 0) -> FakeLog:
    parts: dict[int, list[bytes | None]] = {0: [], 1: [], 2: []}
    for i in range(n):
        if bad_every and i % bad_every == 0:
            v: bytes | None = b"{not json" if i % 2 else json.dumps(rec(i, bytes=-5)).encode()
        else:
            v = json.dumps(rec(i)).encode()
        parts[i % 3].append(v)
    return FakeLog(parts)


def _valid(v: bytes | None) -> bool:
    try:
        parse_audit(v)
        return True
    except ValueError:
        return False


def keys(store: MemStore) -> list[tuple[int, int]]:
    return sorted((r[-2], r[-1]) for r in store.records)


def test_parse_valid_record_roundtrip() -> None:
    r = parse_audit(json.dumps(rec(7)).encode())
    assert r.api == "produce" and r.partition == 3 and r.bytes == 107
    assert r.ts.tzinfo is not None and r.ts.year == 2025
    assert len(r.row()) == len(AUDIT_COLUMNS)


def test_parse_iso_timestamp_and_defaults() -> None:
    d = rec(1, ts="2026-11-21T10:00:00.5Z")
    del d["user"], d["client_idc"]
    r = parse_audit(json.dumps(d))
    assert r.ts.hour == 10 and r.ts.microsecond == 500000 and r.user == "" and r.client_idc == ""


@pytest.mark.parametrize(
    "value, needle",
    [
        (b"{oops", "not JSON"),
        (b"[1,2]", "JSON object"),
        (None, "tombstone"),
        (json.dumps(rec(1, bytes=-1)).encode(), "bytes"),
        (json.dumps(rec(1, api="delete")).encode(), "api"),
        (json.dumps(rec(1, client_ip="999.1.1.1")).encode(), "client_ip"),
        (json.dumps(rec(1, partition="x")).encode(), "partition"),
        (json.dumps({k: v for k, v in rec(1).items() if k != "topic"}).encode(), "topic"),
        (b'{"ts": NaN}', "ts"),
        (json.dumps(rec(1, ts="yesterday")).encode(), "ts"),
    ],
)
def test_parse_rejects_with_reason(value: bytes | None, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_audit(value)


def test_ingest_all_once_and_counts_rejects() -> None:
    log, store = make_log(100, bad_every=10), MemStore()
    ing = AuditIngestor(log, store, batch_size=7)
    stats = ing.run(idle_polls_before_exit=1)
    assert stats.accepted == 90 and stats.rejected == 10
    assert len(store.records) == 90 and len(store.rejects) == 10
    assert store.committed("t") == {p: len(log.parts[p]) for p in log.parts}


@pytest.mark.parametrize("step", ["records", "rejects", "rollup", "commit"])
@pytest.mark.parametrize("crash_batch", [0, 3])
def test_restart_after_crash_neither_loses_nor_duplicates(step: str, crash_batch: int) -> None:
    log, store = make_log(120, bad_every=9), MemStore()
    ing = AuditIngestor(log, store, batch_size=10)
    for _ in range(crash_batch):
        ing.run_once()
    store.crash_at = step
    with pytest.raises(Crash):
        ing.run_once()
    # restart: a new ingestor on the same log and store (the log replays from the commit)
    ing2 = AuditIngestor(log, store, batch_size=10)
    ing2.run(idle_polls_before_exit=1)
    expected_good = sorted(
        (p, o) for p, vals in log.parts.items() for o, v in enumerate(vals) if _valid(v)
    )
    assert keys(store) == expected_good
    assert len(store.records) == len(set(keys(store)))  # no duplicates
    assert len(store.rejects) == sum(len(v) for v in log.parts.values()) - len(expected_good)
    assert store.rollup == store.exact_rollup()  # the rollups too: the stored, uncommitted rows rolled up again


def test_replay_of_committed_range_is_skipped() -> None:
    log, store = make_log(60), MemStore()
    AuditIngestor(log, store, batch_size=8).run(idle_polls_before_exit=1)
    before = list(store.records)
    # a source that ignores the seek and redelivers from 0 (e.g. offsets reset)
    ing = AuditIngestor(log, store, batch_size=8)
    ing.start()
    log.seek(dict.fromkeys(log.parts, 0))
    ing.run(idle_polls_before_exit=1)
    assert store.records == before
    assert ing.stats.duplicates_skipped == 60


def test_new_records_after_restart_are_appended() -> None:
    log, store = make_log(30), MemStore()
    AuditIngestor(log, store).run(idle_polls_before_exit=1)
    log.parts[1].append(json.dumps(rec(999)).encode())
    ing = AuditIngestor(log, store)
    ing.run(idle_polls_before_exit=1)
    assert ing.stats.accepted == 1 and len(store.records) == 31


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        AuditIngestor(make_log(1), MemStore(), batch_size=0)


def test_kafkasim_record_shape_is_accepted_and_broker_idc_filled() -> None:
    sim = {"ts": "2026-11-21T10:00:00Z", "interval_s": 60, "kind": "fetch", "cluster": "east",
           "client_id": "orders-reader", "user": "analytics", "client_ip": "10.1.2.3", "client_idc": "idc-b",
           "topic": "orders", "partition": 0, "broker": 2, "bytes": 123, "records": 4, "latency_ms": 1.5}
    r = parse_audit(json.dumps(sim))
    assert r.api == "fetch" and r.broker_idc == ""
    log = FakeLog({0: [json.dumps(sim).encode(), json.dumps({**sim, "broker": 9}).encode()]})
    store = MemStore()
    topo = {("east", 2): "idc-a"}
    AuditIngestor(log, store, broker_idc=lambda c, b: topo.get((c, b))).run(idle_polls_before_exit=1)
    idcs = [row[AUDIT_COLUMNS.index("broker_idc")] for row in store.records]
    assert idcs == ["idc-a", ""]  # unknown broker: left empty, excluded from cross-IDC accounting


def test_broker_idc_from_snapshot_files(tmp_path: Any) -> None:
    from analytics_spark.clickhouse.ingest import broker_idc_from_snapshots

    snap = {"format": "guardian.snapshot/v1", "cluster": "east", "brokers": [
        {"id": 1, "idc": "idc-a"}, {"id": 2, "idc": "idc-b"}], "topics": []}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(snap))
    f = broker_idc_from_snapshots([p])
    assert f("east", 2) == "idc-b" and f("east", 3) is None and f("west", 1) is None
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ValueError, match=r"bad\.json"):
        broker_idc_from_snapshots([bad])
