"""A real append moves kafkasim's BytesIn/MessagesIn counters together with the log end offset.

A broker counts ``BrokerTopicMetrics`` when it appends; kafkasim counted real appends only at the next
tick, so a scrape between an append and that tick (always the case for records kafkasim appends from a
tick listener, as the audit sink does) saw the log end offset move with no messages-in, and the
collectors had no bytes/message ratio for the topic (``partitions_without_rates``).
"""

from __future__ import annotations

import re

from kafka.record.memory_records import MemoryRecordsBuilder

from kafkasim.cluster.model import Cluster
from kafkasim.cluster.records import store_batches
from kafkasim.observe.metrics import render_broker
from kafkasim.physics.engine import Engine


def _batch(n: int) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, offset=0)
    for k in range(n):
        b.append(0, None, b"v%d" % k * 50)
    b.close()
    return bytes(b.buffer())


def _sample(text: str, name: str, topic: str) -> float:
    m = re.search(rf'^{name}{{topic="{topic}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_counters_move_with_the_log_end_offset_before_the_next_tick() -> None:
    e = Engine(seed=1, burst_rate_per_hour=0.0)
    c = Cluster("c1")
    e.add_cluster(c)
    e.add_broker(c, 1, "idc-a", "r1", "shared", 8e9, [{"path": "/d1", "kind": "ssd", "capacity_bytes": 1e12,
                                                        "max_bytes_per_s": 5e8, "base_latency_ms": 1.0}])
    e.step(1.0)
    p = c.create_topic("audit", 1, 1).partitions[0]
    e.step(1.0)
    _, nbytes, _ = store_batches(c, p, _batch(7))
    text = render_broker(c, c.brokers[1])
    assert e.partition_offsets(p.slot)[1] == 7
    assert _sample(text, "kafka_server_brokertopicmetrics_messagesin_total", "audit") == 7
    assert _sample(text, "kafka_server_brokertopicmetrics_bytesin_total", "audit") == nbytes
    e.step(1.0)  # and the tick does not count them again
    text = render_broker(c, c.brokers[1])
    assert _sample(text, "kafka_server_brokertopicmetrics_messagesin_total", "audit") == 7
    assert float(e.f["bytes_in_total"][p.slot]) == nbytes
