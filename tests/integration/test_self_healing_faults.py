"""Combined faults over kafkasim (TCP, kafka-python), the service's own loops running (issue 33):

* one failed log dir, then two: a dead dir on a broker in maintenance plus a second dead dir elsewhere. The
  second is healed at once, the first once the maintenance ends; one anomaly per fault, no refused plan, and
  no self-healing plan ever targets a dead dir or the broker in maintenance;
* partitions that a running execution moves (under-replicated only because their new replica is still
  copying) raise no ``under-replicated`` anomaly.

Each test prints its figures (simulated seconds from the fault to the result).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.bootstrap import Service
from controlplane.state.commands import meta
from tests.support.executor_support import Sim, scenario
from tests.support.healing_support import (
    anomalies,
    healing_service,
    partitions,
    sim_time,
    start,
    truth,
    wait,
)

pytestmark = pytest.mark.timeout(150)


@pytest.fixture()
def sim(tmp_path: Path) -> Iterator[Sim]:
    with Sim(scenario(brokers=6, topics=2, partitions=12, rf=3, size_gb=0.02, speed=20.0), tmp_path) as s:
        yield s


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    with healing_service(tmp_path) as svc:
        yield svc


def fullest_dir(doc: dict[str, Any], broker: int) -> tuple[str, int]:
    """The log dir of ``broker`` holding the most replicas, and that count."""
    held: dict[str, int] = {}
    for p in partitions(doc):
        if broker in p["replicas"]:
            d = p["log_dirs"][p["replicas"].index(broker)]
            held[d] = held.get(d, 0) + 1
    path = max(sorted(held), key=lambda d: held[d])
    return path, held[path]


def healing_plans(service: Service) -> list[dict[str, Any]]:
    """Every plan self-healing proposed."""
    return service.ctx.store.read(lambda s: [dict(p) for p in s["plans"].values()
                                             if p["proposed_by"] == "self-healing"])


def placements(plan: dict[str, Any]) -> dict[tuple[str, int], set[tuple[int, str]]]:
    """Per partition a plan moves: the (broker, log dir) pairs of its final replica list."""
    return {(m["topic"], m["partition"]): set(zip(m["replicas"], m["log_dirs"], strict=True))
            for m in plan["plan"]["reassignment"]["partitions"]}


def check_targets(plan: dict[str, Any], dead: set[tuple[int, str]], before: dict[tuple[str, int], set[int]],
                  maintenance: int | None) -> None:
    """No replica of the plan on a dead dir; no new replica on the broker in maintenance."""
    for tp, placed in placements(plan).items():
        assert not placed & dead, (f"plan {plan['id']} keeps or puts {tp} on a dead dir", placed & dead)
        new = {b for b, _ in placed} - before.get(tp, set())
        assert maintenance not in new, (f"plan {plan['id']} puts {tp} on broker {maintenance} in maintenance")


def test_a_dead_dir_on_a_maintenance_broker_plus_a_second_dead_dir_converge(sim: Sim, service: Service) -> None:
    start(sim, service, grace_s=60.0)
    doc = truth(sim)
    (dir_m, held_m), (dir_x, held_x) = fullest_dir(doc, 3), fullest_dir(doc, 5)
    service.ctx.store.propose({"type": "maintenance.set", "meta": meta("test", "restart"), "cluster": "c1",
                               "broker": 3, "enabled": True})
    t0 = sim_time(sim)
    sim.control("/fault/offline-log-dir", {"cluster": "c1", "broker": 3, "log_dir": dir_m})
    sim.control("/fault/offline-log-dir", {"cluster": "c1", "broker": 5, "log_dir": dir_x})
    dead = {(3, dir_m), (5, dir_x)}
    key_x = f"log-dir-offline:5:{dir_x}"
    key_m = f"log-dir-offline:3:{dir_m}"
    try:
        fixed_x = wait(lambda: [a for a in anomalies(service) if a["key"] == key_x and a["status"] == "fixed"], 60,
                       "the dead dir off maintenance healed")
    except AssertionError:
        for a in anomalies(service):
            print(a["key"], a["status"], [(h["status"], h["reason"][:200]) for h in a["history"]])
        for p in healing_plans(service):
            print(p["id"], p["status"], p.get("reason"), p["plan"].get("notes"))
        raise
    t_x = sim_time(sim)
    assert not [a for a in anomalies(service) if a["key"] == key_m], "maintenance suppresses its broker's anomaly"
    before = {(p["topic"], p["partition"]): set(p["replicas"]) for p in partitions(doc)}
    for p in healing_plans(service):
        check_targets(p, dead, before, maintenance=3)
    service.ctx.store.propose({"type": "maintenance.set", "meta": meta("test", "restart done"), "cluster": "c1",
                               "broker": 3, "enabled": False})
    wait(lambda: [a for a in anomalies(service) if a["key"] == key_m and a["status"] == "fixed"], 60,
         "the maintenance broker's dead dir healed after its maintenance")
    assert wait(lambda: sim.live().under_replicated == 0 and not sim.live().reassignments, 40, "under-replicated 0")
    t_m = sim_time(sim)
    plans = healing_plans(service)
    per_key: dict[str, int] = {}
    for a in anomalies(service):
        per_key[a["key"]] = per_key.get(a["key"], 0) + 1
    dir_anomalies = {k: n for k, n in per_key.items() if k.startswith("log-dir-offline")}
    assert dir_anomalies == {key_x: 1, key_m: 1}, per_key
    refused = [p for p in plans if p["status"] in ("failed", "rejected")]
    assert not refused, [(p["id"], p["status"], p.get("reason")) for p in refused]
    for p in plans:
        check_targets(p, dead, before, maintenance=None)
    after = truth(sim)
    assert not [p for p in partitions(after) for b, d in zip(p["replicas"], p["log_dirs"], strict=True)
                if (b, d) in dead]
    print(f"\ntwo dead dirs (3:{dir_m} with {held_m} replicas on a broker in maintenance, 5:{dir_x} with {held_x}): "
          f"5's healed at {t_x - t0:.0f} s; 3's healed after its maintenance, under-replicated 0 at {t_m - t0:.0f} s "
          f"(simulated); {len(plans)} plans, 0 refused; one anomaly each ({fixed_x[0]['reason']})")
