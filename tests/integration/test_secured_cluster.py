"""A real deployment's shape end to end: a SASL_SSL/SCRAM-SHA-512 kafkasim with https + basic-auth exporters,
registered through the CLI and the API, observed by the service, changed by ``guardian exec run`` with
Kafka-style security flags; a wrong password is a clear error in both; and no secret in anything written.

Everything Guardian writes goes under one work directory (the service's data dir with its Raft journal and
``access.jsonl``, its DEBUG log, CLI outputs, snapshot, plan and state files); the passwords live elsewhere,
in files only the simulator and the operator's references point to. The last test greps the work directory,
every API response and every CLI output for the Kafka password and the metrics password.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient

from controlplane.bootstrap import Service, build_service
from controlplane.config import ClickHouseConf, RaftConf, Settings, TokenConf, hash_token
from controlplane.service.clusters import endpoints_of
from kafkaio.admin import KafkaAdmin
from kafkaio.connection import KafkaConnection
from kafkaio.endpoints import parse_endpoints
from kafkasim.broker.server import SimRunner
from kafkasim.scenarios.realistic import KAFKA_USER, MECHANISM, Realistic, operator_endpoints, prepare
from raft.localcluster import free_ports
from tests.support.executor_support import guardian, one_replica_plan, read_state, write_plan
from tests.support.kafkasim_support import start_sim

pytestmark = pytest.mark.timeout(300)

TOKEN = "secured-admin-token"
H = {"Authorization": f"Bearer {TOKEN}", "X-Guardian-Reason": "secured cluster test"}
SPEC: dict[str, Any] = {
    "seed": 7, "speed": 20.0, "tick_seconds": 1.0, "audit": {"enabled": True, "interval_s": 1},
    "clusters": [{"name": "east", "partition_throttle": True,
                  "brokers": [{"count": 4, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 2, "memory_gb": 16,
                               "disks": [{"count": 2, "kind": "hdd"}, {"count": 1, "kind": "nvme"}]}],
                  "topics": [{"name": "orders", "partitions": 6, "rf": 2, "bytes_in_per_s": 200_000,
                              "size_gb": 0.02, "tail_groups": 1}]}],
}


@dataclass
class World:
    """The simulator, the service (in process, DEBUG logs, real HTTP) and everything the tests saw."""

    sim: SimRunner
    setup: Realistic
    work: Path
    operator_file: Path
    wrong_password_file: Path
    service: Service
    url: str
    seen: list[str] = field(default_factory=list)
    """Every API response body and CLI output of the module (grepped for secrets at the end)."""

    @property
    def passwords(self) -> dict[str, str]:
        return {"kafka": self.setup.kafka_password_file.read_text().strip(),
                "metrics": self.setup.metrics_password_file.read_text().strip(),
                "wrong": self.wrong_password_file.read_text().strip()}

    @property
    def cluster(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.operator_file.read_text())["clusters"]["east"]
        return doc

    def cli(self, *args: str, timeout: float = 120) -> Any:
        r = guardian(*args, timeout=timeout)
        self.seen += [r.stdout, r.stderr]
        return r

    def api(self, client: TestClient, method: str, path: str, body: Any = None) -> Any:
        r = client.request(method, path, headers=H, json=body)
        self.seen.append(r.text)
        return r

    def security_flags(self, password_file: Path) -> list[str]:
        sec = self.cluster["security"]
        return ["--bootstrap-servers", self.cluster["bootstrap_servers"], "--security-protocol", sec["protocol"],
                "--sasl-mechanism", sec["sasl_mechanism"], "--sasl-username", sec["username"],
                "--sasl-password-file", str(password_file), "--ssl-cafile", sec["ca_file"]]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    secrets_dir = tmp_path_factory.mktemp("secrets")
    work = tmp_path_factory.mktemp("work")
    setup = prepare(secrets_dir)
    wrong = secrets_dir / "wrong.password"
    wrong.write_text("not-the-password-4711\n")
    sim = start_sim(SPEC, realistic=False, security=setup.security, metrics=setup.metrics)
    operator_file = work / "operator-endpoints.json"
    operator_file.write_text(json.dumps(operator_endpoints(sim.endpoints, sim.server.fed, setup)))
    handler = logging.FileHandler(work / "service-debug.log")
    handler.setLevel(logging.DEBUG)
    root, kafka_log = logging.getLogger(), logging.getLogger("kafka")  # kafka-python's too (its SASL exchange)
    old_level, old_kafka_level = root.level, kafka_log.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    kafka_log.setLevel(logging.DEBUG)
    raft_port, http_port = free_ports(2)
    service = build_service(Settings(data_dir=work / "service", raft=RaftConf(self_addr=f"127.0.0.1:{raft_port}"),
                                     clickhouse=ClickHouseConf(mode="off"),
                                     tokens=[TokenConf(name="ops", role="admin", sha256=hash_token(TOKEN))]))
    server = uvicorn.Server(uvicorn.Config(service.app, host="127.0.0.1", port=http_port, log_level="debug"))
    thread = threading.Thread(target=server.run, daemon=True)
    try:
        assert service.store.node.wait_ready(10)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started
        yield World(sim, setup, work, operator_file, wrong, service, f"http://127.0.0.1:{http_port}")
    finally:
        server.should_exit = True
        thread.join(10)
        service.close()
        sim.stop()
        root.removeHandler(handler)
        root.setLevel(old_level)
        kafka_log.setLevel(old_kafka_level)
        handler.close()


def test_register_with_the_cli_and_observe_over_sasl_ssl(world: World) -> None:
    r = world.cli("clusters", "register", "-c", "east", "-e", str(world.operator_file), "--url", world.url,
                  "--token", TOKEN)
    assert r.returncode == 0, r.stderr
    assert f"cluster east registered (SASL_SSL/{MECHANISM} as user '{KAFKA_USER}', 4 brokers" in r.stdout
    with TestClient(world.service.app) as client:
        shown = world.api(client, "GET", "/api/v1/clusters/east").json()
        assert shown["security"]["password_file"] == str(world.setup.kafka_password_file)
        assert all(m["password_file"] == str(world.setup.metrics_password_file)
                   for b in shown["brokers"] for m in b["metrics"])
        assert shown["rack_to_idc"] == world.cluster["rack_to_idc"]
    r = world.cli("clusters", "show", "east", "--url", world.url, "--token", TOKEN)
    assert r.returncode == 0 and json.loads(r.stdout)["security"]["sasl_mechanism"] == MECHANISM
    round_ = world.service.collection.collect(world.service.ctx, "east")
    assert round_ is not None, "the observer could not collect a round over SASL_SSL"
    truth = world.sim.server.fed.cluster("east")
    assert {b.id for b in round_.snapshot.brokers} == set(truth.brokers)
    assert len(round_.snapshot.index.partitions) == sum(len(t.partitions) for t in truth.topics.values())
    clients = world.service.collection.bindings.bound("east")
    assert clients is not None and clients.connection.security.describe() == f"SASL_SSL/{MECHANISM} as user " \
                                                                             f"'{KAFKA_USER}'"
    deadline = time.monotonic() + 30  # the audit consumer reads the audit topic over the same security
    shares: dict[Any, Any] = {}
    while not shares and time.monotonic() < deadline:
        shares = clients.audit.poll()
        time.sleep(0.3)
    assert shares, "the audit consumer read nothing over SASL_SSL"


def test_topology_set_through_the_cli(world: World) -> None:
    hw = world.work / "hardware.json"
    hw.write_text(json.dumps([{"brokers": "*", "log_dirs": "*", "kind": "ssd", "max_bytes_per_s": 5e8}]))
    r = world.cli("clusters", "topology", "set", "east", "--idc", "1=idc-z", "--hardware-file", str(hw),
                  "--url", world.url, "--token", TOKEN)
    assert r.returncode == 0, r.stderr
    topo = json.loads(world.cli("clusters", "topology", "show", "east", "--url", world.url, "--token",
                                TOKEN).stdout)
    assert topo["idc_overrides"] == {"1": "idc-z"} and topo["rack_to_idc"] == world.cluster["rack_to_idc"]
    assert topo["hardware"]["rules"][0]["kind"] == "ssd"
    bad = world.cli("clusters", "topology", "set", "east", "--rack-to-idc", "(?P<dc>.*)", "--url", world.url,
                    "--token", TOKEN)
    assert bad.returncode == 2 and "$.rack_to_idc.regex" in bad.stderr
    record = world.service.store.read(lambda s: json.loads(json.dumps(s["clusters"]["east"])))
    assert endpoints_of("east", record).idc_of(1) == ("idc-z", "broker")
    restore = world.cli("clusters", "topology", "set", "east", "--clear", "idc_overrides", "--clear", "hardware",
                        "--url", world.url, "--token", TOKEN)
    assert restore.returncode == 0, restore.stderr


def test_a_wrong_password_is_a_400_at_registration_or_a_named_error_and_a_502(world: World) -> None:
    bad = {**world.cluster, "name": "east-bad",
           "security": {**world.cluster["security"], "password_file": str(world.wrong_password_file)}}
    with TestClient(world.service.app) as client:
        r = world.api(client, "POST", "/api/v1/clusters", bad)  # probed: the login is refused at once
        assert r.status_code == 400, r.text
        assert [p["path"] for p in r.json()["problems"]] == ["$.security"]
        assert "authentication failed" in r.json()["detail"] and "probe=false" in r.json()["detail"]
        assert world.api(client, "GET", "/api/v1/clusters/east-bad").status_code == 404
        assert world.api(client, "POST", "/api/v1/clusters?probe=false", bad).status_code == 201
        t0 = time.monotonic()
        assert world.service.collection.collect(world.service.ctx, "east-bad") is None
        assert time.monotonic() - t0 < 10, "a refused login must not wait for timeouts"
        shown = world.api(client, "GET", "/api/v1/clusters/east-bad").json()
        assert shown["last_error"]["kind"] == "auth" and "authentication failed" in shown["last_error"]["message"]
        assert shown["status"]["errors"]["auth"] >= 1
        overview = world.api(client, "GET", "/api/v1/overview").json()
        assert [c["last_error"]["kind"] for c in overview["clusters"] if c["name"] == "east-bad"] == ["auth"]
        r = world.api(client, "POST", "/api/v1/plans", {"cluster": "east-bad"})
        assert r.status_code == 502, r.text
        problem = r.json()
        assert problem["cluster"] == "east-bad" and problem["security"] == f"SASL_SSL/{MECHANISM} as user " \
                                                                           f"'{KAFKA_USER}'"
        assert problem["detail"].startswith("no usable snapshot of cluster 'east-bad': cluster east-bad: "
                                            f"authentication failed with SASL_SSL/{MECHANISM}")
        assert world.api(client, "DELETE", "/api/v1/clusters/east-bad").status_code == 200


def test_a_wrong_metrics_password_is_a_400_at_registration_or_a_named_error(world: World) -> None:
    brokers = [{**b, "metrics": [{**m, "password_file": str(world.wrong_password_file)} if isinstance(m, dict)
                                 else m for m in b["metrics"]]} for b in world.cluster["brokers"]]
    bad = {**world.cluster, "name": "east-badm", "brokers": brokers}
    with TestClient(world.service.app) as client:
        r = world.api(client, "POST", "/api/v1/clusters", bad)
        assert r.status_code == 400, r.text
        paths = [p["path"] for p in r.json()["problems"]]
        assert paths and all(p.startswith("$.brokers[") for p in paths), paths
        assert "refused Guardian's credentials" in r.json()["detail"] and "HTTP 401" in r.json()["detail"]
        assert world.api(client, "POST", "/api/v1/clusters?probe=false", bad).status_code == 201
        assert world.service.collection.collect(world.service.ctx, "east-badm") is not None  # Kafka answers
        shown = world.api(client, "GET", "/api/v1/clusters/east-badm").json()
        assert shown["last_error"]["kind"] == "metrics_auth" and shown["last_error"]["loop"] == "scrape"
        metrics = client.get("/metrics").text
        assert 'guardian_cluster_errors_total{cluster="east-badm",kind="metrics_auth"} 1' in metrics
        assert 'guardian_cluster_errors_total{cluster="east",kind="metrics_auth"}' in metrics
        assert world.api(client, "DELETE", "/api/v1/clusters/east-badm").status_code == 200


def test_exec_run_with_security_flags_moves_the_partitions(world: World) -> None:
    eps = parse_endpoints(json.loads(world.operator_file.read_text()), "east")
    admin = KafkaAdmin(KafkaConnection.for_endpoints(eps, client_id="test-checker"))
    try:
        plan = one_replica_plan(admin.live(), select=lambda tp, p: tp[0] == "orders" and tp[1] < 2,
                                cluster="east")
        plan_file = write_plan(plan, world.work / "plan.json")
        state = world.work / "exec-state.json"
        r = world.cli("exec", "run", "-c", "east", *world.security_flags(world.setup.kafka_password_file),
                      "--plan", str(plan_file), "--state-file", str(state), "--quiet", "--interval", "0.2",
                      "--throttle", "fixed:50MB")
        assert r.returncode == 0, r.stderr[-2000:]
        final = max(read_state(state)["executions"].values(), key=lambda e: e["id"])
        assert final["status"] == "completed" and len(final["tasks"]) == len(plan.moves) == 2
        after = admin.live()
        for move in plan.moves:
            assert after.partitions[move.id].replicas == move.replicas
    finally:
        admin.close()


def test_a_wrong_password_is_one_line_and_exit_2_in_the_cli(world: World) -> None:
    plan_file = world.work / "plan.json"
    t0 = time.monotonic()
    r = world.cli("exec", "run", "-c", "east", *world.security_flags(world.wrong_password_file),
                  "--plan", str(plan_file), "--state-file", str(world.work / "bad-state.json"), "--quiet")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cluster east: authentication failed with SASL_SSL/"
                                                   f"{MECHANISM} as user '{KAFKA_USER}': "), r.stderr
    assert time.monotonic() - t0 < 60
    r = world.cli("snapshot", "take", "-c", "east", *world.security_flags(world.wrong_password_file),
                  "--rounds", "1", "-o", str(world.work / "never.json"))
    assert r.returncode == 2 and "authentication failed" in r.stderr and not (world.work / "never.json").exists()
    r = world.cli("exec", "run", "-c", "east", "--bootstrap-servers", world.cluster["bootstrap_servers"],
                  "--sasl-mechanism", MECHANISM, "--plan", str(plan_file))
    assert r.returncode == 2 and "--sasl-mechanism" in r.stderr


def test_snapshot_take_from_the_operator_file(world: World) -> None:
    out = world.work / "snapshot.json"
    r = world.cli("snapshot", "take", "-c", "east", "-e", str(world.operator_file), "--rounds", "1", "-o", str(out))
    assert r.returncode == 0, r.stderr
    brokers = {b["id"] for b in json.loads(out.read_text())["brokers"]}
    assert brokers == set(world.sim.server.fed.cluster("east").brokers)


def test_no_secret_in_anything_written(world: World) -> None:
    """Runs last: every file under the work directory, every API response, every CLI output."""
    with TestClient(world.service.app) as client:
        for path in ("/api/v1/clusters", "/api/v1/clusters/east", "/api/v1/actions", "/api/v1/clusters/east/topology"):
            assert world.api(client, "GET", path).status_code == 200
    files = [p for p in world.work.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"access.jsonl", "service-debug.log", "plan.json", "snapshot.json", "exec-state.json"} <= names, names
    debug_log = (world.work / "service-debug.log").read_text()
    assert "SaslAuthenticate" in debug_log, "the service's DEBUG log did not record the SASL exchange"
    actions = world.service.store.read(lambda s: json.dumps(s["actions"]))
    assert "cluster.register" in actions
    for what, secret in world.passwords.items():
        needle = secret.encode()
        hits = [str(p) for p in files if needle in p.read_bytes()]
        assert not hits, f"the {what} password is in {hits}"
        assert not [t for t in world.seen if secret in t], f"the {what} password is in an API response or CLI output"
        assert secret not in actions
