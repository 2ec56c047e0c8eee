"""The planners' blind spots of issue #20: load-blind pre-allocation, markup in machine-readable output,
whole-cluster pool growth, replicas left on dead brokers, and large replicas that only a swap can place."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

import controlplane.cli.plan as cli_plan
from domain import Plan, pool_stats
from kafkasim.generator import GeneratorSpec, generate_snapshot
from planners import NewTopic, plan_pool_grow, plan_preallocation, plan_rebalance
from planners.preallocate import with_topic
from tests.planner_cases import MB, assert_valid, broker, disk, partition, snapshot_of, topic


def _hot_and_cool() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Six one-disk brokers, one per rack; broker 1 runs at 0.80, the others at 0.20."""
    brokers, parts = [], []
    for b in range(1, 7):
        util = 0.8 if b == 1 else 0.2
        brokers.append(broker(b, "a", f"r{b}", disks=[disk("/data1", util=util)]))
        parts.append(partition(b, [b], ["/data1"], bytes_in=util * 100 * MB))
    return brokers, [topic("old", parts)]


def test_preallocation_places_by_load_not_evenly_per_broker() -> None:
    brokers, topics = _hot_and_cool()
    snap = snapshot_of(brokers, topics)
    result = plan_preallocation(snap, NewTopic("new", partitions=12, replication_factor=2, bytes_in_per_s=60 * MB))
    per_broker = Counter(b for p in result.topic.partitions for b in p.replicas)
    assert per_broker[1] == 0  # the loaded broker takes nothing while cooler disks have room
    before, after = pool_stats(snap)["shared"], pool_stats(with_topic(snap, result.topic))["shared"]
    assert after.max_util == pytest.approx(before.max_util)  # the pool's peak does not rise
    assert max(per_broker[b] for b in range(2, 7)) - min(per_broker[b] for b in range(2, 7)) <= 1


def test_machine_readable_notes_are_printed_verbatim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(cli_plan, "out", Console(file=buffer, width=60, force_terminal=False))
    assignment = ",".join(f"{b}:100:{b + 1}" for b in range(40))  # ":100:" is an emoji code to rich
    command = f"create with: kafka-topics --create --topic [bold]x[/bold] --replica-assignment {assignment}"
    cli_plan._emit(Plan(cluster="t", kind="preallocate", notes=(command,)), tmp_path / "p.json")
    assert f"note: {command}\n" in buffer.getvalue()  # no emoji, no markup, no wrapping


def test_pool_grow_moves_only_the_pools_partitions_onto_the_new_brokers() -> None:
    spec = GeneratorSpec(brokers=30, disks_per_broker=3, partitions=900, seed=5, skew="zipf", idcs=("idc-a", "idc-b"),
                         pools={"shared": 0.5, "pay": 0.3, "free": 0.2})
    snap = generate_snapshot(spec)
    assert any(m.topic for m in plan_rebalance(snap).moves
               if snap.index.topic_by_name[m.topic].pool == "pay")  # the other pool is out of balance too
    growth = plan_pool_grow(snap, "shared", 3)
    after = assert_valid(growth.snapshot, growth.plan)
    new = set(growth.brokers)
    assert growth.plan.moves
    for m in growth.plan.moves:
        old = snap.index.partition_by_id[m.id]
        assert snap.index.topic_by_name[m.topic].pool == "shared"
        assert set(m.replicas) - set(old.replicas) <= new  # replicas go to the new brokers only
    assert all(after.index.broker_load[b].replicas > 0 for b in new)
    before_peak = pool_stats(growth.snapshot)["shared"].max_util
    assert pool_stats(after)["shared"].max_util < before_peak
    share = pool_stats(after)["shared"].mean_util
    filled = [after.index.disk_util_estimate((b, d.path)) for b in new
              for d in after.index.broker_by_id[b].disks]
    assert min(filled) >= 0.8 * share  # the new brokers are filled near the pool's mean
