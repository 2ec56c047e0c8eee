"""Segment-wise retention of record-holding partitions in kafkasim (:mod:`kafkasim.cluster.seglog`).

A Kafka broker deletes whole closed segments: the log start offset sits on a segment's base offset and
records stay readable until the newest record of their segment is older than ``retention.ms``.
"""

from __future__ import annotations

from kafka.record.memory_records import MemoryRecordsBuilder

from kafkasim.cluster.model import Cluster
from kafkasim.cluster.records import store_batches
from kafkasim.cluster.seglog import SegmentedLog
from kafkasim.physics.engine import Engine

LEASE_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "3600000", "segment.ms": "600000"}


def _cluster() -> tuple[Engine, Cluster]:
    e = Engine(seed=1, burst_rate_per_hour=0.0)
    c = Cluster("c1")
    e.add_cluster(c)
    for i in range(1, 4):
        e.add_broker(c, i, "idc-a", f"r{i}", "shared", 8e9,
                     [{"path": "/data1", "kind": "ssd", "capacity_bytes": 1e12, "max_bytes_per_s": 500e6,
                       "base_latency_ms": 1.0}])
    e.rebuild()
    return e, c


def _record(value: bytes) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, offset=0)
    b.append(0, None, value)
    b.close()
    return bytes(b.buffer())


def test_lease_like_log_keeps_its_first_record_until_its_segment_expires() -> None:
    e, c = _cluster()
    p = c.create_topic("__lease", 1, 3, configs=dict(LEASE_CONFIGS)).partitions[0]
    bases: list[int] = []  # the base offset of every segment, by the append that opened it
    t0 = e.t
    starts: list[tuple[float, int]] = []
    for k in range(180):  # one record a minute for 3 hours
        base, _, _ = store_batches(c, p, _record(b"renew-%d" % k + b"x" * 200))
        if k % 11 == 0:  # segment.ms = 10 min: the first append more than 10 minutes after the first rolls
            bases.append(base)
        e.advance(60.0, dt=5.0)
        starts.append((e.t - t0, e.partition_offsets(p.slot)[0]))
    for age, start in starts:
        assert start in bases, (age, start)  # never inside a segment
        if age <= 600 + 3600:
            assert start == 0, (age, start)  # the first segment's newest record (t=600) is not expired
    assert starts[-1][1] > 0
    # what is left is at most retention + one segment (+ the active one) old
    assert e.partition_offsets(p.slot)[1] - starts[-1][1] <= 80
    assert p.batches[0][0] >= starts[-1][1]


def test_size_retention_deletes_closed_segments_only() -> None:
    log = SegmentedLog(0, 0, 0.0, 0.0)
    for k in range(10):
        log.append(k, 100.0, float(k), segment_bytes=250.0, segment_s=1e9)  # two records a segment
    assert [s.base for s in log.closed] == [0, 2, 4, 6]
    removed = log.expire(10.0, 10, float("inf"), 150.0)
    assert removed == 800.0 and log.closed == [] and log.log_start == 8  # the active segment stays
    assert log.size == 200.0


def test_time_retention_rolls_an_expired_active_segment_as_kafka_does() -> None:
    log = SegmentedLog(0, 0, 0.0, 0.0)
    log.append(0, 100.0, 0.0, 1e9, 1e9)
    assert log.expire(50.0, 1, 100.0, float("inf")) == 0.0 and log.log_start == 0
    assert log.expire(101.0, 1, 100.0, float("inf")) == 100.0
    assert log.log_start == 1 and log.size == 0.0
