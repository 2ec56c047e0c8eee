"""Schemathesis over the OpenAPI spec: no generated request (valid or not) makes the API answer 5xx."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings

from analytics_spark.clickhouse import connect
from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from tests.support.chdb_session import chdb_path, fresh_database

TOKEN = "fuzz-admin"


def _app() -> Any:
    settings_ = Settings(data_dir=Path(tempfile.mkdtemp(prefix="guardian-fuzz-")),
                         tokens=[TokenConf(name="fuzz", role="admin", sha256=hash_token(TOKEN))])
    ctx = ServiceContext(settings=settings_, store=LocalStateStore())
    ctx.clickhouse = connect(data_path=chdb_path(), database=fresh_database("api_fuzz"))  # analytics reads too
    ctx.store.propose({"type": "cluster.register", "meta": meta("setup"), "name": "c1",
                       "bootstrap_servers": ["127.0.0.1:9092"]})
    snap = generate_snapshot(GeneratorSpec(brokers=6, disks_per_broker=2, partitions=40, cluster="c1"))
    ctx.snapshots.put(replace(snap, taken_at=datetime.now(UTC)))
    return create_app(ctx)


schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: Any) -> None:
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text}"
