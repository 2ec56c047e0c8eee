"""kafka-utils' real balancers in their own venv on a generated snapshot (installs kafka-utils: bench only)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from benchmarks.kafka_utils_peer import run_kafka_utils
from domain import ClusterSnapshot, apply_plan, check_plan
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]


def _replicas_per_broker(snapshot: ClusterSnapshot) -> Counter[int]:
    return Counter(b for p in snapshot.index.partitions for b in p.replicas)


def test_count_balancer_runs_isolated_and_its_proposal_scores_as_our_plan() -> None:
    grown = generate_snapshot(GeneratorSpec(brokers=12, disks_per_broker=2, partitions=600, replication_factor=3,
                                            seed=3, idcs=("idc-a", "idc-b"), racks_per_idc=2, cluster="ku"))
    # two brokers just added (copies of brokers 1 and 2 under new ids), holding nothing yet
    new = tuple(replace(b, id=100 + b.id) for b in grown.brokers[:2])
    snap = replace(grown, brokers=grown.brokers + new)
    assert _replicas_per_broker(snap)[101] == 0
    run = run_kafka_utils(snap, "count", timeout=300)
    assert run.status == "ok", run.status
    assert run.plan is not None and run.details["version"] == "4.1.0"
    assert run.cpu_seconds > 0
    after = apply_plan(snap, run.plan)
    counts = _replicas_per_broker(after)
    # its count balance: replicas even over the replication groups (racks), then over each group's brokers
    racks: dict[str, list[int]] = {}
    for b in after.brokers:
        racks.setdefault(b.rack, []).append(counts[b.id])
    totals = [sum(v) for v in racks.values()]
    assert max(totals) <= 1.05 * min(totals), racks
    assert all(max(v) - min(v) <= 1 for v in racks.values()), racks
    assert min(counts[101], counts[102]) > 100
    assert all(len(set(p.replicas)) == len(p.replicas) == 3 for p in after.index.partitions)
    for move in run.plan.moves:  # its leader balancing is by replica order, then a preferred-replica election
        assert after.index.partition_by_id[move.id].leader == move.replicas[0]
    # kafka-utils knows racks, not IDC placement policies: only those may be broken
    assert {v.code for v in check_plan(snap, run.plan)} <= {"idc-placement"}


def test_a_run_past_its_time_limit_is_reported_not_raised() -> None:
    snap = generate_snapshot(GeneratorSpec(brokers=12, disks_per_broker=2, partitions=600, replication_factor=3,
                                           seed=3, idcs=("idc-a", "idc-b"), racks_per_idc=2, cluster="ku"))
    run = run_kafka_utils(snap, "genetic", timeout=1, max_partition_movements=100)
    assert run.plan is None
    assert run.status == "did not finish in 1 s"
