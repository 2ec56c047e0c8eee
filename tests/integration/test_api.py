"""REST API: success paths and the 400/401/403/404/409 paths of every endpoint (real app, local store)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.store import LocalStateStore
from domain import dump_snapshot, parse_snapshot
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

TOKENS = {"viewer": "v-token", "operator": "o-token", "admin": "a-token"}


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}", "X-Guardian-Reason": "test"}


@pytest.fixture()
def ctx(tmp_path: Path) -> ServiceContext:
    settings = Settings(data_dir=tmp_path, tokens=[TokenConf(name=f"{r}-user", role=r, sha256=hash_token(t))
                                                   for r, t in TOKENS.items()])
    return ServiceContext(settings=settings, store=LocalStateStore())


@pytest.fixture()
def client(ctx: ServiceContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx)) as c:
        yield c


def fresh_snapshot_text(cluster: str = "c1") -> str:
    from dataclasses import replace
    from datetime import UTC, datetime

    snap = generate_snapshot(GeneratorSpec(brokers=9, disks_per_broker=3, partitions=150, seed=2, cluster=cluster))
    return dump_snapshot(replace(snap, taken_at=datetime.now(UTC)))


def register(client: TestClient, name: str = "c1") -> None:
    r = client.post("/api/v1/clusters?probe=false", headers=auth("admin"),
                    json={"name": name, "bootstrap_servers": ["127.0.0.1:19092"]})
    assert r.status_code == 201, r.text


def test_health_endpoints_need_no_token(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    assert "guardian_raft_is_leader" in client.get("/metrics").text


def test_the_version_is_in_the_api_the_openapi_document_and_the_metrics(client: TestClient) -> None:
    from controlplane import DISTRIBUTION, __version__

    assert client.get("/api/v1/version").status_code == 401  # a viewer token, as /api/v1/status
    got = client.get("/api/v1/version", headers=auth("viewer")).json()
    assert got["version"] == __version__ and got["distribution"] == DISTRIBUTION and got["python"].startswith("3.")
    assert client.get("/api/v1/status", headers=auth("viewer")).json()["version"] == __version__
    me = client.get("/api/v1/whoami", headers=auth("operator")).json()
    assert me == {"name": "operator-user", "role": "operator"}
    assert client.get("/openapi.json").json()["info"]["version"] == __version__
    line = next(ln for ln in client.get("/metrics").text.splitlines() if ln.startswith("guardian_build_info{"))
    assert f'version="{__version__}"' in line and line.endswith(" 1.0"), line


@pytest.mark.parametrize("path", ["/api/v1/clusters", "/api/v1/plans", "/api/v1/status", "/api/v1/actions"])
def test_no_token_is_401_and_unknown_token_is_401(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["detail"].startswith("missing bearer token")
    assert client.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401


def test_wrong_role_is_403(client: TestClient) -> None:
    r = client.post("/api/v1/clusters", headers=auth("operator"),
                    json={"name": "c1", "bootstrap_servers": ["h:1"]})
    assert r.status_code == 403
    assert "needs admin" in r.json()["detail"]
    assert client.post("/api/v1/ids", headers=auth("viewer"), json={"count": 1}).status_code == 403


def test_malformed_bodies_are_400_naming_the_field(client: TestClient) -> None:
    r = client.post("/api/v1/clusters", headers=auth("admin"), json={"name": "c1", "bootstrap_servers": []})
    assert r.status_code == 400
    assert "$.bootstrap_servers" in r.json()["detail"]
    r = client.post("/api/v1/clusters", headers=auth("admin"), content=b"{not json")
    assert r.status_code == 400
    register(client)
    r = client.put("/api/v1/clusters/c1/snapshot", headers=auth("operator"), content=b'{"format": "x"}')
    assert r.status_code == 400 and "$.format" in r.json()["detail"]
    r = client.put("/api/v1/clusters/c1/snapshot", headers=auth("operator"),
                   content=re.sub(r'"util": [0-9.e-]+', '"util": NaN', fresh_snapshot_text(), count=1).encode())
    assert r.status_code == 400 and "finite" in r.json()["detail"]


def test_unknown_ids_are_404(client: TestClient) -> None:
    for method, path in [("get", "/api/v1/clusters/zz"), ("get", "/api/v1/plans/77"),
                         ("post", "/api/v1/plans/77/approve"), ("get", "/api/v1/executions/5"),
                         ("post", "/api/v1/executions/5/stop"), ("put", "/api/v1/clusters/zz/maintenance/1"),
                         ("delete", "/api/v1/throttles/zz/k")]:
        headers = auth("admin")
        r = getattr(client, method)(path, headers=headers)
        assert r.status_code == 404, (path, r.text)
        assert r.json()["title"] == "Not Found"


def test_plan_needs_a_fresh_snapshot_409(client: TestClient) -> None:
    register(client)
    r = client.post("/api/v1/plans", headers=auth("operator"), json={"cluster": "c1"})
    assert r.status_code == 409 and "no snapshot" in r.json()["detail"]
    stale = generate_snapshot(GeneratorSpec(brokers=6, partitions=30, cluster="c1"))  # taken 2026-11-21
    client.put("/api/v1/clusters/c1/snapshot", headers=auth("operator"), content=dump_snapshot(stale).encode())
    r = client.post("/api/v1/plans", headers=auth("operator"), json={"cluster": "c1"})
    assert r.status_code == 409 and "old" in r.json()["detail"]


def test_full_plan_lifecycle(client: TestClient, ctx: ServiceContext) -> None:
    register(client)
    r = client.put("/api/v1/clusters/c1/snapshot", headers=auth("operator"), content=fresh_snapshot_text().encode())
    assert r.status_code == 200, r.text
    assert len(client.get("/api/v1/clusters/c1/brokers", headers=auth("viewer")).json()) == 9
    assert len(client.get("/api/v1/clusters/c1/disks", headers=auth("viewer")).json()) == 27
    assert client.get("/api/v1/clusters/c1/topics", headers=auth("viewer")).status_code == 200
    assert client.get("/api/v1/clusters/c1", headers=auth("viewer")).json()["snapshot"]["brokers"] == 9
    assert client.post("/api/v1/plans", headers=auth("operator"),
                       json={"cluster": "c1", "kind": "teleport"}).status_code == 400
    assert client.post("/api/v1/plans", headers=auth("operator"),
                       json={"cluster": "c1", "params": {"bogus": 1}}).status_code == 400
    r = client.post("/api/v1/plans", headers=auth("operator"), json={"cluster": "c1", "params": {"max_moves": 20}})
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    plan = client.get(f"/api/v1/plans/{plan_id}", headers=auth("viewer")).json()
    assert plan["status"] == "proposed" and plan["plan"]["format"] == "guardian.plan/v1"
    assert client.post(f"/api/v1/plans/{plan_id}/validate", headers=auth("viewer")).json()["valid"] is True
    assert client.post(f"/api/v1/plans/{plan_id}/execute", headers=auth("operator")).status_code == 409
    assert client.post(f"/api/v1/plans/{plan_id}/approve", headers=auth("operator")).status_code == 200
    assert client.post(f"/api/v1/plans/{plan_id}/reject", headers=auth("operator")).status_code == 409
    r = client.post(f"/api/v1/plans/{plan_id}/execute", headers=auth("operator"))
    assert r.status_code == 503 and "no executor" in r.json()["detail"]  # executions: test_api_execute.py
    actions = client.get("/api/v1/actions", headers=auth("viewer")).json()
    assert actions[0]["type"] == "plan.approve" and actions[0]["who"] == "operator-user"
    access = [json.loads(line) for line in ctx.access_log.read_text().splitlines()]
    assert any(a["status"] == 409 and a["path"].endswith("/execute") for a in access)  # refusals recorded too


def test_import_plan_checks_constraints(client: TestClient) -> None:
    register(client)
    text = fresh_snapshot_text()
    client.put("/api/v1/clusters/c1/snapshot", headers=auth("operator"), content=text.encode())
    snap = parse_snapshot(text)
    p = snap.topics[0].partitions[0]
    bad = {"format": "guardian.plan/v1", "cluster": "c1", "kind": "manual",
           "reassignment": {"version": 1, "partitions": [
               {"topic": p.topic, "partition": p.partition, "replicas": [999, *p.replicas[1:]]}]}}
    r = client.post("/api/v1/plans/import", headers=auth("operator"), content=json.dumps(bad).encode())
    assert r.status_code == 409
    assert any("unknown-broker" in v for v in r.json()["violations"])
    good = dict(bad, reassignment={"version": 1, "partitions": [
        {"topic": p.topic, "partition": p.partition, "replicas": list(reversed(p.replicas))}]})
    assert client.post("/api/v1/plans/import", headers=auth("operator"),
                       content=json.dumps(good).encode()).status_code == 201


def test_configuration_endpoints(client: TestClient) -> None:
    register(client)
    h = auth("admin")
    assert client.put("/api/v1/clusters/c1/auto-rebalance", headers=h,
                      json={"enabled": True, "threshold": 1.3}).status_code == 200
    assert client.put("/api/v1/clusters/c1/auto-rebalance", headers=h,
                      json={"enabled": True, "threshold": 0.5}).status_code == 400
    assert client.put("/api/v1/clusters/c1/placement", headers=h,
                      json={"topic": "orders", "placement": {"idc-a": 2}}).status_code == 200
    assert client.put("/api/v1/clusters/c1/pools/pay", headers=h, json={"brokers": [4, 5]}).status_code == 200
    assert client.put("/api/v1/clusters/c1/maintenance/3", headers=auth("operator")).status_code == 200
    cluster: dict[str, Any] = client.get("/api/v1/clusters/c1", headers=auth("viewer")).json()
    assert cluster["auto_rebalance"]["threshold"] == 1.3
    assert cluster["placement"]["topics"]["orders"] == {"idc-a": 2}
    assert cluster["pools"] == {"pay": [4, 5]}
    assert "3" in cluster["maintenance"]
    assert client.delete("/api/v1/clusters/c1/maintenance/3", headers=auth("operator")).status_code == 200
    r = client.put("/api/v1/throttles/c1/disk-1", headers=auth("operator"),
                   json={"kind": "follower", "target": {"broker": 1}, "rate_bytes_per_s": 1e6})
    assert r.status_code == 400 and "$.kind" in r.text and "follower_replication" in r.text  # never applied: refused
    r = client.put("/api/v1/throttles/c1/disk-1", headers=auth("operator"),
                   json={"kind": "follower_replication", "target": {"broker": 1}, "rate_bytes_per_s": 1e6})
    assert r.status_code == 400 and "topic, partition" in r.text  # the target a follower lever needs
    r = client.put("/api/v1/throttles/c1/disk-1", headers=auth("operator"),
                   json={"kind": "migration_rate", "target": {"broker": 1}, "rate_bytes_per_s": 1e6})
    assert r.status_code == 200
    assert client.get("/api/v1/throttles", headers=auth("viewer")).json()[0]["key"] == "disk-1"
    assert client.delete("/api/v1/throttles/c1/disk-1", headers=auth("operator")).status_code == 200
    ids = client.post("/api/v1/ids", headers=auth("operator"), json={"count": 3}).json()
    assert ids["last"] - ids["first"] == 2
    assert client.delete("/api/v1/clusters/c1", headers=h).status_code == 200
    assert client.get("/api/v1/clusters", headers=auth("viewer")).json() == []


def test_openapi_lists_the_endpoints(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/api/v1/plans/{plan_id}/approve" in paths and "/api/v1/executions/{execution_id}/stop" in paths


def test_an_operator_cannot_set_a_placement_policy_through_topic_create(client: TestClient) -> None:
    """Before: ``topic create --placement`` with an operator token set the topic's policy (placement needs admin)."""
    register(client)
    body = {"cluster": "c1", "name": "ledger", "partitions": 3, "expected_bytes_in_per_s": 1e6,
            "placement": {"idc-a": 3}}
    r = client.post("/api/v1/topics", headers=auth("operator"), json=body)
    assert r.status_code == 403 and "$.placement" in r.json()["detail"] and "needs admin" in r.json()["detail"]
    plain = {k: v for k, v in body.items() if k != "placement"}
    r = client.post("/api/v1/topics", headers=auth("operator"), json=plain)
    assert r.status_code == 409 and "snapshot" in r.json()["detail"]  # allowed; refused only for the missing snapshot
    r = client.post("/api/v1/topics", headers=auth("admin"), json=body)
    assert r.status_code == 409  # an admin passes the role check (then the missing snapshot)


def test_preallocate_kind_is_proposed_and_validates(client: TestClient) -> None:
    """``POST /plans`` kind ``preallocate`` proposes the new topic's assignment (it answered 409 "no such
    partition in the snapshot": the new partitions were checked as moves of existing ones); validate says valid."""
    register(client)
    r = client.put("/api/v1/clusters/c1/snapshot", headers=auth("operator"), content=fresh_snapshot_text().encode())
    assert r.status_code == 200, r.text
    r = client.post("/api/v1/plans", headers=auth("operator"),
                    json={"cluster": "c1", "kind": "preallocate",
                          "params": {"topic": "brand-new", "partitions": 6, "replication_factor": 3,
                                     "bytes_in_per_s": 1e6}})
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    plan = client.get(f"/api/v1/plans/{plan_id}", headers=auth("viewer")).json()
    assert plan["kind"] == "preallocate" and len(plan["plan"]["reassignment"]["partitions"]) == 6
    assert client.post(f"/api/v1/plans/{plan_id}/validate", headers=auth("viewer")).json()["valid"] is True
