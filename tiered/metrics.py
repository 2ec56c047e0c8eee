"""Prometheus collector of the tiered-metadata service (registered on the node's /metrics registry).

Goal: events/s (a counter to ``rate()``), retries answered without re-applying, groups, live segments
and remote bytes per cluster.
Method: read at scrape time — per-cluster totals are kept by every store write, so a scrape reads
O(clusters) records, never the segments. Guarantee: figures of this node's applied state.
Cost: one LMDB read transaction per scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tiered.node import TieredNode


class TieredCollector:
    """``collect()`` for prometheus_client; see the module docstring."""

    def __init__(self, node: TieredNode) -> None:
        self.node = node

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        appended = CounterMetricFamily("guardian_tiered_appended_events", "segment events appended through this node")
        appended.add_metric([], float(self.node.appended_events))
        yield appended
        duplicates = CounterMetricFamily("guardian_tiered_duplicate_appends",
                                         "idempotent appends answered as retries of applied groups (not re-applied)")
        duplicates.add_metric([], float(self.node.duplicates))
        yield duplicates
        per = {name: GaugeMetricFamily(f"guardian_tiered_{name}", text, labels=["cluster"]) for name, text in (
            ("events", "segment events stored"), ("groups", "event groups stored"),
            ("live_segments", "segments not yet delete-finished"), ("remote_bytes", "bytes in remote storage"),
            ("partitions", "partitions with tiered metadata"))}
        for cluster, t in self.node.store.totals().items():
            for name, fam in per.items():
                fam.add_metric([cluster], float(getattr(t, name)))
        yield from per.values()
        watermark = GaugeMetricFamily("guardian_tiered_applied_index", "Raft index the tiered store holds")
        watermark.add_metric([], float(self.node.store.watermark()))
        yield watermark
