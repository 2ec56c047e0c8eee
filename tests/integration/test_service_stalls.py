"""The leader's loops survive stalls: three real `guardian serve` processes and a kafkasim federation.

The leader is stopped with SIGSTOP for 2 s and for 10 s, and a follower for 3 s after which it is made
to win an election.  After each stall every node's loop counters keep advancing (``follower`` passes
on followers, ``ok`` passes on the leader: the loop threads outlived the stall), and a plan approved
and executed at the end leaves PENDING and completes — the executor loop of whichever node leads is
alive.  (The APScheduler one-shot re-arming this replaces lost a loop for good after a run more than
1 s late.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.launcher import ServiceCluster
from domain import PartitionMove, Plan, dump_plan
from tests.integration.test_executor_failover import SPEC
from tests.support.kafkasim_support import SimProcess, register_fields, sim_process
from tests.support.service_support import service_cluster, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LOOPS = ("collect", "throttle", "executor")
_SAMPLE = re.compile(r'^guardian_loop_runs_total\{loop="([^"]+)",outcome="([^"]+)"\} ([0-9.e+]+)$')


@pytest.fixture()
def sim(tmp_path: Path) -> Iterator[SimProcess]:
    with sim_process(SPEC, tmp_path) as s:
        yield s


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[ServiceCluster]:
    with service_cluster(tmp_path, executor_s=1.0, collect_s=1.0, throttle_s=1.0) as c:
        yield c


def loop_runs(cluster: ServiceCluster, node: int) -> dict[tuple[str, str], float]:
    url = f"http://127.0.0.1:{cluster.http_ports[node - 1]}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    return {(m[1], m[2]): float(m[3]) for line in text.splitlines() if (m := _SAMPLE.match(line))}


def total(runs: dict[tuple[str, str], float], loop: str, outcome: str | None = None) -> float:
    return sum(v for (name, out), v in runs.items() if name == loop and (outcome is None or out == outcome))


def assert_loops_advance(cluster: ServiceCluster, label: str) -> int:
    """Every node's loops tick again and the (ready) leader's loops pass ``ok``; returns the leader."""
    before = {n: loop_runs(cluster, n) for n in cluster.procs}
    leader = cluster.leader(timeout=20)
    lead_before = loop_runs(cluster, leader)

    def advanced() -> bool:
        now = {n: loop_runs(cluster, n) for n in cluster.procs}
        ticking = all(total(now[n], loop) >= total(before[n], loop) + 2 for n in cluster.procs for loop in LOOPS)
        leading = all(total(now[leader], loop, "ok") >= total(lead_before, loop, "ok") + 2 for loop in LOOPS)
        return ticking and leading

    wait_for(f"loop counters to advance on every node after {label}", advanced, 60, interval=0.5)  # loaded CI
    code, body = cluster.request(leader, "GET", "/readyz")
    assert code == 200 and set(LOOPS) <= set(body["loops"]), body
    return leader


def pause(cluster: ServiceCluster, node: int, seconds: float) -> None:
    pid = cluster.procs[node].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def make_leader(cluster: ServiceCluster, node: int, attempts: int = 12) -> None:
    """Pause whoever leads (1.5 s) until ``node`` wins an election."""
    for _ in range(attempts):
        leader = cluster.leader(timeout=20)
        if leader == node:
            return
        pause(cluster, leader, 1.5)
    raise AssertionError(f"node {node} did not win an election in {attempts} tries")


def test_loops_survive_sigstop_of_leader_and_follower_and_plans_still_execute(
        sim: SimProcess, cluster: ServiceCluster) -> None:
    cluster.wait_up()
    leader = cluster.leader()
    code, body = cluster.request(leader, "POST", "/api/v1/clusters?probe=false", {
        "name": "c1", **register_fields(sim.c1)})
    assert code == 201, body
    leader = assert_loops_advance(cluster, "start")

    pause(cluster, leader, 2.0)
    leader = assert_loops_advance(cluster, "SIGSTOP of the leader for 2 s")

    pause(cluster, leader, 10.0)
    leader = assert_loops_advance(cluster, "SIGSTOP of the leader for 10 s")

    follower = next(n for n in sorted(cluster.procs) if n != leader)
    pause(cluster, follower, 3.0)
    make_leader(cluster, follower)
    leader = assert_loops_advance(cluster, "SIGSTOP of a follower for 3 s that then won an election")
    assert leader == follower

    before = sim.replicas()
    moved = sorted(before)[:2]
    targets = {}
    for topic, part in moved:
        reps = before[(topic, part)]
        spare = next(b for b in range(1, 7) if b not in reps)
        targets[(topic, part)] = [spare, *reps[1:]]
    plan = Plan("c1", "rebalance", tuple(PartitionMove(t, p, tuple(targets[(t, p)]), (None, None))
                                         for t, p in moved))
    code, body = cluster.request(leader, "POST", "/api/v1/plans/import", json.loads(dump_plan(plan)))
    assert code == 201, body
    plan_id = body["plan_id"]
    assert cluster.request(leader, "POST", f"/api/v1/plans/{plan_id}/approve")[0] == 200
    code, body = cluster.request(leader, "POST", f"/api/v1/plans/{plan_id}/execute", timeout=15)
    assert code == 201, body
    eid = body["execution_id"]

    def states() -> Counter[str]:
        code, ex = cluster.request(leader, "GET", f"/api/v1/executions/{eid}")
        return Counter(t["state"] for t in ex["tasks"].values()) if code == 200 else Counter({"?": 1})

    wait_for("the execution's tasks to leave PENDING", lambda: states()["PENDING"] == 0, 20, interval=0.2)

    def finished() -> dict[str, Any] | None:
        code, ex = cluster.request(leader, "GET", f"/api/v1/executions/{eid}")
        return ex if code == 200 and ex["status"] not in ("running", "stopping") else None

    final = wait_for("the execution to complete", finished, 90, interval=0.5)
    assert final["status"] == "completed", final
    after = sim.replicas()
    assert {tp: after[tp] for tp in moved} == targets
