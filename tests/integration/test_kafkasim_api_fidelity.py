"""The APIs kafka-python 3.x's clients send, against kafkasim: each is advertised and answered, or not advertised —
then kafka-python refuses it before sending (IncompatibleBrokerVersion) and a client that sends it anyway gets an
UNSUPPORTED_VERSION answer on a connection that stays open.  This file pins kafkasim/README.md's table
"Fidelity: APIs kafka-python sends" (the answered rows have their own tests, named in the table).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import IncompatibleBrokerVersion
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.structs import OffsetAndMetadata

from kafkasim.broker.wire import REGISTRY, min_version
from tests.support.kafkasim_support import Sim, start_sim

ANSWERED = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
            10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
            15: "DescribeGroups", 16: "ListGroups", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
            22: "InitProducerId", 23: "OffsetForLeaderEpoch", 32: "DescribeConfigs", 33: "AlterConfigs",
            34: "AlterReplicaLogDirs", 35: "DescribeLogDirs", 37: "CreatePartitions", 42: "DeleteGroups",
            43: "ElectLeaders", 44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments",
            46: "ListPartitionReassignments", 48: "DescribeClientQuotas", 49: "AlterClientQuotas",
            60: "DescribeCluster"}
"""Advertised on every listener (SaslHandshake 17 and SaslAuthenticate 36 too on SASL listeners)."""
REFUSED = {21: "DeleteRecords", 24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn",
           27: "WriteTxnMarkers", 28: "TxnOffsetCommit", 29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls",
           47: "OffsetDelete", 50: "DescribeUserScramCredentials", 51: "AlterUserScramCredentials",
           55: "DescribeQuorum", 57: "UpdateFeatures", 61: "DescribeProducers", 65: "DescribeTransactions",
           66: "ListTransactions", 74: "ListConfigResources", 75: "DescribeTopicPartitions"}
"""kafka-python sends these (admin methods, transactional producers); kafkasim does not advertise them."""


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    with start_sim(realistic=False) as s:
        yield s


def _frame(req: Any, cid: int) -> bytes:
    req.with_header(correlation_id=cid, client_id="raw")
    return bytes(req.encode(header=True, framed=True))


def _read(s: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            assert chunk, "kafkasim closed the connection"
            buf += chunk
        return buf

    (size,) = struct.unpack(">i", exact(4))
    return struct.pack(">i", size) + exact(size)


def _connect(sim: Sim) -> socket.socket:
    b = sim.endpoints["clusters"]["east"]["brokers"][0]
    return socket.create_connection((b["host"], b["port"]), timeout=10)


def test_api_versions_advertises_exactly_the_answered_apis(sim: Sim) -> None:
    with _connect(sim) as s:
        s.sendall(_frame(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 1))
        resp = ApiVersionsResponse.decode(_read(s), version=3, header=True, framed=True)
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert set(got) == set(ANSWERED)
    assert got[23] == (2, 4)
    assert not set(got) & set(REFUSED)


@pytest.mark.parametrize("key", sorted(REFUSED), ids=lambda k: REFUSED[k])
def test_an_unadvertised_api_gets_unsupported_version_and_the_connection_stays(sim: Sim, key: int) -> None:
    req_cls, resp_cls = REGISTRY[key]["request"], REGISTRY[key]["response"]
    version = min_version(key)
    with _connect(sim) as s:
        s.sendall(_frame(req_cls(version=version), 7))
        frame = _read(s)
        assert struct.unpack_from(">i", frame, 4)[0] == 7
        resp = resp_cls.decode(frame, version=version, header=True, framed=True)
        if any(f.name == "error_code" and f.for_version_q(version) for f in resp_cls._struct._fields):
            assert resp.error_code == 35  # UNSUPPORTED_VERSION
        s.sendall(_frame(ApiVersionsRequest(version=0), 8))  # the same connection still serves
        assert struct.unpack_from(">i", _read(s), 4)[0] == 8


def test_kafka_python_refuses_unadvertised_apis_without_sending_them(sim: Sim) -> None:
    admin = KafkaAdminClient(bootstrap_servers=sim.bootstrap("east"), request_timeout_ms=10000)
    calls = {
        "DeleteRecords": lambda: admin.delete_records({TopicPartition("orders", 0): 0}),
        "ListTransactions": lambda: admin.list_transactions(),
        "DescribeTopicPartitions": lambda: admin.describe_topic_partitions(["orders"]),
        "DescribeUserScramCredentials": lambda: admin.describe_user_scram_credentials(),
    }

    def counts() -> dict[str, int]:
        out: dict[str, int] = {}
        for per_broker in sim.server.requests.values():
            for name, n in per_broker.items():
                out[name] = out.get(name, 0) + n
        return out

    try:
        before: dict[str, int] = sim.call(counts)
        for call in calls.values():
            with pytest.raises(IncompatibleBrokerVersion):
                call()
        after: dict[str, int] = sim.call(counts)
        assert {name: after.get(name, 0) - before.get(name, 0) for name in calls} == dict.fromkeys(calls, 0)
        assert admin.describe_cluster()["cluster_id"]  # the client is still healthy
    finally:
        admin.close()


def test_an_idempotent_producer_gets_a_producer_id_and_a_group_is_deleted(sim: Sim) -> None:
    """InitProducerId (kafka-python's producer is idempotent by default since KIP-679) and DeleteGroups (an emptied
    real group; a simulated group is refused as NON_EMPTY_GROUP, an unknown one as GROUP_ID_NOT_FOUND)."""
    bs = sim.bootstrap("east")
    producer = KafkaProducer(bootstrap_servers=bs)
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=10000)
    try:
        producer.send("orders", b"x", partition=0).get(10)
        assert producer._transaction_manager.producer_id_and_epoch.producer_id >= 1000
        consumer = KafkaConsumer(bootstrap_servers=bs, group_id="fidelity-g", enable_auto_commit=False)
        consumer.assign([TopicPartition("orders", 0)])
        consumer.commit({TopicPartition("orders", 0): OffsetAndMetadata(1, "", -1)})
        consumer.close()
        assert "fidelity-g" in {g["group_id"] for g in admin.list_groups()}
        got = admin.delete_groups(["fidelity-g", "orders-consumer-tail-1", "nope"])
        assert got == {"fidelity-g": "OK", "orders-consumer-tail-1": "NonEmptyGroupError",
                       "nope": "GroupIdNotFoundError"}
        assert "fidelity-g" not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()
        producer.close()
