"""The guardian.plan/v1 contract: Kafka's reassignment JSON plus leaders and summary."""

from __future__ import annotations

import json

import pytest

from domain import ContractError, LeaderChange, PartitionMove, Plan, dump_plan, parse_plan
from domain.plan_file import plan_json_schema


def sample_plan() -> Plan:
    return Plan(cluster="c1", kind="rebalance",
                moves=(PartitionMove("orders", 0, (3, 2, 4), ("/data2", None, "/data1")),),
                leaders=(LeaderChange("orders", 1, 2),), notes=("n1",))


def test_reassignment_member_is_exactly_kafkas_format() -> None:
    doc = json.loads(dump_plan(sample_plan()))
    assert doc["reassignment"] == {"version": 1, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [3, 2, 4], "log_dirs": ["/data2", "any", "/data1"]}]}
    assert doc["format"] == "guardian.plan/v1"
    assert doc["leaders"] == [{"topic": "orders", "partition": 1, "leader": 2}]


def test_round_trip() -> None:
    plan = sample_plan()
    assert parse_plan(dump_plan(plan)) == plan


def test_kafka_entries_without_log_dirs_mean_any() -> None:
    text = json.dumps({"format": "guardian.plan/v1", "cluster": "c1", "kind": "manual",
                       "reassignment": {"version": 1, "partitions": [
                           {"topic": "t", "partition": 0, "replicas": [1, 2]}]}})
    assert parse_plan(text).moves[0].log_dirs == (None, None)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["reassignment"].update(version=2), "$.reassignment.version"),
        (lambda d: d["reassignment"]["partitions"][0].update(replicas="3,2,4"),
         "$.reassignment.partitions[0].replicas"),
        (lambda d: d["reassignment"]["partitions"][0].update(partition=-1), "$.reassignment.partitions[0].partition"),
        (lambda d: d["reassignment"]["partitions"][0].update(log_dirs=["/a"]),
         "$.reassignment.partitions[0].log_dirs: 1 log dirs for 3 replicas"),
        (lambda d: d.pop("cluster"), "$.cluster: required field is missing"),
        (lambda d: d["leaders"][0].update(leader=None), "$.leaders[0].leader"),
    ],
)
def test_malformed_plans_name_the_field(mutate: object, expected: str) -> None:
    doc = json.loads(dump_plan(sample_plan()))
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(ContractError) as info:
        parse_plan(json.dumps(doc))
    assert any(str(p).startswith(expected) for p in info.value.problems), info.value.problems


def test_schema_has_the_kafka_member() -> None:
    assert "reassignment" in plan_json_schema()["required"]
