"""kafkasim's protocol helpers and topology model: error paths and codecs."""

from __future__ import annotations

import math
import struct

import pytest

from kafkasim.broker.wire import REGISTRY, SUPPORTED, api_versions_list, encode_response, generic_error
from kafkasim.cluster import configs as kc
from kafkasim.cluster import model as m
from kafkasim.cluster.configs import parse_partition_rates, parse_throttled_replicas
from kafkasim.cluster.model import Cluster, SimError
from kafkasim.cluster.records import split_batches
from kafkasim.physics.engine import Engine
from tests.support.records import record_batch


def test_every_known_api_has_an_encodable_error_response() -> None:
    for key, entry in REGISTRY.items():
        if "response" not in entry:
            continue
        cls = entry["response"]
        for v in {0, cls.max_version}:
            frame = encode_response(generic_error(key, v, m.UNSUPPORTED_VERSION), v, 77)
            size, cid = struct.unpack_from(">ii", frame)
            assert size == len(frame) - 4 and cid == 77


def test_advertised_versions_are_within_kafka_python_schemas() -> None:
    for key, lo, hi in api_versions_list():
        assert key in SUPPORTED
        assert 0 <= lo <= hi <= REGISTRY[key]["request"].max_version


def _batch(n: int) -> bytes:
    return record_batch([b"v%d" % i for i in range(n)], timestamp_ms=[1000 + i for i in range(n)])


def test_split_batches_reads_counts_and_rejects_garbage() -> None:
    data = _batch(3) + _batch(2)
    parts = split_batches(data)
    assert [(c, d) for _, c, d, _ in parts] == [(3, 2), (2, 1)]
    assert parts[0][3] == 1002
    with pytest.raises(SimError) as e:
        split_batches(data[:-3])
    assert e.value.code == m.CORRUPT_MESSAGE
    bad = bytearray(_batch(1))
    bad[16] = 1  # magic v1
    with pytest.raises(SimError) as e:
        split_batches(bytes(bad))
    assert e.value.code == m.UNSUPPORTED_FOR_MESSAGE_FORMAT
    with pytest.raises(SimError):
        split_batches(b"\x00" * 10)


def cluster(capable: bool = False) -> Cluster:
    e = Engine(seed=0)
    c = Cluster("c", partition_throttle=capable)
    e.add_cluster(c)
    for i in (1, 2, 3):
        e.add_broker(c, i, "idc-a", f"r{i}", "shared", 8e9,
                     [{"path": f"/d{k}", "kind": "ssd", "capacity_bytes": 1e12, "max_bytes_per_s": 5e8,
                       "base_latency_ms": 0.5} for k in (1, 2)])
    e.rebuild()
    return c


def test_topic_validation_errors_carry_kafka_codes() -> None:
    c = cluster()
    cases = [
        (lambda: c.create_topic("bad name!", 1, 1), m.INVALID_TOPIC_EXCEPTION),
        (lambda: c.create_topic("t", 0, 1), m.INVALID_PARTITIONS),
        (lambda: c.create_topic("t", 1, 4), m.INVALID_REPLICATION_FACTOR),
        (lambda: c.create_topic("t", -1, -1, {0: [1, 1]}), m.INVALID_REPLICA_ASSIGNMENT),
        (lambda: c.create_topic("t", -1, -1, {1: [1]}), m.INVALID_REPLICA_ASSIGNMENT),
        (lambda: c.create_topic("t", 1, 1, configs={"retention.ms": "soon"}), m.INVALID_CONFIG),
        (lambda: c.create_topic("t", 1, 1, configs={kc.PT_FETCH: "0:1"}), m.INVALID_CONFIG),
        (lambda: c.create_partitions("nope", 3, None), m.UNKNOWN_TOPIC_OR_PARTITION),
        (lambda: c.alter_broker_configs("1", [("num.io.threads", 0, "9")]), m.INVALID_CONFIG),
        (lambda: c.alter_broker_configs("9", [("leader.replication.throttled.rate", 0, "1")]), m.INVALID_REQUEST),
        (lambda: c.alter_quota((("client-id", "x"),), "producer_byte_rate", math.nan), m.INVALID_REQUEST),
    ]
    for fn, code in cases:
        with pytest.raises(SimError) as e:
            fn()
        assert e.value.code == code, e.value.message
    assert "t" not in c.topics


def test_incremental_ops_append_subtract_delete() -> None:
    c = cluster()
    c.create_topic("t", 2, 2)
    key = "leader.replication.throttled.replicas"
    c.alter_topic_configs("t", [(key, 2, "0:1,1:2")])
    c.alter_topic_configs("t", [(key, 2, "1:2,0:3")])
    assert c.topics["t"].configs[key] == "0:1,1:2,0:3"
    c.alter_topic_configs("t", [(key, 3, "1:2")])
    assert parse_throttled_replicas(c.topics["t"].configs[key]) == {(0, 1), (0, 3)}
    c.alter_topic_configs("t", [(key, 1, None)])
    assert key not in c.topics["t"].configs
    assert parse_throttled_replicas("*") is None
    assert parse_partition_rates("*:10,2:5") == {-1: 10.0, 2: 5.0}
    with pytest.raises(ValueError):
        parse_partition_rates("0:-1")


def test_quota_precedence_follows_kafka() -> None:
    c = cluster()
    c.alter_quota((("client-id", None),), "producer_byte_rate", 100.0)
    assert c.quota_for("u", "any", "producer_byte_rate") == 100.0
    c.alter_quota((("client-id", "svc"),), "producer_byte_rate", 200.0)
    assert c.quota_for("u", "svc", "producer_byte_rate") == 200.0
    c.alter_quota((("user", "u"),), "producer_byte_rate", 300.0)
    assert c.quota_for("u", "svc", "producer_byte_rate") == 300.0
    c.alter_quota((("client-id", "svc"), ("user", "u")), "producer_byte_rate", 400.0)
    assert c.quota_for("u", "svc", "producer_byte_rate") == 400.0
    c.alter_quota((("client-id", "svc"), ("user", "u")), "producer_byte_rate", None)
    assert c.quota_for("u", "svc", "producer_byte_rate") == 300.0
    assert c.quota_for("u", "svc", "consumer_byte_rate") == math.inf


def test_record_batches_stay_within_partition_and_global_budgets() -> None:
    from kafkasim.cluster.records import store_batches

    c = cluster()
    t = c.create_topic("mem", 3, 1)
    eng = c.engine
    eng.batch_budget = 20_000
    c.max_batch_bytes_per_partition = 12_000
    batch = _batch(40)  # ~600 bytes
    for i in range(60):
        store_batches(c, t.partitions[i % 3], batch)
    assert eng.batch_bytes == sum(p.batch_bytes for p in t.partitions)
    assert eng.batch_bytes <= eng.batch_budget
    assert all(p.batch_bytes <= 12_000 for p in t.partitions)
    # the newest batches survive; offsets keep counting
    p0 = t.partitions[0]
    assert p0.batches[-1][1] == 20 * 40 - 1
    assert p0.batches[0][0] > 0
    c.delete_topic("mem")
    assert eng.batch_bytes == 0
