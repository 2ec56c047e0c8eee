"""`guardian plan leaders|preallocate|drain|restore|migrate-idc|pool-shrink|pool-grow` end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.files import read_plan, read_snapshot
from domain import apply_plan, dump_snapshot
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "examples" / "skewed-multi-idc.json"


def guardian(*args: str | Path, hash_seed: str = "0") -> subprocess.CompletedProcess[str]:
    exe = shutil.which("guardian", path=str(Path(sys.executable).parent))
    assert exe, "the guardian console script is installed in the venv"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "NO_COLOR": "1",
                               "PYTHONHASHSEED": hash_seed})


@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("snap") / "pooled.json"
    spec = GeneratorSpec(brokers=16, disks_per_broker=3, partitions=300, seed=5, idcs=("idc-a", "idc-b"),
                         pools={"shared": 0.75, "free": 0.25}, cluster="pooled")
    path.write_text(dump_snapshot(generate_snapshot(spec)))
    return path


def valid(snapshot: Path, plan: Path) -> None:
    result = guardian("plan", "validate", "-s", snapshot, "-p", plan)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "plan is valid" in result.stdout


def test_every_plan_command_has_help() -> None:
    for cmd in ("rebalance", "leaders", "preallocate", "drain", "restore", "migrate-idc", "pool-shrink", "pool-grow"):
        result = guardian("plan", cmd, "--help")
        assert result.returncode == 0, result.stderr
        assert "--snapshot" in result.stdout


def test_rebalance_with_bounds_and_leaders(tmp_path: Path) -> None:
    plan = tmp_path / "r.json"
    result = guardian("plan", "rebalance", "-s", EXAMPLE, "-o", plan, "--max-partitions", "50")
    assert result.returncode == 0, result.stderr
    assert "peak/mean" in result.stdout and "note:" in result.stdout  # the bound is reported
    assert json.loads(plan.read_text())["summary"]["partitions_moved"] <= 50
    valid(EXAMPLE, plan)
    leaders = tmp_path / "l.json"
    result = guardian("plan", "leaders", "-s", EXAMPLE, "-o", leaders)
    assert result.returncode == 0, result.stderr
    assert "leader balance" in result.stdout
    doc = json.loads(leaders.read_text())
    assert doc["kind"] == "leaders" and doc["leaders"] and doc["summary"]["bytes_to_move"] == 0
    valid(EXAMPLE, leaders)


def test_drain_then_restore(tmp_path: Path, pooled: Path) -> None:
    drain = tmp_path / "d.json"
    result = guardian("plan", "drain", "-s", pooled, "-o", drain, "--brokers", "1,2")
    assert result.returncode == 0, result.stderr
    valid(pooled, drain)
    snap = read_snapshot(pooled)
    during = apply_plan(snap, read_plan(drain))
    assert all(not {1, 2} & set(p.replicas) for p in during.index.partitions)
    during_path = tmp_path / "during.json"
    during_path.write_text(dump_snapshot(during))
    restore = tmp_path / "back.json"
    result = guardian("plan", "restore", "-s", during_path, "--recorded", pooled, "-b", "1,2", "-o", restore)
    assert result.returncode == 0, result.stderr
    valid(during_path, restore)
    back = apply_plan(during, read_plan(restore))
    for p in snap.index.partitions:
        now = back.index.partition_by_id[p.id]
        assert (now.replicas, now.log_dirs, now.leader) == (p.replicas, p.log_dirs, p.leader)


def test_migrate_idc_writes_ordered_steps(tmp_path: Path, pooled: Path) -> None:
    snap = read_snapshot(pooled)
    name = next(t.name for t in snap.topics if t.placement == {"idc-a": 2, "idc-b": 1})
    out = tmp_path / "mig.json"
    staged = tmp_path / "staged.json"
    result = guardian("plan", "migrate-idc", "-s", pooled, "-o", out, "--placement", "idc-b=3", "--topic", name,
                      "--snapshot-out", staged)
    assert result.returncode == 0, result.stderr
    steps = sorted(tmp_path.glob("mig-step*.json"))
    assert [p.name for p in steps] == ["mig-step1.json", "mig-step2.json"]
    assert "step 1 of 2" in result.stdout
    current = read_snapshot(staged)
    assert current.index.topic_by_name[name].placement == {"idc-b": 3}
    for step in steps:  # each step validates against the state the previous steps leave
        path = tmp_path / f"at-{step.name}"
        path.write_text(dump_snapshot(current))
        valid(path, step)
        current = apply_plan(current, read_plan(step))
    idc = {b.id: b.idc for b in current.brokers}
    assert all({idc[b] for b in p.replicas} == {"idc-b"} for p in current.index.topic_by_name[name].partitions)


def test_preallocate_and_pool_commands(tmp_path: Path, pooled: Path) -> None:
    out = tmp_path / "new.json"
    result = guardian("plan", "preallocate", "-s", pooled, "-o", out, "--topic", "fresh", "--partitions", "6",
                      "--bytes-in-per-s", "6e7", "--placement", "idc-a=2,idc-b=1")
    assert result.returncode == 0, result.stderr
    assert "--replica-assignment" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["kind"] == "preallocate" and len(doc["reassignment"]["partitions"]) == 6
    result = guardian("plan", "validate", "-s", pooled, "-p", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pre-allocation of new topic fresh (pool shared) is valid" in result.stdout
    doc["reassignment"]["partitions"][0]["replicas"][1] = doc["reassignment"]["partitions"][0]["replicas"][0]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc))
    result = guardian("plan", "validate", "-s", pooled, "-p", broken)
    assert result.returncode == 1 and "duplicate-broker" in result.stdout
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"modelled": 1e6}))
    result = guardian("plan", "preallocate", "-s", pooled, "-o", out, "-t", "modelled", "--partitions", "2",
                      "--model", model)
    assert result.returncode == 0, result.stderr

    shrink = tmp_path / "shrink.json"
    result = guardian("plan", "pool-shrink", "-s", pooled, "-o", shrink, "--pool", "shared", "--count", "1")
    assert result.returncode == 0, result.stderr
    assert "to pool 'free'" in result.stdout
    valid(pooled, shrink)
    grow, grown = tmp_path / "grow.json", tmp_path / "grown.json"
    result = guardian("plan", "pool-grow", "-s", pooled, "-o", grow, "--pool", "shared", "--count", "2",
                      "--snapshot-out", grown)
    assert result.returncode == 0, result.stderr
    valid(grown, grow)


@pytest.mark.parametrize("args", [
    ["drain", "--brokers", "999"],
    ["drain", "--brokers", "x,y"],
    ["migrate-idc", "--placement", "idc-z=3", "--pool", "shared"],
    ["migrate-idc", "--placement", "garbage", "--pool", "shared"],
    ["preallocate", "--topic", "t", "--partitions", "3"],
    ["pool-shrink", "--pool", "shared"],
])
def test_bad_requests_exit_2_with_a_clear_message(tmp_path: Path, pooled: Path, args: list[str]) -> None:
    out = tmp_path / "p.json"
    result = guardian("plan", args[0], "-s", pooled, "-o", out, *args[1:])
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error" in result.stderr.lower() and "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("command", [["rebalance"], ["leaders"], ["drain", "--brokers", "3,4"]])
def test_plans_are_byte_identical_across_processes(tmp_path: Path, command: list[str]) -> None:
    outs = []
    for seed in ("1", "2"):  # different string hashing: set/dict order must not leak into plans
        out = tmp_path / f"{seed}.json"
        result = guardian("plan", command[0], "-s", EXAMPLE, "-o", out, *command[1:], hash_seed=seed)
        assert result.returncode == 0, result.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
