"""Writes the collectors' 1-minute rollups to ClickHouse (``disk_rollups``, ``partition_rollups``), so
the load history survives a restart and can be plotted or queried."""

from __future__ import annotations

import threading
from typing import Any

from analytics_spark.clickhouse import ClickHouse
from collectors.builder import Collected
from collectors.collector import RollupAggregator

DISK_COLUMNS = ("minute", "cluster", "broker", "log_dir", "samples", "util_avg", "util_max", "await_ms_avg",
                "read_bytes_per_s_avg", "write_bytes_per_s_avg")
PARTITION_COLUMNS = ("minute", "cluster", "topic", "partition", "samples", "bytes_in_per_s_avg",
                     "bytes_in_per_s_max", "bytes_out_per_s_avg", "messages_in_per_s_avg",
                     "disk_read_bytes_per_s_avg")


class RollupWriter:
    """``on_collected`` callback of the collection job: folds each round into per-cluster minute
    aggregates and inserts every completed minute. ReplacingMergeTree keys make a re-sent minute
    replace, not duplicate, the stored one."""

    def __init__(self, ch: ClickHouse) -> None:
        self.ch = ch
        self._aggregators: dict[str, RollupAggregator] = {}
        self._lock = threading.Lock()
        self.rows_written = 0

    def __call__(self, cluster: str, collected: Collected) -> None:
        with self._lock:
            rows = self._aggregators.setdefault(cluster, RollupAggregator()).add(collected)
            self.write(rows)

    def flush(self) -> None:
        """Write the partial current minute of every cluster (at shutdown)."""
        with self._lock:
            for aggregator in self._aggregators.values():
                self.write(aggregator.flush())

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Insert rollup rows (as the aggregator makes them); O(rows)."""
        disks = [[r.get(c, 0.0) for c in DISK_COLUMNS] for r in rows if r["kind"] == "disk"]
        parts = [[r.get(c, 0.0) for c in PARTITION_COLUMNS] for r in rows if r["kind"] == "partition"]
        if disks:
            self.ch.insert_rows("disk_rollups", disks, DISK_COLUMNS)
        if parts:
            self.ch.insert_rows("partition_rollups", parts, PARTITION_COLUMNS)
        self.rows_written += len(disks) + len(parts)
