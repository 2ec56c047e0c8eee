"""Drain then restore on kafkasim's default cluster (real ``guardian exec`` processes over TCP).

The default cluster's original placement already breaks rack spread for some partitions (two replicas
in one rack of an IDC), so a drain that spreads them better used to make the restore "worse than
before" and the restore was refused, leaving the drained broker empty (issue 16, item 11).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kafkasim.scenarios.scenario import DEFAULT_SCENARIO
from tests.support.executor_support import guardian

pytestmark = pytest.mark.timeout(240)


def default_cluster() -> dict[str, Any]:
    """kafkasim's default cluster (topology, racks, topics) under the name ``c1``, with small fast copies."""
    spec = copy.deepcopy(DEFAULT_SCENARIO)
    spec.pop("audit", None)
    spec["speed"] = 20.0
    cluster = spec["clusters"][0]
    cluster["name"] = "c1"
    for topic in cluster["topics"]:
        topic["size_gb"] = 0.05
    spec["clusters"] = [cluster]
    return spec


def test_drain_then_restore_puts_every_partition_back(make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(default_cluster())
    before = {tp: p.replicas for tp, p in sim.live().partitions.items()}
    common = ["-e", str(sim.endpoints_file), "-c", "c1", "--state-file", str(tmp_path / "state.json"), "--quiet",
              "--interval", "0.2"]
    drain = guardian("exec", "drain", "--brokers", "1", *common, timeout=200)
    assert drain.returncode == 0, drain.stderr[-2000:]
    drained = sim.live(include_lease=True)
    assert not [tp for tp, p in drained.partitions.items() if 1 in p.replicas]
    restore = guardian("exec", "restore", *common, timeout=200)
    assert restore.returncode == 0, restore.stderr[-3000:]
    after = sim.live()
    assert after.reassignments == {}
    assert {tp: p.replicas for tp, p in after.partitions.items()} == before
    assert sim.leftover_throttles() == {}
