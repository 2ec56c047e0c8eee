"""Integration: audit ingest is exactly-once for the raw table *and* the rollups across kill -9.

A real ingest process (:mod:`tests.support.ingest_crash_child`: the product's ingestor and ClickHouse store
on embedded chdb) is killed with SIGKILL at one point after another — inside the raw insert, between the raw
insert and the rejects, inside and after the rollup step, after the commit, and from outside at a random moment
of an insert — and restarted each time on the same data directory. The last run ingests the rest of the log and
reports the raw table, the rejects and both audit rollups, which must equal what the log itself holds: no row
lost, none counted twice, in any table.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--partitions", "3", "--per-partition", "3000", "--batch-size", "1200"]

# (flag, value): a point of the ingest's write sequence to die at (see the child's docstring)
KILLS: list[tuple[str, str]] = [
    ("--kill-during", "records:1:4"),   # inside the raw insert
    ("--kill-after", "rejects:2"),      # a batch committed, then raw rows and rejects stored, rollups not
    ("--kill-during", "rollup:1:2"),    # inside the rollup step
    ("--kill-after", "rollup:2"),       # a batch committed, then everything but the commit
]


def _child(data: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tests.support.ingest_crash_child", "--data", str(data),
                             *ARGS, *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _run_killed(data: Path, flag: str, value: str) -> list[str]:
    proc = _child(data, flag, value)
    out, err = proc.communicate(timeout=120)
    lines = out.splitlines()
    if proc.returncode == 0:  # the point was never reached (every batch is in already): the log is done
        assert lines[-1].startswith("done"), err[-2000:]
    else:
        assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}: {err[-2000:]}"
    return lines


def _run_killed_from_outside(data: Path, rng: random.Random) -> None:
    """Kill -9 the process a random few milliseconds after it announced an insert."""
    proc = _child(data)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if line.startswith("records 2") or line.startswith("done") or time.monotonic() > deadline:
            break
    time.sleep(rng.uniform(0.0, 0.02))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)


def _diff(expected: dict[str, int], observed: dict[str, int]) -> dict[str, Any]:
    keys = set(expected) | set(observed)
    wrong = {k: (expected.get(k), observed.get(k)) for k in keys if expected.get(k) != observed.get(k)}
    return dict(sorted(wrong.items())[:5]) | {"wrong_keys": len(wrong)}


def _verified_exact(data: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the verifying child on ``data``; assert the raw table holds every valid record once and both rollups,
    as the models read them, have every minute key exact. Returns (expected, observed)."""
    final = _child(data, "--verify")
    out, err = final.communicate(timeout=180)
    assert final.returncode == 0, err[-3000:]
    report = json.loads(out.splitlines()[-1])
    exp, obs = report["expected"], report["observed"]
    assert (obs["rows"], obs["distinct_offsets"], obs["bytes"]) == (exp["rows"], exp["rows"], exp["bytes"])
    assert obs["partition_minute"] == exp["partition_minute"], _diff(exp["partition_minute"],
                                                                     obs["partition_minute"])
    assert obs["client_minute"] == exp["client_minute"], _diff(exp["client_minute"], obs["client_minute"])
    return exp, obs


def test_kill_9_at_every_step_of_the_ingest_leaves_raw_and_rollups_exact(tmp_path: Path) -> None:
    data = tmp_path / "chdb"
    rng = random.Random(32)
    steps_seen: list[str] = []
    for flag, value in KILLS:
        steps_seen.extend(_run_killed(data, flag, value))
    _run_killed_from_outside(data, rng)
    exp, obs = _verified_exact(data)
    assert obs["rejects"] == exp["rejects"]
    assert obs["partition_requests"] == obs["client_requests"] == exp["rows"]
    # every kill point was really reached (a test that never kills proves nothing)
    assert {"rollup 2", "rejects 2", "commit 1"} <= set(steps_seen)


@pytest.mark.bench
def test_kill_9_at_random_moments_many_times_leaves_raw_and_rollups_exact(tmp_path: Path) -> None:
    """The soak form (make bench): 12 kills from outside at random moments of inserts, then the exact check."""
    data = tmp_path / "chdb"
    rng = random.Random(7)
    for _ in range(12):
        _run_killed_from_outside(data, rng)
    _verified_exact(data)
