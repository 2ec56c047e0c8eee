"""Self-healing over kafkasim (TCP, kafka-python), the service's own loops running: a dead broker healed once;
half the cluster dying raises an alert and moves nothing; a broker back inside its grace period moves nothing.
Each test prints its figures (simulated seconds from the fault to detection, to the fix, to under-replicated = 0;
bytes moved)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.bootstrap import Service, build_service
from controlplane.config import ClickHouseConf, IntervalsConf, RaftConf, Settings
from controlplane.state.commands import meta
from raft.localcluster import free_ports
from tests.integration.executor_support import Sim, scenario
from tests.integration.kafkasim_support import http_json

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def sim(tmp_path: Path) -> Iterator[Sim]:
    s = Sim(scenario(brokers=6, topics=2, partitions=12, rf=3, size_gb=0.02, speed=20.0), tmp_path)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    (port,) = free_ports(1)
    svc = build_service(Settings(data_dir=tmp_path / "g", raft=RaftConf(self_addr=f"127.0.0.1:{port}"),
                                 clickhouse=ClickHouseConf(mode="off"),
                                 intervals=IntervalsConf(collect_s=1.0, throttle_s=0.5, executor_s=0.5)))
    try:
        assert svc.store.node.wait_ready(10)
        yield svc
    finally:
        svc.close()


def sim_time(sim: Sim) -> float:
    return float(http_json(sim.endpoints["control_url"] + "/state")["sim_time"])


def wait(what: Callable[[], Any], timeout: float, why: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out: {why}")


def start(sim: Sim, service: Service, grace_s: float, **healing: Any) -> None:
    ctx = service.ctx
    ctx.store.propose({"type": "cluster.register", "meta": meta("test"), "name": "c1",
                       "bootstrap_servers": sim.cluster.bootstrap_servers.split(","),
                       "metrics_urls": {str(b.id): b.metrics_url for b in sim.cluster.brokers}})
    ctx.store.propose({"type": "cluster.self_healing", "meta": meta("test"), "name": "c1", "enabled": True,
                       "grace_s": grace_s, **healing})
    service.scheduler.start()
    wait(lambda: ctx.snapshots.get("c1"), 30, "a usable round")


def anomalies(service: Service, kind: str | None = None) -> list[dict[str, Any]]:
    return service.ctx.store.read(lambda s: [dict(a) for a in (s.get("anomalies") or {}).values()
                                             if kind is None or a["kind"] == kind])


def test_dead_broker_is_healed_once(sim: Sim, service: Service) -> None:
    start(sim, service, grace_s=60.0)
    t0 = sim_time(sim)
    sim.control("/fault/kill-broker", {"cluster": "c1", "broker": 2})
    found = wait(lambda: anomalies(service, "broker-dead"), 20, "detection")
    t_detect = sim_time(sim)
    assert found[0]["subject"]["broker"] == 2
    fixing = wait(lambda: [a for a in anomalies(service, "broker-dead") if a.get("execution_id")], 30, "fix started")
    t_fix = sim_time(sim)
    assert wait(lambda: sim.live().under_replicated == 0 and not sim.live().reassignments, 40, "under-replicated 0")
    t_healed = sim_time(sim)
    rec = wait(lambda: [a for a in anomalies(service, "broker-dead") if a["status"] == "fixed"], 20, "fixed")[0]
    ex = service.ctx.store.read(lambda s: dict(s["executions"][str(fixing[0]["execution_id"])]))
    moved = sum(int(t.get("size_bytes") or 0) for t in ex["tasks"].values())
    assert all(2 not in p.replicas for p in sim.live().partitions.values())
    assert max(sim.submissions.values()) == 1, sim.submissions  # each partition reassigned once
    print(f"\ndead broker: detected {t_detect - t0:.0f} s, fix started {t_fix - t0:.0f} s (grace 60 s), "
          f"under-replicated 0 at {t_healed - t0:.0f} s (simulated); {len(ex['tasks'])} moves, "
          f"{moved / 2**20:.0f} MiB moved; anomaly {rec['id']} {rec['status']}: {rec['reason']}")


def test_half_the_cluster_dying_is_alert_only(sim: Sim, service: Service) -> None:
    start(sim, service, grace_s=10.0)
    t0 = sim_time(sim)
    for b in (1, 2, 3):
        sim.control("/fault/kill-broker", {"cluster": "c1", "broker": b})
    wait(lambda: anomalies(service, "mass-failure"), 20, "mass-failure alert")
    t_detect = sim_time(sim)
    time.sleep(4.0)  # > grace (10 s simulated = 0.5 s wall) several times over
    assert not sim.submissions, sim.submissions
    plans = service.ctx.store.read(lambda s: [p for p in s["plans"].values() if p["proposed_by"] == "self-healing"])
    assert plans == []
    print(f"\nhalf the cluster dead: mass-failure alert at {t_detect - t0:.0f} s (simulated); "
          f"{len(sim.submissions)} partitions moved")


def test_a_broker_back_inside_its_grace_period_moves_nothing(sim: Sim, service: Service) -> None:
    start(sim, service, grace_s=600.0)
    sim.control("/fault/kill-broker", {"cluster": "c1", "broker": 4})
    wait(lambda: anomalies(service, "broker-dead"), 20, "detection")
    sim.control("/fault/revive-broker", {"cluster": "c1", "broker": 4})
    closed = wait(lambda: [a for a in anomalies(service, "broker-dead") if a["status"] == "fixed"], 20, "closed")
    assert not sim.submissions
    print(f"\nbroker back inside grace: anomaly closed ({closed[0]['reason']}), nothing moved")
