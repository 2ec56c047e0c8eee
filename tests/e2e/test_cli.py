"""The `guardian` console script end to end: offline plan commands, exit codes, error messages."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "examples" / "skewed-multi-idc.json"


def guardian(*args: str | Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("guardian", path=str(Path(sys.executable).parent))
    assert exe, "the guardian console script is installed in the venv"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", "NO_COLOR": "1"})


def test_every_command_has_help() -> None:
    for cmd in ([], ["plan"], ["plan", "rebalance"], ["plan", "validate"], ["schema"], ["schema", "snapshot"],
                ["sim"], ["sim", "generate"], ["snapshot", "show"]):
        result = guardian(*cmd, "--help")
        assert result.returncode == 0, result.stderr
        assert "Usage" in result.stdout


def test_rebalance_then_validate(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    result = guardian("plan", "rebalance", "--snapshot", EXAMPLE, "--out", plan)
    assert result.returncode == 0, result.stderr
    assert "peak/mean" in result.stdout and "plan written" in result.stdout
    doc = json.loads(plan.read_text())
    assert doc["format"] == "guardian.plan/v1" and doc["reassignment"]["version"] == 1
    assert doc["summary"]["after"]["max_util"] < doc["summary"]["before"]["max_util"]
    result = guardian("plan", "validate", "--snapshot", EXAMPLE, "--plan", plan)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "plan is valid" in result.stdout


def test_validate_names_every_violation_and_exits_1(tmp_path: Path) -> None:
    snapshot = json.loads(EXAMPLE.read_text())
    dead = next(b["id"] for b in snapshot["brokers"] if b["state"] == "dead")
    topic = snapshot["topics"][0]
    p0 = topic["partitions"][0]
    bad = {"format": "guardian.plan/v1", "cluster": snapshot["cluster"], "kind": "manual",
           "reassignment": {"version": 1, "partitions": [
               {"topic": topic["name"], "partition": p0["partition"], "replicas": [dead, *p0["replicas"][1:]],
                "log_dirs": ["any"] * len(p0["replicas"])},
               {"topic": topic["name"], "partition": p0["partition"], "replicas": p0["replicas"][:1]},
               {"topic": "no-such-topic", "partition": 0, "replicas": [1]}]}}
    plan = tmp_path / "bad.json"
    plan.write_text(json.dumps(bad))
    result = guardian("plan", "validate", "-s", EXAMPLE, "-p", plan)
    assert result.returncode == 1
    assert "target-not-alive" in result.stdout
    assert "duplicate-entry" in result.stdout
    assert "unknown-partition" in result.stdout


@pytest.mark.parametrize("command", ["rebalance", "validate", "show"])
def test_malformed_snapshot_exits_2_naming_the_field(tmp_path: Path, command: str) -> None:
    doc = json.loads(EXAMPLE.read_text())
    doc["brokers"][2]["disks"][1]["util"] = "high"
    doc["topics"][0]["partitions"][0]["size_bytes"] = -1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    commands: dict[str, list[str | Path]] = {
        "rebalance": ["plan", "rebalance", "-s", bad, "-o", tmp_path / "p.json"],
        "validate": ["plan", "validate", "-s", bad, "-p", tmp_path / "p.json"],
        "show": ["snapshot", "show", "-s", bad]}
    result = guardian(*commands[command])
    assert result.returncode == 2
    assert "$.brokers[2].disks[1].util" in result.stderr
    assert "$.topics[0].partitions[0].size_bytes" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "p.json").exists()


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = guardian("plan", "rebalance", "-s", tmp_path / "nope.json", "-o", tmp_path / "p.json")
    assert result.returncode == 2
    assert "cannot read" in result.stderr and "nope.json" in result.stderr


def test_schema_commands_print_json_schema() -> None:
    for kind in ("snapshot", "plan"):
        result = guardian("schema", kind)
        assert result.returncode == 0
        assert json.loads(result.stdout)["type"] == "object"


def test_sim_generate_is_deterministic(tmp_path: Path) -> None:
    args = ["--brokers", "8", "--disks-per-broker", "2", "--partitions", "50", "--seed", "5",
            "--pools", "shared=0.75,pay=0.25"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert guardian("sim", "generate", "--out", a, *args).returncode == 0
    assert guardian("sim", "generate", "--out", b, *args).returncode == 0
    assert a.read_bytes() == b.read_bytes()
    bad = guardian("sim", "generate", "--out", tmp_path / "c.json", "--pools", "shared")
    assert bad.returncode == 2 and "--pools" in bad.stderr
