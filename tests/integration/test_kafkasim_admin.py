"""kafkasim driven over real TCP by kafka-python's KafkaAdminClient, producer and consumer."""

from __future__ import annotations

import functools
import socket
import struct
import time
import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import InvalidConfigurationError, InvalidReplicationAssignmentError, TopicAlreadyExistsError
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from kafkasim.broker.server import SimRunner
from tests.support.kafkasim_support import http_json, start_sim


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRunner]:
    runner = start_sim(realistic=False)
    yield runner
    runner.stop()


@pytest.fixture(scope="module")
def admin(sim: SimRunner) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=sim.endpoints["clusters"]["east"]["bootstrap_servers"],
                         request_timeout_ms=10000)
    yield a
    a.close()


def test_describe_cluster_and_metadata(sim: SimRunner, admin: KafkaAdminClient) -> None:
    d = admin.describe_cluster()
    assert sorted(b["broker_id"] for b in d["brokers"]) == [1, 2, 3, 4]
    assert {b["rack"] for b in d["brokers"]} == {"idc-a-r1", "idc-b-r1", "idc-a-r2", "idc-b-r2"}
    assert d["controller_id"] == 1
    assert "orders" in admin.list_topics()
    (t,) = admin.describe_topics(["orders"])
    assert len(t["partitions"]) == 4
    for p in t["partitions"]:
        assert len(p["replica_nodes"]) == 3 and p["leader_id"] == p["replica_nodes"][0]


def test_create_topic_with_assignments_and_configs(admin: KafkaAdminClient) -> None:
    nt = NewTopic("assigned", num_partitions=-1, replication_factor=-1,
                  replica_assignments={0: [1, 2], 1: [2, 3], 2: [4, 1]},
                  topic_configs={"retention.ms": "3600000"})
    admin.create_topics([nt])
    (t,) = admin.describe_topics(["assigned"])
    assert {p["partition_index"]: p["replica_nodes"] for p in t["partitions"]} == {0: [1, 2], 1: [2, 3], 2: [4, 1]}
    cfg = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "assigned")])
    assert cfg["topic"]["assigned"]["retention.ms"]["value"] == "3600000"
    assert cfg["topic"]["assigned"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("assigned", 1, 1)])
    with pytest.raises(InvalidReplicationAssignmentError):
        admin.create_topics([NewTopic("bad-assign", -1, -1, replica_assignments={0: [1, 99]})])
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics([NewTopic("bad-config", 1, 1, topic_configs={"no.such.key": "1"})])


def test_create_partitions_and_delete(admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("grow", 2, 2)])
    admin.create_partitions({"grow": NewPartitions(total_count=5)})
    (t,) = admin.describe_topics(["grow"])
    assert len(t["partitions"]) == 5
    admin.delete_topics(["grow"])
    assert "grow" not in admin.list_topics()


def test_alter_configs_topic_broker_and_partition_throttle(sim: SimRunner, admin: KafkaAdminClient) -> None:
    # raise_on_unknown=False: Kafka (and kafkasim) flag the throttle rates read-only, which kafka-python's client-side
    # check takes for "unknown" (tests/contract/test_configs.py)
    admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "2",
                                        configs={"follower.replication.throttled.rate": "10000000"})],
                        raise_on_unknown=False)
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "orders",
                                        configs={"leader.replication.throttled.replicas": "0:1,1:2"})])
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "orders", configs={
        "follower.replication.throttled.replicas": (AlterConfigOp.APPEND, "0:4")})])
    b = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "2")])["broker"]["2"]
    assert b["follower.replication.throttled.rate"]["value"] == "10000000"
    t = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "orders")])["topic"]["orders"]
    assert t["leader.replication.throttled.replicas"]["value"] == "0:1,1:2"
    assert t["follower.replication.throttled.replicas"]["value"] == "0:4"
    # the model saw it too
    cl = sim.server.fed.clusters["east"]
    assert sim.call(lambda: cl.broker_rate(2, "follower.replication.throttled.rate")) == 10_000_000
    # partition-level throttle: accepted on the capable cluster...
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "orders", configs={
        "guardian.partition.throttle.produce.bytes.per.second": "0:1000"})])
    all_b = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
    assert all_b["broker"]["1"]["guardian.partition.throttle.enable"]["value"] == "true"
    # ... and rejected by the vanilla one (raw IncrementalAlterConfigs: the broker says INVALID_CONFIG)
    west = KafkaAdminClient(bootstrap_servers=sim.endpoints["clusters"]["west"]["bootstrap_servers"])
    try:
        west.create_topics([NewTopic("w", 1, 1)])
        res = west.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "w", configs={
            "guardian.partition.throttle.produce.bytes.per.second": "0:1000"})], raise_on_unknown=False)
        assert res["topic"]["w"] is InvalidConfigurationError or "InvalidConfiguration" in str(res)
        all_w = west.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
        assert "guardian.partition.throttle.enable" not in all_w["broker"]["1"]
    finally:
        west.close()
    # bad broker config value
    res = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "2", configs={
        "leader.replication.throttled.rate": "fast"})], raise_on_unknown=False)
    assert "InvalidConfiguration" in str(res)


def test_log_dirs_describe_and_alter(sim: SimRunner, admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("moveme", -1, -1, replica_assignments={0: [3]})])
    dirs = admin.describe_log_dirs(brokers=[3])
    (entry,) = dirs
    assert entry["broker"] == 3
    paths = {d["log_dir"] for d in entry["log_dirs"]}
    assert paths == {"/data1", "/data2", "/data3"}
    cur = [d["log_dir"] for d in entry["log_dirs"] for t in d["topics"] if t["name"] == "moveme"]
    assert len(cur) == 1
    for d in entry["log_dirs"]:
        assert d["total_bytes"] > d["usable_bytes"] >= 0 or not d["topics"]
    cl = sim.server.fed.clusters["east"]
    slot = cl.topics["moveme"].partitions[0].slot
    sim.call(lambda: cl.engine.f["size"].__setitem__(slot, 400e6))
    target = next(p for p in sorted(paths) if p != cur[0])
    res = admin.alter_replica_log_dirs({("moveme", 0, 3): target})
    assert all(err.__name__ == "NoError" for err in res.values())
    dirs = admin.describe_log_dirs({"moveme": [0]}, brokers=[3])[0]["log_dirs"]
    fut = [(d["log_dir"], p["is_future_key"]) for d in dirs for t in d["topics"] for p in t["partitions"]]
    assert (target, True) in fut and (cur[0], False) in fut
    # a 400 MB copy at 100 MB/s (replica.alter.log.dirs.io.max.bytes.per.second) takes ~4 s
    admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "3", configs={
        "replica.alter.log.dirs.io.max.bytes.per.second": "100000000"})], raise_on_unknown=False)
    http_json(sim.endpoints["control_url"] + "/advance", {"seconds": 2, "dt": 1})
    assert sim.call(lambda: bool(cl.topics["moveme"].partitions[0].futures))
    http_json(sim.endpoints["control_url"] + "/advance", {"seconds": 4, "dt": 1})
    dirs = admin.describe_log_dirs({"moveme": [0]}, brokers=[3])[0]["log_dirs"]
    fut = [(d["log_dir"], p["is_future_key"]) for d in dirs for t in d["topics"] for p in t["partitions"]]
    assert fut == [(target, False)]
    res = admin.alter_replica_log_dirs({("moveme", 0, 3): "/nope"})
    assert [e.__name__ for e in res.values()] == ["LogDirNotFoundError"]


def test_reassignment_list_and_cancel(sim: SimRunner, admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("ra", -1, -1, replica_assignments={0: [1, 2], 1: [2, 3]})])
    cl = sim.server.fed.clusters["east"]
    for p in cl.topics["ra"].partitions:
        sim.call(functools.partial(cl.engine.f["size"].__setitem__, p.slot, 5e9))
    res = admin.alter_partition_reassignments({TopicPartition("ra", 0): [1, 3], TopicPartition("ra", 1): [4, 3]})
    assert res == {TopicPartition("ra", 0): None, TopicPartition("ra", 1): None}
    ongoing = admin.list_partition_reassignments()
    assert ongoing[TopicPartition("ra", 0)] == {"replicas": [1, 3, 2], "adding_replicas": [3],
                                                "removing_replicas": [2]}
    assert ongoing[TopicPartition("ra", 1)]["adding_replicas"] == [4]
    # cancel one with null replicas
    admin.alter_partition_reassignments({TopicPartition("ra", 1): None})
    ongoing = admin.list_partition_reassignments({"ra": [0, 1]})
    assert list(ongoing) == [TopicPartition("ra", 0)]
    (t,) = admin.describe_topics(["ra"])
    assert {p["partition_index"]: p["replica_nodes"] for p in t["partitions"]}[1] == [2, 3]
    res = admin.alter_partition_reassignments({TopicPartition("ra", 1): None})
    assert res[TopicPartition("ra", 1)].__name__ == "NoReassignmentInProgressError"
    # the identical target again while it is in flight is logged as a re-submission ("same")
    admin.alter_partition_reassignments({TopicPartition("ra", 0): [1, 3]})
    log = http_json(sim.endpoints["control_url"] + "/reassignments?cluster=east")
    mine = [(e["partition"], e["replicas"], e["effect"]) for e in log["log"] if e["topic"] == "ra"]
    assert mine == [(0, [1, 3], "start"), (1, [4, 3], "start"), (1, None, "cancel"), (0, [1, 3], "same")]
    assert log["counts"]["ra:0"] == {"submitted": 2, "cancelled": 0, "start": 1, "same": 1}
    # the second (refused) cancel is not logged: only accepted entries are
    assert log["counts"]["ra:1"] == {"submitted": 1, "cancelled": 1, "start": 1, "cancel": 1}
    later = http_json(sim.endpoints["control_url"] + f"/reassignments?cluster=east&since={log['seq'] - 1}")
    assert [e["seq"] for e in later["log"]] == [log["seq"]]
    with pytest.raises(urllib.error.HTTPError) as bad:
        http_json(sim.endpoints["control_url"] + "/reassignments?cluster=nope")
    assert bad.value.code == 404


def _retry(fn: Any, attempts: int = 20) -> Any:
    """Admin calls may hit the connection of a broker that was just killed; the client then reconnects."""
    from kafka.errors import KafkaConnectionError, NodeNotReadyError

    for i in range(attempts):
        try:
            return fn()
        except (KafkaConnectionError, NodeNotReadyError):
            if i == attempts - 1:
                raise
            time.sleep(0.2)
    return None


def test_preferred_election_after_broker_restart(sim: SimRunner, admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("lead", -1, -1, replica_assignments={0: [2, 1, 3]})])
    ctl = sim.endpoints["control_url"]
    http_json(ctl + "/fault/kill-broker", {"cluster": "east", "broker": 2})
    try:
        deadline = time.time() + 10
        leader = None
        while time.time() < deadline:
            (t,) = _retry(lambda: admin.describe_topics(["lead"]))
            leader = t["partitions"][0]["leader_id"]
            if leader != 2:
                break
            time.sleep(0.2)
        assert leader == 1
        assert 2 not in t["partitions"][0]["isr_nodes"]
    finally:
        http_json(ctl + "/fault/revive-broker", {"cluster": "east", "broker": 2})
    _retry(lambda: admin.elect_leaders(0, {"lead": [0]}))
    (t,) = _retry(lambda: admin.describe_topics(["lead"]))
    assert t["partitions"][0]["leader_id"] == 2


def _send(admin: KafkaAdminClient, request: Any) -> Any:
    async def go() -> Any:
        return await admin._manager.send(request)

    return admin._manager.run(go)


def test_client_quotas_through_protocol_layer(admin: KafkaAdminClient) -> None:
    E = AlterClientQuotasRequest.EntryData
    req = AlterClientQuotasRequest(entries=[E(
        entity=[E.EntityData(entity_type="client-id", entity_name="orders-svc")],
        ops=[E.OpData(key="producer_byte_rate", value=1_000_000.0, remove=False)])], validate_only=False)
    resp = _send(admin, req)
    assert [e.error_code for e in resp.entries] == [0]
    C = DescribeClientQuotasRequest.ComponentData
    resp = _send(admin, DescribeClientQuotasRequest(components=[C(entity_type="client-id", match_type=2)],
                                                    strict=False))
    assert resp.error_code == 0
    got = {(e.entity[0].entity_name, v.key): v.value for e in resp.entries for v in e.values}
    assert got == {("orders-svc", "producer_byte_rate"): 1_000_000.0}
    bad = AlterClientQuotasRequest(entries=[E(entity=[E.EntityData(entity_type="client-id", entity_name="x")],
                                              ops=[E.OpData(key="bogus_rate", value=1.0, remove=False)])],
                                   validate_only=False)
    assert _send(admin, bad).entries[0].error_code != 0


def test_produce_consume_round_trip_and_offsets(sim: SimRunner, admin: KafkaAdminClient) -> None:
    bs = sim.endpoints["clusters"]["east"]["bootstrap_servers"]
    admin.create_topics([NewTopic("rt", 2, 2)])
    prod = KafkaProducer(bootstrap_servers=bs)
    try:
        for i in range(50):
            prod.send("rt", key=str(i % 5).encode(), value=f"msg-{i}".encode(), partition=i % 2)
        prod.flush(10)
    finally:
        prod.close()
    cons = KafkaConsumer(bootstrap_servers=bs, consumer_timeout_ms=3000, auto_offset_reset="earliest",
                         enable_auto_commit=False)
    try:
        tps = [TopicPartition("rt", 0), TopicPartition("rt", 1)]
        cons.assign(tps)
        got = [(m.partition, m.offset, m.value) for m in cons]
        assert sorted(v for _, _, v in got) == sorted(f"msg-{i}".encode() for i in range(50))
        assert sorted(o for p, o, _ in got if p == 0) == list(range(25))
        assert cons.end_offsets(tps) == {tps[0]: 25, tps[1]: 25}
        assert cons.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
    finally:
        cons.close()


def _frame(req: Any, cid: int) -> bytes:
    req.with_header(correlation_id=cid, client_id="raw")
    return bytes(req.encode(header=True, framed=True))


def _read_frame(s: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            assert chunk, "socket closed by kafkasim"
            buf += chunk
        return buf

    size = struct.unpack(">i", exact(4))[0]
    return exact(size)


def test_pipelined_requests_and_unsupported_apis(sim: SimRunner) -> None:
    b = sim.endpoints["clusters"]["east"]["brokers"][0]
    with socket.create_connection((b["host"], b["port"]), timeout=10) as s:
        # three pipelined requests in one write, answered in order
        s.sendall(_frame(ApiVersionsRequest(version=0), 11) + _frame(MetadataRequest(version=1, topics=None), 12)
                  + _frame(ApiVersionsRequest(version=1), 13))
        r1, r2, r3 = (_read_frame(s) for _ in range(3))
        assert [struct.unpack_from(">i", r)[0] for r in (r1, r2, r3)] == [11, 12, 13]
        av = ApiVersionsResponse.decode(r1[4:], version=0)
        keys = {k.api_key for k in av.api_keys}
        assert {0, 1, 2, 3, 19, 20, 32, 33, 34, 35, 37, 43, 44, 45, 46, 48, 49, 60} <= keys
        md = MetadataResponse.decode(r2[4:], version=1)
        assert len(md.brokers) == 4
        # an API kafkasim does not implement (DescribeAcls, key 29) gets an error response, not a close
        from kafka.protocol.admin.acl import DescribeAclsRequest, DescribeAclsResponse

        s.sendall(_frame(DescribeAclsRequest(version=1, resource_type_filter=1, resource_name_filter=None,
                                             pattern_type_filter=1, principal_filter=None, host_filter=None,
                                             operation=1, permission_type=1), 14))
        r4 = _read_frame(s)
        assert struct.unpack_from(">i", r4)[0] == 14
        assert DescribeAclsResponse.decode(r4[4:], version=1).error_code == 35
        # an API key no schema knows: minimal error frame, connection stays usable
        s.sendall(struct.pack(">ihhi", 10, 999, 0, 15) + struct.pack(">h", -1))
        r5 = _read_frame(s)
        assert struct.unpack_from(">ih", r5) == (15, 35)
        s.sendall(_frame(ApiVersionsRequest(version=0), 16))
        assert struct.unpack_from(">i", _read_frame(s))[0] == 16


def test_producer_quota_slows_a_real_client(sim: SimRunner, admin: KafkaAdminClient) -> None:
    bs = sim.endpoints["clusters"]["east"]["bootstrap_servers"]
    admin.create_topics([NewTopic("quota-t", -1, -1, replica_assignments={0: [1]})])
    E = AlterClientQuotasRequest.EntryData
    resp = _send(admin, AlterClientQuotasRequest(entries=[E(
        entity=[E.EntityData(entity_type="client-id", entity_name="slowpoke")],
        ops=[E.OpData(key="producer_byte_rate", value=500_000.0, remove=False)])], validate_only=False))
    assert resp.entries[0].error_code == 0

    def produce(client_id: str) -> float:
        prod = KafkaProducer(bootstrap_servers=bs, client_id=client_id, batch_size=64 * 1024, linger_ms=5)
        try:
            prod.send("quota-t", value=b"w", partition=0).get(10)  # connect first
            t0 = time.perf_counter()
            for _ in range(150):
                prod.send("quota-t", value=b"z" * 10_000, partition=0)
            prod.flush(30)
            return time.perf_counter() - t0
        finally:
            prod.close()

    free = produce("speedy")
    slow = produce("slowpoke")  # 1.5 MB at 0.5 MB/s with a 1 s burst: >= ~2 s
    assert slow > 1.8  # the token bucket holds ~2 s of responses
    assert slow > free + 1.0


def test_simulated_traffic_is_readable(sim: SimRunner) -> None:
    bs = sim.endpoints["clusters"]["east"]["bootstrap_servers"]
    cons = KafkaConsumer(bootstrap_servers=bs, consumer_timeout_ms=3000, enable_auto_commit=False)
    try:
        tp = TopicPartition("orders", 2)
        cons.assign([tp])
        cons.seek_to_end(tp)
        end = cons.position(tp)
        assert end > 1000  # the scenario's initial log plus producer traffic
        cons.seek(tp, end - 300)
        got = []
        for m in cons:
            got.append(m)
            if len(got) >= 300:
                break
        assert [m.offset for m in got] == list(range(end - 300, end))
        assert {len(m.value) for m in got} == {1024}
        assert cons.beginning_offsets([tp])[tp] >= 0
    finally:
        cons.close()


def test_throttled_reassignment_over_the_wire(sim: SimRunner, admin: KafkaAdminClient) -> None:
    """10 GB moved under a 10 MB/s KIP-73 throttle: ~1,000 simulated seconds, then the new replica set."""
    admin.create_topics([NewTopic("wire-move", -1, -1, replica_assignments={0: [1, 2]})])
    cl = sim.server.fed.clusters["east"]
    slot = cl.topics["wire-move"].partitions[0].slot
    sim.call(lambda: cl.engine.f["size"].__setitem__(slot, 10e9))
    admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "4", configs={
        "follower.replication.throttled.rate": "10000000"})], raise_on_unknown=False)
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "wire-move", configs={
        "follower.replication.throttled.replicas": "0:4"})])
    admin.alter_partition_reassignments({TopicPartition("wire-move", 0): [1, 4]})
    ctl = sim.endpoints["control_url"]
    http_json(ctl + "/advance", {"seconds": 500, "dt": 5})
    assert TopicPartition("wire-move", 0) in admin.list_partition_reassignments()
    dirs = admin.describe_log_dirs({"wire-move": [0]}, brokers=[4])[0]["log_dirs"]
    (part,) = [p for d in dirs for t in d["topics"] for p in t["partitions"]]
    assert 4.5e9 < part["partition_size"] < 5.5e9 and part["offset_lag"] > 0
    http_json(ctl + "/advance", {"seconds": 560, "dt": 5})
    assert TopicPartition("wire-move", 0) not in admin.list_partition_reassignments()
    (t,) = admin.describe_topics(["wire-move"])
    assert t["partitions"][0]["replica_nodes"] == [1, 4]
    assert sorted(t["partitions"][0]["isr_nodes"]) == [1, 4]
    admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "4", configs={
        "follower.replication.throttled.rate": (AlterConfigOp.DELETE, None)})], raise_on_unknown=False)
    b4 = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "4")])["broker"]["4"]
    assert "follower.replication.throttled.rate" not in b4


def test_rack_aware_consumer_reads_from_same_rack_follower(sim: SimRunner, admin: KafkaAdminClient) -> None:
    """KIP-392: the leader names a same-rack in-sync replica and the consumer fetches from it."""
    bs = sim.endpoints["clusters"]["east"]["bootstrap_servers"]
    admin.create_topics([NewTopic("near", -1, -1, replica_assignments={0: [1, 2]})])
    cl = sim.server.fed.clusters["east"]
    rack2 = cl.brokers[2].rack
    assert cl.brokers[1].rack != rack2
    prod = KafkaProducer(bootstrap_servers=bs)
    try:
        for i in range(20):
            prod.send("near", value=b"n%d" % i, partition=0)
        prod.flush(10)
    finally:
        prod.close()
    g2 = cl.brokers[2].gidx
    before = sim.call(lambda: sim.server.requests.get(g2, {}).get("Fetch", 0))
    cons = KafkaConsumer(bootstrap_servers=bs, client_rack=rack2, consumer_timeout_ms=3000,
                         auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        cons.assign([TopicPartition("near", 0)])
        got = [m.value for m in cons]
    finally:
        cons.close()
    assert got == [b"n%d" % i for i in range(20)]
    after = sim.call(lambda: sim.server.requests.get(g2, {}).get("Fetch", 0))
    assert after > before


def test_legacy_alter_configs_replaces_the_dynamic_set(sim: SimRunner, admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("legacy", 1, 1, topic_configs={"retention.ms": "1000", "retention.bytes": "5"})])
    res = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "legacy", configs={"retention.ms": "2000"})],
                              incremental=False)
    assert res == {"topic": {"legacy": "OK"}}
    cfg = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "legacy")])["topic"]["legacy"]
    # kafka-python re-sends the other modified keys, as AlterConfigs resets omitted ones
    assert cfg["retention.ms"]["value"] == "2000" and cfg["retention.bytes"]["value"] == "5"
    cl = sim.server.fed.clusters["east"]
    assert sim.call(lambda: dict(cl.topics["legacy"].configs)) == {"retention.ms": "2000", "retention.bytes": "5"}
    # a raw AlterConfigs (API 33) resets every key it omits
    from kafka.protocol.admin.configs import AlterConfigsRequest

    R = AlterConfigsRequest.AlterConfigsResource
    resp = _send(admin, AlterConfigsRequest(resources=[R(resource_type=2, resource_name="legacy", configs=[
        R.AlterableConfig(name="retention.ms", value="3000")])], validate_only=False))
    assert [r.error_code for r in resp.responses] == [0]
    assert sim.call(lambda: dict(cl.topics["legacy"].configs)) == {"retention.ms": "3000"}


def test_garbage_frames_get_answers_and_the_broker_keeps_serving(sim: SimRunner) -> None:
    import random

    from kafkasim.broker.wire import REGISTRY

    rng = random.Random(42)
    keys = sorted(k for k, e in REGISTRY.items() if "response" in e and k != 0)  # acks=0 produce has no answer
    b = sim.endpoints["clusters"]["east"]["brokers"][2]
    with socket.create_connection((b["host"], b["port"]), timeout=10) as s:
        for cid in range(200):
            key = rng.choice(keys)
            ver = rng.randint(0, REGISTRY[key]["request"].max_version)
            body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
            payload = struct.pack(">hhih", key, ver, cid, 3) + b"abc" + body
            s.sendall(struct.pack(">i", len(payload)) + payload)
            resp = _read_frame(s)
            assert struct.unpack_from(">i", resp)[0] == cid
    # and it still answers a real client
    admin = KafkaAdminClient(bootstrap_servers=f"{b['host']}:{b['port']}")
    try:
        assert "orders" in admin.list_topics()
    finally:
        admin.close()
