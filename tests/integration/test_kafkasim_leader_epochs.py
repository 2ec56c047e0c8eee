"""kafka-python's consumer across a leader change on kafkasim: batches carry the leader epoch, the consumer
validates its position with OffsetForLeaderEpoch (KIP-320) and reads on — no duplicate, no ERROR.

Before kafkasim answered API 23, the same consumer logged ``Non-retriable error from OffsetForLeaderEpoch``
at ERROR about ten times a second after every leader change (issue 38); the ``unanswered`` case runs the flow
with API 23 withdrawn from ApiVersions and shows that error, so the answered case is known to be able to fail.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from kafkasim.broker import wire
from tests.support.kafkasim_support import Sim, http_json, start_sim

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture()
def sim() -> Iterator[Sim]:
    with start_sim(realistic=False) as s:
        yield s


def _poll(consumer: KafkaConsumer, want: int, timeout: float = 20) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    return got


def _requests(sim: Sim, cluster: str, name: str) -> int:
    def count() -> int:
        cl = sim.server.fed.clusters[cluster]
        return sum(sim.server.requests.get(b.gidx, {}).get(name, 0) for b in cl.brokers.values())

    out: int = sim.call(count)
    return out


@pytest.mark.parametrize("answered", [True, False], ids=["answered", "unanswered"])
def test_a_consumer_reads_on_across_a_leader_change(sim: Sim, answered: bool, caplog: pytest.LogCaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if not answered:
        monkeypatch.delitem(wire.SUPPORTED, 23)  # as kafkasim was: not advertised, not answered
    caplog.set_level(logging.INFO, logger="kafka.consumer.fetcher")
    bs = sim.bootstrap("east")
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=10000)
    producer = KafkaProducer(bootstrap_servers=bs, retries=20, retry_backoff_ms=200)
    consumer = KafkaConsumer(bootstrap_servers=bs, auto_offset_reset="earliest", enable_auto_commit=False,
                             metadata_max_age_ms=1000)
    try:
        admin.create_topics([NewTopic("epochs", -1, -1, replica_assignments={0: [1, 2, 3]})])
        for i in range(20):
            producer.send("epochs", value=b"before-%d" % i, partition=0)
        producer.flush(10)
        consumer.assign([TopicPartition("epochs", 0)])
        first = _poll(consumer, 20)
        assert [r.value for r in first] == [b"before-%d" % i for i in range(20)]
        assert {r.leader_epoch for r in first} == {0}  # stamped by the leader of epoch 0

        http_json(sim.endpoints["control_url"] + "/fault/kill-broker", {"cluster": "east", "broker": 1})
        for i in range(10):
            producer.send("epochs", value=b"after-%d" % i, partition=0)
        producer.flush(20)
        if not answered:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not [r for r in caplog.records
                                                       if "OffsetForLeaderEpoch" in r.getMessage()]:
                consumer.poll(timeout_ms=200)
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert any("OffsetForLeaderEpoch" in e and "IncompatibleBrokerVersion" in e for e in errors)
            return
        second = _poll(consumer, 10)
        assert [r.value for r in second] == [b"after-%d" % i for i in range(10)]  # no re-read: no false truncation
        assert {r.leader_epoch for r in second} == {1} and {r.offset for r in second} == set(range(20, 30))
        assert _requests(sim, "east", "OffsetForLeaderEpoch") >= 1  # the position was validated over the wire
        assert consumer.position(TopicPartition("epochs", 0)) == 30
        # (the dead broker's refused connections are kafka-python's own ERROR lines: controlplane.logs' business)
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert [e for e in errors if "OffsetForLeaderEpoch" in e] == []
        assert not [r for r in caplog.records if "Truncation detected" in r.getMessage()]
    finally:
        consumer.close()
        producer.close()
        admin.close()
