"""A service execution on kafkasim, started through the API, reports the rate its copies run at and an
ETA that moves (the executor measures between the observer's published rounds; it collects nothing
itself) and records the human who started it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.bootstrap import Service
from controlplane.config import IntervalsConf, TokenConf, hash_token
from controlplane.state.commands import meta
from domain import PartitionMove, Plan, plan_to_dict
from kafkasim.broker.server import SimRunner
from tests.support.kafkasim_support import register_fields, start_sim
from tests.support.service_support import local_service

pytestmark = pytest.mark.timeout(150)
TOKEN = "olga-operator-token-0123"


@pytest.fixture()
def sim() -> Iterator[SimRunner]:
    with start_sim() as runner:
        yield runner


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    with local_service(tmp_path, tokens=[TokenConf(name="olga", role="operator", sha256=hash_token(TOKEN))],
                       intervals=IntervalsConf(collect_s=1.0, throttle_s=1.0, executor_s=0.5)) as svc:
        yield svc


def test_a_service_execution_on_kafkasim_reports_a_rate_and_a_moving_eta(sim: SimRunner, service: Service) -> None:
    ctx = service.ctx
    c = sim.endpoints["clusters"]["east"]
    ctx.store.propose({"type": "cluster.register", "meta": meta("test"), "name": "east",
                       **register_fields(c)})
    service.scheduler.start()
    deadline = time.monotonic() + 40
    while (snap := ctx.snapshots.get("east")) is None:
        assert time.monotonic() < deadline, service.collection.last_refusal
        time.sleep(0.2)
    moves = []
    for p in snap.index.topic_by_name["orders"].partitions[:3]:
        target = min(b.id for b in snap.brokers if b.id not in p.replicas)
        moves.append(PartitionMove(p.topic, p.partition, (target, *p.replicas[1:]), (None,) * len(p.replicas)))
    plan = Plan("east", "rebalance", tuple(moves))
    plan_id = ctx.store.propose({"type": "plan.propose", "meta": meta("test"), "cluster": "east", "kind": plan.kind,
                                 "plan": plan_to_dict(plan), "snapshot_taken_at": snap.taken_at.isoformat()})["plan_id"]
    ctx.store.propose({"type": "plan.approve", "meta": meta("test"), "plan_id": plan_id})
    with TestClient(service.app) as client:
        started = client.post(f"/api/v1/plans/{plan_id}/execute", headers={"Authorization": f"Bearer {TOKEN}"})
        assert started.status_code == 201, started.text
        eid = started.json()["execution_id"]
        execution = client.get(f"/api/v1/executions/{eid}", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert execution["started_by"] == "olga"  # the token that started it, not the executor
        actions = client.get("/api/v1/actions", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert [a["who"] for a in actions if a["type"] == "execution.start"] == ["olga"]

    def progress() -> tuple[str, dict[str, Any]]:
        ex = ctx.store.read(lambda s: dict(s["executions"][str(eid)]))
        return str(ex["status"]), dict(ex.get("progress") or {})

    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status, pr = progress()
        if pr.get("bytes_done") and (not seen or pr != seen[-1]):
            seen.append(pr)
        if status != "running":
            break
        time.sleep(0.25)
    copying = [pr for pr in seen if pr["bytes_done"] < pr["bytes_total"]]
    assert len(copying) >= 3, seen
    assert all(pr["bytes_done"] <= pr["bytes_total"] for pr in seen), seen
    rated = [pr for pr in copying if pr["rate_bytes_per_s"] > 0]
    assert len(rated) >= 2, copying  # before the fix: rate 0 and no ETA on every record
    etas = [pr["eta_s"] for pr in rated]
    assert all(e is not None and e > 0 for e in etas), rated
    assert len(set(etas)) >= 2 and etas[-1] < etas[0], etas  # the ETA keeps moving (down)
