"""The three backends of the Kafka port's conformance suite, behind one test handle.

Goal: every contract test states Kafka's behaviour once and asserts it on the in-memory fake
(:class:`kafkaio.fake.FakeKafkaCluster`), on kafkasim over real TCP (SASL_SSL/SCRAM, as ``sim up
--realistic`` serves it) and on real Apache Kafka brokers of ``guardian lab``; Kafka is the reference.

Method: a :class:`Backend` holds the port object (``port``: the fake itself, or :class:`kafkaio.admin.KafkaAdmin`
over a :class:`kafkaio.connection.KafkaConnection` built from the operator's endpoints document, exactly
as the service builds it) plus the few test-only verbs the port lacks: create a topic and wait until
its partitions have leaders, produce bytes to a partition, kill and restart a broker, let moves
proceed, read client quotas back, delete a topic, and poll until a condition holds. The fake has no
clock, so "a move proceeds" is :meth:`FakeKafkaCluster.finish` there; on the real backends moves proceed
by themselves once unthrottled.

Guarantee: the real backends are shared by a whole test session (one lab, one kafkasim); every test uses
fresh topic names (:func:`unique`) and removes what it set on brokers and client ids, so tests do not
see each other. Nothing here skips: a lab that cannot start skips or fails through ``require_lab``.
Cost: the fake is free; kafkasim starts in ~1 s; the lab in ~30-40 s (3 brokers x 2 log dirs).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest

from kafkaio.admin import KafkaAdmin
from kafkaio.connection import KafkaConnection
from kafkaio.endpoints import load_endpoints_file, parse_endpoints
from kafkaio.fake import FakeKafkaCluster
from kafkaio.fake_source import FakeBulkReader
from kafkaio.port import BulkReader, KafkaCluster
from kafkaio.source import KafkaSource, KafkaSourceOptions
from kafkaio.types import TP
from kafkalab import lab as kl
from kafkasim.scenarios.scenario import build_federation
from tests.support.kafkasim_support import Sim, client_kwargs, start_federation
from tests.support.lab_support import Lab, start_lab

BROKERS = (1, 2, 3)
SIM_CLUSTER = "contract"
SIM_SPEC: dict[str, Any] = {
    "seed": 11, "speed": 1.0, "tick_seconds": 0.5,
    "clusters": [{
        "name": SIM_CLUSTER, "partition_throttle": False,
        "broker_configs": {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"},
        "brokers": [{"count": 3, "idcs": ["idc-a"], "racks_per_idc": 3, "memory_gb": 8,
                     "disks": [{"count": 2, "kind": "ssd"}]}],
        "topics": []}],
}
"""kafkasim's cluster: the lab's shape (3 brokers, one rack each, 2 log dirs each, KIP-392's selector)."""

REUSE_LAB_ENV = "GUARDIAN_CONTRACT_LAB"
"""A directory holding ``lab/`` (a running lab) and ``lab-endpoints.json``: the suite uses that lab and leaves it
running (a developer's loop; CI leaves it unset and the suite starts and stops its own lab)."""

_names = itertools.count()


def unique(prefix: str) -> str:
    """A topic or client name no other test of this session (or an earlier session on a reused lab) uses."""
    return f"ct-{prefix}-{os.getpid()}-{int(time.time() * 1000) % 10**7}-{next(_names)}"


def wait_until(what: str, probe: Callable[[], Any], timeout_s: float = 30.0, every_s: float = 0.25) -> Any:
    """Poll ``probe`` until it returns something truthy (returned); fail naming ``what`` and the last value.
    (Typed ``Any``: probes are ``a and b and value`` expressions.)"""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = probe()
        except Exception as exc:  # a read racing a change: try again until the deadline
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(every_s)


class Backend:
    """One backend: the port plus test-only verbs (see the module docstring)."""

    name = "?"
    real = True
    """Answers over the wire (kafkasim, Kafka); the fake is not."""

    def __init__(self, port: KafkaCluster, log_dirs: Mapping[int, Sequence[str]]) -> None:
        self.port = port
        self.brokers = list(BROKERS)
        self.log_dirs = {b: list(d) for b, d in log_dirs.items()}

    def __repr__(self) -> str:
        return f"<{self.name} backend>"

    # -------------------------------------------------------------- topics and data
    def create_topic(self, name: str, assignment: Mapping[int, Sequence[int]],
                     configs: Mapping[str, str] | None = None) -> None:
        """CreateTopics through the port, then wait until every partition has its preferred leader."""
        self.port.create_topic(name, assignment, configs)
        want = {(name, p): tuple(r) for p, r in assignment.items()}

        def ready() -> bool:
            parts = self.port.live().partitions
            return all(tp in parts and parts[tp].replicas == r and parts[tp].leader == r[0]
                       and set(parts[tp].isr) == set(r) for tp, r in want.items())

        wait_until(f"topic {name} to be created", ready)

    def delete_topic(self, name: str) -> None:
        raise NotImplementedError

    def produce(self, topic: str, partition: int, nbytes: int) -> None:
        """Append ``nbytes`` of records to ``topic``-``partition`` (acks=all)."""
        raise NotImplementedError

    # -------------------------------------------------------------- brokers and moves
    def kill(self, broker: int) -> None:
        """The broker dies (kill -9 on the lab) and the cluster notices (it leaves the alive set)."""
        raise NotImplementedError

    def start(self, broker: int) -> None:
        """The broker comes back and is alive again."""
        raise NotImplementedError

    def proceed(self, tps: Sequence[TP] = ()) -> None:
        """Let unthrottled moves make progress (the fake has no clock: it finishes them; real backends move
        by themselves)."""

    def quotas(self, client_id: str) -> dict[str, float]:
        """The client-id quotas set for ``client_id`` (DescribeClientQuotas, exact match)."""
        raise NotImplementedError

    def bulk_reader(self) -> BulkReader:
        """The collectors' bulk reader of this cluster (:class:`kafkaio.port.BulkReader`)."""
        raise NotImplementedError

    # -------------------------------------------------------------- the wire (real backends only)
    @property
    def connection(self) -> KafkaConnection:
        raise NotImplementedError(f"{self.name} has no wire")

    def client_config(self) -> dict[str, Any]:
        raise NotImplementedError(f"{self.name} has no wire")

    def wait(self, what: str, probe: Callable[[], Any], timeout_s: float = 30.0) -> Any:
        """:func:`wait_until`."""
        return wait_until(what, probe, timeout_s)

    def close(self) -> None:
        self.port.close()


# ------------------------------------------------------------------------------------------------ fake
class FakeBackend(Backend):
    """A fresh :class:`FakeKafkaCluster` per test (moves finish only when told, as the executor's tests use it)."""

    name = "fake"
    real = False

    def __init__(self) -> None:
        self.fake = FakeKafkaCluster({b: ["/data1", "/data2"] for b in BROKERS},
                                     racks={b: f"idc-a-r{b}" for b in BROKERS})
        for b in BROKERS:
            self.fake.static_cfg[b]["replica.selector.class"] = \
                "org.apache.kafka.common.replica.RackAwareReplicaSelector"
        super().__init__(self.fake, self.fake.log_dir_paths)

    def delete_topic(self, name: str) -> None:
        self.fake.delete_topic(name)

    def produce(self, topic: str, partition: int, nbytes: int) -> None:
        p = self.fake.topics[topic][partition]
        p.size += nbytes

    def kill(self, broker: int) -> None:
        self.fake.kill(broker)

    def start(self, broker: int) -> None:
        self.fake.revive(broker)

    def proceed(self, tps: Sequence[TP] = ()) -> None:
        self.fake.finish(list(tps) or None)

    def quotas(self, client_id: str) -> dict[str, float]:
        return dict(self.fake.quotas.get(client_id, {}))

    def bulk_reader(self) -> BulkReader:
        return FakeBulkReader(self.fake.view())

    def wait(self, what: str, probe: Callable[[], Any], timeout_s: float = 30.0) -> Any:
        """The fake changes only when called: what has not happened after a few polls never will."""
        return wait_until(what, probe, min(timeout_s, 0.5), every_s=0.05)


# ------------------------------------------------------------------------------------------------ wire
class WireBackend(Backend):
    """kafkasim or the lab, reached as an operator's registration reaches a cluster: its endpoints document."""

    def __init__(self, conn: KafkaConnection, log_dirs: Mapping[int, Sequence[str]], kwargs: dict[str, Any]) -> None:
        self._conn = conn
        self._kwargs = kwargs
        super().__init__(KafkaAdmin(conn, client_id="contract"), log_dirs)

    @property
    def connection(self) -> KafkaConnection:
        return self._conn

    def client_config(self) -> dict[str, Any]:
        return dict(self._kwargs)

    def bulk_reader(self) -> BulkReader:
        """A :class:`KafkaSource` on the backend's connection (not reading consumer groups: other tests' groups)."""
        return KafkaSource(self._conn, KafkaSourceOptions(consumer_offsets=False, request_timeout_ms=15_000))

    def delete_topic(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self._conn.client().delete_topics([name])

    def produce(self, topic: str, partition: int, nbytes: int) -> None:
        chunk = 16 * 1024
        producer = KafkaProducer(acks="all", linger_ms=5, batch_size=256 * 1024, client_id="contract-producer",
                                 **self._kwargs)
        try:
            payload = b"x" * chunk
            for _ in range(max(1, nbytes // chunk)):
                producer.send(topic, payload, partition=partition)
            producer.flush(60)
        finally:
            producer.close(10)

    def quotas(self, client_id: str) -> dict[str, float]:
        comp = DescribeClientQuotasRequest.ComponentData
        req = DescribeClientQuotasRequest(components=[comp(entity_type="client-id", match_type=0, match=client_id)],
                                          strict=True)
        resp = self._conn.send(req)
        assert not resp.error_code, resp.error_message
        out: dict[str, float] = {}
        for e in resp.entries or []:
            if {x.entity_type: x.entity_name for x in e.entity} == {"client-id": client_id}:
                out.update({v.key: float(v.value) for v in e.values})
        return out

    def wait_alive(self, broker: int, alive: bool, timeout_s: float = 60.0) -> None:
        wait_until(f"broker {broker} {'alive' if alive else 'dead'}",
                   lambda: (broker in self.port.live().alive) == alive, timeout_s)

    def close(self) -> None:
        super().close()
        self._conn.close()


class SimBackend(WireBackend):
    """kafkasim over real TCP, SASL_SSL/SCRAM-SHA-512, from the operator's endpoints document."""

    name = "kafkasim"

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        cluster = sim.cluster(SIM_CLUSTER)
        eps = parse_endpoints(sim.endpoints, SIM_CLUSTER)
        conn = KafkaConnection.for_endpoints(eps, client_id="contract", request_timeout_ms=15_000)

        def dirs() -> dict[int, list[str]]:
            cl = sim.server.fed.cluster(SIM_CLUSTER)
            return {b.id: [d.path for d in b.disks] for b in cl.brokers.values()}

        super().__init__(conn, sim.call(dirs), client_kwargs(cluster))

    def kill(self, broker: int) -> None:
        self.sim.call(lambda: self.sim.server.kill_broker(SIM_CLUSTER, broker))
        self.wait_alive(broker, False)

    def start(self, broker: int) -> None:
        self.sim.call(lambda: self.sim.server.revive_broker(SIM_CLUSTER, broker))
        self.wait_alive(broker, True)


class LabBackend(WireBackend):
    """Real Apache Kafka 4.x brokers of ``guardian lab`` (KRaft, SASL_SSL/SCRAM-SHA-512, 2 JBOD dirs each)."""

    name = "kafka"

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        eps = load_endpoints_file(lab.endpoints_file, lab.cluster)
        conn = KafkaConnection.for_endpoints(eps, client_id="contract", request_timeout_ms=15_000)
        super().__init__(conn, {b: lab.log_dirs(b) for b in lab.broker_ids}, lab.client_config())

    def kill(self, broker: int) -> None:
        self.lab.kill(broker)
        self.wait_alive(broker, False)

    def start(self, broker: int) -> None:
        self.lab.start(broker)
        self.wait_alive(broker, True, timeout_s=90)


# ------------------------------------------------------------------------------------------------ starting
def start_kafkasim() -> Sim:
    """kafkasim with :data:`SIM_SPEC`, realistic (SASL_SSL, secrets in a temporary directory removed on stop)."""
    import json

    return start_federation(build_federation(json.loads(json.dumps(SIM_SPEC))), realistic=True)


@contextlib.contextmanager
def lab_for_session(base: Path) -> Iterator[Lab]:
    """The session's lab: a reused running one (:data:`REUSE_LAB_ENV`), or a new 3-broker x 2-dir lab stopped
    afterwards."""
    reuse = os.environ.get(REUSE_LAB_ENV)
    if reuse:
        directory = Path(reuse)
        yield Lab(kl.load_state(directory / "lab"), directory / "lab-endpoints.json")
        return
    lab = start_lab(base, brokers=len(BROKERS), log_dirs=2)
    try:
        yield lab
    finally:
        problems = kl.down(lab.directory)
        assert not problems, problems


def quiet_kafka_logs() -> None:
    """kafka-python logs every refused connection to a killed broker at WARNING/ERROR: expected here."""
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
