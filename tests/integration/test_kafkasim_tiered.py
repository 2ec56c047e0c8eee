"""kafkasim's tiered topics over TCP (kafka-python) against a real tiered-metadata service (`guardian serve`
with ``[tiered]``, gRPC): groups recorded under traffic, a consumer reading from offset 0 after local
retention served from remote byte for byte, a deposed leader's append refused, a move that copies only the
local tail (and DescribeLogDirs reporting the local size, which Guardian's executor reads).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from controlplane.launcher import ServiceCluster
from kafkasim.broker.server import SimRunner
from kafkasim.cluster.configs import REMOTE_LOG_TASK, RETENTION_CHECK
from kafkasim.scenarios.scenario import build_federation
from kafkasim.tiering.segments import COPIED, COPYING
from kafkasim.tiering.tiered import TieredManager, TieredSettings, kafka_topic_id
from tiered.client import COPY_FINISHED, COPY_STARTED, TieredClient

pytestmark = pytest.mark.slow
CLUSTER = "tc"
SPEC: dict[str, Any] = {"seed": 5, "speed": 1.0, "tick_seconds": 1.0, "clusters": [
    {"name": CLUSTER, "brokers": [{"count": 4, "idcs": ["a", "b"], "racks_per_idc": 2, "memory_gb": 8,
                                   "disks": [{"count": 1, "kind": "nvme"}]}], "topics": [],
     "broker_configs": {RETENTION_CHECK: "100", REMOTE_LOG_TASK: "100"}}]}  # every tick (Kafka: 300000, 30000)


class Env:
    def __init__(self, service: ServiceCluster, runner: SimRunner, mgr: TieredManager, remote: Path) -> None:
        self.service, self.runner, self.mgr, self.remote = service, runner, mgr, remote
        self.bootstrap = runner.endpoints["clusters"][CLUSTER]["bootstrap_servers"]
        self.client = TieredClient(service.grpc_addresses, service.token)
        self.admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10000)

    def call(self, fn: Callable[[], Any]) -> Any:
        return self.runner.call(fn)

    def create(self, name: str, configs: dict[str, str], assignment: list[int] | None = None,
               rate: float = 0.0) -> str:
        topic = NewTopic(name, 1, 2, topic_configs={"remote.storage.enable": "true", **configs}) if not assignment \
            else NewTopic(name, -1, -1, replica_assignments={0: assignment},
                          topic_configs={"remote.storage.enable": "true", **configs})
        self.admin.create_topics([topic])
        cl = self.runner.server.fed.clusters[CLUSTER]

        def traffic() -> str:
            p = cl.partition(name, 0)
            self.runner.server.fed.engine.f["base_rate"][p.slot] = rate
            return kafka_topic_id(cl.topics[name].topic_id)
        return str(self.call(traffic))

    def log(self, name: str) -> Any:
        cl = self.runner.server.fed.clusters[CLUSTER]
        return self.call(lambda: self.mgr.log_of(cl, name, 0))

    def partition(self, name: str) -> Any:
        return self.call(lambda: self.runner.server.fed.clusters[CLUSTER].partition(name, 0))


def wait_for(pred: Callable[[], Any], timeout: float = 60.0, what: str | Callable[[], str] = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what() if callable(what) else what}")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    base = tmp_path_factory.mktemp("tiered-sim")
    service = ServiceCluster(base / "svc", size=1, tiered=True)
    service.start_all()
    runner: SimRunner | None = None
    try:
        service.wait_up(60)
        probe = TieredClient(service.grpc_addresses, service.token)
        wait_for(lambda: _answers(probe), 60, "the tiered service")
        probe.close()
        fed = build_federation(SPEC)
        mgr = TieredManager(fed, TieredSettings(tuple(service.grpc_addresses), service.token, base / "remote",
                                                follower_tail_s=2.0))
        runner = SimRunner(fed, tiered=mgr)
        runner.start()
        e = Env(service, runner, mgr, base / "remote")
        yield e
        e.admin.close()
        e.client.close()
    finally:
        if runner is not None:
            runner.stop()
        service.close()


def _answers(client: TieredClient) -> bool:
    try:
        client.list_partitions(limit=1)
        return True
    except grpc.RpcError:
        return False


def test_groups_recorded_under_traffic(env: Env) -> None:
    tid = env.create("orders-t", {"segment.bytes": "200000", "local.retention.bytes": "400000"}, rate=150_000.0)
    producer = KafkaProducer(bootstrap_servers=env.bootstrap, acks="all", linger_ms=5)
    for i in range(300):
        producer.send("orders-t", key=b"k%d" % i, value=b"v" * 300 + b"%d" % i)
    producer.flush(30)
    producer.close()
    groups = wait_for(lambda: (g := env.client.all_groups(CLUSTER, tid, 0)) and len(g) >= 8 and g, 60,
                      "8 groups in the service")
    ids = [g.group_id for g in groups]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    started = [e.segment_id for g in groups for e in g.events if e.kind == COPY_STARTED]
    finished = [e.segment_id for g in groups for e in g.events if e.kind == COPY_FINISHED]
    assert started == sorted(started) and len(set(started)) == len(started) and set(finished) <= set(started)
    epoch = env.partition("orders-t").leader_epoch
    assert {g.leader_epoch for g in groups} == {epoch}
    for g in groups:  # a group is one kind of event: the copy's start, then (after the upload) its finish
        assert len({e.kind for e in g.events}) == 1
    # each finished segment is a file in the remote store, of the size the service recorded
    state = env.client.current_state(CLUSTER, tid, 0)
    done = [s for s in state.segments if s.state == COPY_FINISHED]
    assert done and all((env.remote / s.remote_path).exists() for s in done)
    assert state.state.remote_bytes == sum(s.size_bytes for s in done)
    # DescribeLogDirs reports the local size (what Guardian's executor estimates moves from), not the total
    lg = wait_for(lambda: (x := env.log("orders-t")) and x.local_start > 0 and x, 60, "local retention")
    leader = env.partition("orders-t").leader
    dirs = env.admin.describe_log_dirs({"orders-t": [0]}, brokers=[leader])[0]["log_dirs"]
    (size,) = [p["partition_size"] for d in dirs for t in d["topics"] for p in t["partitions"]]
    slot = env.partition("orders-t").slot
    total = env.call(lambda: float(env.runner.server.fed.engine.f["bytes_in_total"][slot]))
    assert lg.local_start > 0 and size < 0.8 * total and size >= 400_000


def test_consumer_from_zero_reads_remote_bytes(env: Env) -> None:
    env.create("bytes-t", {"segment.bytes": "20000", "local.retention.bytes": "40000"})
    values = [(b"key-%05d" % i, bytes([i % 251]) * 400 + b"-%05d" % i) for i in range(500)]
    producer = KafkaProducer(bootstrap_servers=env.bootstrap, acks="all", linger_ms=0, batch_size=4096)
    for k, v in values:
        producer.send("bytes-t", key=k, value=v)
    producer.flush(30)
    producer.close()
    lg = wait_for(lambda: (x := env.log("bytes-t")) and x.local_start > 100 and
                  sum(s.state == COPIED and not s.local for s in x.segments) >= 5 and x, 60,
                  lambda: f"remote-only segments (have {env.log('bytes-t').segments}, {dict(env.mgr.stats)})")
    before = env.mgr.stats["remote_fetches"]
    consumer = KafkaConsumer(bootstrap_servers=env.bootstrap, enable_auto_commit=False, consumer_timeout_ms=15000)
    tp = TopicPartition("bytes-t", 0)
    consumer.assign([tp])
    assert consumer.beginning_offsets([tp])[tp] == 0  # the log start: the data is still readable (remote)
    consumer.seek(tp, 0)
    got: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 60
    while len(got) < len(values) and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=1000).values():
            got.extend((r.key, r.value) for r in recs)
    consumer.close()
    assert got == values
    assert env.mgr.stats["remote_fetches"] > before
    # the remote file is the broker's own log bytes (v2 batches as stored), byte for byte
    seg = next(s for s in lg.segments if s.state == COPIED and not s.local)
    part = env.partition("bytes-t")
    stored = env.call(lambda: b"".join(b[3] for b in part.batches if seg.base <= b[0] <= seg.end))
    assert (env.remote / seg.remote_path).read_bytes() == stored


def test_deposed_leaders_append_is_refused(env: Env) -> None:
    tid = env.create("fence-t", {"segment.bytes": "5000"})
    env.mgr.pause()
    try:
        producer = KafkaProducer(bootstrap_servers=env.bootstrap, acks="all")
        for i in range(20):
            producer.send("fence-t", value=b"f" * 1000 + b"%d" % i)
        producer.flush(30)
        producer.close()
        wait_for(lambda: any(s.state == COPYING for s in env.log("fence-t").segments), 30, "a queued copy")
        part = env.partition("fence-t")  # the live object: read its fields on the loop thread
        old_leader, old_epoch = env.call(lambda: (part.leader, part.leader_epoch))
        env.call(lambda: env.runner.server.kill_broker(CLUSTER, old_leader))
        wait_for(lambda: env.call(lambda: part.leader_epoch) > old_epoch, 10, "a new leader")
        time.sleep(1.5)  # a tick re-queues the segments under the new epoch, ahead of the old job
    finally:
        env.mgr.resume()
    new_epoch = env.call(lambda: part.leader_epoch)
    wait_for(lambda: all(s.state == COPIED for s in env.log("fence-t").segments), 60, "the copies")
    assert env.mgr.stats["fenced"] >= 1
    groups = env.client.all_groups(CLUSTER, tid, 0)
    assert groups and {g.leader_epoch for g in groups} == {new_epoch}
    with pytest.raises(grpc.RpcError) as err:  # what the deposed leader would send now
        env.client.append_group(CLUSTER, tid, 0, old_epoch, [dict(
            kind=COPY_STARTED, start_offset=10_000, end_offset=10_010, leader_epoch=old_epoch)])
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    env.call(lambda: env.runner.server.revive_broker(CLUSTER, old_leader))


def test_move_copies_only_the_local_tail(env: Env) -> None:
    env.create("move-t", {"segment.bytes": "2000000", "local.retention.bytes": "6000000",
                          "follower.replication.throttled.replicas": "*"}, assignment=[1, 2], rate=2_000_000.0)
    wait_for(lambda: (x := env.log("move-t")) and sum(s.state == COPIED and not s.local for s in x.segments) >= 8,
             90, "16+ MB in remote")
    env.admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "4", configs={
        "follower.replication.throttled.rate": "10000000"})], raise_on_unknown=False)
    eng = env.runner.server.fed.engine
    cl = env.runner.server.fed.clusters[CLUSTER]
    dirs = env.admin.describe_log_dirs({"move-t": [0]}, brokers=[1])[0]["log_dirs"]
    (local,) = [p["partition_size"] for d in dirs for t in d["topics"] for p in t["partitions"]]
    total0, copied0 = env.call(lambda: (float(eng.f["bytes_in_total"][cl.partition("move-t", 0).slot]),
                                        float(eng.b_reassign_in_total[cl.brokers[4].gidx])))
    t0 = env.call(lambda: eng.t)
    env.admin.alter_partition_reassignments({TopicPartition("move-t", 0): [4, 2]})
    wait_for(lambda: env.partition("move-t").replicas == [4, 2], 60, "the move")
    copied, t1 = env.call(lambda: (float(eng.b_reassign_in_total[cl.brokers[4].gidx]) - copied0, eng.t))
    start = env.mgr.starts.get((("tc", cl.topics["move-t"].topic_id, 0), 4))
    assert start is not None
    # the new replica copied the local tail (at most the local size + what arrived during the move),
    # not the log's history (all of it is in remote storage)
    assert local < 10_000_000 and total0 > 3 * local
    assert copied <= local + 2_000_000 * (t1 - t0) * 1.5 + 1_000_000
    assert copied < 0.5 * total0


def test_kafkasim_up_tiers_through_a_service_named_on_the_command_line(env: Env, tmp_path: Path) -> None:
    token = tmp_path / "tiered.token"
    token.write_text(env.service.token + "\n")
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"seed": 3, "speed": 1.0, "tick_seconds": 1.0, "clusters": [
        {"name": "cli", "brokers": [{"count": 3, "idcs": ["a"], "racks_per_idc": 1, "memory_gb": 4,
                                     "disks": [{"count": 1, "kind": "ssd"}]}], "topics": []}]}))
    eps = tmp_path / "endpoints.json"
    args = [sys.executable, "-m", "kafkasim", "up", "--scenario", str(scenario), "--endpoints-file", str(eps),
            "--remote-dir", str(tmp_path / "remote"), "--tiered-token-file", str(token), "--duration", "60"]
    for a in env.service.grpc_addresses:
        args += ["--tiered-address", a]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        bootstrap = json.loads(proc.stdout.readline())["clusters"]["cli"]["bootstrap_servers"]
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        admin.create_topics([NewTopic("logs-t", 1, 2, topic_configs={"remote.storage.enable": "true",
                                                                       "segment.bytes": "100000"})])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        for i in range(200):
            producer.send("logs-t", value=b"v" * 1000 + b"%d" % i)
        producer.flush(30)
        producer.close()
        parts = wait_for(lambda: [p for p in env.client.list_partitions("cli") if p.groups > 0], 60,
                         "the CLI-started simulator's partition in the service")
        assert parts and (tmp_path / "remote").exists()
    finally:
        proc.terminate()
        proc.wait(15)
    missing = subprocess.run([sys.executable, "-m", "kafkasim", "up", "--tiered-address", "127.0.0.1:1"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "--tiered-token-file" in missing.stderr
