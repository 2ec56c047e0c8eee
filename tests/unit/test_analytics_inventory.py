"""The topic inventory from a snapshot: pool, tenant by the operator's pattern, partitions, RF, bytes."""

from __future__ import annotations

import re

from analytics_spark.clickhouse.inventory import UNKNOWN_TENANT, inventory_rows
from domain import parse_snapshot
from tests.support.snapshots import dumps, small_doc


def test_rows_per_topic_with_tenant_from_the_name() -> None:
    doc = small_doc()
    names = [t["name"] for t in doc["topics"]]
    doc["topics"][0]["name"] = "payments.orders"
    doc["topics"].append({**doc["topics"][-1], "name": "__consumer_offsets"})
    snap = parse_snapshot(dumps(doc))
    rows = {r[1]: r for r in inventory_rows(snap, re.compile(r"^(?P<tenant>[a-z]+)\."))}
    assert "__consumer_offsets" not in rows and "payments.orders" in rows
    for t in snap.topics:
        if t.name.startswith("__"):
            continue
        cluster, _, pool, tenant, parts, rf, size = rows[t.name]
        assert (cluster, pool, parts) == (snap.cluster, t.pool, len(t.partitions))
        assert rf == max(len(p.replicas) for p in t.partitions)
        assert size == sum(p.size_bytes for p in t.partitions)
        assert tenant == ("payments" if t.name == "payments.orders" else UNKNOWN_TENANT)
    assert len(rows) == len(names)
