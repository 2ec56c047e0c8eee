"""Analytics results through the API: 503 without ClickHouse, the latest run's rows with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from analytics_spark.clickhouse import connect
from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.store import LocalStateStore
from tests.support.chdb_session import chdb_path, fresh_database

H = {"Authorization": "Bearer viewer-token"}
PATHS = ["/api/v1/analytics/traffic-model", "/api/v1/analytics/lineage/c1/orders", "/api/v1/analytics/costs",
         "/api/v1/analytics/idle-topics", "/api/v1/analytics/cross-idc"]


def context(tmp_path: Path) -> ServiceContext:
    token = TokenConf(name="v", role="viewer", sha256=hash_token("viewer-token"))
    settings = Settings(data_dir=tmp_path, tokens=[token])
    return ServiceContext(settings=settings, store=LocalStateStore())


@pytest.fixture()
def client_without(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(context(tmp_path))) as c:
        yield c


@pytest.fixture()
def client_with(tmp_path: Path) -> Iterator[TestClient]:
    ctx = context(tmp_path)
    ctx.clickhouse = connect(data_path=chdb_path(), database=fresh_database("api_analytics"))
    with TestClient(create_app(ctx)) as c:
        yield c


@pytest.mark.parametrize("path", PATHS)
def test_without_clickhouse_every_analytics_read_is_503(client_without: TestClient, path: str) -> None:
    r = client_without.get(path, headers=H)
    assert r.status_code == 503 and "ClickHouse" in r.json()["detail"]
    assert client_without.get(path).status_code == 401


def test_before_any_run_the_results_are_empty(client_with: TestClient) -> None:
    assert client_with.get(PATHS[0], headers=H).json() == {}
    assert client_with.get(PATHS[1], headers=H).json() == []
    assert client_with.get(PATHS[2], headers=H).json() == []
    assert client_with.get(PATHS[3], headers=H).json() == []
    assert client_with.get(PATHS[1] + "?role=nobody", headers=H).status_code == 400
