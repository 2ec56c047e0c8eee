"""kafka-utils as a benchmark peer: our snapshot -> its input, its proposal -> our plan (no kafka-utils needed)."""

from __future__ import annotations

import pytest

from benchmarks.kafka_utils_peer import kafka_utils_request, plan_from_kafka_utils
from domain import LeaderChange, PartitionMove, apply_plan, parse_snapshot
from tests.support.snapshots import GIB, dumps, small_doc


def test_request_is_one_cluster_per_pool_with_rack_liveness_weight_and_size() -> None:
    snap = parse_snapshot(dumps(small_doc()))
    request = kafka_utils_request(snap, "genetic", ["--num-gens", "5"], max_partition_movements=7)
    assert request["balancer"] == "genetic"
    assert request["balancer_args"] == ["--num-gens", "5"]
    assert request["max_partition_movements"] == 7
    pools = {p["pool"]: p for p in request["pools"]}
    assert sorted(pools) == ["pay", "shared"]
    assert pools["pay"]["brokers"] == [[5, "b-r2", True]]
    assert pools["pay"]["partitions"] == [["ledger", 0, [5], pytest.approx(3e6), float(GIB)]]
    shared = pools["shared"]
    # the dead broker stays in its pool, marked dead (kafka-utils sees it with no metadata: inactive)
    assert shared["brokers"] == [[1, "a-r1", True], [2, "a-r2", True], [3, "a-r3", True], [4, "b-r1", True],
                                 [6, "b-r3", False]]
    # weight = mean disk bytes/s per replica: 3 x 10e6 writes + the leader's 5e6 reads, over 3 replicas
    assert shared["partitions"] == [
        ["orders", 0, [1, 2, 4], pytest.approx(35e6 / 3), float(GIB)],
        ["orders", 1, [2, 1, 4], pytest.approx(2e6), float(GIB)],
    ]


def test_proposal_becomes_moves_with_log_dirs_by_the_brokers_rule_and_preferred_elections() -> None:
    snap = parse_snapshot(dumps(small_doc()))
    answer = {"status": "ok", "assignment": [
        ["orders", 0, [3, 2, 4]],  # 1 -> 3: broker 3's dirs are empty, the tie goes to /data1
        ["orders", 1, [1, 2, 3]],  # reordered (1 first) and 4 -> 3: /data1 now holds one, so /data2
    ]}
    plan = plan_from_kafka_utils(snap, answer, kind="kafka-utils-count")
    assert plan.kind == "kafka-utils-count"
    assert plan.moves == (
        PartitionMove("orders", 0, (3, 2, 4), ("/data1", "/data1", "/data1")),
        PartitionMove("orders", 1, (1, 2, 3), ("/data2", "/data1", "/data2")),
    )
    # orders-0 loses its leader 1, so Kafka hands leadership to the first target replica (3): no election;
    # orders-1 keeps leader 2 through the move, then the preferred-replica election makes 1 leader
    assert plan.leaders == (LeaderChange("orders", 1, 1),)
    after = apply_plan(snap, plan).index.partition_by_id
    assert (after[("orders", 0)].replicas, after[("orders", 0)].leader) == ((3, 2, 4), 3)
    assert (after[("orders", 1)].replicas, after[("orders", 1)].leader) == ((1, 2, 3), 1)
    assert after[("ledger", 0)] == snap.index.partition_by_id[("ledger", 0)]


def test_reorder_only_costs_no_replica_move_and_an_empty_proposal_no_plan() -> None:
    snap = parse_snapshot(dumps(small_doc()))
    plan = plan_from_kafka_utils(snap, {"assignment": [["orders", 0, [2, 1, 4]]]}, kind="k")
    assert plan.moves == (PartitionMove("orders", 0, (2, 1, 4), ("/data1", "/data1", "/data1")),)
    assert plan.leaders == (LeaderChange("orders", 0, 2),)
    assert plan_from_kafka_utils(snap, {"assignment": []}, kind="k").moves == ()


def test_proposal_naming_an_unknown_partition_is_refused() -> None:
    snap = parse_snapshot(dumps(small_doc()))
    with pytest.raises(ValueError, match="lacks"):
        plan_from_kafka_utils(snap, {"assignment": [["orders", 9, [1, 2, 4]]]}, kind="k")
