"""Self-healing of disks over kafkasim (TCP, kafka-python), the service's own loops running:

* a fail-slow disk (``/fault/slow-disk`` factor 40) loses its leadership within a few intervals, and throttle
  protection throttles none of the tenant's produce/fetch for it (no partition throttle, no client quota is
  set on the cluster; the anomaly's history and the action log carry why);
* a disk that stays slow past ``evacuate_slow_after_s`` is evacuated to its broker's healthy dir (KIP-113);
* a failed log dir (``/fault/offline-log-dir``: DescribeLogDirs ``KAFKA_STORAGE_ERROR``, offline replicas in
  Metadata, the broker alive) has its replicas re-created on other brokers, each partition submitted once.

Each test prints its figures: simulated seconds from the fault to detection, to the fix started, to the
result (leadership off / disk empty / under-replicated = 0), and bytes moved.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.bootstrap import Service
from kafkasim.cluster.model import PT_FETCH, PT_PRODUCE
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
EVACUATE_AFTER_S = 150.0


def spec() -> dict[str, Any]:
    """6 brokers x 2 HDDs, 2 topics x 12 partitions RF 3 produced by one tenant, partition throttles available."""
    s = scenario(brokers=6, topics=2, partitions=12, rf=3, size_gb=0.02, speed=20.0)
    s["clusters"][0]["partition_throttle"] = True
    s["clusters"][0]["topics"][0]["producer"] = {"client_id": "tenant-svc", "user": "tenant"}
    return s


@pytest.fixture()
def sim(tmp_path: Path) -> Iterator[Sim]:
    with Sim(spec(), tmp_path) as s:
        yield s


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    with healing_service(tmp_path) as svc:
        yield svc


def busiest_disk(doc: dict[str, Any], broker: int) -> tuple[str, int]:
    """The log dir of ``broker`` leading the most partitions (and that count)."""
    led: dict[str, int] = {}
    for p in partitions(doc):
        if p["leader"] == broker:
            path = p["log_dirs"][p["replicas"].index(broker)]
            led[path] = led.get(path, 0) + 1
    path = max(sorted(led), key=lambda d: led[d])
    return path, led[path]


def on_disk(doc: dict[str, Any], broker: int, path: str) -> tuple[list[str], list[str]]:
    """(partitions led from the disk, partitions with a replica on it)."""
    led, held = [], []
    for p in partitions(doc):
        if broker in p["replicas"] and p["log_dirs"][p["replicas"].index(broker)] == path:
            held.append(f"{p['topic']}-{p['partition']}")
            if p["leader"] == broker:
                led.append(f"{p['topic']}-{p['partition']}")
    return led, held


def tenant_levers(sim: Sim) -> dict[str, Any]:
    """Partition throttles and client quotas set on the cluster (kafkasim's own model)."""
    def read() -> dict[str, Any]:
        cl = sim.runner.server.fed.clusters["c1"]
        out: dict[str, Any] = {f"topic {t.name}": {k: v for k, v in t.configs.items() if k in (PT_PRODUCE, PT_FETCH)}
                               for t in cl.topics.values()}
        out = {k: v for k, v in out.items() if v}
        if cl.quotas:
            out["quotas"] = {str(k): dict(v) for k, v in cl.quotas.items()}
        return out
    return dict(sim.runner.call(read))


def test_fail_slow_disk_loses_leadership_and_its_clients_are_not_throttled(sim: Sim, service: Service) -> None:
    start(sim, service, grace_s=60.0, evacuate_slow_after_s=86_400.0)
    broker = 3
    path, led_before = busiest_disk(truth(sim), broker)
    t0 = sim_time(sim)
    sim.control("/fault/slow-disk", {"cluster": "c1", "broker": broker, "log_dir": path, "factor": 40})
    found = wait(lambda: anomalies(service, "disk-fail-slow"), 30, "fail-slow detection")
    t_detect = sim_time(sim)
    assert (found[0]["subject"]["broker"], found[0]["subject"]["log_dir"]) == (broker, path), found
    fixing = wait(lambda: [a for a in anomalies(service, "disk-fail-slow") if a.get("execution_id")], 30,
                  "leadership fix started")
    t_fix = sim_time(sim)
    wait(lambda: not on_disk(truth(sim), broker, path)[0], 30, "no partition led from the slow disk")
    t_off = sim_time(sim)
    ex = wait(lambda: (e := execution(service, fixing[0]["execution_id"]))["status"] == "completed" and e, 30,
              "the leadership execution completed")
    held_after = on_disk(truth(sim), broker, path)[1]
    assert held_after, "leadership moved, the replicas stay (no evacuation before evacuate_slow_after_s)"
    t_done = sim_time(sim)
    wait(lambda: sim_time(sim) - t_done > 120, 30, "six more rounds")
    (still,) = anomalies(service, "disk-fail-slow")
    assert still["status"] in ("confirmed", "fixing"), ("the disk is still slow: its anomaly stays open", still)
    note = wait(lambda: [h for a in anomalies(service, "disk-fail-slow") for h in a["history"]
                         if h.get("note") and h.get("by") == "throttle-protection"], 30,
                "throttle protection's note on the anomaly")
    actions = service.ctx.store.read(lambda s: [a for a in s["actions"] if a["type"] == "anomaly.note"])
    assert actions and "spared the clients" in actions[-1]["why"], actions
    assert service.ctx.throttle is not None
    report = {(d["broker"], d["path"]): d for d in service.ctx.throttle.explain("c1")["disks"]}
    assert report[(broker, path)]["reason"].startswith("skipped: fail-slow disk"), report
    assert not report[(broker, path)]["unhealthy"]
    assert tenant_levers(sim) == {}, "no produce/fetch throttle or quota for the tenant on the slow disk"
    throttles = service.ctx.store.read(lambda s: dict(s["throttles"].get("c1", {})))
    assert not [k for k in throttles if not str(throttles[k]["kind"]).startswith("migration")], throttles
    rec = anomalies(service, "disk-fail-slow")[0]
    print(f"\nfail-slow disk {broker}:{path} (await x40): detected {t_detect - t0:.0f} s, fix started "
          f"{t_fix - t0:.0f} s, leadership of {led_before} partition(s) off at {t_off - t0:.0f} s (simulated); "
          f"{len(ex['tasks'])} task(s), {moved_bytes(ex)} bytes moved; anomaly {rec['id']} {rec['status']}; "
          f"throttle protection: {report[(broker, path)]['reason'][:60]}...; note: {note[0]['reason'][:90]}")


def test_a_disk_that_stays_slow_is_evacuated_to_its_brokers_healthy_dir(sim: Sim, service: Service) -> None:
    start(sim, service, grace_s=60.0, evacuate_slow_after_s=EVACUATE_AFTER_S)
    broker = 4
    doc = truth(sim)
    path, _ = busiest_disk(doc, broker)
    hosted_before = {(p["topic"], p["partition"]) for p in partitions(doc) if broker in p["replicas"]}
    held_before = on_disk(doc, broker, path)[1]
    t0 = sim_time(sim)
    sim.control("/fault/slow-disk", {"cluster": "c1", "broker": broker, "log_dir": path, "factor": 40})
    wait(lambda: anomalies(service, "disk-fail-slow"), 30, "fail-slow detection")
    t_detect = sim_time(sim)
    wait(lambda: not on_disk(truth(sim), broker, path)[0], 30, "leadership off")
    t_off = sim_time(sim)
    wait(lambda: not on_disk(truth(sim), broker, path)[1], 60, "every replica off the slow disk")
    t_empty = sim_time(sim)
    after = truth(sim)
    assert {(p["topic"], p["partition"]) for p in partitions(after) if broker in p["replicas"]} == hosted_before, \
        "evacuated to the broker's own healthy dir (KIP-113), no replica left the broker"
    closed = wait(lambda: [a for a in anomalies(service, "disk-fail-slow") if a["status"] == "fixed"], 30, "fixed")
    plans = service.ctx.store.read(lambda s: [dict(p) for p in s["plans"].values()
                                              if p["proposed_by"] == "self-healing"])
    kinds = [p["kind"] for p in plans]
    assert kinds == ["heal-leaders", "heal-disk"], [(p["kind"], p["status"], p["plan"]["notes"]) for p in plans]
    evac = execution(service, int(plans[1]["execution_id"]))
    assert evac["status"] == "completed"
    rec = closed[0]
    assert len(anomalies(service, "disk-fail-slow")) == 1, "one anomaly for the fault"
    statuses = [h["status"] for h in rec["history"] if not h.get("note")]
    assert "cleared" not in statuses and statuses[-1] == "fixed" and statuses.count("fixed") == 1, rec["history"]
    assert rec["reason"].startswith("evacuated"), rec["reason"]
    assert rec["closed_at"] >= evac["finished_at"], "fixed only once the evacuation ended"
    evacuating = [h["reason"] for h in rec["history"] if h["status"] == "fixing" and "evacuate it" in h["reason"]]
    waited = float(evacuating[0].split("still slow after ")[1].split(" s")[0])
    assert waited >= EVACUATE_AFTER_S, evacuating
    print(f"\nslow disk {broker}:{path} kept slow: detected {t_detect - t0:.0f} s, leadership off {t_off - t0:.0f} s, "
          f"{len(held_before)} replica(s) evacuated to its broker's other dir by {t_empty - t0:.0f} s (simulated, "
          f"evacuate_slow_after_s {EVACUATE_AFTER_S:.0f}, evacuation planned after {waited:.0f} s slow); "
          f"{moved_bytes(evac) / 2**20:.0f} MiB moved; anomaly {rec['id']} {rec['status']}: {rec['reason']}")


def test_failed_log_dir_is_re_created_on_other_brokers(sim: Sim, service: Service) -> None:
    start(sim, service, grace_s=60.0)
    broker = 2
    doc = truth(sim)
    held: dict[str, int] = {}
    for p in partitions(doc):
        if broker in p["replicas"]:
            d = p["log_dirs"][p["replicas"].index(broker)]
            held[d] = held.get(d, 0) + 1
    path = max(sorted(held), key=lambda d: held[d])
    t0 = sim_time(sim)
    sim.control("/fault/offline-log-dir", {"cluster": "c1", "broker": broker, "log_dir": path})
    live = sim.live()
    assert broker in live.alive, "the broker runs on"
    assert sum(1 for p in live.partitions.values() if broker in p.offline) == held[path]
    found = wait(lambda: [a for a in anomalies(service, "log-dir-offline") if a["status"] != "detected"], 30,
                 "offline dir detection")
    t_detect = sim_time(sim)
    assert (found[0]["subject"]["broker"], found[0]["subject"]["log_dir"]) == (broker, path)
    assert found[0]["evidence"]["replicas"] == held[path], found[0]["evidence"]
    fixing = wait(lambda: [a for a in anomalies(service, "log-dir-offline") if a.get("execution_id")], 30,
                  "fix started")
    t_fix = sim_time(sim)
    assert wait(lambda: sim.live().under_replicated == 0 and not sim.live().reassignments, 40, "under-replicated 0")
    t_healed = sim_time(sim)
    rec = wait(lambda: [a for a in anomalies(service, "log-dir-offline")
                        if a["id"] == fixing[0]["id"] and a["status"] == "fixed"], 20, "fixed")[0]
    ex = execution(service, fixing[0]["execution_id"])
    after = truth(sim)
    assert not on_disk(after, broker, path)[1], "nothing left on the failed dir"
    assert broker in sim.live().alive
    assert max(sim.submissions.values()) == 1, sim.submitted
    assert len(sim.submissions) == held[path]
    racks = {b["id"]: b["rack"] for b in after["brokers"]}
    assert all(len({racks[r] for r in p["replicas"]}) == len(p["replicas"]) for p in partitions(after))
    print(f"\nfailed log dir {broker}:{path} ({held[path]} replicas): detected {t_detect - t0:.0f} s, fix started "
          f"{t_fix - t0:.0f} s, under-replicated 0 at {t_healed - t0:.0f} s (simulated); {len(ex['tasks'])} moves "
          f"to other brokers, {moved_bytes(ex) / 2**20:.0f} MiB moved; each partition submitted once; "
          f"anomaly {rec['id']} {rec['status']}: {rec['reason']}")
