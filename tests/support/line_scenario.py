"""Two IDCs joined by one leased line, driven step by step: kafkasim over TCP + Guardian's throttle service
with leased-line protection (tests and figures).

kafkasim runs on 127.0.0.1 (as ``sim up --realistic`` lays it out) with its clock frozen;
:meth:`LineScenario.step` advances simulated time,
runs one collection round (Prometheus text + the Kafka protocol + the audit topic) and one evaluation,
which acts through Kafka configs and client quotas. Ground truth (line demand and carried bytes, ISR,
per-partition rates) is read from the simulator, independent of what Guardian measured.

Layout: brokers 1, 3 in idc-a and 2, 4 in idc-b; the line carries ``LINE_MB_S`` each way.

* ``orders`` (8 partitions, RF 2 over both IDCs): producer ``orders-svc`` and consumer ``billing`` in idc-a;
* ``replay`` (4 partitions, both replicas in idc-a): producer ``replay-svc`` in idc-a, consumer ``analytics``
  (tenant priority 1: throttled first) in idc-b, so its fetches cross the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.config import LeasedLineConf, LeasedLinesConf
from controlplane.service.leased_lines import LineService
from kafkasim.scenarios.scenario import build_federation
from tests.support.kafkasim_support import http_json
from tests.support.throttle_scenario import DrivenScenario

CLUSTER = "east"
LINE_MB_S = 55.0
AB = ("idc-a", "idc-b")


def spec(seed: int = 3) -> dict[str, Any]:
    """The scenario (see the module docstring)."""
    return {
        "seed": seed, "speed": 1e-6, "tick_seconds": 1.0,
        "audit": {"enabled": True, "interval_s": 5, "topic": "__guardian_audit"},
        "network": {"lines": [{"between": list(AB), "capacity_mb_s": LINE_MB_S, "latency_ms": 2}]},
        "clusters": [{
            "name": CLUSTER, "partition_throttle": False,
            "brokers": [{"count": 4, "idcs": list(AB), "racks_per_idc": 1, "memory_gb": 64,
                         "disks": [{"count": 2, "kind": "nvme"}]}],
            "topics": [
                {"name": "orders", "partitions": 8, "rf": 2, "bytes_in_per_s": 1.5e6, "size_gb": 2,
                 "tail_groups": 1, "producer": {"client_id": "orders-svc", "idc": "idc-a"},
                 "consumer": {"client_id": "billing", "idc": "idc-a"}},
                {"name": "replay", "partitions": 4, "rf": 2, "bytes_in_per_s": 1e6, "size_gb": 0.2,
                 "tail_groups": 4, "producer": {"client_id": "replay-svc", "idc": "idc-a"},
                 "consumer": {"client_id": "analytics", "idc": "idc-b"}},
            ]}],
    }


@dataclass
class Truth:
    """Simulator ground truth at one instant."""

    t: float
    lines: dict[tuple[str, str], dict[str, Any]]
    fetch: dict[tuple[str, int], float]
    produce: dict[tuple[str, int], float]
    leader_idc: dict[tuple[str, int], str]
    isr: dict[tuple[str, int], list[int]]
    replicas: dict[tuple[str, int], list[int]]
    lag: dict[tuple[str, int], float]
    """Bytes each partition's lagging consumer is behind."""
    repl_behind_s: float
    """The worst in-sync follower's lag behind its leader, in seconds of that partition's ingress."""
    reassigning: int
    broker_configs: dict[int, dict[str, str]]
    quotas: dict[str, dict[str, float]]


class LineScenario(DrivenScenario):
    """kafkasim + the throttle service with line protection on one local state store; ``close()`` when done."""

    def __init__(self, protect: bool = True, step_s: float = 5.0) -> None:
        fed = build_federation(spec())
        fed.engine.burst_rate_per_hour = 0.0
        cl = fed.clusters[CLUSTER]
        # replay lives in idc-a only (brokers 1 and 3): its consumer in idc-b reads across the line
        for p in cl.topics["replay"].partitions:
            reps = [1, 3] if p.index % 2 == 0 else [3, 1]
            p.replicas, p.isr, p.leader = list(reps), list(reps), reps[0]
            p.log_dirs = {b: cl.brokers[b].disks[p.index % 2].gidx for b in reps}
        fed.engine.mark_dirty()
        conf = LeasedLinesConf(protect=protect, lines=[LeasedLineConf(src_idc=AB[0], dst_idc=AB[1],
                                                                      capacity_bytes_per_s=LINE_MB_S * 1e6)],
                               fetch_priority={"analytics": 1, "billing": 9})
        self.lines = LineService(conf)
        super().__init__(fed, step_s, lines=self.lines)

    def reassign(self, moves: dict[tuple[str, int], list[int]]) -> None:
        """Start reassignments over the Kafka protocol (what the executor would do)."""
        self.reassign_partitions(moves)

    def network(self) -> dict[str, Any]:
        """kafkasim's line report over its control API."""
        return dict(http_json(self.control + "/network"))

    def truth(self) -> Truth:
        """Ground truth from the simulator (on its loop thread)."""
        def read() -> Truth:
            eng = self.fed.engine
            cl = self.fed.clusters[CLUSTER]
            if eng.dirty:
                eng.rebuild()
            assert eng.network is not None
            report = eng.network.report()
            lines = {(x["src_idc"], x["dst_idc"]): x for x in report["lines"]}
            f = eng.f
            fetch, produce, lidc, isr, reps, lag = {}, {}, {}, {}, {}, {}
            worst = 0.0
            gidx = {b.id: b.gidx for b in cl.brokers.values()}
            for t in cl.topics.values():
                for p in t.partitions:
                    key = (t.name, p.index)
                    fetch[key] = float(f["syn_out"][p.slot])
                    produce[key] = float(f["syn_in"][p.slot])
                    lag[key] = float(f["lag"][p.slot])
                    lidc[key] = cl.brokers[p.leader].idc if p.leader >= 0 else ""
                    isr[key], reps[key] = list(p.isr), list(p.replicas)
                    rate = max(float(f["in_rate"][p.slot]), 1.0)
                    for b in p.isr:
                        worst = max(worst, eng.net_lag.get((p.slot, gidx[b]), 0.0) / rate)
            quotas = {",".join(f"{k}={v}" for k, v in e): dict(v) for e, v in cl.quotas.items()}
            return Truth(t=eng.t, lines=lines, fetch=fetch, produce=produce, leader_idc=lidc, isr=isr, replicas=reps,
                         lag=lag, repl_behind_s=worst,
                         reassigning=sum(1 for t in cl.topics.values() for p in t.partitions if p.reassignment),
                         broker_configs={b.id: dict(b.configs or {}) for b in cl.brokers.values()}, quotas=quotas)

        result: Truth = self.runner.call(read)
        return result
