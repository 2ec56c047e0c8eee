"""What an operator runs offline: a bare Kafka reassignment JSON validated, ``snapshot show --json``, file modes.

Goal: ``plan validate`` takes the reassignment JSON ``kafka-reassign-partitions`` or Cruise Control write (and
names every broken constraint in it); ``snapshot show`` prints the hottest disks and brokers, and ``--json``
the same figures as data; plans and snapshots are written 0644 (they hold no secret). Method: the CLI app
driven in-process (``CliRunner``) on a generated snapshot. Cost: ~3 s.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controlplane.cli.app import app
from domain import dump_snapshot, pool_stats
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def guardian(*args: str | Path) -> Done:
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200", "NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Done(result.exit_code, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("op") / "snap.json"
    path.write_text(dump_snapshot(generate_snapshot(GeneratorSpec(brokers=6, disks_per_broker=2, partitions=60,
                                                                  seed=4, cluster="op"))))
    return path


def test_a_bare_kafka_reassignment_json_is_validated_like_a_plan(snapshot: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    made = guardian("plan", "rebalance", "-s", snapshot, "-o", plan)
    assert made.returncode == 0, made.stderr
    bare = tmp_path / "kafka.json"  # what kafka-reassign-partitions --generate writes: no format, no cluster
    bare.write_text(json.dumps(json.loads(plan.read_text())["reassignment"]))
    assert set(json.loads(bare.read_text())) == {"version", "partitions"}
    ok = guardian("plan", "validate", "-s", snapshot, "-p", bare)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "plan is valid" in ok.stdout
    doc = json.loads(bare.read_text())
    first = doc["partitions"][0]
    first["replicas"] = [first["replicas"][0]] * len(first["replicas"])  # the same broker twice
    first.pop("log_dirs", None)
    doc["partitions"].append({"topic": "no-such-topic", "partition": 0, "replicas": [1, 2, 3]})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    refused = guardian("plan", "validate", "-s", snapshot, "-p", bad)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "duplicate-broker" in refused.stdout and "unknown-partition" in refused.stdout
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"version": 2, "partitions": [{"topic": "t", "partition": -1, "replicas": []}]}))
    unreadable = guardian("plan", "validate", "-s", snapshot, "-p", broken)
    assert unreadable.returncode == 2 and "Kafka reassignment JSON" in unreadable.stderr
    assert "$.version" in unreadable.stderr and "$.partitions[0].partition" in unreadable.stderr


def test_snapshot_show_prints_the_hottest_disks_and_brokers_and_the_same_as_json(snapshot: Path) -> None:
    shown = guardian("snapshot", "show", "-s", snapshot, "--top", "3")
    assert shown.returncode == 0, shown.stderr
    assert "hottest 3 disks" in shown.stdout and "hottest 3 brokers" in shown.stdout
    as_json = guardian("snapshot", "show", "-s", snapshot, "--top", "3", "--json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    from controlplane.files import read_snapshot

    snap = read_snapshot(snapshot)
    utils = sorted((snap.index.disk_util_estimate((b.id, d.path)) for b in snap.brokers for d in b.disks),
                   reverse=True)
    assert [d["estimated_util"] for d in doc["hottest_disks"]] == pytest.approx(utils[:3])
    assert len(doc["hottest_brokers"]) == 3
    assert doc["hottest_brokers"][0]["max_disk_util"] == pytest.approx(utils[0])
    stats = pool_stats(snap)
    assert doc["pools"]["shared"]["peak_to_mean"] == pytest.approx(stats["shared"].peak_to_mean)
    assert doc["cluster"] == "op" and doc["dead_brokers"] == []


def test_plans_and_snapshots_are_written_readable_by_the_team(snapshot: Path, tmp_path: Path) -> None:
    made = guardian("sim", "generate", "--out", tmp_path / "s.json", "--brokers", "3", "--partitions", "10")
    assert made.returncode == 0, made.stderr
    planned = guardian("plan", "rebalance", "-s", snapshot, "-o", tmp_path / "p.json")
    assert planned.returncode == 0, planned.stderr
    for name in ("s.json", "p.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
