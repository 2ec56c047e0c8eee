"""A real `guardian serve` process protects a kafkasim disk on its own: scheduled throttle job, wire adapters,
API. kafkasim runs at 10x real time; the service observes the cluster every 0.5 s (5 simulated seconds: one
collection round, which the throttle job evaluates once)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.config import hash_token
from controlplane.launcher import ServiceCluster
from kafkasim.broker.server import SimRunner
from tests.support.kafkasim_support import http_json, register_fields, start_sim
from tests.support.service_support import wait_for
from tests.support.throttle_scenario import CLUSTER, spec


@pytest.fixture()
def sim() -> Iterator[SimRunner]:
    s = spec(partition_throttle=True)
    s["speed"] = 10.0
    with start_sim(s) as runner:  # SASL_SSL + https exporters with basic auth, as ``sim up --realistic``
        runner.call(lambda: setattr(runner.server.fed.engine, "burst_rate_per_hour", 0.0))
        yield runner


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[ServiceCluster]:
    cluster = ServiceCluster(tmp_path, size=1)
    cluster.config.write_text(f'[[tokens]]\nname = "admin"\nrole = "admin"\nsha256 = "{hash_token(cluster.token)}"\n'
                              "[intervals]\nauto_rebalance_check_s = 3600\ncollect_s = 0.5\nthrottle_s = 0.5\n")
    cluster.start_all()
    try:
        cluster.leader(timeout=20)
        yield cluster
    finally:
        cluster.close()


def test_serve_throttles_a_lagging_consumer_and_releases_it(sim: SimRunner, service: ServiceCluster) -> None:
    ep = sim.endpoints["clusters"][CLUSTER]
    code, body = service.request(1, "POST", "/api/v1/clusters", {
        "name": CLUSTER, **register_fields(ep)})
    assert code == 201, body
    time.sleep(2.0)  # a few calm evaluations: nothing to do
    assert service.request(1, "GET", "/api/v1/throttles")[1] == []
    http_json(sim.endpoints["control_url"] + "/fault/lagging-consumer",
              {"cluster": CLUSTER, "topic": "orders", "partition": 0, "lag_bytes": 6e9, "rate_bytes_per_s": 160e6})
    rows = wait_for("a throttle", lambda: service.request(1, "GET", "/api/v1/throttles")[1], 20)
    assert rows[0]["key"] == "fetch:orders:0" and rows[0]["set_by"] == "throttle-protection"
    # the lever is recorded first, then applied (throttle_loop): give the AlterConfigs a moment
    wait_for("the throttle config", lambda: "guardian.partition.throttle.fetch.bytes.per.second" in sim.call(
        lambda: dict(sim.server.fed.clusters[CLUSTER].topics["orders"].configs)), 5)
    code, explain = service.request(1, "GET", f"/api/v1/throttle/explain/{CLUSTER}")
    assert code == 200 and explain["history"][0]["type"] == "throttle.set", json.dumps(explain)[:500]
    # the consumer catches up (6 GB at ~100 MB/s simulated = ~6 s real), then the throttle is released
    wait_for("the release", lambda: service.request(1, "GET", "/api/v1/throttles")[1] == [], 40)
    cfg = sim.call(lambda: dict(sim.server.fed.clusters[CLUSTER].topics["orders"].configs))
    assert "guardian.partition.throttle.fetch.bytes.per.second" not in cfg
