"""API hardening (issue 16): request limits and auth before the body, strict types, RFC 7807 everywhere,
500s logged and counted, and careless input refused when it is written. Real app; the body-limit tests
also run it in a real uvicorn server over TCP."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient

from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.store import LocalStateStore
from domain import dump_snapshot
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from raft.errors import NotLeaderError
from raft.localcluster import free_ports
from tests.support.service_ports import NoConnectionExecutor

TOKENS = {"viewer": "v-token", "operator": "o-token", "admin": "a-token"}
MiB = 1 << 20


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}", "X-Guardian-Reason": "hardening test"}


def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, tokens=[TokenConf(name=f"{r}-user", role=r, sha256=hash_token(t))
                                               for r, t in TOKENS.items()])


@pytest.fixture()
def ctx(tmp_path: Path) -> ServiceContext:
    return ServiceContext(settings=settings(tmp_path), store=LocalStateStore())


@pytest.fixture()
def client(ctx: ServiceContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx)) as c:
        yield c


def register(client: TestClient, name: str = "c1") -> None:
    r = client.post("/api/v1/clusters?probe=false", headers=auth("admin"),
                    json={"name": name, "bootstrap_servers": ["h:9092"]})
    assert r.status_code == 201, r.text


def with_snapshot(client: TestClient, ctx: ServiceContext, name: str = "c1") -> Any:
    register(client, name)
    snap = generate_snapshot(GeneratorSpec(brokers=9, disks_per_broker=2, partitions=60, seed=3, cluster=name))
    snap = replace(snap, taken_at=datetime.now(UTC))
    ctx.snapshots.put(snap)
    return snap


def assert_problem(r: Any, status: int, fragment: str = "") -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["title"] and fragment in body["detail"], body
    return body


# ---------------------------------------------------------------- body limits, auth before the body
@pytest.fixture()
def server(ctx: ServiceContext) -> Iterator[int]:
    (port,) = free_ports(1)
    srv = uvicorn.Server(uvicorn.Config(create_app(ctx), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.started
    try:
        yield port
    finally:
        srv.should_exit = True
        thread.join(10)


def raw_request(port: int, head: str, body: bytes = b"", timeout: float = 3.0) -> tuple[int, dict[str, Any], float]:
    """Send ``head`` and ``body`` (not the whole declared body), then read the answer: status, JSON, seconds."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    header, _, payload = data.partition(b"\r\n\r\n")
    return int(header.split()[1]), json.loads(payload), time.perf_counter() - start


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 1 << 30


def test_an_unauthenticated_100_mb_body_is_refused_without_being_read(server: int) -> None:
    head = ("POST /api/v1/ids HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {100 * MiB}\r\n")
    status, body, seconds = raw_request(server, head, b'{"count": 1')  # 11 of 100 MiB sent: reading would hang
    assert status == 401 and body["title"] == "Unauthorized" and seconds < 2.5


def test_an_authenticated_body_over_the_cap_is_413_before_it_is_read(server: int) -> None:
    head = ("POST /api/v1/ids HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {TOKENS['operator']}\r\nContent-Length: {100 * MiB}\r\n")
    status, body, seconds = raw_request(server, head, b'{"count": 1')
    assert status == 413 and body["limit_bytes"] == MiB and "limit" in body["detail"] and seconds < 2.5


def test_a_chunked_body_is_cut_off_at_the_cap(server: int) -> None:
    head = ("POST /api/v1/ids HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {TOKENS['operator']}\r\nTransfer-Encoding: chunked\r\n")
    chunk = b" " * (256 * 1024)
    body = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(5))  # 1.25 MiB, never terminated
    status, problem, _ = raw_request(server, head, body)
    assert status == 413 and problem["limit_bytes"] == MiB


def test_the_guard_reads_nothing_of_an_unauthenticated_body(ctx: ServiceContext) -> None:
    """At the ASGI level: count what the app pulls from the connection."""
    app = create_app(ctx)
    pulled: list[int] = []
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        pulled.append(MiB)
        return {"type": "http.request", "body": b" " * MiB, "more_body": True}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "PUT", "scheme": "http",
             "path": "/api/v1/clusters/c1/snapshot", "raw_path": b"/api/v1/clusters/c1/snapshot", "root_path": "",
             "query_string": b"", "headers": [(b"transfer-encoding", b"chunked")], "client": ("t", 1),
             "server": ("t", 80)}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 401 and pulled == []


def test_snapshot_import_takes_more_than_the_default_cap(client: TestClient, ctx: ServiceContext) -> None:
    register(client)
    snap = generate_snapshot(GeneratorSpec(brokers=6, partitions=30, cluster="c1"))
    text = dump_snapshot(replace(snap, taken_at=datetime.now(UTC))) + " " * (2 * MiB)  # 2 MiB of padding
    r = client.put("/api/v1/clusters/c1/snapshot", headers=auth("operator"), content=text.encode())
    assert r.status_code == 200, r.text
    r = client.post("/api/v1/clusters", headers=auth("admin"), content=b"{}" + b" " * (2 * MiB))
    assert_problem(r, 413, "limit of 1048576 bytes")


# ---------------------------------------------------------------- strict types, content types
@pytest.mark.parametrize(("path", "method", "body", "field"), [
    ("/api/v1/ids", "post", {"count": "1"}, "$.count"),
    ("/api/v1/ids", "post", {"count": True}, "$.count"),
    ("/api/v1/ids", "post", {"count": 1.5}, "$.count"),
    ("/api/v1/clusters/c1/auto-rebalance", "put", {"enabled": True, "window_minutes": True}, "$.window_minutes"),
    ("/api/v1/clusters/c1/auto-rebalance", "put", {"enabled": "yes"}, "$.enabled"),
    ("/api/v1/clusters/c1/pools/pay", "put", {"brokers": ["4"]}, "$.brokers[0]"),
    ("/api/v1/clusters/c1/pools/pay", "put", {"brokers": [2**31]}, "$.brokers[0]"),
    ("/api/v1/executions/1/stop", "post", {"rollback": "true"}, "$.rollback"),
])
def test_no_lax_coercion(client: TestClient, path: str, method: str, body: dict[str, Any], field: str) -> None:
    register(client)
    r = getattr(client, method)(path, headers=auth("admin"), json=body)
    problem = assert_problem(r, 400, field)
    assert any(p["path"] == field for p in problem["problems"])


def test_broker_ids_are_int32(client: TestClient) -> None:
    register(client)
    assert_problem(client.put(f"/api/v1/clusters/c1/maintenance/{2**31}", headers=auth("operator")), 400,
                   "$.path.broker")
    r = client.post("/api/v1/alerts/alertmanager", headers=auth("operator"), json={"alerts": [
        {"status": "firing", "labels": {"cluster": "c1", "broker": str(2**31), "disk": "/d"}}]})
    assert_problem(r, 400, "$.alerts[0].labels.broker")


def test_text_plain_json_is_415_and_a_body_without_content_type_is_json(client: TestClient) -> None:
    r = client.post("/api/v1/ids", headers={**auth("operator"), "Content-Type": "text/plain"}, content=b'{"count": 2}')
    assert_problem(r, 415, "Content-Type: application/json")
    r = client.put("/api/v1/clusters/c1/snapshot", headers={**auth("operator"), "Content-Type": "text/plain"},
                   content=b"{}")
    assert_problem(r, 415, "'text/plain'")
    r = client.post("/api/v1/ids", headers=auth("operator"), content=b'{"count": 2}')  # no Content-Type
    assert r.status_code == 200 and r.json()["last"] - r.json()["first"] == 1
    r = client.post("/api/v1/ids", headers={**auth("operator"), "Content-Type": "application/json; charset=utf-8"},
                    content=b'{"count": 1}')
    assert r.status_code == 200


class FollowerStore(LocalStateStore):
    @property
    def is_leader(self) -> bool:
        return False

    def status(self) -> dict[str, Any]:
        return {**super().status(), "role": "follower", "is_leader": False, "leader": "10.0.0.2:4321"}

    def propose(self, command: dict[str, Any], timeout: float = 5.0) -> Any:
        raise NotLeaderError("10.0.0.2:4321")


def test_the_redirect_to_the_leader_keeps_the_query_string(tmp_path: Path) -> None:
    ctx = ServiceContext(settings=settings(tmp_path), store=FollowerStore(),
                         http_of={"10.0.0.2:4321": "http://10.0.0.2:8080/"})
    with TestClient(create_app(ctx), follow_redirects=False) as client:
        r = client.post("/api/v1/ids?trace=1&x=a%20b", headers=auth("operator"), json={"count": 1})
        assert r.status_code == 307
        assert r.headers["location"] == "http://10.0.0.2:8080/api/v1/ids?trace=1&x=a%20b"
        r = client.post("/api/v1/throttle/evaluate/c1?why=alert", headers=auth("operator"))
        assert r.headers["location"] == "http://10.0.0.2:8080/api/v1/throttle/evaluate/c1?why=alert"


# ---------------------------------------------------------------- 500s, RFC 7807 everywhere
class ExplodingExecutor(NoConnectionExecutor):
    def start_approved(self, plan_id: int, caps: Mapping[str, int] | None = None, why: str = "",
                       by: str | None = None, options: Mapping[str, Any] | None = None) -> int:
        raise RuntimeError("lost connection to clickhouse://guardian:hunter2@ch:8123 (token=abc123)")


def approved_plan(client: TestClient, ctx: ServiceContext) -> int:
    with_snapshot(client, ctx)
    r = client.post("/api/v1/plans", headers=auth("operator"), json={"cluster": "c1", "params": {"max_moves": 5}})
    assert r.status_code == 201, r.text
    plan_id = int(r.json()["plan_id"])
    assert client.post(f"/api/v1/plans/{plan_id}/approve", headers=auth("operator")).status_code == 200
    return plan_id


def test_a_500_is_a_problem_logged_once_counted_and_in_the_access_log(
        client: TestClient, ctx: ServiceContext, caplog: pytest.LogCaptureFixture) -> None:
    plan_id = approved_plan(client, ctx)
    ctx.executor = ExplodingExecutor()
    with caplog.at_level(logging.ERROR, logger="controlplane.api.access"):
        r = client.post(f"/api/v1/plans/{plan_id}/execute", headers=auth("operator"))
    problem = assert_problem(r, 500, "internal error")
    assert "hunter2" not in r.text and "RuntimeError" not in r.text
    (line,) = [rec.getMessage() for rec in caplog.records if rec.name == "controlplane.api.access"]
    assert problem["error"] in line and "RuntimeError" in line and "/api/v1/plans/{plan_id}/execute" in line
    assert "hunter2" not in line and "abc123" not in line and "\n" not in line
    access = [json.loads(x) for x in ctx.access_log.read_text().splitlines()]
    assert access[-1]["status"] == 500 and access[-1]["error"] == problem["error"]
    assert access[-1]["who"] == "operator-user"
    metric = 'guardian_http_requests_total{method="POST",route="/api/v1/plans/{plan_id}/execute",status="500"} 1.0'
    assert metric in client.get("/metrics").text


def test_refusals_before_routing_are_counted_too(client: TestClient, ctx: ServiceContext) -> None:
    client.post("/api/v1/ids", json={"count": 1})
    client.post("/api/v1/ids", headers={**auth("operator"), "Content-Type": "text/plain"}, content=b"{}")
    text = client.get("/metrics").text
    assert 'route="/api/v1/ids",status="401"} 1.0' in text and 'route="/api/v1/ids",status="415"} 1.0' in text
    assert [a["status"] for a in map(json.loads, ctx.access_log.read_text().splitlines())] == [401, 415]


@pytest.mark.parametrize(("method", "path"), [("get", "/nope"), ("delete", "/api/v1/ids"), ("get", "/api/v1/plans/x")])
def test_router_errors_are_problems(client: TestClient, method: str, path: str) -> None:
    r = getattr(client, method)(path, headers=auth("admin"))
    assert r.status_code in (400, 404, 405) and r.headers["content-type"].startswith("application/problem+json")


# ---------------------------------------------------------------- careless input refused at write time
def test_executing_an_approved_plan_whose_cluster_was_removed_is_409(client: TestClient, ctx: ServiceContext) -> None:
    plan_id = approved_plan(client, ctx)
    ctx.executor = ExplodingExecutor()  # never reached
    r = client.delete("/api/v1/clusters/c1", headers=auth("admin"))
    assert_problem(r, 409, f"approved or executing plans [{plan_id}]")
    assert ctx.snapshots.get("c1") is not None  # nothing dropped on a refusal
    # a state written before the rule: the cluster is gone, the plan still approved
    ctx.store.read(lambda s: s["clusters"].pop("c1"))
    r = client.post(f"/api/v1/plans/{plan_id}/execute", headers=auth("operator"))
    assert_problem(r, 409, "no longer registered")


@pytest.mark.parametrize(("cron", "fragment"), [
    ("61 * * * *", "maximum value (59)"), ("every night", "should match pattern"), ("a b c d e", "5-field crontab"),
    ("* * 31 2 *", "never fires")])
def test_an_invalid_window_cron_is_400_naming_the_field(client: TestClient, cron: str, fragment: str) -> None:
    register(client)
    r = client.put("/api/v1/clusters/c1/auto-rebalance", headers=auth("admin"),
                   json={"enabled": True, "window_cron": cron})
    problem = assert_problem(r, 400, "$.window_cron")
    assert fragment in problem["detail"]
    assert client.get("/api/v1/clusters/c1", headers=auth("viewer")).json()["auto_rebalance"] == {"enabled": False}


def test_maintenance_needs_a_broker_the_cluster_has(client: TestClient, ctx: ServiceContext) -> None:
    register(client, "bare")
    r = client.put("/api/v1/clusters/bare/maintenance/17", headers=auth("operator"))
    assert r.status_code == 200 and "not checked" in r.json()["note"]  # no snapshot: accepted, and said so
    with_snapshot(client, ctx)
    problem = assert_problem(client.put("/api/v1/clusters/c1/maintenance/17", headers=auth("operator")), 404,
                             "no broker 17")
    assert problem["broker"] == 17
    r = client.put("/api/v1/clusters/c1/maintenance/3", headers=auth("operator"))
    assert r.status_code == 200 and "note" not in r.json()
    assert client.delete("/api/v1/clusters/bare/maintenance/17", headers=auth("operator")).status_code == 200


def test_a_pool_cannot_take_brokers_holding_other_pools_replicas(client: TestClient, ctx: ServiceContext) -> None:
    snap = with_snapshot(client, ctx)
    r = client.put("/api/v1/clusters/c1/pools/pay", headers=auth("admin"), json={"brokers": [4, 5]})
    problem = assert_problem(r, 409, "would straddle pool 'pay'")
    assert set(problem["brokers"]) <= {"4", "5"} and problem["brokers"]
    holders = {b for t in snap.topics for p in t.partitions for b in p.replicas if t.name in problem["brokers"]["4"]}
    assert 4 in holders or "4" not in problem["brokers"]
    assert client.get("/api/v1/clusters/c1", headers=auth("viewer")).json()["pools"] == {}  # nothing proposed
    every = sorted(b.id for b in snap.brokers)  # the whole cluster: every topic lies wholly inside
    r = client.put("/api/v1/clusters/c1/pools/pay", headers=auth("admin"), json={"brokers": every})
    assert r.status_code == 200 and "note" not in r.json()
    register(client, "bare")
    r = client.put("/api/v1/clusters/bare/pools/pay", headers=auth("admin"), json={"brokers": [1]})
    assert r.status_code == 200 and "not checked" in r.json()["note"]


# ---------------------------------------------------------------- the OpenAPI document
def test_openapi_declares_bearer_and_the_problems_returned(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    bearer = spec["components"]["securitySchemes"]["bearer"]
    assert bearer["type"] == "http" and bearer["scheme"] == "bearer" and "admin.token" in bearer["description"]
    assert "HTTPValidationError" not in spec["components"]["schemas"] and "Problem" in spec["components"]["schemas"]
    ids = spec["paths"]["/api/v1/ids"]["post"]
    assert ids["security"] == [{"bearer": []}]
    assert {"400", "401", "403", "409", "413", "415"} <= set(ids["responses"]) and "422" not in ids["responses"]
    assert ids["responses"]["415"]["content"]["application/problem+json"]["schema"]["$ref"].endswith("/Problem")
    approve = spec["paths"]["/api/v1/plans/{plan_id}/approve"]["post"]["responses"]
    assert {"400", "401", "403", "404", "409"} <= set(approve)
    put_snapshot = spec["paths"]["/api/v1/clusters/{name}/snapshot"]["put"]
    assert put_snapshot["x-guardian-max-body-bytes"] == 160 * MiB and "requestBody" in put_snapshot
    assert "security" not in spec["paths"]["/healthz"]["get"]
    assert not any("422" in op["responses"] for ops in spec["paths"].values() for op in ops.values())
