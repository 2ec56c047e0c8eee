"""One-command IDC migration and topic pre-allocation through the API, on kafkasim over TCP.

A 3-replica topic in idc-a moves to idc-b with one ``POST /api/v1/migrations`` while a real consumer
(kafka-python) reads and commits: every step runs to completion in order, all replicas end in idc-b, no
record is lost or read twice and the committed offsets carry on from where they were. A topic created with
``POST /api/v1/topics`` has exactly the replica assignment the preallocate planner chose.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from typer.testing import CliRunner

from controlplane.bootstrap import Service
from controlplane.cli.app import app as cli
from controlplane.config import IntervalsConf, TokenConf, hash_token
from kafkasim.broker.server import SimRunner
from raft.localcluster import free_ports
from tests.support.kafkasim_support import client_kwargs, register_fields, start_sim
from tests.support.service_ports import executor_of
from tests.support.service_support import local_service

TOKEN = "idc-operator"
H = {"Authorization": f"Bearer {TOKEN}", "X-Guardian-Reason": "move payments to idc-b"}
TWO_IDCS: dict[str, Any] = {
    "seed": 11, "speed": 20.0, "tick_seconds": 1.0,
    "clusters": [{"name": "east", "partition_throttle": True,
                  "brokers": [{"count": 6, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 3, "memory_gb": 16,
                               "disks": [{"count": 2, "kind": "hdd"}]}],
                  "topics": [{"name": "background", "partitions": 6, "rf": 2, "bytes_in_per_s": 200_000,
                              "size_gb": 0.05, "tail_groups": 1}]}],
}
PARTITIONS, RECORDS = 4, 300


@pytest.fixture()
def sim() -> Iterator[SimRunner]:
    with start_sim(TWO_IDCS) as runner:
        yield runner


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    with local_service(tmp_path, intervals=IntervalsConf(collect_s=1.0),
                       tokens=[TokenConf(name="op", role="admin", sha256=hash_token(TOKEN))]) as svc:
        yield svc


def kafka_kwargs(sim: SimRunner) -> dict[str, Any]:
    """kafka-python keyword arguments for ``east``: bootstrap servers and its SASL_SSL settings."""
    return client_kwargs(sim.endpoints["clusters"]["east"])


def idc_brokers(admin: KafkaAdminClient) -> dict[str, list[int]]:
    """IDC -> broker ids, from each broker's rack (``idc-a-r1``)."""
    out: dict[str, list[int]] = {}
    for b in admin.describe_cluster()["brokers"]:
        out.setdefault(str(b["rack"]).rsplit("-r", 1)[0], []).append(int(b["broker_id"]))
    return {k: sorted(v) for k, v in out.items()}


def replicas_of(admin: KafkaAdminClient, topic: str) -> dict[int, list[int]]:
    (t,) = admin.describe_topics([topic])
    return {int(p["partition_index"]): [int(b) for b in p["replica_nodes"]] for p in t["partitions"]}


def register_and_collect(client: TestClient, service: Service, sim: SimRunner) -> None:
    east = sim.endpoints["clusters"]["east"]
    r = client.post("/api/v1/clusters", headers=H, json={
        "name": "east", **register_fields(east)})
    assert r.status_code == 201, r.text
    for _ in range(3):
        service.collection(service.ctx)
        time.sleep(0.5)


class Reader(threading.Thread):
    """A consumer of the group ``payments-reader`` that polls and commits until told to stop."""

    def __init__(self, kafka: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(**kafka, group_id="payments-reader",
                                      enable_auto_commit=False, auto_offset_reset="earliest",
                                      client_id="payments-reader", request_timeout_ms=20000, max_poll_records=7)
        self.consumer.assign([TopicPartition("payments", p) for p in range(PARTITIONS)])
        self.seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.stop = threading.Event()
        self.until: int | None = None
        self.errors: list[str] = []

    def step(self) -> None:
        for tp, records in self.consumer.poll(timeout_ms=200).items():
            self.seen[tp.partition].extend(r.offset for r in records)
        self.consumer.commit()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.step()
                time.sleep(0.05)
        except Exception as exc:  # reported by the test
            self.errors.append(repr(exc))


def test_one_command_migration_moves_every_replica_and_keeps_offsets(sim: SimRunner, service: Service) -> None:
    admin = KafkaAdminClient(**kafka_kwargs(sim), request_timeout_ms=20000)
    idcs = idc_brokers(admin)
    a, b = idcs["idc-a"], idcs["idc-b"]
    assert len(a) == len(b) == 3
    admin.create_topics([NewTopic("payments", -1, -1, replica_assignments={
        p: [a[(p + k) % 3] for k in range(3)] for p in range(PARTITIONS)})])
    producer = KafkaProducer(**kafka_kwargs(sim), acks="all")
    for i in range(RECORDS):
        producer.send("payments", value=f"payment-{i}".encode() * 20, partition=i % PARTITIONS)
    producer.flush()
    reader = Reader(kafka_kwargs(sim))
    deadline = time.monotonic() + 30
    while min(len(v) for v in reader.seen.values()) < 10 and time.monotonic() < deadline:
        reader.step()
    before = {p: reader.consumer.committed(TopicPartition("payments", p)) for p in range(PARTITIONS)}
    assert all(v is not None and v > 0 for v in before.values())
    reader.start()
    with TestClient(service.app) as client:
        register_and_collect(client, service, sim)
        bad = client.post("/api/v1/migrations", headers=H, json={"cluster": "east", "topics": ["payments"],
                                                                  "placement": {"idc-b": 0}})
        assert bad.status_code == 400 and "$.placement.idc-b" in bad.json()["detail"]
        bad = client.post("/api/v1/migrations", headers=H, json={
            "cluster": "east", "topics": ["payments"], "placement": {"idc-b": 3}, "throttle": {"schedule": "25:00"}})
        assert bad.status_code == 400 and "$.throttle.schedule" in bad.json()["detail"]
        started = time.monotonic()
        r = client.post("/api/v1/migrations", headers=H, json={
            "cluster": "east", "topics": ["payments"], "placement": {"idc-b": 3},
            "throttle": {"mode": "fixed", "fixed_rate": "40MB"}, "caps": {"per_broker": 4}})
        assert r.status_code == 201, r.text
        created = r.json()
        assert created["steps"] == 3  # RF 3, two replicas kept in sync: one replica per partition per step
        migration_id = created["migration_id"]
        cluster = client.get("/api/v1/clusters/east", headers=H).json()
        assert cluster["placement"]["topics"]["payments"] == {"idc-b": 3}  # the policy is set first
        steps_seen: list[int] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            executor_of(service.ctx).run_once()
            m = client.get(f"/api/v1/migrations/{migration_id}", headers=H).json()
            if not steps_seen or steps_seen[-1] != m["progress"]["step"]:
                steps_seen.append(m["progress"]["step"])
            if m["status"] != "running":
                break
            time.sleep(0.3)
        elapsed = time.monotonic() - started
        assert m["status"] == "completed", m
        assert steps_seen == sorted(steps_seen) and steps_seen[-1] == 3  # in order, to the last step
        assert m["progress"]["fraction"] == 1.0 and m["progress"]["bytes_total"] > 0
        executions = [client.get(f"/api/v1/executions/{e}", headers=H).json() for e in m["executions"]]
        assert [e["status"] for e in executions] == ["completed"] * 3
        assert all(e["options"]["throttle"] == {"mode": "fixed", "fixed_rate": 40e6} for e in executions)
        assert all(e["caps"]["per_broker"] == 4 and e["started_by"] == "op" for e in executions)
        assert [e["options"]["migration"]["step"] for e in executions] == [1, 2, 3]
        ends = [e["finished_at"] for e in executions]
        assert ends == sorted(ends)
    reader.until = RECORDS
    deadline = time.monotonic() + 30
    while sum(len(v) for v in reader.seen.values()) < RECORDS and time.monotonic() < deadline:
        time.sleep(0.2)
    reader.stop.set()
    reader.join(10)
    assert not reader.errors
    final = replicas_of(admin, "payments")
    assert all(set(r) <= set(b) and len(r) == 3 for r in final.values()), final
    for p in range(PARTITIONS):
        assert reader.seen[p] == list(range(RECORDS // PARTITIONS)), p  # every record once, in order: no reset
        committed = reader.consumer.committed(TopicPartition("payments", p))
        assert committed == RECORDS // PARTITIONS >= before[p]
    ends = reader.consumer.end_offsets([TopicPartition("payments", p) for p in range(PARTITIONS)])
    assert set(ends.values()) == {RECORDS // PARTITIONS}  # the log moved with its offsets
    reader.consumer.close()
    producer.close()
    admin.close()
    print(f"\nmigrate-idc payments idc-a -> idc-b: 3 steps, {m['progress']['bytes_total']} bytes, "
          f"{elapsed:.1f} s wall, consumer read {RECORDS} records once")


def test_topic_create_uses_the_planned_assignment(sim: SimRunner, service: Service) -> None:
    admin = KafkaAdminClient(**kafka_kwargs(sim), request_timeout_ms=20000)
    idcs = idc_brokers(admin)
    with TestClient(service.app) as client:
        register_and_collect(client, service, sim)
        bad = client.post("/api/v1/topics", headers=H, json={"cluster": "east", "name": "bad name",
                                                             "partitions": 3, "expected_bytes_in_per_s": 1e6})
        assert bad.status_code == 400 and "$.name" in bad.json()["detail"]
        r = client.post("/api/v1/topics", headers=H, json={
            "cluster": "east", "name": "invoices", "partitions": 6, "replication_factor": 3,
            "expected_bytes_in_per_s": 6e6, "placement": {"idc-a": 2, "idc-b": 1},
            "configs": {"retention.ms": "3600000"}})
        assert r.status_code == 201, r.text
        created = r.json()
        again = client.post("/api/v1/topics", headers=H, json={"cluster": "east", "name": "invoices",
                                                               "partitions": 1, "expected_bytes_in_per_s": 1.0})
        assert again.status_code == 409
        actions = client.get("/api/v1/actions", headers=H).json()
        assert any(x["type"] == "topic.created" and x["subject"]["topic"] == "invoices" for x in actions)
    planned = {int(p): r for p, r in created["assignment"].items()}
    assert replicas_of(admin, "invoices") == planned  # exactly the planned assignment
    for replicas in planned.values():
        assert sum(x in idcs["idc-a"] for x in replicas) == 2 and sum(x in idcs["idc-b"] for x in replicas) == 1
        assert replicas[0] in idcs["idc-a"]  # leaders in the IDC with the most replicas
    assert len({r[0] for r in planned.values()}) == 3  # leaders spread over idc-a's brokers
    admin.close()


@pytest.fixture()
def served(service: Service) -> Iterator[str]:
    """The service's app on a real port, its executor passing every 0.3 s (as ``guardian serve`` runs it)."""
    (port,) = free_ports(1)
    server = uvicorn.Server(uvicorn.Config(service.app, host="127.0.0.1", port=port, log_level="warning"))
    stop = threading.Event()

    def passes() -> None:
        while not stop.is_set():
            executor_of(service.ctx).run_once()
            stop.wait(0.3)

    threads = [threading.Thread(target=server.run, daemon=True), threading.Thread(target=passes, daemon=True)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        server.should_exit = True
        for t in threads:
            t.join(10)


def test_the_cli_creates_and_migrates_through_the_controller(sim: SimRunner, service: Service, served: str) -> None:
    admin = KafkaAdminClient(**kafka_kwargs(sim), request_timeout_ms=20000)
    idcs = idc_brokers(admin)
    with TestClient(service.app) as client:
        register_and_collect(client, service, sim)
    runner = CliRunner()
    created = runner.invoke(cli, ["topic", "create", "ledger", "-c", "east", "--partitions", "3", "--rf", "3",
                                  "--expected-bytes-in-per-s", "3000000", "--placement", "idc-a=3",
                                  "--url", served, "--token", TOKEN])
    assert created.exit_code == 0, created.output
    ledger = replicas_of(admin, "ledger")
    assert all(set(r) <= set(idcs["idc-a"]) for r in ledger.values())
    assignment = ",".join(":".join(map(str, ledger[p])) for p in sorted(ledger))
    assert f"replica assignment: {assignment}" in created.stdout  # what the CLI printed is what the cluster has
    for _ in range(2):  # the controller's snapshot knows the new topic
        service.collection(service.ctx)
        time.sleep(0.5)
    moved = runner.invoke(cli, ["migrate-idc", "ledger", "--to", "idc-b=3", "-c", "east", "--url", served,
                                "--token", TOKEN, "--interval", "0.3", "--throttle", "fixed:30MB"])
    assert moved.exit_code == 0, moved.output
    lines = moved.stdout.strip().splitlines()
    assert lines[0].startswith("migration ") and "3 step(s)" in lines[0]
    assert any("step 2/3" in line for line in lines) and lines[-1].endswith("completed")
    assert all(set(r) <= set(idcs["idc-b"]) for r in replicas_of(admin, "ledger").values())
    (m,) = [x for x in TestClient(service.app).get("/api/v1/migrations", headers=H).json() if "ledger" in x["topics"]]
    assert m["options"]["throttle"] == {"mode": "fixed", "fixed_rate": 30e6}  # the CLI's flag, nothing else
    admin.close()
