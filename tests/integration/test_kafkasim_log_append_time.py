"""kafkasim stamps batches of a ``message.timestamp.type=LogAppendTime`` topic as Kafka does (real clients)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.support.executor_support import scenario

pytestmark = pytest.mark.timeout(60)


def test_log_append_time_topics_carry_the_brokers_clock_with_a_valid_crc(make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(scenario(brokers=3, topics=1, partitions=1))
    client = sim.client_kwargs()  # bootstrap servers and the realistic simulator's SASL_SSL settings
    sim.admin._call("create", lambda a: a.create_topics([
        NewTopic("stamped", 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"}),
        NewTopic("plain", 1, 1)]))
    producer = KafkaProducer(**client)
    before = int(time.time() * 1000)
    meta = producer.send("stamped", b"v", timestamp_ms=1_000).get(timeout=10)
    plain = producer.send("plain", b"v", timestamp_ms=1_000).get(timeout=10)
    after = int(time.time() * 1000)
    producer.close()
    assert before <= meta.timestamp <= after  # the log append time comes back in the produce response
    assert plain.timestamp == 1_000
    consumer = KafkaConsumer(**client, check_crcs=True, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition("stamped", 0), TopicPartition("plain", 0)])
    consumer.seek_to_beginning()
    got = {m.topic: m for m in consumer}
    consumer.close()
    assert before <= got["stamped"].timestamp <= after and got["stamped"].timestamp_type == 1
    assert got["plain"].timestamp == 1_000 and got["plain"].timestamp_type == 0
