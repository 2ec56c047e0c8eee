"""Audit topic → ClickHouse ingestion, exactly once across restarts.

The ingestor polls batches of (partition, offset, value) from an :class:`AuditSource` (the
kafka-python consumer :class:`KafkaAuditSource` in production, a fake in unit tests), validates
each value, and writes per batch, in this order:

1. the valid records into ``audit_records`` together with their provenance
   (``src_topic, src_partition, src_offset``);
2. the rejected ones (offset, reason, raw prefix) into ``audit_rejects``;
3. the per-partition and per-client minute rollups of the minutes the batch touched, recomputed
   whole from ``audit_records`` (:mod:`analytics_spark.clickhouse.audit_rollups`: idempotent);
4. a commit row per partition (``next_offset`` = last offset in the batch + 1) into
   ``audit_ingest_offsets``.

On start it resumes every partition at its committed ``next_offset``. A crash (kill -9 included)
between 1 and 4 leaves rows past the commit; they are found by their provenance (the *present*
set), their minutes are rolled up again before anything else, and they are skipped when the
source redelivers them. So a restart neither loses nor duplicates records, in the raw table or in
the rollups, and every rejected record is counted once
(``tests/integration/test_analytics_ingest_crash.py`` kills a real ingest process at each step).
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from analytics_spark.clickhouse import ClickHouse, audit_rollups
from analytics_spark.clickhouse.audit_records import AUDIT_COLUMNS, validate_many

log = logging.getLogger(__name__)

RAW_PREFIX_BYTES = 1024
_TS, _CLUSTER = AUDIT_COLUMNS.index("ts"), AUDIT_COLUMNS.index("cluster")


@dataclass(frozen=True)
class SourceRecord:
    """One message of the audit topic."""

    partition: int
    offset: int
    value: bytes | None


class AuditSource(Protocol):
    """A partitioned, offset-addressed log (the audit topic)."""

    topic: str

    def partitions(self) -> list[int]:
        """Partition ids of the topic."""
        ...

    def seek(self, positions: Mapping[int, int | None]) -> None:
        """Assign the partitions; start each at its offset (None: the earliest available)."""
        ...

    def poll(self, max_records: int, timeout_s: float) -> list[SourceRecord]:
        """Up to ``max_records`` next records, in offset order within each partition."""
        ...

    def close(self) -> None:
        """Release the source."""
        ...


@dataclass(frozen=True)
class Commit:
    """Progress of one partition after one batch."""

    src_partition: int
    next_offset: int
    accepted: int
    rejected: int


class IngestStore(Protocol):
    """Where records, rejects and commits go (ClickHouse in production)."""

    def committed(self, topic: str) -> dict[int, int]:
        """Committed next offset per partition (absent: nothing committed)."""
        ...

    def present_offsets(self, topic: str, partition: int, from_offset: int) -> set[int]:
        """Offsets >= from_offset of ``partition`` already stored (as record or reject)."""
        ...

    def write_records(self, topic: str, rows: list[tuple[Any, ...]]) -> None:
        """Insert audit rows (AUDIT_COLUMNS + partition, offset) in one insert."""
        ...

    def write_rejects(self, topic: str, rows: list[tuple[int, int, str, str]]) -> None:
        """Insert (partition, offset, reason, raw) of rejected records."""
        ...

    def roll_up(self, topic: str, rows: list[tuple[Any, ...]]) -> None:
        """Make the rollups exact for the minutes of these stored audit rows (idempotent)."""
        ...

    def roll_up_stored(self, topic: str, partition: int, from_offset: int) -> None:
        """Make the rollups exact for the minutes of every stored row of ``partition`` at ``from_offset`` or
        later (idempotent)."""
        ...

    def commit(self, topic: str, commits: list[Commit]) -> None:
        """Record the batch's progress."""
        ...


class ClickHouseIngestStore:
    """:class:`IngestStore` on the Guardian ClickHouse schema.

    ``namespace`` (e.g. the cluster name) prefixes the stored source topic (``c1/__guardian_audit``), so
    the same audit topic name on several clusters keeps separate offsets and provenance.
    """

    def __init__(self, ch: ClickHouse, namespace: str = ""):
        self.ch = ch
        self.namespace = namespace

    def key(self, topic: str) -> str:
        """The source topic as stored (``namespace/topic``; a topic name never contains ``/``)."""
        return f"{self.namespace}/{topic}" if self.namespace else topic

    def committed(self, topic: str) -> dict[int, int]:
        rows = self.ch.rows(
            f"SELECT src_partition, max(next_offset) FROM {self.ch.table('audit_ingest_offsets')} "
            "WHERE src_topic = {t:String} GROUP BY src_partition",
            {"t": self.key(topic)},
        )
        return {int(p): int(o) for p, o in rows}

    def present_offsets(self, topic: str, partition: int, from_offset: int) -> set[int]:
        params = {"t": self.key(topic), "p": partition, "o": from_offset}
        where = "WHERE src_topic = {t:String} AND src_partition = {p:Int32} AND src_offset >= {o:Int64}"
        rows = self.ch.rows(
            f"SELECT src_offset FROM {self.ch.table('audit_records')} {where} "
            f"UNION DISTINCT SELECT src_offset FROM {self.ch.table('audit_rejects')} {where}",
            params,
        )
        return {int(r[0]) for r in rows}

    def write_records(self, topic: str, rows: list[tuple[Any, ...]]) -> None:
        self.ch.insert_rows(
            "audit_records",
            [(*r, self.key(topic)) for r in rows],
            [*AUDIT_COLUMNS, "src_partition", "src_offset", "src_topic"],
        )

    def write_rejects(self, topic: str, rows: list[tuple[int, int, str, str]]) -> None:
        self.ch.insert_rows(
            "audit_rejects",
            [(self.key(topic), *r) for r in rows],
            ["src_topic", "src_partition", "src_offset", "reason", "raw"],
        )

    def roll_up(self, topic: str, rows: list[tuple[Any, ...]]) -> None:
        audit_rollups.roll_up(self.ch, {(str(r[_CLUSTER]), r[_TS]) for r in rows})

    def roll_up_stored(self, topic: str, partition: int, from_offset: int) -> None:
        audit_rollups.roll_up_stored(self.ch, self.key(topic), partition, from_offset)

    def commit(self, topic: str, commits: list[Commit]) -> None:
        self.ch.insert_rows(
            "audit_ingest_offsets",
            [(self.key(topic), c.src_partition, c.next_offset, c.accepted, c.rejected) for c in commits],
            ["src_topic", "src_partition", "next_offset", "accepted", "rejected"],
        )


@dataclass
class IngestStats:
    """Counters of one ingestor's lifetime."""

    batches: int = 0
    accepted: int = 0
    rejected: int = 0
    duplicates_skipped: int = 0
    reject_reasons: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class AuditIngestor:
    """Consumes an :class:`AuditSource` into an :class:`IngestStore` in batches, exactly once."""

    def __init__(
        self,
        source: AuditSource,
        store: IngestStore,
        *,
        batch_size: int = 5000,
        poll_timeout_s: float = 0.5,
        broker_idc: Callable[[str, int], str | None] | None = None,
    ):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.source = source
        self.store = store
        self.batch_size = batch_size
        self.poll_timeout_s = poll_timeout_s
        self.broker_idc = broker_idc  # (cluster, broker) -> IDC, for records that lack broker_idc
        self.stats = IngestStats()
        self._position: dict[int, int] = {}
        self._present: dict[int, set[int]] = {}
        self._started = False

    def start(self) -> dict[int, int | None]:
        """Resume every partition at its committed offset; return the positions sought."""
        committed = self.store.committed(self.source.topic)
        positions: dict[int, int | None] = {}
        for p in sorted(set(self.source.partitions()) | set(committed)):
            pos = committed.get(p)
            positions[p] = pos
            start = pos if pos is not None else 0
            self._position[p] = start
            self._present[p] = self.store.present_offsets(self.source.topic, p, start)
            if self._present[p]:
                log.info("audit ingest: partition %d has %d uncommitted stored offsets; their minutes are rolled "
                         "up again and they will be skipped on redelivery", p, len(self._present[p]))
                self.store.roll_up_stored(self.source.topic, p, start)
        self.source.seek(positions)
        self._started = True
        return positions

    def run_once(self) -> int:
        """Poll and store one batch; return the number of records polled (0 when idle)."""
        if not self._started:
            self.start()
        batch = self.source.poll(self.batch_size, self.poll_timeout_s)
        if not batch:
            return 0
        topic = self.source.topic
        fresh = []
        for rec in batch:
            if rec.offset < self._position.get(rec.partition, 0) or rec.offset in self._present.get(
                rec.partition, ()
            ):
                self.stats.duplicates_skipped += 1
                continue
            fresh.append(rec)
        records, reasons = validate_many([r.value for r in fresh])
        good: list[tuple[Any, ...]] = []
        bad: list[tuple[int, int, str, str]] = []
        per_part: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for rec, parsed, reason in zip(fresh, records, reasons, strict=True):
            if parsed is not None:
                if not parsed.broker_idc and self.broker_idc is not None:
                    idc = self.broker_idc(parsed.cluster, parsed.broker)
                    if idc:
                        parsed = parsed.model_copy(update={"broker_idc": idc})
                good.append((*parsed.row(), rec.partition, rec.offset))
                per_part[rec.partition][0] += 1
            else:
                raw = (rec.value or b"")[:RAW_PREFIX_BYTES].decode("utf-8", errors="replace")
                bad.append((rec.partition, rec.offset, reason[:1000], raw))
                per_part[rec.partition][1] += 1
                self.stats.reject_reasons[reason.split(":", 1)[0][:80]] += 1
        self.store.write_records(topic, good)
        self.store.write_rejects(topic, bad)
        self.store.roll_up(topic, good)
        last: dict[int, int] = {}
        for rec in batch:
            last[rec.partition] = max(last.get(rec.partition, -1), rec.offset)
        commits = [
            Commit(p, max(o + 1, self._position.get(p, 0)), per_part[p][0], per_part[p][1])
            for p, o in sorted(last.items())
        ]
        self.store.commit(topic, commits)
        for c in commits:
            self._position[c.src_partition] = c.next_offset
            present = self._present.get(c.src_partition)
            if present:
                self._present[c.src_partition] = {o for o in present if o >= c.next_offset}
        self.stats.batches += 1
        self.stats.accepted += len(good)
        self.stats.rejected += len(bad)
        return len(batch)

    def run(
        self,
        *,
        max_batches: int | None = None,
        stop: Callable[[], bool] | None = None,
        idle_polls_before_exit: int | None = None,
    ) -> IngestStats:
        """Ingest until ``stop()`` is true, ``max_batches`` batches, or N consecutive idle polls."""
        idle = 0
        n = 0
        while not (stop and stop()):
            got = self.run_once()
            n += 1
            idle = 0 if got else idle + 1
            if max_batches is not None and n >= max_batches:
                break
            if idle_polls_before_exit is not None and idle >= idle_polls_before_exit:
                break
        return self.stats


def ingest_status(ch: ClickHouse, topic: str) -> list[dict[str, int]]:
    """Per partition: committed next offset, accepted and rejected totals (rejects deduplicated)."""
    rows = ch.rows(
        f"""SELECT o.src_partition, o.next_offset, o.accepted, ifNull(r.rejected, 0)
        FROM (SELECT src_partition, max(next_offset) AS next_offset, sum(accepted) AS accepted
              FROM {ch.table('audit_ingest_offsets')} WHERE src_topic = {{t:String}}
              GROUP BY src_partition) AS o
        LEFT JOIN (SELECT src_partition, count() AS rejected
              FROM (SELECT DISTINCT src_partition, src_offset FROM {ch.table('audit_rejects')}
                    WHERE src_topic = {{t:String}})
              GROUP BY src_partition) AS r USING (src_partition)
        ORDER BY o.src_partition""",
        {"t": topic},
    )
    return [
        {"partition": int(p), "next_offset": int(o), "accepted": int(a), "rejected": int(r)}
        for p, o, a, r in rows
    ]


class KafkaAuditSource:
    """:class:`AuditSource` over kafka-python's KafkaConsumer (manual assignment, no group)."""

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        topic: str,
        *,
        client_id: str = "guardian-audit-ingest",
        metadata_timeout_s: float = 10.0,
        **consumer_config: Any,
    ):
        from kafka import KafkaConsumer

        self.topic = topic
        self._metadata_timeout_s = metadata_timeout_s
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **consumer_config,
        )

    def partitions(self) -> list[int]:
        deadline = time.monotonic() + self._metadata_timeout_s
        while True:
            parts = self._consumer.partitions_for_topic(self.topic)
            if parts:
                return sorted(parts)
            if time.monotonic() >= deadline:
                raise RuntimeError(f"audit topic {self.topic!r} not found (no partition metadata)")
            time.sleep(0.2)

    def seek(self, positions: Mapping[int, int | None]) -> None:
        from kafka import TopicPartition

        tps = {p: TopicPartition(self.topic, p) for p in positions}
        self._consumer.assign(list(tps.values()))
        for p, off in positions.items():
            if off is None:
                self._consumer.seek_to_beginning(tps[p])
            else:
                self._consumer.seek(tps[p], off)

    def poll(self, max_records: int, timeout_s: float) -> list[SourceRecord]:
        got = self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        out: list[SourceRecord] = []
        for tp, msgs in got.items():
            out.extend(SourceRecord(tp.partition, m.offset, m.value) for m in msgs)
        return out

    def close(self) -> None:
        self._consumer.close()


def broker_idc_from_snapshots(paths: Iterable[str | os.PathLike[str]]) -> Callable[[str, int], str | None]:
    """(cluster, broker id) -> IDC from ``guardian.snapshot/v1`` files; ValueError names a bad file."""
    import json

    table: dict[tuple[str, int], str] = {}
    for path in paths:
        try:
            with open(path) as f:
                snap = json.load(f)
            for b in snap["brokers"]:
                if b.get("idc"):
                    table[(str(snap["cluster"]), int(b["id"]))] = str(b["idc"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"cannot read broker IDCs from snapshot {path}: {exc}") from None
    return lambda cluster, broker: table.get((cluster, broker))


def records_as_json_lines(records: Iterable[Mapping[str, Any]]) -> list[bytes]:
    """Encode audit dicts the way the audit topic carries them (one JSON object per value)."""
    import json

    return [json.dumps(r, separators=(",", ":"), default=str).encode() for r in records]
