"""kafkasim's group coordinator over real TCP: consumer groups and committed offsets the way Kafka's own
admin API serves them (kafka-python's KafkaAdminClient and KafkaConsumer, confluent-kafka's AdminClient)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import NoError, UnknownMemberIdError
from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.consumer.offsets import OffsetSpec
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.structs import OffsetAndMetadata

from kafkasim.broker.groups import coordinator, offsets_partition
from kafkasim.broker.server import SimRunner
from kafkasim.observe.exporters import MetricsConfig
from tests.support.kafkasim_support import http_json, http_text, start_sim

SPEC: dict[str, Any] = {
    "seed": 5, "speed": 1.0, "tick_seconds": 1.0,
    "clusters": [
        {"name": "east",
         "broker_configs": {"log.retention.check.interval.ms": "5000"},  # quick retention (Kafka: 300000)
         "brokers": [{"count": 4, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 2, "memory_gb": 16,
                      "disks": [{"count": 2, "kind": "ssd"}]}],
         "topics": [
             {"name": "orders", "partitions": 4, "rf": 3, "bytes_in_per_s": 400_000, "size_gb": 1,
              "tail_groups": 2, "consumer": {"client_id": "billing", "ip": "10.9.8.7"}},
             {"name": "clicks", "partitions": 2, "rf": 2, "bytes_in_per_s": 1_000_000, "size_gb": 2,
              "tail_groups": 0, "lag_bytes": 200_000_000, "lag_rate": 5_000_000,
              "configs": {"retention.ms": "600000"}}]},
        {"name": "west",
         "brokers": [{"count": 2, "idcs": ["idc-c"], "racks_per_idc": 2, "memory_gb": 8,
                      "disks": [{"count": 1, "kind": "ssd"}]}],
         "topics": [{"name": "logs", "partitions": 2, "rf": 2, "bytes_in_per_s": 100_000, "tail_groups": 1}]},
    ],
}
EAST_GROUPS = {"billing-tail-1", "billing-tail-2", "clicks-consumer"}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRunner]:
    # frozen clock: simulated time moves only with advance(); the legacy endpoint (its consumer lag series)
    runner = start_sim(SPEC, realistic=False, speed=0.0, metrics=MetricsConfig(realistic=False))
    advance(runner, 10)  # retention moves the log start of "clicks" past 0
    yield runner
    runner.stop()


@pytest.fixture(scope="module")
def admin(sim: SimRunner) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=bs(sim), request_timeout_ms=10000)
    yield a
    a.close()


def bs(sim: SimRunner, cluster: str = "east") -> str:
    return str(sim.endpoints["clusters"][cluster]["bootstrap_servers"])


def advance(sim: SimRunner, seconds: float) -> None:
    sim.call(lambda: sim.server.fed.engine.advance(seconds, 1.0))


def lag_messages(sim: SimRunner, topic: str, partition: int) -> int:
    """The engine's own lag of the lagging consumer, in messages."""
    def read() -> int:
        eng = sim.server.fed.engine
        slot = sim.server.fed.clusters["east"].topics[topic].partitions[partition].slot
        return int(float(eng.f["lag"][slot]) / float(eng.f["msg_size"][slot]))
    return int(sim.call(read))


def wire_offsets(admin: KafkaAdminClient, tps: list[TopicPartition], spec: OffsetSpec) -> dict[TopicPartition, int]:
    got = admin.list_partition_offsets({tp: spec for tp in tps})
    return {tp: int(o.offset) for tp, o in got.items()}


def test_admin_lists_the_simulated_groups_each_on_its_coordinator(sim: SimRunner, admin: KafkaAdminClient) -> None:
    groups = admin.list_groups()
    assert {g["group_id"] for g in groups} == EAST_GROUPS  # west's "logs-consumer-tail-1" is another cluster
    assert len(groups) == len(EAST_GROUPS)  # each listed by exactly one broker
    assert all(g["protocol_type"] == "consumer" and g["group_state"] == "Stable" for g in groups)
    cl = sim.server.fed.clusters["east"]
    coordinators = sim.call(lambda: {gid: coordinator(cl, gid) for gid in EAST_GROUPS})
    for bid in (1, 2, 3, 4):
        mine = {g["group_id"] for g in admin.list_groups(broker_ids=[bid])}
        assert mine == {gid for gid, b in coordinators.items() if b.id == bid}
    assert [g["group_id"] for g in admin.list_groups(states_filter=["Empty"])] == []
    with KafkaAdminClient(bootstrap_servers=bs(sim, "west"), request_timeout_ms=10000) as west:
        assert {g["group_id"] for g in west.list_groups()} == {"logs-consumer-tail-1"}


def test_describe_shows_the_simulated_consumer_as_the_member(admin: KafkaAdminClient) -> None:
    d = admin.describe_groups(sorted(EAST_GROUPS))
    for gid in ("billing-tail-1", "billing-tail-2"):
        g = d[gid]
        assert (g["error"], g["group_state"], g["protocol_type"], g["protocol_data"]) == (None, "Stable", "consumer",
                                                                                        "range")
        (member,) = g["members"]
        assert (member["client_id"], member["client_host"]) == ("billing", "/10.9.8.7")
        assert member["member_metadata"]["topics"] == ["orders"]
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": "orders", "partitions": [0, 1, 2, 3]}]
    (member,) = d["clicks-consumer"]["members"]
    assert member["client_id"] == "clicks-consumer"
    assert member["member_assignment"]["assigned_partitions"] == [{"topic": "clicks", "partitions": [0, 1]}]
    assert admin.describe_groups(["nobody"])["nobody"]["group_state"] == "Dead"


def test_committed_offsets_match_the_engine(sim: SimRunner, admin: KafkaAdminClient) -> None:
    offsets = admin.list_group_offsets({gid: None for gid in EAST_GROUPS})
    orders = [TopicPartition("orders", i) for i in range(4)]
    clicks = [TopicPartition("clicks", i) for i in range(2)]
    leo = wire_offsets(admin, orders + clicks, OffsetSpec.LATEST)
    start = wire_offsets(admin, clicks, OffsetSpec.EARLIEST)
    for gid in ("billing-tail-1", "billing-tail-2"):  # tailing groups commit the log end offset
        assert {tp: o.offset for tp, o in offsets[gid].items()} == {tp: leo[tp] for tp in orders}
    lagging = offsets["clicks-consumer"]
    assert set(lagging) == set(clicks)
    for tp in clicks:
        assert leo[tp] - lagging[tp].offset == lag_messages(sim, tp.topic, tp.partition)  # the engine's lag
        assert start[tp] > 0  # retention (10 min) already removed the oldest records ...
        assert start[tp] < lagging[tp].offset < leo[tp]  # ... but not what the laggard still has to read
    # ListOffsets serves the engine's log start (after retention) and log end
    slot_offsets = sim.call(lambda: [sim.server.fed.engine.partition_offsets(p.slot)
                                     for p in sim.server.fed.clusters["east"].topics["clicks"].partitions])
    assert [(start[tp], leo[tp]) for tp in clicks] == slot_offsets


def test_a_lagging_consumer_commits_at_its_consumption_rate(sim: SimRunner, admin: KafkaAdminClient) -> None:
    tp = TopicPartition("clicks", 0)
    before = admin.list_group_offsets({"clicks-consumer": [tp]})["clicks-consumer"][tp].offset
    lag_before = lag_messages(sim, "clicks", 0)
    advance(sim, 20)
    after = admin.list_group_offsets({"clicks-consumer": [tp]})["clicks-consumer"][tp].offset
    leo = wire_offsets(admin, [tp], OffsetSpec.LATEST)[tp]
    msg = sim.call(lambda: float(sim.server.fed.engine.f["msg_size"][
        sim.server.fed.clusters["east"].topics["clicks"].partitions[0].slot]))
    assert after - before == pytest.approx(5_000_000 * 20 / msg, rel=0.02)  # lag_rate, served from the page cache
    assert 0 < leo - after == lag_messages(sim, "clicks", 0) < lag_before  # catching up: producers write 0.5 MB/s


def test_a_real_consumer_commits_with_assign(sim: SimRunner, admin: KafkaAdminClient) -> None:
    tp, other = TopicPartition("orders", 1), TopicPartition("orders", 2)
    c = KafkaConsumer(bootstrap_servers=bs(sim), group_id="audit-app", enable_auto_commit=False,
                      client_id="auditor", request_timeout_ms=10000)
    try:
        c.assign([tp, other])
        c.commit({tp: OffsetAndMetadata(1234, "checkpoint", -1), other: OffsetAndMetadata(99, None, -1)})
        assert c.committed(tp) == 1234
    finally:
        c.close()
    got = admin.list_group_offsets({"audit-app": None})["audit-app"]
    assert {k: (v.offset, v.metadata) for k, v in got.items()} == {tp: (1234, "checkpoint"), other: (99, None)}
    assert admin.list_group_offsets({"audit-app": [TopicPartition("orders", 3)]})["audit-app"][
        TopicPartition("orders", 3)].offset == -1  # never committed
    listed = {g["group_id"]: g for g in admin.list_groups()}
    assert (listed["audit-app"]["group_state"], listed["audit-app"]["protocol_type"]) == ("Empty", "")
    assert admin.describe_groups(["audit-app"])["audit-app"]["members"] == []
    # a later commit overwrites; an unknown partition is refused; a simulated group is not a client's to commit to
    res = admin.alter_group_offsets("audit-app", {tp: OffsetAndMetadata(2000, "", -1),
                                                  TopicPartition("orders", 9): OffsetAndMetadata(1, "", -1)})
    assert res[tp] is NoError and res[TopicPartition("orders", 9)] is not NoError
    assert admin.list_group_offsets({"audit-app": [tp]})["audit-app"][tp].offset == 2000
    res = admin.alter_group_offsets("billing-tail-1", {tp: OffsetAndMetadata(5, "", -1)})
    assert res[tp] is UnknownMemberIdError


def test_subscribed_consumers_join_share_and_leave(sim: SimRunner, admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("jobs", 2, 1)])
    def listed() -> bool:
        return any(t.get("name", t.get("topic")) == "jobs" and len(t["partitions"]) == 2
                   for t in admin.describe_topics(["jobs"]))

    deadline = time.monotonic() + 20  # in the metadata before anyone subscribes: a group leader that assigns
    while time.monotonic() < deadline and not listed():  # before its client has the partitions assigns none
        time.sleep(0.2)

    def consumer(name: str) -> KafkaConsumer:
        c = KafkaConsumer(bootstrap_servers=bs(sim), group_id="workers", client_id=name, enable_auto_commit=False,
                          auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=300,
                          request_timeout_ms=10000)
        c.subscribe(["jobs"])
        return c

    def poll_until(cs: list[KafkaConsumer], done: Any, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            for c in cs:
                c.poll(100)
        assert done()

    a = consumer("worker-a")
    b: KafkaConsumer | None = None
    try:
        poll_until([a], lambda: len(a.assignment()) == 2)
        a.commit({TopicPartition("jobs", 0): OffsetAndMetadata(0, "", -1)})
        b = consumer("worker-b")
        poll_until([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1 if b else False)
        assert a.assignment() | b.assignment() == {TopicPartition("jobs", 0), TopicPartition("jobs", 1)}
        d = admin.describe_groups(["workers"])["workers"]
        assert d["group_state"] == "Stable" and d["protocol_type"] == "consumer"
        assert sorted(m["client_id"] for m in d["members"]) == ["worker-a", "worker-b"]
        b.close()
        b = None
        poll_until([a], lambda: len(a.assignment()) == 2)  # b left: a owns both partitions again
    finally:
        for c in (a, b):
            if c is not None:
                c.close()
    assert admin.describe_groups(["workers"])["workers"]["group_state"] == "Empty"
    assert admin.list_group_offsets({"workers": None})["workers"][TopicPartition("jobs", 0)].offset == 0


def _frame(req: Any, cid: int) -> bytes:
    req.with_header(correlation_id=cid, client_id="raw")
    return bytes(req.encode(header=True, framed=True))


def _call(host: str, port: int, req: Any, resp_cls: Any) -> Any:
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(_frame(req, 7))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
            chunk = s.recv(65536)
            assert chunk, "socket closed by kafkasim"
            buf += chunk
    return resp_cls.decode(buf[4:], version=req.API_VERSION, header=True)


def test_non_coordinators_answer_not_coordinator(sim: SimRunner) -> None:
    brokers = sim.endpoints["clusters"]["east"]["brokers"]
    av = _call(brokers[0]["host"], brokers[0]["port"], ApiVersionsRequest(version=3, client_software_name="t",
                                                                           client_software_version="1"),
               ApiVersionsResponse)
    keys = {k.api_key: k.max_version for k in av.api_keys}
    assert {8, 9, 10, 11, 12, 13, 14, 15, 16, 42} <= set(keys) and 47 not in keys  # OffsetDelete: not answered
    fc = _call(brokers[0]["host"], brokers[0]["port"],
               FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=["clicks-consumer"]),
               FindCoordinatorResponse)
    (row,) = fc.coordinators
    assert row.error_code == 0
    assert row.node_id == [1, 2, 3, 4][offsets_partition("clicks-consumer") % 4]
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    for b in brokers:
        req = OffsetFetchRequest(version=8, groups=[G(group_id="clicks-consumer", topics=None)], require_stable=False)
        r = _call(b["host"], b["port"], req, OffsetFetchResponse)
        (g,) = r.groups
        if b["id"] == row.node_id:
            assert g.error_code == 0 and {t.name for t in g.topics} == {"clicks"}
        else:
            assert g.error_code == 16 and g.topics == []  # NOT_COORDINATOR


def test_confluent_admin_lists_describes_and_fetches(sim: SimRunner) -> None:
    a = AdminClient({"bootstrap.servers": bs(sim)})
    listed = a.list_consumer_groups(request_timeout=10).result()
    assert listed.errors == []
    assert {g.group_id for g in listed.valid} >= EAST_GROUPS
    desc = a.describe_consumer_groups(["clicks-consumer"], request_timeout=10)["clicks-consumer"].result()
    cl = sim.server.fed.clusters["east"]
    assert desc.coordinator.id == sim.call(lambda: coordinator(cl, "clicks-consumer")).id
    assert [m.client_id for m in desc.members] == ["clicks-consumer"]
    fut = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("clicks-consumer")],
                                        request_timeout=10)["clicks-consumer"]
    got = {(tp.topic, tp.partition): tp.offset for tp in fut.result().topic_partitions}
    assert set(got) == {("clicks", 0), ("clicks", 1)} and all(o > 0 for o in got.values())


def test_coordinator_moves_when_its_broker_dies(sim: SimRunner) -> None:
    cl = sim.server.fed.clusters["east"]
    first = sim.call(lambda: coordinator(cl, "clicks-consumer")).id
    sim.call(lambda: sim.server.kill_broker("east", first))
    try:
        moved = sim.call(lambda: coordinator(cl, "clicks-consumer")).id
        assert moved != first
        port = next(b["port"] for b in sim.endpoints["clusters"]["east"]["brokers"] if b["id"] == moved)
        with KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=10000) as a:
            got = a.list_group_offsets({"clicks-consumer": None})["clicks-consumer"]
            assert set(got) == {TopicPartition("clicks", 0), TopicPartition("clicks", 1)}
            listed = a.list_groups()  # asks every alive broker
            ids = [g["group_id"] for g in listed]
            assert set(ids) >= EAST_GROUPS and len(ids) == len(set(ids))
    finally:
        sim.call(lambda: sim.server.revive_broker("east", first))
    assert sim.call(lambda: coordinator(cl, "clicks-consumer")).id == first  # deterministic: it moves back


def test_control_api_and_legacy_metrics_name_the_same_groups(sim: SimRunner, admin: KafkaAdminClient) -> None:
    report = http_json(sim.endpoints["control_url"] + "/groups?cluster=east")
    groups = report["groups"]
    assert set(groups) >= EAST_GROUPS
    clicks = groups["clicks-consumer"]
    assert (clicks["kind"], clicks["state"], clicks["members"]) == ("lagging", "Stable", ["clicks-consumer"])
    wire = admin.list_group_offsets({"clicks-consumer": None})["clicks-consumer"]
    assert clicks["offsets"] == {f"{tp.topic}:{tp.partition}": o.offset for tp, o in wire.items()}  # frozen clock
    assert clicks["lag"]["clicks:0"] == lag_messages(sim, "clicks", 0)
    assert groups["billing-tail-1"]["kind"] == "tail" and set(groups["billing-tail-1"]["lag"].values()) == {0}
    # the legacy endpoint's kafka_consumergroup_lag names the lagging group as the admin API does
    leader = sim.call(lambda: sim.server.fed.clusters["east"].topics["clicks"].partitions[0].leader)
    url = next(b["metrics_url"] for b in sim.endpoints["clusters"]["east"]["brokers"] if b["id"] == leader)
    line = next(x for x in http_text(url).splitlines()
                if x.startswith("kafka_consumergroup_lag{") and 'topic="clicks",partition="0"' in x)
    assert 'consumergroup="clicks-consumer"' in line and float(line.split()[-1]) == clicks["lag"]["clicks:0"]
