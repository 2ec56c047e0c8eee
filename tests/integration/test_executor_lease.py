"""Two executors on one kafkasim cluster over TCP: the execution lease, and a dead executor's leftovers.

Real ``guardian exec`` processes (killed with SIGKILL) and an in-process service executor share one
kafkasim cluster; the lease lives on the cluster (``__guardian_executor_lease``), so nothing but the cluster
connects them.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from controlplane.executor.lease import LeaseHeld
from controlplane.executor.service import ExecutorService, bind_cluster
from controlplane.state.store import LocalStateStore
from domain import plan_to_dict
from domain.throttles import FOLLOWER_REPLICAS, LEADER_REPLICAS
from tests.support.executor_support import (
    guardian,
    guardian_popen,
    one_replica_plan,
    scenario,
    wait_state,
    write_plan,
)

pytestmark = pytest.mark.timeout(240)


def in_progress(execution: dict[str, Any]) -> int:
    return sum(1 for t in execution["tasks"].values() if t["state"] == "IN_PROGRESS")


def topic_lists(sim: Any, topic: str) -> dict[str, str]:
    return sim.admin.topic_configs([topic], (LEADER_REPLICAS, FOLLOWER_REPLICAS)).get(topic, {})


def test_a_killed_cli_executor_blocks_others_until_its_lease_expires_then_its_leftovers_are_cleaned(
        make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(scenario(brokers=6, topics=2, partitions=6, rf=2, size_gb=1.0, speed=5))
    live = sim.live()
    before = {tp: p.replicas for tp, p in live.partitions.items()}
    first_plan = write_plan(one_replica_plan(live, select=lambda tp, p: tp[0] == "t-0"), tmp_path / "first.json")
    second_plan = one_replica_plan(live, select=lambda tp, p: tp[0] == "t-1")
    second_file = write_plan(second_plan, tmp_path / "second.json")
    common = ["-e", str(sim.endpoints_file), "-c", "c1", "--quiet", "--interval", "0.2", "--lease-intervals", "10"]
    first_state, second_state = tmp_path / "first-state.json", tmp_path / "second-state.json"
    first = guardian_popen("exec", "run", "--plan", str(first_plan), "--state-file", str(first_state),
                           "--throttle", "fixed:1MB", *common, "--lease-intervals", "75")  # TTL 15 s
    try:
        wait_state(first_state, lambda e: in_progress(e) >= 3 and (e.get("progress") or {}).get("throttles"), 60.0)
        assert topic_lists(sim, "t-0"), "the first executor set no throttled-replica list"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    killed_at = time.monotonic()
    moving = {tp for tp in sim.live().reassignments}
    assert moving and {tp[0] for tp in moving} == {"t-0"}

    # before the lease expires: refused, naming the dead executor; nothing of the second plan submitted
    refused = guardian("exec", "run", "--plan", str(second_file), "--state-file", str(second_state), *common)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"leased to cli executor pid {first.pid}" in refused.stderr, refused.stderr
    assert "until" in refused.stderr
    assert not any(tp[0] == "t-1" for tp in sim.submissions)

    # after it expired (TTL 15 s): the next executor cancels the dead one's moves, removes its throttles, proceeds
    time.sleep(max(0.0, 16.0 - (time.monotonic() - killed_at)))
    second = guardian_popen("exec", "run", "--plan", str(second_file), "--state-file", str(second_state),
                            "--throttle", "fixed:50MB", *common)
    try:
        wait_state(second_state, lambda e: e["status"] == "running", 60.0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (topic_lists(sim, "t-0") or set(sim.live().reassignments) & moving):
            time.sleep(0.2)
        assert topic_lists(sim, "t-0") == {}, "the dead executor's throttled replicas are still set"
        assert not set(sim.live().reassignments) & moving, "the dead executor's moves are still in flight"
        _, err = second.communicate(timeout=180)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(10)
    assert second.returncode == 0, err[-3000:]
    assert all(sim.cancels[tp] >= 1 for tp in moving)
    after = sim.live()
    for move in second_plan.moves:
        assert after.partitions[move.id].replicas == move.replicas
    for tp in moving:
        assert after.partitions[tp].replicas == before[tp]  # cancelled: reverted
    assert sim.leftover_throttles() == {}
    assert set(sim.submissions[m.id] for m in second_plan.moves) == {1}


def test_a_service_execution_is_refused_while_a_cli_executor_holds_the_cluster(make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(scenario(brokers=6, topics=2, partitions=6, rf=2, size_gb=1.0, speed=5))
    live = sim.live()
    cli_plan = write_plan(one_replica_plan(live, select=lambda tp, p: tp[0] == "t-0"), tmp_path / "cli.json")
    state = tmp_path / "cli-state.json"
    cli = guardian_popen("exec", "run", "-e", str(sim.endpoints_file), "-c", "c1", "--plan", str(cli_plan),
                         "--state-file", str(state), "--quiet", "--interval", "0.2", "--throttle", "fixed:1MB")
    store = LocalStateStore()
    service = ExecutorService(store, bind=bind_cluster, group="node-a:1,node-b:1")
    try:
        wait_state(state, lambda e: in_progress(e) >= 1, 60.0)
        deadline = time.monotonic() + 30
        while not sim.submissions and time.monotonic() < deadline:
            time.sleep(0.1)
        meta = {"who": "test", "why": "", "at": "2026-01-01T00:00:00Z"}
        store.propose({"type": "cluster.register", "meta": meta, "name": "c1",
                       "bootstrap_servers": sim.cluster.bootstrap_servers.split(","), "security": sim.c1["security"]})
        doc = plan_to_dict(one_replica_plan(live, select=lambda tp, p: tp[0] == "t-1"))
        pid = store.propose({"type": "plan.propose", "meta": meta, "cluster": "c1", "kind": "rebalance",
                             "plan": doc})["plan_id"]
        store.propose({"type": "plan.approve", "meta": meta, "plan_id": pid})
        with pytest.raises(LeaseHeld, match=f"cli executor pid {cli.pid}"):
            service.start_approved(pid, why="operator")
        refusals = store.read(lambda s: [a for a in s["actions"] if a["type"] == "execution.refused"])
        assert len(refusals) == 1 and f"pid {cli.pid}" in json.dumps(refusals[0])
        assert store.read(lambda s: s["executions"]) == {}
        assert not any(tp[0] == "t-1" for tp in sim.submissions)
    finally:
        cli.send_signal(signal.SIGTERM)  # detach: the lease is handed back with its moves listed
        cli.wait(30)
        service.stop()
    assert set(sim.submissions.values()) == {1}
