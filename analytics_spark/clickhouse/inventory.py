"""The analytics' topic inventory from the live clusters: one row per topic of each latest snapshot.

Goal: the cost and idle-topic models join audit traffic with ``topic_inventory`` (pool, tenant,
partitions, replication factor, storage bytes per topic); on a real cluster that table must come from
what Guardian observes, not from the synthetic ``analytics seed``.

Method: :func:`inventory_rows` reads a :class:`~domain.ClusterSnapshot` (Kafka metadata + the collectors'
replica sizes, pools from the replicated pool assignments): partitions, the largest replica set, bytes = Σ
partition size (one copy: the cost model multiplies by the replication factor), the topic's pool, and its
tenant from the operator's ``[analytics] tenant_pattern`` (a regex whose named group ``tenant`` is taken
from the topic name, first match; by default the first token of a dotted or dashed name; Kafka has no tenant
concept, naming conventions are where operators keep it). A topic the pattern does not match is tenant
``unknown`` (the models' existing bucket). :func:`write_inventory` inserts the rows; ``topic_inventory`` is
a ReplacingMergeTree on (cluster, topic) by ``updated_at``, so the newest row of a topic wins and rewriting
the same snapshot is harmless.

Guarantee: internal topics (``__consumer_offsets``, Guardian's own ``__guardian_*``) are left out; no
row is written for a cluster without a snapshot. Cost: O(partitions) per snapshot; one insert.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from analytics_spark.clickhouse import ClickHouse
from domain import ClusterSnapshot

UNKNOWN_TENANT = "unknown"
COLUMNS = ("cluster", "topic", "pool", "tenant", "partitions", "replication_factor", "size_bytes")
Row = tuple[str, str, str, str, int, int, int]


def inventory_rows(snapshot: ClusterSnapshot, tenant: re.Pattern[str]) -> list[Row]:
    """One row per non-internal topic of ``snapshot`` (see the module docstring)."""
    rows: list[Row] = []
    for t in snapshot.topics:
        if t.name.startswith("__"):
            continue
        m = tenant.search(t.name)
        rf = max((len(p.replicas) for p in t.partitions), default=0)
        size = sum(p.size_bytes for p in t.partitions)
        rows.append((snapshot.cluster, t.name, t.pool, (m.group("tenant") if m else None) or UNKNOWN_TENANT,
                     len(t.partitions), rf, int(size)))
    return rows


def write_inventory(ch: ClickHouse, snapshots: Iterable[ClusterSnapshot], tenant: re.Pattern[str]) -> int:
    """Insert the inventory rows of every snapshot; the number of rows written."""
    rows = [r for s in snapshots for r in inventory_rows(s, tenant)]
    if rows:
        ch.insert_rows("topic_inventory", rows, list(COLUMNS))
    return len(rows)
