"""What the API says about executions: one progress count for the list, the detail and the dashboard
(never past 100%), who started an execution, what approving twice answers, and the four-eyes rule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain.execution import Task, TaskState, bytes_progress, progress_json

TOKENS = {"viewer": "view-token-0123456789", "operator": "oper-token-0123456789",
          "operator2": "oper2-token-0123456789"}
GB = 1_000_000_000


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}", "X-Guardian-Reason": "test"}


def make_ctx(tmp_path: Path, **settings: Any) -> ServiceContext:
    tokens = [TokenConf(name="vera", role="viewer", sha256=hash_token(TOKENS["viewer"])),
              TokenConf(name="olga", role="operator", sha256=hash_token(TOKENS["operator"])),
              TokenConf(name="otto", role="operator", sha256=hash_token(TOKENS["operator2"]))]
    return ServiceContext(settings=Settings(data_dir=tmp_path, tokens=tokens, **settings), store=LocalStateStore())


@pytest.fixture()
def ctx(tmp_path: Path) -> ServiceContext:
    return make_ctx(tmp_path)


@pytest.fixture()
def client(ctx: ServiceContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx)) as c:
        yield c


def spec(key: str, size: int) -> dict[str, Any]:
    topic, part = key.split(":")
    return {"key": key, "topic": topic, "partition": int(part), "action": "reassign", "source_replicas": [1, 2],
            "target_replicas": [3, 4], "source_log_dirs": [], "target_log_dirs": [], "size_bytes": size,
            "leader": None, "batch": 0, "after": []}


def running_execution(ctx: ServiceContext) -> int:
    """An execution whose reassignments copy two new replicas each: measured totals are twice the planned
    size, and the executor's last progress record lags the tasks (the case that read 137.6% vs 99%)."""
    ctx.store.propose({"type": "cluster.register", "meta": meta("admin"), "name": "c1", "bootstrap_servers": ["h:1"]})
    plan_id = ctx.store.propose({"type": "plan.propose", "meta": meta("alice"), "cluster": "c1", "kind": "rebalance",
                                 "plan": {"format": "guardian.plan/v1"}})["plan_id"]
    ctx.store.propose({"type": "plan.approve", "meta": meta("bob"), "plan_id": plan_id})
    eid = int(ctx.store.propose({"type": "execution.start", "meta": meta("olga"), "plan_id": plan_id,
                                 "tasks": [spec("t:0", GB), spec("t:1", GB), spec("t:2", GB)]})["execution_id"])
    ctx.store.propose({"type": "execution.tasks", "meta": meta("executor"), "execution_id": eid, "updates": [
        {"key": "t:0", "state": "IN_PROGRESS"}, {"key": "t:1", "state": "IN_PROGRESS"},
        {"key": "t:2", "state": "IN_PROGRESS"}]})
    ctx.store.propose({"type": "execution.tasks", "meta": meta("executor"), "execution_id": eid, "updates": [
        {"key": "t:0", "state": "COMPLETED", "bytes_done": 2 * GB, "bytes_total": 2 * GB},
        {"key": "t:1", "state": "IN_PROGRESS", "bytes_done": int(1.5 * GB), "bytes_total": 2 * GB,
         "rate_bytes_per_s": 1e8},
        {"key": "t:2", "state": "IN_PROGRESS", "bytes_done": int(0.6 * GB), "bytes_total": 2 * GB}]})
    ctx.store.propose({"type": "execution.progress", "meta": meta("executor"), "execution_id": eid, "progress": {
        "bytes_done": 3 * GB, "bytes_total": 6 * GB, "rate_bytes_per_s": 1e8, "eta_s": 30.0}})
    return eid


def test_list_detail_and_dashboard_count_progress_the_same_way_and_never_pass_100_percent(
        ctx: ServiceContext, client: TestClient) -> None:
    eid = running_execution(ctx)
    listed = next(e for e in client.get("/api/v1/executions", headers=auth("viewer")).json() if e["id"] == eid)
    detail = client.get(f"/api/v1/executions/{eid}", headers=auth("viewer")).json()
    overview = client.get("/api/v1/overview", headers=auth("viewer")).json()
    dash = next(c for c in overview["clusters"] if c["name"] == "c1")["execution"]
    want = (2 * GB + int(1.5 * GB) + int(0.6 * GB), 6 * GB)
    for prog in (listed["progress"], detail["progress"]):
        assert (prog["bytes_done"], prog["bytes_total"]) == want
        assert prog["fraction"] == pytest.approx(want[0] / want[1]) and prog["fraction"] <= 1.0
        assert prog["rate_bytes_per_s"] == 1e8 and prog["eta_s"] == 30.0  # the executor's record is kept
    assert (dash["bytes_done"], dash["bytes_total"]) == want


task_states = st.sampled_from(list(TaskState))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(task_states, st.integers(0, 10 * GB), st.integers(0, 10 * GB), st.integers(0, 10 * GB)),
                max_size=20))
def test_bytes_done_never_exceed_bytes_to_do(rows: list[tuple[TaskState, int, int, int]]) -> None:
    tasks = [Task(f"t:{i}", "t", i, "reassign", (1,), (2,), size_bytes=size, state=state, bytes_done=done,
                  bytes_total=total) for i, (state, size, done, total) in enumerate(rows)]
    done, total = bytes_progress(tasks)
    assert 0 <= done <= total
    doc = {"progress": {}, "tasks": {t.key: t.to_json() for t in tasks}}
    prog = progress_json(doc)
    assert 0.0 <= prog["fraction"] <= 1.0 and (prog["bytes_done"], prog["bytes_total"]) == (done, total)


def proposed_plan(ctx: ServiceContext, by: str) -> int:
    if ctx.store.read(lambda s: "c1" not in s["clusters"]):
        ctx.store.propose({"type": "cluster.register", "meta": meta("admin"), "name": "c1",
                           "bootstrap_servers": ["h:1"]})
    return int(ctx.store.propose({"type": "plan.propose", "meta": meta(by), "cluster": "c1", "kind": "rebalance",
                                  "plan": {"format": "guardian.plan/v1"}})["plan_id"])


def test_deciding_a_plan_twice_is_409_naming_the_first_decision(ctx: ServiceContext, client: TestClient) -> None:
    plan_id = proposed_plan(ctx, "olga")
    first = client.post(f"/api/v1/plans/{plan_id}/approve", headers=auth("operator"))
    assert first.status_code == 200 and first.json()["changed"] is True
    again = client.post(f"/api/v1/plans/{plan_id}/approve", headers=auth("operator2"))
    assert again.status_code == 409, again.text
    assert "already approved" in again.json()["detail"] and "'olga'" in again.json()["detail"]
    plan = client.get(f"/api/v1/plans/{plan_id}", headers=auth("viewer")).json()
    assert plan["status"] == "approved" and plan["decided_by"] == "olga"  # the first decision stands
    rejected = proposed_plan(ctx, "olga")
    assert client.post(f"/api/v1/plans/{rejected}/reject", headers=auth("operator")).status_code == 200
    assert client.post(f"/api/v1/plans/{rejected}/reject", headers=auth("operator")).status_code == 409
    assert client.post(f"/api/v1/plans/{rejected}/approve", headers=auth("operator")).status_code == 409
    approvals = [a for a in client.get("/api/v1/actions", headers=auth("viewer")).json() if a["type"] == "plan.approve"]
    assert len(approvals) == 1  # a refused second decision proposes nothing


def test_without_four_eyes_the_proposer_may_approve(ctx: ServiceContext, client: TestClient) -> None:
    plan_id = proposed_plan(ctx, "olga")
    assert client.post(f"/api/v1/plans/{plan_id}/approve", headers=auth("operator")).status_code == 200


def test_four_eyes_refuses_the_proposers_own_approval_naming_both(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, approval={"four_eyes": True})
    with TestClient(create_app(ctx)) as client:
        plan_id = proposed_plan(ctx, "olga")
        own = client.post(f"/api/v1/plans/{plan_id}/approve", headers=auth("operator"))
        assert own.status_code == 409, own.text
        detail = own.json()["detail"]
        assert "four-eyes" in detail and "'olga'" in detail and detail.count("olga") == 2
        assert client.get(f"/api/v1/plans/{plan_id}", headers=auth("viewer")).json()["status"] == "proposed"
        other = client.post(f"/api/v1/plans/{plan_id}/approve", headers=auth("operator2"))
        assert other.status_code == 200, other.text
        plan = client.get(f"/api/v1/plans/{plan_id}", headers=auth("viewer")).json()
        assert plan["proposed_by"] == "olga" and plan["decided_by"] == "otto"
        # rejecting one's own plan stays allowed (it changes nothing on the cluster)
        mine = proposed_plan(ctx, "olga")
        assert client.post(f"/api/v1/plans/{mine}/reject", headers=auth("operator")).status_code == 200
