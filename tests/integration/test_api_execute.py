"""Plans executed through the API on a kafkasim cluster: approve, execute, progress, stop with rollback,
and auto-rebalance acting on its own inside its window."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.bootstrap import Service
from controlplane.config import IntervalsConf, TokenConf, hash_token
from controlplane.service.auto_rebalance import run_auto_rebalance
from kafkasim.broker.server import SimRunner
from tests.support.kafkasim_support import register_fields, start_sim
from tests.support.service_ports import executor_of
from tests.support.service_support import local_service

TOKEN = "exec-operator"
H = {"Authorization": f"Bearer {TOKEN}"}
SKEWED: dict[str, Any] = {
    "seed": 5, "speed": 20.0, "tick_seconds": 1.0,
    "clusters": [{"name": "east", "partition_throttle": True,
                  "brokers": [{"count": 6, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 3, "memory_gb": 16,
                               "disks": [{"count": 2, "kind": "hdd"}]}],
                  "topics": [{"name": "hot", "partitions": 12, "rf": 2, "bytes_in_per_s": 4_000_000, "skew": 1.2,
                              "size_gb": 0.2, "tail_groups": 1},
                             {"name": "cold", "partitions": 12, "rf": 2, "bytes_in_per_s": 100_000,
                              "size_gb": 0.1, "tail_groups": 1}]}],
}


@pytest.fixture()
def sim(request: pytest.FixtureRequest) -> Iterator[SimRunner]:
    with start_sim(getattr(request, "param", SKEWED)) as runner:
        yield runner


# ten times the traffic: the hottest disk above the planner's floor (0.30 util), under which Guardian leaves an
# idle pool alone — auto-rebalance included
BUSY: dict[str, Any] = {**SKEWED, "clusters": [{**SKEWED["clusters"][0], "topics": [
    {**SKEWED["clusters"][0]["topics"][0], "bytes_in_per_s": 40_000_000}, SKEWED["clusters"][0]["topics"][1]]}]}


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    with local_service(tmp_path, intervals=IntervalsConf(collect_s=1.0),
                       tokens=[TokenConf(name="op", role="admin", sha256=hash_token(TOKEN))]) as svc:
        yield svc


def collect(service: Service, rounds: int = 3) -> None:
    for _ in range(rounds):
        service.collection(service.ctx)
        time.sleep(0.5)


def run_until(service: Service, client: TestClient, execution_id: int, statuses: set[str],
              timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        executor_of(service.ctx).run_once()
        execution = client.get(f"/api/v1/executions/{execution_id}", headers=H).json()
        if execution["status"] in statuses:
            return dict(execution)
        time.sleep(0.3)
    raise AssertionError(f"execution {execution_id} did not reach {statuses}")


def register(client: TestClient, sim: SimRunner) -> None:
    east = sim.endpoints["clusters"]["east"]
    r = client.post("/api/v1/clusters", headers=H, json={
        "name": "east", **register_fields(east)})
    assert r.status_code == 201, r.text


def test_execute_through_the_api_until_completed(sim: SimRunner, service: Service) -> None:
    with TestClient(service.app) as client:
        register(client, sim)
        collect(service)
        # floor 0: this idle scene's hottest disk is under the 0.30 below which a rebalance moves nothing
        r = client.post("/api/v1/plans", headers=H, json={"cluster": "east",
                                                          "params": {"max_partitions": 3, "floor": 0.0}})
        assert r.status_code == 201, r.text
        plan_id = r.json()["plan_id"]
        moves = client.get(f"/api/v1/plans/{plan_id}", headers=H).json()["plan"]["reassignment"]["partitions"]
        assert 0 < len(moves) <= 3
        assert client.post(f"/api/v1/plans/{plan_id}/approve", headers=H).status_code == 200
        r = client.post(f"/api/v1/plans/{plan_id}/execute", headers=H)
        assert r.status_code == 201, r.text
        execution_id = r.json()["execution_id"]
        again = client.post(f"/api/v1/plans/{plan_id}/execute", headers=H)
        assert again.json()["execution_id"] == execution_id  # idempotent while it runs
        done = run_until(service, client, execution_id, {"completed"})
        assert done["progress"]["fraction"] == 1.0
        assert all(t["state"] == "COMPLETED" for t in done["tasks"].values())
        assert client.get(f"/api/v1/plans/{plan_id}", headers=H).json()["status"] == "completed"
        stop = client.post(f"/api/v1/executions/{execution_id}/stop", headers=H, json={"rollback": True})
        assert stop.json()["changed"] is False  # nothing to stop any more


@pytest.mark.parametrize("sim", [BUSY], indirect=True)
def test_auto_rebalance_acts_inside_its_window_only(sim: SimRunner, service: Service) -> None:
    with TestClient(service.app) as client:
        register(client, sim)
        collect(service)
        off = run_auto_rebalance(service.ctx)
        assert off == [{"cluster": "east", "action": "skip", "why": "auto-rebalance is off"}]
        r = client.put("/api/v1/clusters/east/auto-rebalance", headers=H,
                       json={"enabled": True, "window_cron": "* * * * *", "window_minutes": 5, "threshold": 1.05})
        assert r.status_code == 200
        (first,) = run_auto_rebalance(service.ctx)
        assert first["action"] == "skip" and "acting if the next one confirms it" in first["why"], first
        collect(service, rounds=1)  # a later snapshot confirms the imbalance
        (decision,) = run_auto_rebalance(service.ctx)
        assert decision["action"] == "execute", decision
        assert "two successive snapshots" in decision["why"]
        (second,) = run_auto_rebalance(service.ctx)
        assert second == {"cluster": "east", "action": "skip", "why": "an execution is running"}
        actions = client.get("/api/v1/actions", headers=H).json()
        assert {a["type"] for a in actions if a["who"] == "auto-rebalance"} >= {"plan.propose", "plan.approve"}
        # the busy scene's copies run slowly under the adaptive throttle (its HDDs near their ceiling): the test
        # ends the execution with a rollback rather than wait for it
        stop = client.post(f"/api/v1/executions/{decision['execution_id']}/stop", headers=H, json={"rollback": True})
        assert stop.status_code == 200, stop.text
        run_until(service, client, decision["execution_id"], {"stopped", "completed"}, timeout=120)
        (after,) = run_auto_rebalance(service.ctx)  # the cached snapshot still measured the old placement
        assert after == {"cluster": "east", "action": "skip",
                         "why": "no snapshot measured wholly after the last execution ended yet"}
        time.sleep(1.0)  # one collection interval
        collect(service, rounds=1)
        (settled,) = run_auto_rebalance(service.ctx)
        assert "no snapshot measured" not in settled["why"], (settled, service.collection.last_refusal)
