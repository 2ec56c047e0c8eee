"""``guardian migrate-idc`` and ``guardian topic create`` standalone (an endpoints file, no controller), as
separate processes against kafkasim over TCP; and the Kafka port's ``create_topic`` against kafkasim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafkaio.errors import AdminError, TopicExists
from tests.support.executor_support import guardian, read_state

pytestmark = pytest.mark.timeout(150)
TWO_IDCS: dict[str, Any] = {
    "seed": 7, "speed": 20.0, "tick_seconds": 1.0,
    "clusters": [{"name": "c1", "brokers": [{"count": 6, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 3,
                                             "memory_gb": 16, "disks": [{"count": 2, "kind": "hdd"}]}],
                  "topics": [{"prefix": "bg", "count": 1, "partitions": 6, "rf": 2, "bytes_in_per_s": 100_000,
                              "size_gb": 0.02, "tail_groups": 1}]}],
}


def by_idc(sim: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for b in sim.runner.server.fed.clusters["c1"].brokers.values():  # the operator's document names no IDC
        out.setdefault(b.idc, []).append(int(b.id))
    return {k: sorted(v) for k, v in out.items()}


def test_create_topic_through_the_port_carries_the_assignment(make_sim: Any) -> None:
    sim = make_sim(TWO_IDCS)
    sim.admin.create_topic("explicit", {0: [1, 2, 3], 1: [4, 5, 6]}, {"retention.ms": "60000"})
    live = sim.live()
    assert [live.partitions[("explicit", p)].replicas for p in (0, 1)] == [(1, 2, 3), (4, 5, 6)]
    assert sim.admin.topic_configs(["explicit"], ["retention.ms"]) == {"explicit": {"retention.ms": "60000"}}
    with pytest.raises(TopicExists):
        sim.admin.create_topic("explicit", {0: [1, 2, 3]})
    with pytest.raises(AdminError):
        sim.admin.create_topic("broken", {0: [1, 99]})
    assert "broken" not in sim.live().topic_sizes


def test_standalone_topic_create_then_migrate_idc_runs_every_step(make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(TWO_IDCS)
    idcs = by_idc(sim)
    connect = ["-e", str(sim.endpoints_file), "-c", "c1"]
    created = guardian("topic", "create", "payments", *connect, "--partitions", "4", "--rf", "3",
                       "--expected-bytes-in-per-s", "2000000", "--placement", "idc-a=3", "--collect-rounds", "1")
    assert created.returncode == 0, created.stderr[-2000:]
    live = sim.live()
    planned = [live.partitions[("payments", p)].replicas for p in range(4)]
    assert all(set(r) <= set(idcs["idc-a"]) and len(r) == 3 for r in planned)
    assert "replica assignment: " + ",".join(":".join(map(str, r)) for r in planned) in created.stdout
    state = tmp_path / "state.json"
    moved = guardian("migrate-idc", "payments", "--to", "idc-b=3", *connect, "--state-file", str(state),
                     "--quiet", "--interval", "0.2", "--collect-rounds", "1", "--throttle", "fixed:40MB")
    assert moved.returncode == 0, moved.stderr[-2000:]
    assert "in 3 step(s)" in moved.stdout and "migration completed: 3 step(s)" in moved.stdout
    after = sim.live()
    assert all(set(after.partitions[("payments", p)].replicas) <= set(idcs["idc-b"]) for p in range(4))
    doc = read_state(state)
    executions = sorted(doc["executions"].values(), key=lambda e: e["id"])
    assert [e["status"] for e in executions] == ["completed"] * 3
    assert [e["options"]["migration"]["step"] for e in executions] == [1, 2, 3]
    assert doc["clusters"]["c1"]["placement"]["topics"]["payments"] == {"idc-b": 3}
    assert sim.leftover_throttles() == {}
    again = guardian("migrate-idc", "payments", "--to", "idc-b=3", *connect, "--state-file", str(state),
                     "--quiet", "--collect-rounds", "1")
    assert again.returncode == 0 and "nothing to move" in again.stdout
    bad = guardian("migrate-idc", "payments", "--to", "idc-b", *connect, "--state-file", str(state))
    assert bad.returncode == 2 and "--to" in bad.stderr
