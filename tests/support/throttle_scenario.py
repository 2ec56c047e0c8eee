"""A seeded kafkasim scenario driven step by step for throttle protection (tests and the benchmark).

kafkasim runs on real 127.0.0.1 ports as ``sim up --realistic`` lays it out (SASL_SSL + SCRAM, https
exporters with basic auth), with its clock frozen (speed ~0): :meth:`ThrottleScenario.step` advances
simulated time through the control API, runs one round of the service's observer (the
collection job: Prometheus text + the Kafka protocol) and one throttle evaluation of the round it
published, which acts through Kafka configs / client quotas on the cluster's shared client.
Ground truth for assertions (per-partition throughput, lag, latencies, disk util) is read from the
simulator itself, independent of what Guardian measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, TopicPartition

from controlplane.config import Settings
from controlplane.service.clusters import ClusterBindings
from controlplane.service.collection import CollectionJob
from controlplane.service.context import ServiceContext
from controlplane.service.leased_lines import LineService
from controlplane.service.protection import ProtectionService
from controlplane.service.protection_source import round_binding
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from kafkasim.scenarios.scenario import Federation, build_federation
from planners.protection import ProtectionConfig
from tests.support.kafkasim_support import http_json, register_fields, start_federation

CLUSTER = "east"
HOT_PARTITION = ("orders", 0)


def spec(partition_throttle: bool = True, seed: int = 5) -> dict[str, Any]:
    """3 brokers x 2 HDDs (200 MB/s); orders (consumer ``billing``) and events (consumer ``analytics``)."""
    return {
        "seed": seed, "speed": 1e-6, "tick_seconds": 1.0,
        "audit": {"enabled": True, "interval_s": 10, "topic": "__guardian_audit"},
        "clusters": [{
            "name": CLUSTER, "partition_throttle": partition_throttle,
            "brokers": [{"count": 3, "idcs": ["idc-a"], "racks_per_idc": 3, "memory_gb": 8,
                         "disks": [{"count": 2, "kind": "hdd"}]}],
            "topics": [
                {"name": "orders", "partitions": 6, "rf": 2, "bytes_in_per_s": 5e6, "size_gb": 20, "tail_groups": 1,
                 "producer": {"client_id": "orders-svc"}, "consumer": {"client_id": "billing"}},
                {"name": "events", "partitions": 6, "rf": 2, "bytes_in_per_s": 3e6, "size_gb": 4, "tail_groups": 2,
                 "producer": {"client_id": "events-svc"}, "consumer": {"client_id": "analytics"}},
            ]}],
    }


@dataclass
class Truth:
    """Simulator ground truth at one instant."""

    t: float
    fetch: dict[tuple[str, int], float]
    produce: dict[tuple[str, int], float]
    lag: dict[tuple[str, int], float]
    produce_latency_ms: dict[tuple[str, int], float]
    fetch_latency_ms: dict[tuple[str, int], float]
    util: dict[tuple[int, str], float]
    await_ms: dict[tuple[int, str], float]
    leader_disk: dict[tuple[str, int], tuple[int, str]]
    topic_configs: dict[str, dict[str, str]]
    quotas: dict[str, dict[str, float]]
    broker_configs: dict[int, dict[str, str]]
    reassigning: int


class DrivenScenario:
    """kafkasim laid out as ``sim up --realistic`` (SASL_SSL + SCRAM, https exporters with basic auth) with its
    clock frozen, registered as an operator registers it, plus the service's observer and a throttle service
    on one local state store; ``close()`` when done."""

    def __init__(self, fed: Federation, step_s: float, protection: bool = True,
                 config: ProtectionConfig | None = None, lines: LineService | None = None) -> None:
        self.fed = fed
        self.protection = protection
        self.step_s = step_s
        self.observer: CollectionJob | None = None
        # the clock is frozen (speed ~0: the tick loop never takes a micro-step whose real-traffic rates would
        # be bytes / 1e-6 s); time moves only through advance()
        self.runner = start_federation(fed, speed=1e-12)
        try:
            self.endpoints = ep = self.runner.endpoints
            self.control = ep["control_url"]
            c = self.runner.cluster(CLUSTER)
            self.bootstrap = c["bootstrap_servers"]
            self.store = LocalStateStore()
            # what the operator registers: bootstrap, metrics endpoints, security, the rack->IDC rule, hardware
            self.store.propose({"type": "cluster.register", "meta": meta("test"), "name": CLUSTER,
                                **register_fields(c), "control_url": self.control})
            self.ctx = ServiceContext(settings=Settings(), store=self.store)
            self.observer = CollectionJob(bindings=ClusterBindings())
            self.service = ProtectionService(self.store, config or ProtectionConfig(), max_snapshot_age_s=60,
                                           bind=round_binding(self.observer.board, self.observer.bindings),
                                           lines=lines)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the observer and the cluster's clients, then stop the simulator."""
        if self.observer is not None:
            self.observer.close()
        self.runner.stop()

    # ------------------------------------------------------------------ driving
    def advance(self, seconds: float) -> None:
        """Advance simulated time (1 s physics ticks)."""
        http_json(self.control + "/advance", {"seconds": seconds, "dt": 1.0})

    def step(self) -> dict[str, Any]:
        """Advance one interval, run one observer round, then evaluate it (protection on) or not (off)."""
        self.advance(self.step_s)
        assert self.observer is not None
        self.observer.collect(self.ctx, CLUSTER)
        if self.protection:
            return self.service.evaluate(CLUSTER)
        return {"decisions": []}

    def reassign_partitions(self, moves: dict[tuple[str, int], list[int]]) -> None:
        """Start reassignments over the Kafka protocol (what the executor would do), as the operator's client."""
        admin = KafkaAdminClient(**self.runner.client_kwargs(CLUSTER))
        try:
            admin.alter_partition_reassignments({TopicPartition(t, p): r for (t, p), r in moves.items()})
        finally:
            admin.close()

    def throttles(self) -> dict[str, Any]:
        """Throttles in the replicated state for the cluster."""
        return dict(self.store.read(lambda s: json.loads(json.dumps(s["throttles"].get(CLUSTER, {})))))

    def actions(self) -> list[dict[str, Any]]:
        """The action log entries of throttle commands."""
        return list(self.store.read(lambda s: json.loads(json.dumps(
            [a for a in s["actions"] if a["type"].startswith("throttle.")]))))


class ThrottleScenario(DrivenScenario):
    """The :func:`spec` scenario with throttle protection on (or off, to measure the unprotected)."""

    def __init__(self, partition_throttle: bool = True, protection: bool = True, seed: int = 5,
                 step_s: float = 5.0, config: ProtectionConfig | None = None) -> None:
        fed = build_federation(spec(partition_throttle, seed))
        fed.engine.burst_rate_per_hour = 0.0  # no random bursts: "unaffected" is measurable to +-5%
        super().__init__(fed, step_s, protection, config)

    def lagging_consumer(self, lag_bytes: float = 10e9, rate: float = 160e6) -> None:
        """A consumer of orders-0 a long way behind, catching up at ``rate`` (reads the leader's disk)."""
        http_json(self.control + "/fault/lagging-consumer", {"cluster": CLUSTER, "topic": HOT_PARTITION[0],
                                                             "partition": HOT_PARTITION[1], "lag_bytes": lag_bytes,
                                                             "rate_bytes_per_s": rate})

    def reassign(self, topic: str, partition: int, replicas: list[int]) -> None:
        """Start one reassignment over the Kafka protocol (what the executor would do)."""
        self.reassign_partitions({(topic, partition): replicas})

    def truth(self) -> Truth:
        """Ground truth from the simulator (on its loop thread)."""
        def read() -> Truth:
            eng = self.fed.engine
            cl = self.fed.clusters[CLUSTER]
            if eng.dirty:
                eng.rebuild()
            f = eng.f
            fetch, produce, lag, plat, flat, ldisk = {}, {}, {}, {}, {}, {}
            for t in cl.topics.values():
                for p in t.partitions:
                    key = (t.name, p.index)
                    fetch[key] = float(f["syn_out"][p.slot])
                    produce[key] = float(f["syn_in"][p.slot])
                    lag[key] = float(f["lag"][p.slot])
                    plat[key] = float(f["produce_latency_ms"][p.slot])
                    flat[key] = float(f["fetch_latency_ms"][p.slot])
                    if p.leader >= 0:
                        d = eng.disks[p.log_dirs[p.leader]]
                        ldisk[key] = (p.leader, d.path)
            util = {(b.id, d.path): float(eng.d_util[d.gidx]) for b in cl.brokers.values() for d in b.disks}
            aw = {(b.id, d.path): float(eng.d_await[d.gidx]) for b in cl.brokers.values() for d in b.disks}
            quotas: dict[str, dict[str, float]] = {}
            for entity, values in cl.quotas.items():
                quotas[",".join(f"{k}={v}" for k, v in entity)] = dict(values)
            return Truth(t=eng.t, fetch=fetch, produce=produce, lag=lag, produce_latency_ms=plat,
                         fetch_latency_ms=flat, util=util, await_ms=aw, leader_disk=ldisk,
                         topic_configs={n: dict(t.configs) for n, t in cl.topics.items()}, quotas=quotas,
                         broker_configs={b.id: dict(b.configs or {}) for b in cl.brokers.values()},
                         reassigning=sum(1 for t in cl.topics.values() for p in t.partitions if p.reassignment))

        result: Truth = self.runner.call(read)
        return result
