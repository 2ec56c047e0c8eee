"""The Raft benchmark's targets (``make bench`` territory: marked bench, not run by ``make test``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_raft


@pytest.mark.bench
@pytest.mark.timeout(300)
def test_quick_raft_benchmark_meets_design_targets(tmp_path: Path) -> None:
    out = tmp_path / "raft.json"
    assert bench_raft.main(["--quick", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())["summary"]
    assert summary["safety_ok"]
    assert summary["throughput_ok"], summary
    assert summary["failover_ok"], summary
