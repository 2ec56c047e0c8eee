"""Helpers for the self-healing integration tests: an in-process service over a kafkasim federation, the
simulator's clock and ground truth, anomalies from the replicated state."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from controlplane.bootstrap import Service
from controlplane.config import IntervalsConf
from controlplane.service.self_healing import SelfHealingJob
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain.lease import LEASE_TOPIC
from tests.support.executor_support import Sim
from tests.support.kafkasim_support import http_json, register_fields
from tests.support.service_support import local_service, wait_for


@contextlib.contextmanager
def healing_service(tmp_path: Path, collect_s: float = 1.0) -> Iterator[Service]:
    """A one-node controller (its own Raft) with fast loops for the ``with`` block."""
    with local_service(tmp_path / "g", intervals=IntervalsConf(collect_s=collect_s, throttle_s=0.5,
                                                               executor_s=0.5)) as svc:
        yield svc


def sim_time(sim: Sim) -> float:
    """The simulator's clock (simulated seconds)."""
    return float(http_json(sim.endpoints["control_url"] + "/state")["sim_time"])


def truth(sim: Sim) -> dict[str, Any]:
    """kafkasim's ground truth of ``c1`` (guardian.snapshot/v1)."""
    return dict(http_json(sim.endpoints["control_url"] + "/snapshot?cluster=c1"))


def partitions(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every partition of a snapshot document but the executor's lease log (Guardian's own bookkeeping topic,
    created when the first execution starts — after the plan under test was made)."""
    return [p | {"topic": t["name"]} for t in doc["topics"] if t["name"] != LEASE_TOPIC for p in t["partitions"]]


def wait(what: Callable[[], Any], timeout: float, why: str, every: float = 0.2) -> Any:
    """Poll ``what`` until it returns something truthy (returned) or fail after ``timeout`` wall seconds."""
    return wait_for(why, what, timeout, every)


def start(sim: Sim, service: Service, grace_s: float, enabled: bool = True, **healing: Any) -> None:
    """Register ``c1``, set its self-healing, start the loops, wait for a first usable round."""
    ctx = service.ctx
    ctx.store.propose({"type": "cluster.register", "meta": meta("test"), "name": "c1",
                       **register_fields(sim.endpoints["clusters"]["c1"])})
    ctx.store.propose({"type": "cluster.self_healing", "meta": meta("test"), "name": "c1", "enabled": enabled,
                       "grace_s": grace_s, **healing})
    service.scheduler.start()
    wait(lambda: ctx.snapshots.get("c1"), 30, "a usable round")


def anomalies(service: Service, kind: str | None = None) -> list[dict[str, Any]]:
    """Every anomaly (of ``kind``) in the replicated state."""
    return service.ctx.store.read(lambda s: [dict(a) for a in (s.get("anomalies") or {}).values()
                                             if kind is None or a["kind"] == kind])


def execution(service: Service, execution_id: int) -> dict[str, Any]:
    """One execution record."""
    return dict(service.ctx.store.read(lambda s: dict(s["executions"][str(execution_id)])))


def moved_bytes(ex: dict[str, Any]) -> int:
    """Bytes an execution's tasks copied (their sizes)."""
    return sum(int(t.get("size_bytes") or 0) for t in ex["tasks"].values())


def healing_job(service: Service) -> SelfHealingJob:
    """The scheduler's self-healing job (its counters)."""
    job = service.scheduler.jobs["self_healing"].run
    assert isinstance(job, SelfHealingJob)
    return job


def seed_anomalies(store: LocalStateStore) -> dict[str, int]:
    """c1 and c2; a dead broker being fixed by plan P on c1, a fail-slow disk confirmed on c1, an
    under-replicated warning closed on c2."""
    for name in ("c1", "c2"):
        store.propose({"type": "cluster.register", "meta": meta("t"), "name": name,
                       "bootstrap_servers": ["127.0.0.1:9"]})

    def raise_(cluster: str, key: str, kind: str, confirmed: bool) -> int:
        return int(store.propose({"type": "anomaly.raise", "meta": meta("self-healing", "found"), "cluster": cluster,
                                  "key": key, "kind": kind, "subject": {"broker": 2}, "summary": f"{kind} on 2",
                                  "evidence": {"dead_for_s": 400}, "confirmed": confirmed})["anomaly_id"])
    dead = raise_("c1", "broker-dead:2", "broker-dead", True)
    plan = int(store.propose({"type": "plan.propose", "meta": meta("self-healing", "heal"), "cluster": "c1",
                              "kind": "heal-broker", "plan": {"notes": ["drain broker 2"]}})["plan_id"])
    store.propose({"type": "anomaly.update", "meta": meta("self-healing", "fix"), "anomaly_id": dead,
                   "status": "fixing", "expect": "confirmed", "plan_id": plan})
    slow = raise_("c1", "disk-fail-slow:3:/data1", "disk-fail-slow", True)
    urp = raise_("c2", "under-replicated:c2", "under-replicated", True)
    store.propose({"type": "anomaly.update", "meta": meta("self-healing", "gone"), "anomaly_id": urp,
                   "status": "fixed", "reason": "no longer observed"})
    return {"dead": dead, "plan": plan, "slow": slow, "urp": urp}
