"""A snapshot taken while a reassignment is in flight plans from target replica sets (issue 16, item 11).

Kafka lists a moving partition's replicas as target + removing (RF + 1); planning from that list proposed
RF-4 targets for an RF-3 topic. kafkasim is frozen here, so the move stays in flight for the whole test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, TopicPartition

from collectors.collector import ClusterCollector
from domain import check_plan, parse_snapshot
from planners import plan_rebalance
from tests.support.collectors_support import Sim
from tests.support.executor_support import guardian

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sim() -> Iterator[Sim]:
    s = Sim()
    yield s
    s.stop()


def test_snapshot_taken_mid_move_shows_target_replica_sets(sim: Sim, tmp_path: Path) -> None:
    eps = sim.endpoints()
    admin = KafkaAdminClient(client_id="test", **sim.client_kwargs())
    try:
        old = sim.topology()[("orders", 0)]["replicas"]
        new = [b for b in (1, 2, 3, 4) if b not in old][:1] + list(old[1:])
        admin.alter_partition_reassignments({TopicPartition("orders", 0): new})
    finally:
        admin.close()
    col = ClusterCollector(eps)
    try:
        raw = col.collect_once()
    finally:
        col.close()
    assert raw.coverage.reassignments_in_flight == 1
    assert len(raw.snapshot.index.partition_by_id[("orders", 0)].replicas) == 4  # what Kafka lists mid-move
    assert list(raw.planning_snapshot().index.partition_by_id[("orders", 0)].replicas) == new

    endpoints_file = tmp_path / "endpoints.json"
    endpoints_file.write_text(json.dumps(sim.endpoints_doc))
    out = tmp_path / "snap.json"
    taken = guardian("snapshot", "take", "-e", str(endpoints_file), "-c", "east", "-o", str(out), "--rounds", "1")
    assert taken.returncode == 0, taken.stderr[-2000:]
    snap = parse_snapshot(out.read_text())
    assert list(snap.index.partition_by_id[("orders", 0)].replicas) == new
    assert {len(p.replicas) for p in snap.index.topic_by_name["orders"].partitions} == {3}
    plan = plan_rebalance(snap)
    assert all(len(m.replicas) == 3 for m in plan.moves if m.topic == "orders")
    assert check_plan(snap, plan) == []
