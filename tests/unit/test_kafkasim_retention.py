"""kafkasim checks retention every ``log.retention.check.interval.ms`` (default 300000) as a Kafka broker does:
nothing is deleted before the leader's broker runs its check, what is due goes at the check."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkasim.broker.protocol import Handler
from kafkasim.broker.server import SimServer
from kafkasim.cluster.configs import REMOTE_LOG_TASK, RETENTION_CHECK, interval_s
from kafkasim.cluster.records import store_batches
from kafkasim.cluster.retention import RetentionClock
from kafkasim.scenarios.scenario import Federation, ScenarioError, build_federation


def federation(check_ms: str | None, topic_configs: dict[str, str]) -> Federation:
    cluster: dict[str, Any] = {
        "name": "c", "brokers": [{"count": 3, "disks": [{"count": 1, "kind": "ssd"}]}],
        "topics": [{"name": "t", "partitions": 3, "rf": 3, "bytes_in_per_s": 1e6, "size_gb": 0.1,
                    "configs": topic_configs}]}
    if check_ms is not None:
        cluster["broker_configs"] = {RETENTION_CHECK: check_ms}
    fed = build_federation({"seed": 3, "clusters": [cluster]})
    fed.engine.burst_rate_per_hour = 0.0
    return fed


def starts_and_sizes(fed: Federation) -> tuple[list[int], float]:
    parts = fed.clusters["c"].topics["t"].partitions
    return [fed.engine.partition_offsets(p.slot)[0] for p in parts], sum(fed.engine.f["size"][p.slot] for p in parts)


def test_time_retention_waits_for_the_default_300_s_check_then_deletes() -> None:
    fed = federation(None, {"retention.ms": "60000"})  # a minute of data kept, checked every 5 minutes
    fed.engine.advance(299.0)
    starts, size = starts_and_sizes(fed)
    assert starts == [0, 0, 0] and size > 0.3e9 + 250e6  # the seeded 100 MB each and every byte since
    fed.engine.advance(2.0)
    starts, size = starts_and_sizes(fed)
    assert all(s > 0 for s in starts) and size < 0.1e9  # the check deleted what is older than a minute
    before = starts
    fed.engine.advance(290.0)
    assert starts_and_sizes(fed)[0] == before  # the log start stays put until the next check
    fed.engine.advance(20.0)
    assert all(s > b for s, b in zip(starts_and_sizes(fed)[0], before, strict=True))


def test_size_retention_runs_at_the_configured_interval() -> None:
    fed = federation("20000", {"retention.bytes": "120000000"})  # checked every 20 s
    fed.engine.advance(19.0)
    starts, size = starts_and_sizes(fed)
    assert starts == [0, 0, 0] and size > 0.3e9
    fed.engine.advance(1.0)
    starts, size = starts_and_sizes(fed)
    assert all(s > 0 for s in starts) and size <= 3 * 120e6 + 1
    fed.engine.advance(10.0)
    assert starts_and_sizes(fed)[1] > 3 * 120e6  # grows past the cap until the next check


def _record(value: bytes) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, offset=0)
    b.append(0, None, value)
    b.close()
    return bytes(b.buffer())


def test_a_record_holding_log_deletes_whole_segments_only_at_a_check() -> None:
    fed = federation("60000", {})
    e, c = fed.engine, fed.clusters["c"]
    p = c.create_topic("lease", 1, 3, configs={"retention.ms": "10000", "segment.ms": "5000"}).partitions[0]
    for k in range(6):  # a record every 2 s: segments roll every 5 s
        store_batches(c, p, _record(b"renew-%d" % k))
        e.advance(2.0)
    e.advance(30.0)  # every record is more than 10 s old, but the next check is 60 s after start
    assert e.partition_offsets(p.slot) == (0, 6)
    e.advance(30.0)
    assert e.partition_offsets(p.slot) == (6, 6)  # the check deleted every segment (the active one rolled)


def test_the_clock_restarts_a_revived_or_reconfigured_broker_and_skips_dead_ones() -> None:
    fed = federation("10000", {})
    clock, brokers = RetentionClock(), fed.engine.brokers
    alive = np.array([True, True, True])
    clock.sync(brokers, 100.0)
    assert list(clock.due(109.0, alive)) == [False, False, False]
    assert list(clock.due(110.0, alive)) == [True, True, True] and list(clock.next) == [120.0] * 3
    assert list(clock.due(145.0, alive)) == [True, True, True] and list(clock.next) == [150.0] * 3  # fixed rate
    down = np.array([True, False, True])
    clock.sync(brokers, 146.0)
    assert list(clock.due(150.0, down)) == [True, False, True]
    brokers[1].revivals += 1
    clock.sync(brokers, 155.0)  # broker 2 is back: its schedule starts again
    brokers[2].static_configs[RETENTION_CHECK] = "3000"
    clock.sync(brokers, 156.0)
    assert list(clock.next) == [160.0, 165.0, 159.0]


def test_a_broker_killed_and_revived_between_two_ticks_restarts_its_schedule() -> None:
    fed = federation("10000", {})
    e, c = fed.engine, fed.clusters["c"]
    e.advance(5.0)
    assert list(e.retention_clock.next - e.t) == [5.0] * 3
    c.set_broker_alive(1, False)
    c.set_broker_alive(1, True)  # a restart within one tick: the rebuild never sees it dead
    e.advance(1.0)
    g = c.brokers[1].gidx
    assert e.retention_clock.next[g] - e.t == 9.0  # 10 s after the revive (at t = 5), not the old check
    assert [n - e.t for i, n in enumerate(e.retention_clock.next) if i != g] == [4.0, 4.0]


def test_the_interval_is_described_validated_and_read_only() -> None:
    fed = federation(None, {})
    cl = fed.clusters["c"]
    entries = {k: (v, ro, src) for k, v, ro, src in Handler()._broker_configs(cl, cl.brokers[1])}
    assert entries[RETENTION_CHECK] == ("300000", True, 5)  # Kafka's default, from the default source
    assert interval_s({}, RETENTION_CHECK) == 300.0 and interval_s({RETENTION_CHECK: "1500"}, RETENTION_CHECK) == 1.5
    fed = federation("1500", {})
    cl = fed.clusters["c"]
    entries = {k: (v, ro, src) for k, v, ro, src in Handler()._broker_configs(cl, cl.brokers[1])}
    assert entries[RETENTION_CHECK] == ("1500", True, 4)  # the broker's server.properties
    for bad in ("0", "-5", "soon"):
        with pytest.raises(ScenarioError, match=r"broker_configs: log.retention.check.interval.ms must be"):
            federation(bad, {})


def test_a_revive_may_change_the_interval_but_only_to_a_valid_one() -> None:
    fed = federation(None, {})
    server = SimServer(fed)
    fed.clusters["c"].set_broker_alive(1, False)
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        asyncio.run(server.revive_broker("c", 1, {RETENTION_CHECK: "0"}))
    assert RETENTION_CHECK not in fed.clusters["c"].brokers[1].static_configs  # nothing changed


def test_the_remote_log_manager_interval_is_described_validated_and_read_only() -> None:
    fed = federation(None, {})
    cl = fed.clusters["c"]
    entries = {k: (v, ro, src) for k, v, ro, src in Handler()._broker_configs(cl, cl.brokers[1])}
    assert entries[REMOTE_LOG_TASK] == ("30000", True, 5)  # Kafka's default (KIP-405), from the default source
    assert interval_s({}, REMOTE_LOG_TASK) == 30.0 and interval_s({REMOTE_LOG_TASK: "500"}, REMOTE_LOG_TASK) == 0.5
    assert [interval_s(b.static_configs, REMOTE_LOG_TASK) for b in cl.brokers.values()] == [30.0] * 3  # what tasks read
    fed = build_federation({"clusters": [{"name": "c", "brokers": [{"count": 1}],
                                          "broker_configs": {REMOTE_LOG_TASK: "2000"}}]})
    cl = fed.clusters["c"]
    assert dict((k, v) for k, v, _, _ in Handler()._broker_configs(cl, cl.brokers[1]))[REMOTE_LOG_TASK] == "2000"
    assert interval_s(cl.brokers[1].static_configs, REMOTE_LOG_TASK) == 2.0
    for bad in ("0", "soon"):
        with pytest.raises(ScenarioError, match=r"broker_configs: remote.log.manager.task.interval.ms must be"):
            build_federation({"clusters": [{"name": "c", "brokers": [{"count": 1}],
                                            "broker_configs": {REMOTE_LOG_TASK: bad}}]})
