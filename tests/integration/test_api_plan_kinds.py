"""Planner kinds restore, pool-grow and migrate-idc, execution settings and migrations through the real app
(local store, a snapshot put through the API; no executor on this node)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain import ClusterSnapshot, apply_plan, check_plan, dump_snapshot, parse_plan
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

OP = {"Authorization": "Bearer o-token", "X-Guardian-Reason": "test"}


@pytest.fixture()
def ctx(tmp_path: Path) -> ServiceContext:
    settings = Settings(data_dir=tmp_path, tokens=[TokenConf(name="oscar", role="admin", sha256=hash_token("o-token"))])
    return ServiceContext(settings=settings, store=LocalStateStore())


@pytest.fixture()
def snap() -> ClusterSnapshot:
    s = generate_snapshot(GeneratorSpec(brokers=12, disks_per_broker=2, partitions=60, seed=4, cluster="c1",
                                        pools={"shared": 0.75, "free": 0.25}))
    return replace(s, taken_at=datetime.now(UTC))


@pytest.fixture()
def client(ctx: ServiceContext, snap: ClusterSnapshot) -> Iterator[TestClient]:
    with TestClient(create_app(ctx)) as c:
        assert c.post("/api/v1/clusters?probe=false", headers=OP,
                      json={"name": "c1", "bootstrap_servers": ["h:1"]}).status_code == 201
        assert c.put("/api/v1/clusters/c1/snapshot", headers=OP, content=dump_snapshot(snap).encode()).status_code \
            == 200
        yield c


def plan(client: TestClient, kind: str, params: dict[str, Any]) -> Any:
    return client.post("/api/v1/plans", headers=OP, json={"cluster": "c1", "kind": kind, "params": params})


@pytest.mark.parametrize(("kind", "params", "path"), [
    ("pool-grow", {"pool": "shared"}, "$.params.count"),
    ("pool-grow", {"pool": "shared", "count": "2"}, "$.params.count"),
    ("pool-grow", {"pool": "shared", "count": 1, "surprise": True}, "$.params.surprise"),
    ("migrate-idc", {"placement": {"idc-b": 0}, "topics": ["t0"]}, "$.params.placement.idc-b"),
    ("migrate-idc", {"topics": ["t0"]}, "$.params.placement"),
    ("migrate-idc", {"placement": {"idc-b": 1}, "min_insync": 0}, "$.params.min_insync"),
    ("restore", {"drain_execution": "latest"}, "$.params.drain_execution"),
    ("rebalance", {"target": 0.9}, "$.params.target"),  # the planners' own models (planners.params)
    ("rebalance", {"max_moves": "ten"}, "$.params.max_moves"),
    ("leaders", {"tolerance": True}, "$.params.tolerance"),
    ("drain", {"brokers": []}, "$.params.brokers"),
    ("preallocate", {"topic": "x"}, "$.params.partitions"),
])
def test_typed_parameters_are_400_naming_the_field(client: TestClient, kind: str, params: dict[str, Any],
                                                   path: str) -> None:
    r = plan(client, kind, params)
    assert r.status_code == 400, r.text
    assert r.json()["problems"][0]["path"] == path


def test_pool_grow_records_the_brokers_it_needs_and_execute_moves_them_first(client: TestClient,
                                                                             snap: ClusterSnapshot) -> None:
    r = plan(client, "pool-grow", {"pool": "shared", "count": 2})
    assert r.status_code == 201, r.text
    grown = r.json()["prerequisites"]["pools"]["shared"]
    free = {b.id for b in snap.brokers if b.pool == "free"}
    assert len(grown) == 2 and set(grown) <= free
    record = client.get(f"/api/v1/plans/{r.json()['plan_id']}", headers=OP).json()
    assert record["kind"] == "pool-grow" and record["prerequisites"] == {"pools": {"shared": grown}}
    targets = {b for m in record["plan"]["reassignment"]["partitions"] for b in m["replicas"]}
    assert targets & set(grown)  # the new brokers are filled
    client.post(f"/api/v1/plans/{record['id']}/approve", headers=OP)
    bad = client.post(f"/api/v1/plans/{record['id']}/execute", headers=OP, json={"throttle": {"floor": "lots"}})
    assert bad.status_code == 400 and bad.json()["problems"][0]["path"] == "$.throttle.floor"
    bad = client.post(f"/api/v1/plans/{record['id']}/execute", headers=OP, json={"caps": {"per_disk": 0}})
    assert bad.status_code == 400 and bad.json()["problems"][0]["path"] == "$.caps.per_disk"
    r = client.post(f"/api/v1/plans/{record['id']}/execute", headers=OP, json={"throttle": {"mode": "fixed"}})
    assert r.status_code == 503  # valid settings; this node has no executor


def test_migrate_idc_proposes_every_step_each_valid_after_the_previous(client: TestClient,
                                                                       snap: ClusterSnapshot) -> None:
    topic = next(t for t in snap.topics if len(t.partitions[0].replicas) == 3 and t.pool == "shared")
    idcs = sorted({b.idc for b in snap.brokers})
    r = plan(client, "migrate-idc", {"topics": [topic.name], "placement": {idcs[-1]: 3}})
    assert r.status_code == 201, r.text
    ids = r.json().get("plan_ids", [r.json()["plan_id"]])
    assert r.json()["prerequisites"] == {"placements": {topic.name: {idcs[-1]: 3}}}
    records = [client.get(f"/api/v1/plans/{i}", headers=OP).json() for i in ids]
    assert all(x["kind"] == "migrate-idc" for x in records)
    current = replace(snap, topics=tuple(replace(t, placement={idcs[-1]: 3}) if t.name == topic.name else t
                                         for t in snap.topics))
    for x in records:
        step = parse_plan(json.dumps(x["plan"]))
        assert check_plan(current, step) == []
        current = apply_plan(current, step)
    idc_of = {b.id: b.idc for b in snap.brokers}
    final = next(t for t in current.topics if t.name == topic.name)
    assert all({idc_of[b] for b in p.replicas} == {idcs[-1]} for p in final.partitions)


def test_restore_undoes_a_finished_drain_judged_against_its_recorded_placement(
        client: TestClient, ctx: ServiceContext, snap: ClusterSnapshot) -> None:
    assert plan(client, "restore", {}).json()["detail"].startswith("no finished drain execution")
    part = snap.topics[0].partitions[0]
    other = next(b.id for b in snap.brokers if b.id not in part.replicas and b.pool == "shared")
    recorded = (other, *part.replicas[1:])  # the drain moved the first replica off broker `other`
    store = ctx.store
    moved = {"topic": part.topic, "partition": part.partition, "replicas": list(part.replicas)}
    doc = {"format": "guardian.plan/v1", "cluster": "c1", "kind": "drain",
           "reassignment": {"version": 1, "partitions": [moved]}}
    pid = store.propose({"type": "plan.propose", "meta": meta("op"), "cluster": "c1", "kind": "drain",
                         "plan": doc})["plan_id"]
    store.propose({"type": "plan.approve", "meta": meta("op"), "plan_id": pid})
    key = f"{part.topic}:{part.partition}"
    eid = store.propose({"type": "execution.start", "meta": meta("op"), "plan_id": pid, "tasks": [
        {"key": key, "topic": part.topic, "partition": part.partition, "action": "reassign",
         "source_replicas": list(recorded), "target_replicas": list(part.replicas)}]})["execution_id"]
    for state in ("IN_PROGRESS", "COMPLETED"):
        store.propose({"type": "execution.tasks", "meta": meta("op"), "execution_id": eid,
                       "updates": [{"key": key, "state": state}]})
    store.propose({"type": "execution.finish", "meta": meta("op"), "execution_id": eid, "status": "completed"})
    assert plan(client, "restore", {"drain_execution": eid + 100}).status_code == 409
    r = plan(client, "restore", {})
    assert r.status_code == 201, r.text
    record = client.get(f"/api/v1/plans/{r.json()['plan_id']}", headers=OP).json()
    assert record["kind"] == "restore" and record["params"] == {"drain_execution": eid}
    moves = record["plan"]["reassignment"]["partitions"]
    assert [(m["topic"], m["partition"], m["replicas"]) for m in moves] == [(part.topic, part.partition,
                                                                            list(recorded))]
    assert record["plan"]["leaders"][0]["leader"] == other  # the recorded preferred leader leads again


def test_openapi_documents_the_typed_kinds_and_the_new_routes(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    extra = spec["paths"]["/api/v1/plans"]["post"]["x-guardian-params"]
    assert set(extra) == {"rebalance", "leaders", "drain", "pool-shrink", "preallocate", "read-local", "restore",
                          "pool-grow", "migrate-idc"}  # every kind typed (planners.params, and restore's)
    assert "count" in extra["pool-grow"]["properties"] and "placement" in extra["migrate-idc"]["required"]
    assert extra["rebalance"]["properties"]["target"]["anyOf"][0]["minimum"] == 1.0
    for path in ("/api/v1/migrations", "/api/v1/migrations/{migration_id}", "/api/v1/migrations/{migration_id}/stop",
                 "/api/v1/topics", "/api/v1/executions/{execution_id}/caps"):
        assert path in spec["paths"], path
    post = spec["paths"]["/api/v1/migrations"]["post"]
    assert "400" in post["responses"] and "422" not in post["responses"]


def test_a_migration_needs_an_executor_and_four_eyes_refuses_it(client: TestClient, ctx: ServiceContext,
                                                                snap: ClusterSnapshot) -> None:
    topic = next(t for t in snap.topics if len(t.partitions[0].replicas) == 3 and t.pool == "shared")
    body = {"cluster": "c1", "topics": [topic.name], "placement": {sorted({b.idc for b in snap.brokers})[-1]: 3}}
    assert client.post("/api/v1/migrations", headers=OP, json={**body, "topics": ["nope"]}).status_code == 400
    r = client.post("/api/v1/migrations", headers=OP, json=body)
    assert r.status_code == 503 and "no executor" in r.json()["detail"]  # checked and planned; nothing recorded
    assert client.get("/api/v1/plans", headers=OP).json() == []
    assert client.post("/api/v1/migrations", headers=OP, json={**body, "placement": {}}).status_code == 400
    ctx.settings.approval.four_eyes = True
    r = client.post("/api/v1/migrations", headers=OP, json=body)
    assert r.status_code == 409 and "four-eyes" in r.json()["detail"]
    assert client.get("/api/v1/migrations/7", headers=OP).status_code == 404
