"""The anomalies router (real app, local store): list with filters, explain with its fix, ignore, the
self-healing settings; 401/403/404/409/400 paths."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.store import LocalStateStore
from tests.support.healing_support import seed_anomalies as seed

TOKENS = {"viewer": "v-token", "operator": "o-token", "admin": "a-token"}


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}", "X-Guardian-Reason": "test"}


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, int], LocalStateStore]]:
    settings = Settings(data_dir=tmp_path, tokens=[TokenConf(name=f"{r}-user", role=r, sha256=hash_token(t))
                                                   for r, t in TOKENS.items()])
    store = LocalStateStore()
    ids = seed(store)
    with TestClient(create_app(ServiceContext(settings=settings, store=store))) as c:
        yield c, ids, store


def ids_of(rows: list[dict[str, Any]]) -> list[int]:
    return [int(a["id"]) for a in rows]


def test_list_filters_and_orders_newest_first(env: tuple[TestClient, dict[str, int], LocalStateStore]) -> None:
    client, ids, _ = env
    r = client.get("/api/v1/anomalies", headers=auth("viewer"))
    assert r.status_code == 200
    assert ids_of(r.json()) == sorted(ids_of(r.json()), reverse=True) == [ids["urp"], ids["slow"], ids["dead"]]
    assert all("history" not in a for a in r.json())
    assert ids_of(client.get("/api/v1/anomalies?cluster=c1", headers=auth("viewer")).json()) == \
        [ids["slow"], ids["dead"]]
    assert ids_of(client.get("/api/v1/anomalies?open=true", headers=auth("viewer")).json()) == \
        [ids["slow"], ids["dead"]]
    assert ids_of(client.get("/api/v1/anomalies?status=fixed", headers=auth("viewer")).json()) == [ids["urp"]]
    assert ids_of(client.get("/api/v1/anomalies?limit=1", headers=auth("viewer")).json()) == [ids["urp"]]
    assert client.get("/api/v1/anomalies?limit=0", headers=auth("viewer")).status_code == 400
    assert client.get("/api/v1/anomalies").status_code == 401
    assert client.get("/api/v1/anomalies", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_explain_shows_evidence_history_and_the_fix(env: tuple[TestClient, dict[str, int], LocalStateStore]) -> None:
    client, ids, _ = env
    r = client.get(f"/api/v1/anomalies/{ids['dead']}", headers=auth("viewer"))
    assert r.status_code == 200
    a = r.json()
    assert a["status"] == "fixing" and a["evidence"] == {"dead_for_s": 400}
    assert [h["status"] for h in a["history"]] == ["confirmed", "fixing"]
    assert a["plan"]["id"] == ids["plan"] and a["plan"]["kind"] == "heal-broker"
    assert a["plan"]["notes"] == ["drain broker 2"]
    assert "plan" not in client.get(f"/api/v1/anomalies/{ids['slow']}", headers=auth("viewer")).json()
    r = client.get("/api/v1/anomalies/9999", headers=auth("viewer"))
    assert r.status_code == 404 and "unknown anomaly 9999" in r.json()["detail"]
    assert client.get("/api/v1/anomalies/0", headers=auth("viewer")).status_code == 400


def test_ignore_needs_an_operator_and_refuses_a_fix_in_flight(
        env: tuple[TestClient, dict[str, int], LocalStateStore]) -> None:
    client, ids, store = env
    path = f"/api/v1/anomalies/{ids['slow']}/ignore"
    assert client.post(path, headers=auth("viewer"), json={"reason": "x"}).status_code == 403
    r = client.post(path, headers=auth("operator"), json={"reason": "disk swap planned"})
    assert r.status_code == 200, r.text
    rec = store.read(lambda s: dict(s["anomalies"][str(ids["slow"])]))
    assert rec["status"] == "ignored" and rec["reason"] == "disk swap planned"
    assert rec["history"][-1]["by"] == "operator-user"
    r = client.post(f"/api/v1/anomalies/{ids['dead']}/ignore", headers=auth("operator"), json={})
    assert r.status_code == 409 and "stop its execution first" in r.json()["detail"]
    assert client.post("/api/v1/anomalies/9999/ignore", headers=auth("operator"), json={}).status_code == 404
    r = client.post(f"/api/v1/anomalies/{ids['urp']}/ignore", headers=auth("operator"), json={})
    assert r.status_code == 409, r.text  # closed: fixed -> ignored is not a transition
    r = client.post(path, headers=auth("operator"), json={"reason": "x", "extra": 1})
    assert r.status_code == 400


def test_self_healing_settings(env: tuple[TestClient, dict[str, int], LocalStateStore]) -> None:
    client, _, store = env
    body = {"enabled": True, "grace_s": 120, "max_concurrent_fixes": 2, "mass_failure_share": 0.25,
            "evacuate_slow_after_s": 600, "heal_bound_s": 1800, "heal_rate_bytes_per_s": 80e6}
    assert client.put("/api/v1/clusters/c1/self-healing", headers=auth("viewer"), json=body).status_code == 403
    r = client.put("/api/v1/clusters/c1/self-healing", headers=auth("operator"), json=body)
    assert r.status_code == 200, r.text
    rec = store.read(lambda s: dict(s["self_healing"]["c1"]))
    assert {k: rec[k] for k in body} == body and rec["updated_by"] == "operator-user"
    assert client.put("/api/v1/clusters/nope/self-healing", headers=auth("operator"), json=body).status_code == 404
    for bad in ({"enabled": True, "mass_failure_share": 1.0}, {"enabled": True, "grace_s": -1},
                {"enabled": True, "max_concurrent_fixes": 0}, {"grace_s": 10},
                {"enabled": True, "heal_rate_bytes_per_s": 0}, {"enabled": True, "heal_bound_s": -5}):
        r = client.put("/api/v1/clusters/c1/self-healing", headers=auth("operator"), json=bad)
        assert r.status_code == 400, (bad, r.text)
        if "heal_rate_bytes_per_s" in bad or "heal_bound_s" in bad:
            assert next(k for k in bad if k.startswith("heal")) in r.text, r.text
