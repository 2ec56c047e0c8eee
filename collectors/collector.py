"""The collector of one cluster: admin round + scrape round -> :class:`~collectors.builder.Collected`,
and a long-running fixed-delay loop with snapshot and 1-minute rollup callbacks.

The admin fetch and the scrapes run concurrently (two threads: the admin client's own network
loop and the scraper's asyncio loop, whose metrics connections are kept alive between rounds).
Nothing raised by a source stops the loop: a failed round is reported to ``on_error`` and the next
one starts after the interval.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from collectors.builder import WANTED_METRICS, Collected, LoadModel, ModelConfig
from collectors.promtext import Payload, parse_fast
from collectors.scrape import Scraper
from collectors.scraped import RoundResult
from kafkaio.endpoints import ClusterEndpoints
from kafkaio.errors import KafkaAuthError, KafkaSourceError
from kafkaio.port import BulkReader
from kafkaio.source import KafkaSource, KafkaSourceOptions
from kafkaio.types import KafkaState

log = logging.getLogger("guardian.collectors")


class CollectionError(Exception):
    """A round produced no snapshot (cluster metadata unreadable); ``auth`` when the cluster refused Guardian's
    credentials or TLS trust settings (retrying does not help)."""

    def __init__(self, message: str, auth: KafkaAuthError | None = None) -> None:
        super().__init__(message)
        self.auth = auth


def _parser(text: str) -> Payload:
    return parse_fast(text, WANTED_METRICS)


class ClusterCollector:
    """Collects one cluster; reuses one admin client and one :class:`LoadModel` across rounds.

    ``source`` is any :class:`~kafkaio.port.BulkReader` (default: a :class:`~kafkaio.source.KafkaSource` owning a
    connection to ``endpoints``; the tests' :class:`~kafkaio.fake_source.FakeBulkReader`)."""

    def __init__(self, endpoints: ClusterEndpoints, config: ModelConfig | None = None,
                 source_options: KafkaSourceOptions | None = None, scrape_timeout_s: float = 5.0,
                 concurrency: int = 256, source: BulkReader | None = None, full_admin_every: int = 6) -> None:
        self.endpoints = endpoints
        self.model = LoadModel(endpoints, config)
        self.source: BulkReader = source or KafkaSource.for_endpoints(endpoints, source_options)
        self.scrape_timeout_s = scrape_timeout_s
        self.concurrency = concurrency
        self._scraper = Scraper(concurrency, _parser)  # its connections are kept alive between rounds
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"admin-{endpoints.cluster}")
        self.last_state: KafkaState | None = None
        self.full_admin_every = max(1, full_admin_every)
        self._slice = 0
        self._targets = endpoints.metrics_endpoint_by_url()

    def _fetch(self) -> KafkaState:
        """The admin round.  The first round reads everything; later rounds read metadata,
        reassignments and quotas, plus log dirs and configs of one slice of the brokers and topics
        (slice ``k`` of ``full_admin_every``, rotating: each broker is re-read every
        ``full_admin_every`` rounds at a cost of 1/``full_admin_every`` of a full read per round),
        plus at once the brokers that need it: replicas without a known log dir, replicas of
        partitions being reassigned (and their topics' throttle configs), intra-broker moves in
        flight (their copy progress is read from the listing)."""
        last = self.last_state
        if last is None:
            state = self.source.fetch(full=True)
        else:
            n = self.full_admin_every
            k = self._slice % n
            self._slice += 1
            alive = sorted(last.brokers)
            want = set(alive[k::n]) | self.model.unknown_dir_brokers | set(last.futures_by_broker)
            topics = set(last.topics[k::n])
            for key, ra in last.reassignments.items():
                want.update(ra.replicas)  # copies in flight: their targets' log dirs, throttle configs
                want.update(ra.adding)
                topics.add(key[0])
            state = self.source.fetch(full=False, previous=last, refresh_brokers=want,
                                      refresh_topics=sorted(topics))
        return state

    def scrape(self) -> RoundResult:
        """One concurrent scrape of every metrics endpoint of the cluster (each broker's endpoints with
        their CA and credential references)."""
        by_url = self._targets
        return self._scraper.scrape([by_url.get(u, u) for u in self.endpoints.metrics_urls], self.scrape_timeout_s)

    def collect_once(self) -> Collected:
        """One round. Raises :class:`CollectionError` when cluster metadata cannot be read.

        The cyclic garbage collector is paused for the round (allocation-heavy, few cycles).
        """
        was = gc.isenabled()
        gc.disable()
        try:
            return self._collect_once()
        finally:
            if was:
                gc.enable()

    def _collect_once(self) -> Collected:
        t0 = time.perf_counter()
        fut = self._pool.submit(self._fetch)
        scrape = self.scrape()
        t_scrape = time.perf_counter() - t0
        try:
            state = fut.result()
        except KafkaSourceError as exc:
            raise CollectionError(str(exc), exc if isinstance(exc, KafkaAuthError) else None) from None
        t_admin = state.duration_s
        self.last_state = state
        collected = self.model.build(state, scrape)
        collected.removing = {tp: tuple(ra.removing) for tp, ra in state.reassignments.items() if ra.removing}
        collected.adding = {tp: tuple(ra.adding) for tp, ra in state.reassignments.items() if ra.adding}
        collected.log_dirs_read_at = dict(state.log_dirs_at)
        collected.round_seconds.update({"scrape": t_scrape, "admin": t_admin, "parse": collected.coverage.parse_seconds,
                                        "total": time.perf_counter() - t0})
        return collected

    def close(self) -> None:
        """Release the admin client, the kept metrics connections and the worker thread."""
        self.source.close()
        self._scraper.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------- rollups
@dataclass
class _Acc:
    n: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    maxs: dict[str, float] = field(default_factory=dict)

    def add(self, values: dict[str, float]) -> None:
        self.n += 1
        for k, v in values.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
            self.maxs[k] = max(self.maxs.get(k, v), v)


class RollupAggregator:
    """Folds snapshots into 1-minute rows per disk and per partition (mean and max of each figure).

    :meth:`add` returns the rows of every minute that closed (a snapshot of a later minute
    arrived); rows are plain dicts ready for a columnar insert::

        disk:      {"kind": "disk", "cluster", "minute", "broker", "log_dir", "samples",
                    "util_avg", "util_max", "read_bytes_per_s_avg", "write_bytes_per_s_avg", "await_ms_avg", ...}
        partition: {"kind": "partition", "cluster", "minute", "topic", "partition", "samples",
                    "bytes_in_per_s_avg", "bytes_in_per_s_max", "bytes_out_per_s_avg",
                    "messages_in_per_s_avg", "disk_read_bytes_per_s_avg", ...}
    """

    def __init__(self) -> None:
        self.minute: datetime | None = None
        self.disks: dict[tuple[int, str], _Acc] = {}
        self.parts: dict[tuple[str, int], _Acc] = {}
        self.cluster = ""

    def add(self, c: Collected) -> list[dict[str, Any]]:
        """Account one snapshot; return the rows of minutes that are now complete."""
        minute = c.snapshot.taken_at.astimezone(UTC).replace(second=0, microsecond=0)
        rows: list[dict[str, Any]] = []
        if self.minute is not None and minute != self.minute:
            rows = self.flush()
        self.minute = minute
        self.cluster = c.snapshot.cluster
        for b in c.snapshot.brokers:
            for d in b.disks:
                self.disks.setdefault((b.id, d.path), _Acc()).add({
                    "util": d.util, "read_bytes_per_s": d.read_bytes_per_s, "write_bytes_per_s": d.write_bytes_per_s,
                    "await_ms": d.await_ms})
        for t in c.snapshot.topics:
            for p in t.partitions:
                self.parts.setdefault((t.name, p.partition), _Acc()).add({
                    "bytes_in_per_s": p.bytes_in_per_s, "bytes_out_per_s": p.bytes_out_per_s,
                    "messages_in_per_s": p.messages_in_per_s, "disk_read_bytes_per_s": p.disk_read_bytes_per_s})
        return rows

    def flush(self) -> list[dict[str, Any]]:
        """Rows of the current (possibly partial) minute; resets the accumulators."""
        if self.minute is None:
            return []
        rows: list[dict[str, Any]] = []
        for (bid, path), a in sorted(self.disks.items()):
            row: dict[str, Any] = {"kind": "disk", "cluster": self.cluster, "minute": self.minute, "broker": bid,
                                   "log_dir": path, "samples": a.n}
            for k, v in a.sums.items():
                row[f"{k}_avg"] = v / a.n
                row[f"{k}_max"] = a.maxs[k]
            rows.append(row)
        for (topic, part), a in sorted(self.parts.items()):
            row = {"kind": "partition", "cluster": self.cluster, "minute": self.minute, "topic": topic,
                   "partition": part, "samples": a.n}
            for k, v in a.sums.items():
                row[f"{k}_avg"] = v / a.n
                row[f"{k}_max"] = a.maxs[k]
            rows.append(row)
        self.disks.clear()
        self.parts.clear()
        return rows


# ---------------------------------------------------------------------- loop
SnapshotCallback = Callable[[Collected], None]
RollupCallback = Callable[[list[dict[str, Any]]], None]
ErrorCallback = Callable[[Exception], None]


class CollectorLoop:
    """Runs :meth:`ClusterCollector.collect_once` every ``interval_s`` (fixed delay) in a thread.

    ``on_snapshot`` gets every :class:`Collected`; ``on_rollup`` gets the rows of each completed
    minute (the service writes them to ClickHouse); ``on_error`` gets every failure.  A callback
    that raises is logged and never stops the loop.  :attr:`latest` is the newest result.
    """

    def __init__(self, collector: ClusterCollector, interval_s: float = 10.0,
                 on_snapshot: SnapshotCallback | None = None, on_rollup: RollupCallback | None = None,
                 on_error: ErrorCallback | None = None) -> None:
        if not interval_s > 0:
            raise ValueError("interval_s must be > 0")
        self.collector = collector
        self.interval_s = interval_s
        self.on_snapshot = on_snapshot
        self.on_rollup = on_rollup
        self.on_error = on_error
        self.rollups = RollupAggregator()
        self.latest: Collected | None = None
        self.rounds = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the loop thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"collector-{self.collector.endpoints.cluster}",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current round, flush the partial minute's rollups, close the collector."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        rows = self.rollups.flush()
        if rows:
            self._call(self.on_rollup, rows)
        self.collector.close()

    def _call(self, cb: Callable[[Any], None] | None, arg: Any) -> None:
        if cb is None:
            return
        try:
            cb(arg)
        except Exception:
            log.exception("collector callback failed")

    def run_round(self) -> Collected | None:
        """One round with all callbacks (what the thread does each interval)."""
        try:
            c = self.collector.collect_once()
        except Exception as exc:  # a loop never dies of a bad round
            self.failures += 1
            log.warning("collection round of %s failed: %s", self.collector.endpoints.cluster, exc)
            self._call(self.on_error, exc)
            return None
        self.rounds += 1
        self.latest = c
        self._call(self.on_snapshot, c)
        rows = self.rollups.add(c)
        if rows:
            self._call(self.on_rollup, rows)
        return c

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.run_round()
            self._stop.wait(max(self.interval_s - (time.monotonic() - t0), 0.1 * self.interval_s))
