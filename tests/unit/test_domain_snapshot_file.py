"""The guardian.snapshot/v1 contract: valid files load, every malformed field is named by its JSON path."""

from __future__ import annotations

import json
import math

import pytest

from domain import BrokerState, ContractError, DiskKind, dump_snapshot, parse_snapshot
from domain.snapshot_file import snapshot_json_schema
from tests.support.snapshots import DELETE, dumps, mutated, small_doc


def problems_of(doc: object) -> list[str]:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(ContractError) as info:
        parse_snapshot(text)
    return [str(p) for p in info.value.problems]


def test_small_snapshot_loads_into_frozen_model() -> None:
    snap = parse_snapshot(dumps(small_doc()))
    assert snap.cluster == "c1"
    assert [b.id for b in snap.brokers] == [1, 2, 3, 4, 5, 6]
    assert snap.brokers[5].state is BrokerState.DEAD
    assert snap.brokers[0].disks[0].kind is DiskKind.HDD
    orders = snap.topics[0]
    assert orders.placement == {"idc-a": 2, "idc-b": 1}
    assert orders.partitions[0].replicas == (1, 2, 4)
    assert orders.partitions[0].log_dirs == ("/data1", "/data1", "/data1")
    with pytest.raises(AttributeError):
        snap.brokers[0].id = 9  # type: ignore[misc]


def test_design_md_example_is_accepted() -> None:
    example = {
        "format": "guardian.snapshot/v1", "cluster": "c1", "taken_at": "2026-11-21T10:00:00Z",
        "brokers": [{"id": i, "host": "127.0.0.1", "port": 19090 + i, "idc": "idc-a" if i < 3 else "idc-b",
                     "rack": f"r{i}", "pool": "shared", "state": "alive", "memory_bytes": 68719476736,
                     "disks": [{"path": p, "kind": "hdd", "capacity_bytes": 4000000000000,
                                "max_bytes_per_s": 200000000, "used_bytes": 1200000000000, "util": 0.62,
                                "await_ms": 12.5, "read_bytes_per_s": 20000000, "write_bytes_per_s": 90000000,
                                "load_history": [0.55, 0.61, 0.70]} for p in ("/data1", "/data2", "/data3")]}
                    for i in (1, 2, 3)],
        "topics": [{"name": "orders", "pool": "shared", "placement": {"idc-a": 2, "idc-b": 1},
                    "partitions": [{"partition": 0, "replicas": [1, 2, 3], "leader": 1, "isr": [1, 2, 3],
                                    "log_dirs": ["/data1", "/data3", "/data2"], "size_bytes": 53687091200,
                                    "bytes_in_per_s": 1048576, "bytes_out_per_s": 3145728,
                                    "messages_in_per_s": 1000, "disk_read_bytes_per_s": 0}]}],
    }
    snap = parse_snapshot(json.dumps(example))
    assert snap.topics[0].partitions[0].size_bytes == 53687091200


def test_round_trip_is_byte_identical() -> None:
    text = dump_snapshot(parse_snapshot(dumps(small_doc())))
    assert dump_snapshot(parse_snapshot(text)) == text


def test_unknown_fields_are_ignored() -> None:
    doc = mutated(small_doc(), "brokers.0.vendor_extension", {"x": 1})
    doc["future_top_level"] = [1, 2]
    assert parse_snapshot(json.dumps(doc)).brokers[0].id == 1


def test_leader_minus_one_means_no_leader() -> None:
    doc = mutated(small_doc(), "topics.0.partitions.0.leader", -1)
    assert parse_snapshot(json.dumps(doc)).topics[0].partitions[0].leader is None


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("brokers.0.id", "1", "$.brokers[0].id: Input should be a valid integer"),
        ("brokers.0.port", 70000, "$.brokers[0].port"),
        ("brokers.0.state", "sleeping", "$.brokers[0].state"),
        ("brokers.0.disks.0.kind", "tape", "$.brokers[0].disks[0].kind"),
        ("brokers.0.disks.0.capacity_bytes", 0, "$.brokers[0].disks[0].capacity_bytes"),
        ("brokers.0.disks.0.util", 1.7, "$.brokers[0].disks[0].util"),
        ("brokers.0.disks.0.util", -0.1, "$.brokers[0].disks[0].util"),
        ("brokers.0.disks.0.used_bytes", -5, "$.brokers[0].disks[0].used_bytes"),
        ("brokers.0.disks.0.load_history", [0.2, 3.0], "$.brokers[0].disks[0].load_history[1]"),
        ("brokers.1.disks.1.await_ms", "slow", "$.brokers[1].disks[1].await_ms"),
        ("topics.0.partitions.1.size_bytes", -1, "$.topics[0].partitions[1].size_bytes"),
        ("topics.0.partitions.1.bytes_in_per_s", -3.0, "$.topics[0].partitions[1].bytes_in_per_s"),
        ("topics.0.partitions.0.replicas", [], "$.topics[0].partitions[0].replicas"),
        ("topics.0.partitions.0.log_dirs", DELETE, "$.topics[0].partitions[0].log_dirs: required field is missing"),
        ("brokers.2.host", DELETE, "$.brokers[2].host: required field is missing"),
        ("taken_at", "2026-11-21T10:00:00", "$.taken_at"),
        ("format", "guardian.snapshot/v2", "$.format"),
        ("topics.0.placement", {"idc-a": 0}, "$.topics[0].placement.idc-a"),
    ],
)
def test_malformed_field_is_named_by_json_path(path: str, value: object, expected: str) -> None:
    problems = problems_of(mutated(small_doc(), path, value))
    assert any(p.startswith(expected) for p in problems), problems


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_metrics_are_rejected(token: str) -> None:
    text = dumps(small_doc()).replace('"util": 0.1', f'"util": {token}', 1)
    problems = problems_of(text)
    assert problems == ["$.brokers[0].disks[0].util: Input should be a finite number"]
    assert math.isnan(float("nan"))  # the parser, not Python, rejected it


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("topics.0.partitions.0.replicas", [1, 2, 99], "$.topics[0].partitions[0].replicas[2]: unknown broker 99"),
        ("topics.0.partitions.0.replicas", [1, 1, 4], "$.topics[0].partitions[0].replicas: broker 1 appears 2 times"),
        ("topics.0.partitions.0.leader", 3, "$.topics[0].partitions[0].leader: leader 3 is not a replica"),
        ("topics.0.partitions.0.isr", [1, 5], "$.topics[0].partitions[0].isr[1]: in-sync replica 5 is not a replica"),
        ("topics.0.partitions.0.log_dirs", ["/data1", "/data9", "/data1"],
         "$.topics[0].partitions[0].log_dirs[1]: broker 2 has no log dir '/data9'"),
        ("topics.0.partitions.0.log_dirs", ["/data1"], "$.topics[0].partitions[0].log_dirs: 1 log dirs for 3 replicas"),
        ("topics.0.partitions.1.partition", 0, "$.topics[0].partitions[1].partition: duplicate partition 0"),
        ("topics.1.name", "orders", "$.topics[1].name: duplicate topic 'orders'"),
        ("brokers.1.id", 1, "$.brokers[1].id: duplicate broker id 1"),
        ("brokers.0.disks.1.path", "/data1", "$.brokers[0].disks[1].path: duplicate log dir '/data1'"),
        ("brokers.0.disks.0.used_bytes", 2000 * 2**30, "$.brokers[0].disks[0].used_bytes: 2147483648000 exceeds"),
        ("topics.0.placement", {"idc-z": 1}, "$.topics[0].placement.idc-z: no broker is in IDC 'idc-z'"),
        ("topics.0.placement", {"idc-a": 3, "idc-b": 1}, "$.topics[0].partitions[0].replicas: placement requires 4"),
    ],
)
def test_cross_reference_problems(path: str, value: object, expected: str) -> None:
    problems = problems_of(mutated(small_doc(), path, value))
    assert any(p.startswith(expected) for p in problems), problems


def test_every_problem_is_reported_at_once() -> None:
    doc = mutated(small_doc(), "brokers.0.disks.0.util", 5)
    doc = mutated(doc, "topics.0.partitions.1.size_bytes", -1)
    doc = mutated(doc, "brokers.3.port", "x")
    problems = problems_of(doc)
    assert len(problems) == 3
    assert {p.split(":")[0] for p in problems} == {
        "$.brokers[0].disks[0].util", "$.topics[0].partitions[1].size_bytes", "$.brokers[3].port"}


def test_invalid_json_is_a_contract_error_not_a_crash() -> None:
    problems = problems_of('{"format": "guardian.snapshot/v1", "brokers": [')
    assert len(problems) == 1 and problems[0].startswith("$: not valid JSON")


def test_schema_describes_the_contract() -> None:
    schema = snapshot_json_schema()
    assert set(schema["required"]) == {"format", "cluster", "taken_at", "brokers"}
    assert "BrokerDoc" in schema["$defs"]
