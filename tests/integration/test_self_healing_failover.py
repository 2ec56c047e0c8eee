"""A self-healing fix survives a kill -9 of the leader controller and completes once.

Real processes: kafkasim (``python -m kafkasim up --realistic``: SASL_SSL) and three ``guardian serve`` nodes
(:class:`controlplane.launcher.ServiceCluster`). Self-healing is switched on through the API
(``PUT /api/v1/clusters/c1/self-healing``), a broker is killed, and once the fix's execution has started
(the anomaly names its execution, copies are in flight) the leader is killed with SIGKILL. Asserted: the new
leader carries the anomaly on (it does not plan a second fix), the execution completes, under-replicated
partitions return to 0, the anomaly ends ``fixed`` on the new leader, and kafkasim's reassignment log
(``GET /reassignments``) shows every moved partition submitted exactly once and nothing cancelled.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.launcher import ServiceCluster
from tests.support.executor_support import scenario
from tests.support.healing_support import partitions, wait
from tests.support.kafkasim_support import SimProcess, register_fields, sim_process
from tests.support.service_support import service_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
DEAD = 3


@pytest.fixture()
def sim(tmp_path: Path) -> Iterator[SimProcess]:
    with sim_process(scenario(brokers=6, topics=2, partitions=12, rf=3, size_gb=0.1, speed=10.0), tmp_path) as s:
        yield s


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[ServiceCluster]:
    with service_cluster(tmp_path, executor_s=0.5, collect_s=1.0, throttle_s=30.0) as c:
        yield c


def anomalies(cluster: ServiceCluster, node: int, kind: str) -> list[dict[str, Any]]:
    code, body = cluster.request(node, "GET", "/api/v1/anomalies?cluster=c1")
    return [a for a in body if a["kind"] == kind] if code == 200 else []


def test_leader_killed_mid_fix_the_fix_completes_once(sim: SimProcess, cluster: ServiceCluster) -> None:
    cluster.wait_up()
    leader = cluster.leader()
    code, body = cluster.request(leader, "POST", "/api/v1/clusters?probe=false", {
        "name": "c1", **register_fields(sim.c1)})
    assert code == 201, body
    code, body = cluster.request(leader, "PUT", "/api/v1/clusters/c1/self-healing",
                                 {"enabled": True, "grace_s": 30.0})
    assert code == 200, body
    wait(lambda: cluster.request(leader, "GET", "/api/v1/clusters/c1/snapshot")[0] == 200, 30, "a snapshot")
    hosted = sorted((p["topic"], p["partition"]) for p in partitions(sim.truth()) if DEAD in p["replicas"])
    t0 = sim.sim_time()
    sim.control("/fault/kill-broker", {"cluster": "c1", "broker": DEAD})
    started = wait(lambda: [a for a in anomalies(cluster, leader, "broker-dead") if a.get("execution_id")], 40,
                   "the fix's execution started", every=0.1)
    t_fix = sim.sim_time()
    wait(lambda: sim.reassignments()["seq"] > 0, 10, "copies in flight", every=0.05)
    submitted_by_old = sim.reassignments()["seq"]
    cluster.kill(leader)
    t_kill = sim.sim_time()
    new_leader = cluster.leader(timeout=10.0, exclude=leader)

    def fixed() -> list[dict[str, Any]]:
        return [a for a in anomalies(cluster, new_leader, "broker-dead") if a["status"] in ("fixed", "failed")]
    done = wait(fixed, 90, "the anomaly closed on the new leader", every=0.5)
    t_done = sim.sim_time()
    assert [(a["id"], a["status"]) for a in done] == [(started[0]["id"], "fixed")], done
    code, rec = cluster.request(new_leader, "GET", f"/api/v1/anomalies/{started[0]['id']}")
    assert code == 200 and rec["execution_id"] == started[0]["execution_id"], rec
    code, ex = cluster.request(new_leader, "GET", f"/api/v1/executions/{rec['execution_id']}")
    assert code == 200 and ex["status"] == "completed", ex
    code, plans = cluster.request(new_leader, "GET", "/api/v1/plans")
    healing = [p for p in plans if p.get("proposed_by") == "self-healing"] if code == 200 else []
    assert len(healing) == 1, healing  # the new leader did not plan a second fix

    after = sim.truth()
    assert all(DEAD not in p["replicas"] for p in partitions(after))
    assert all(len(p["isr"]) == len(p["replicas"]) for p in partitions(after)), "under-replicated 0"
    log = sim.reassignments()
    moved = {f"{t}:{p}" for t, p in hosted}
    assert set(log["counts"]) == moved, "only the dead broker's partitions were reassigned"
    assert all(c == {"submitted": 1, "cancelled": 0, "start": 1} for c in log["counts"].values()), \
        [e for e in log["log"] if log["counts"][f"{e['topic']}:{e['partition']}"]["submitted"] != 1]
    moved_bytes = sum(int(t.get("size_bytes") or 0) for t in ex["tasks"].values())
    print(f"\nleader killed mid-fix: fix started {t_fix - t0:.0f} s after the broker died, leader killed at "
          f"{t_kill - t0:.0f} s with {submitted_by_old} of {len(moved)} partitions submitted, anomaly fixed on the "
          f"new leader at {t_done - t0:.0f} s (simulated); {len(ex['tasks'])} moves, {moved_bytes / 2**20:.0f} MiB "
          f"moved; each partition submitted once (load average {os.getloadavg()[0]:.1f})")
