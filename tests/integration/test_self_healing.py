"""Self-healing over kafkasim (TCP, kafka-python), the service's own loops running: a dead broker healed once;
half the cluster dying raises an alert and moves nothing; a broker back inside its grace period moves nothing;
the two brokers of one rack dying together are healed with every partition's rack spread held.
Each test prints its figures (simulated seconds from the fault to detection, to the fix, to under-replicated = 0;
bytes moved)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.bootstrap import Service
from tests.support.executor_support import Sim, scenario
from tests.support.healing_support import (
    anomalies,
    execution,
    healing_service,
    moved_bytes,
    partitions,
    sim_time,
    start,
    truth,
    wait,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def sim(tmp_path: Path) -> Iterator[Sim]:
    with Sim(scenario(brokers=6, topics=2, partitions=12, rf=3, size_gb=0.02, speed=20.0), tmp_path) as s:
        yield s


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    with healing_service(tmp_path) as svc:
        yield svc


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
    ex = execution(service, fixing[0]["execution_id"])
    moved = moved_bytes(ex)
    assert all(2 not in p.replicas for p in sim.live().partitions.values())
    assert max(sim.submissions.values()) == 1, sim.submitted  # each partition reassigned once
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
    closed = wait(lambda: [a for a in anomalies(service, "broker-dead") if a["status"] == "cleared"], 20, "closed")
    assert not sim.submissions
    print(f"\nbroker back inside grace: anomaly closed ({closed[0]['reason']}), nothing moved")


def test_two_brokers_of_one_rack_dying_together_are_healed_with_rack_spread_held(tmp_path: Path,
                                                                                 service: Service) -> None:
    spec = scenario(brokers=8, topics=2, partitions=12, rf=3, size_gb=0.02, speed=20.0)
    spec["clusters"][0]["brokers"][0]["racks_per_idc"] = 4  # racks r1..r4, two brokers each: 1+5, 2+6, ...
    sim = Sim(spec, tmp_path)
    try:
        before = truth(sim)
        racks = {b["id"]: b["rack"] for b in before["brokers"]}
        pair = sorted(b for b, r in racks.items() if r == racks[1])
        assert len(pair) == 2
        lost = [p for p in partitions(before) if set(p["replicas"]) & set(pair)]
        start(sim, service, grace_s=60.0)
        t0 = sim_time(sim)
        for b in pair:
            sim.control("/fault/kill-broker", {"cluster": "c1", "broker": b})
        wait(lambda: len(anomalies(service, "broker-dead")) == 2, 20, "both brokers detected")
        t_detect = sim_time(sim)
        assert not anomalies(service, "mass-failure"), "a rack of two is healed, not held back"
        wait(lambda: [a for a in anomalies(service, "broker-dead") if a.get("execution_id")], 30, "fix started")
        t_fix = sim_time(sim)
        wait(lambda: all(a["status"] == "fixed" for a in anomalies(service, "broker-dead")), 50, "both fixed")
        assert wait(lambda: sim.live().under_replicated == 0 and not sim.live().reassignments, 20,
                    "under-replicated 0")
        t_healed = sim_time(sim)
        after = truth(sim)
        assert all(not set(p["replicas"]) & set(pair) for p in partitions(after))
        spread = [p for p in partitions(after) if len({racks[r] for r in p["replicas"]}) < len(p["replicas"])]
        assert not spread, [(p["topic"], p["partition"], p["replicas"]) for p in spread]
        assert max(sim.submissions.values()) == 1, sim.submitted
        execs = [execution(service, a["execution_id"]) for a in anomalies(service, "broker-dead")]
        moved = sum(moved_bytes(e) for e in execs)
        print(f"\nrack {racks[1]} (brokers {pair}) dead: detected {t_detect - t0:.0f} s, first fix started "
              f"{t_fix - t0:.0f} s, under-replicated 0 at {t_healed - t0:.0f} s (simulated); {len(lost)} partitions "
              f"touched, {sum(len(e['tasks']) for e in execs)} moves in {len(execs)} executions, "
              f"{moved / 2**20:.0f} MiB moved; rack spread held everywhere; each partition reassigned once")
    finally:
        sim.stop()
