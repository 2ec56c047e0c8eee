"""Collectors against a real kafkasim federation over TCP: topology, rates, faults, page cache."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition

from collectors.builder import Collected, ModelConfig
from collectors.collector import ClusterCollector, CollectorLoop
from collectors.completeness import UsabilityPolicy, refusal_reasons
from domain import BrokerState, parse_snapshot
from kafkaio.source import KafkaSourceOptions
from tests.support.collectors_support import (
    SCENARIO,
    FaultProxy,
    OffsetExporter,
    Sim,
    rate_truth,
    with_proxy,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sim():
    s = Sim()
    yield s
    s.stop()


def collect_pair(sim: Sim, col: ClusterCollector,
                 seconds: float = 10.0) -> tuple[Collected, dict[str, Any], dict[str, Any]]:
    """Round, advance, round; returns the second result and ground-truth captures at both instants."""
    col.collect_once()
    before = sim.counters()
    sim.advance(seconds)
    after = sim.counters()
    return col.collect_once(), before, after


def check_topology(sim: Sim, c: Collected) -> None:
    truth = sim.topology()
    got = {(p.topic, p.partition): p for t in c.snapshot.topics for p in t.partitions}
    assert set(got) == set(truth)
    for key, tp in truth.items():
        p = got[key]
        assert p.replicas == tp["replicas"], key
        assert p.leader == tp["leader"], key
        assert p.isr == tp["isr"], key
        assert p.log_dirs == tp["log_dirs"], key
    brokers = sim.brokers()
    assert {b.id for b in c.snapshot.brokers} == set(brokers)
    for b in c.snapshot.brokers:
        assert b.rack == brokers[b.id]["rack"]
        assert b.idc == brokers[b.id]["idc"]
        assert (b.state is BrokerState.ALIVE) == brokers[b.id]["alive"]
        if brokers[b.id]["alive"]:
            assert [d.path for d in b.disks] == brokers[b.id]["disks"]
    # the file contract round-trips
    parse_snapshot(json.dumps(c.to_dict()))


def check_rates(sim: Sim, c: Collected, before: dict[str, Any], after: dict[str, Any],
                skip_brokers: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    truth = sim.topology()
    bytes_in = rate_truth(before, after, "bytes_in")
    checked = 0
    for t in c.snapshot.topics:
        for p in t.partitions:
            exp = float(bytes_in[truth[(p.topic, p.partition)]["slot"]])
            if exp > 1000:
                assert p.bytes_in_per_s == pytest.approx(exp, rel=0.10), (p.topic, p.partition)
                checked += 1
    assert checked >= 10
    util = rate_truth(before, after, "io_time")
    brokers = sim.brokers()
    n = 0
    for b in c.snapshot.brokers:
        if b.id in skip_brokers or not brokers[b.id]["alive"]:
            continue
        for d in b.disks:
            assert abs(d.util - float(util[brokers[b.id]["gidx"][d.path]])) <= 0.05, (b.id, d.path)
            n += 1
    assert n >= 3


def test_snapshot_matches_ground_truth(sim: Sim) -> None:
    col = ClusterCollector(sim.endpoints())
    try:
        first = col.collect_once()
        assert first.coverage.first_round
        assert any("first collection round" in r for r in refusal_reasons(first.snapshot))
        before = sim.counters()
        sim.advance(10)
        after = sim.counters()
        c = col.collect_once()
        check_topology(sim, c)
        check_rates(sim, c, before, after)
        assert c.coverage.broker_fraction == 1.0
        assert c.coverage.partition_fraction == 1.0
        assert refusal_reasons(c.snapshot) == []
        assert c.coverage.controller == 1
        # load_history gains one value per round with a rate
        assert all(len(d.load_history) == 1 for b in c.snapshot.brokers for d in b.disks)
        sim.advance(10)
        c3 = col.collect_once()
        assert all(len(d.load_history) == 2 for b in c3.snapshot.brokers for d in b.disks)
        # user writes on leaders' disks, replication writes on followers'
        assert sum(b.user_write for b in c.behaviours.values()) == pytest.approx(
            sum(p.bytes_in_per_s for t in c.snapshot.topics for p in t.partitions), rel=1e-6)
        for beh in c3.behaviours.values():
            assert beh.measured_write is not None
            assert beh.estimated_write == pytest.approx(beh.measured_write, rel=0.10, abs=2000)
    finally:
        col.close()


def test_partition_rates_come_from_log_end_offsets(sim: Sim) -> None:
    """Stock brokers have no per-partition byte counter: Δ log-end offset × the topic's bytes/message."""
    col = ClusterCollector(sim.endpoints())
    try:
        c, before, after = collect_pair(sim, col)
        assert c.coverage.bytes_in_methods == {"leo_x_topic_ratio": c.coverage.partitions_total}
        check_rates(sim, c, before, after)
    finally:
        col.close()


def test_reassignment_in_flight_and_completed(sim: Sim) -> None:
    eps = sim.endpoints()
    col = ClusterCollector(eps)
    admin = KafkaAdminClient(client_id="test", **sim.client_kwargs())
    try:
        col.collect_once()
        sim.advance(5)
        col.collect_once()
        old = sim.topology()[("events-0", 0)]["replicas"]
        new = [b for b in (1, 2, 3, 4) if b not in old][:1] + list(old[1:])
        admin.alter_partition_reassignments({TopicPartition("events-0", 0): new})
        mid = col.collect_once()
        assert mid.coverage.reassignments_in_flight == 1
        sim.advance(30)  # the copy (50 MB at <= 400 MB/s) completes
        col.collect_once()
        c, before, after = collect_pair(sim, col)
        assert c.coverage.reassignments_in_flight == 0
        got = {(p.topic, p.partition): p for t in c.snapshot.topics for p in t.partitions}
        assert list(got[("events-0", 0)].replicas) == new
        check_topology(sim, c)
        check_rates(sim, c, before, after)
    finally:
        admin.close()
        col.close()


def test_migration_io_is_attributed_while_a_copy_runs() -> None:
    spec = json.loads(json.dumps(SCENARIO))
    spec["clusters"][0]["topics"][1]["size_gb"] = 5  # events-* partitions take ~25 s to copy
    s = Sim(spec)
    eps = s.endpoints()
    col = ClusterCollector(eps)
    admin = KafkaAdminClient(client_id="test", **s.client_kwargs())
    try:
        old = s.topology()[("events-0", 0)]["replicas"]
        target = next(b for b in (1, 2, 3, 4) if b not in old)
        admin.alter_partition_reassignments({TopicPartition("events-0", 0): [target, *old[1:]]})
        col.collect_once()
        s.advance(5)
        c = col.collect_once()
        assert c.coverage.reassignments_in_flight == 1
        det = c.partitions[("events-0", 0)]
        assert det.migration_bytes_per_s > 10e6
        dest = next(p for t in c.snapshot.topics for p in t.partitions if (p.topic, p.partition) == ("events-0", 0))
        dest_dir = dest.log_dirs[list(dest.replicas).index(target)]
        assert c.behaviours[(target, dest_dir)].migration_write == pytest.approx(det.migration_bytes_per_s)
        leader = dest.leader
        assert leader is not None
        src_dir = dest.log_dirs[list(dest.replicas).index(leader)]
        assert c.behaviours[(leader, src_dir)].migration_read == pytest.approx(det.migration_bytes_per_s)
    finally:
        admin.close()
        col.close()
        s.stop()


def test_dead_broker_is_marked_dead_and_rates_survive(sim: Sim) -> None:
    col = ClusterCollector(sim.endpoints(), scrape_timeout_s=2.0)
    try:
        col.collect_once()
        sim.advance(10)
        col.collect_once()
        sim.call(lambda: sim.runner.server.kill_broker("east", 4))
        sim.advance(10)
        c1 = col.collect_once()  # leadership moved this round
        assert 4 in c1.coverage.brokers_dead
        c, before, after = collect_pair(sim, col)
        dead = next(b for b in c.snapshot.brokers if b.id == 4)
        assert dead.state is BrokerState.DEAD
        assert dead.disks, "a dead broker keeps its last known log dirs"
        check_topology(sim, c)
        check_rates(sim, c, before, after, skip_brokers={4})
        assert c.coverage.broker_fraction == 1.0  # of alive brokers
    finally:
        col.close()


@pytest.mark.parametrize("fault", ["garbage", "stall", "reset"])
def test_metrics_endpoint_faults(sim: Sim, fault: str) -> None:
    """A fault of one broker's JMX exporter: recorded for that endpoint; its node_exporter is still read."""
    eps = sim.endpoints()
    proxy = FaultProxy(sim.endpoint(2, "jmx"))
    proxy.stall_s = 3.0
    col = ClusterCollector(with_proxy(eps, proxy.target, proxy.url), ModelConfig(hold_s=60.0), scrape_timeout_s=1.0)
    try:
        col.collect_once()
        sim.advance(60)  # counters grow well above what one interval adds (so a restart shows as a drop)
        col.collect_once()
        if fault == "reset":
            proxy.arm_reset()
        else:
            proxy.mode = fault
        before = sim.counters()
        sim.advance(10)
        after = sim.counters()
        t0 = time.monotonic()
        c = col.collect_once()
        assert time.monotonic() - t0 < 2.5  # a stalled endpoint costs at most its timeout
        if fault == "reset":
            assert "counter_reset" in json.dumps(c.coverage.drops)
        else:
            assert 2 in c.coverage.metrics_failed
            assert set(c.coverage.endpoints_failed) == {proxy.url}
            assert proxy.url in c.coverage.metrics_failed[2]
            assert 2 in c.coverage.brokers_with_metrics  # its node_exporter answered: disks are fresh
            assert c.coverage.disks_with_metrics == c.coverage.disks_total
        # values held from the last good round keep the snapshot within tolerance
        check_topology(sim, c)
        check_rates(sim, c, before, after)
        # the endpoint recovers (a reset exporter keeps counting from its new base)
        if fault != "reset":
            proxy.mode = "pass"
        col.collect_once()
        c2, before, after = collect_pair(sim, col)
        assert c2.coverage.metrics_failed == {}
        check_rates(sim, c2, before, after)
        assert c2.coverage.partition_fraction == 1.0
    finally:
        col.close()
        proxy.close()


def test_page_cache_estimate_separates_lagging_from_tailing_consumers(sim: Sim) -> None:
    """Positions of the groups Kafka knows come from its admin API (the laggard, the simulation's tailing
    group); an operator's kafka_exporter URL adds a group ``tail`` Kafka does not list."""
    exporter = OffsetExporter(sim, "orders")
    col = ClusterCollector(replace(sim.endpoints(), exporter_urls=(exporter.url,)))
    laggard = "orders-consumer"  # kafkasim names a lagging consumer group after its client id
    tailing = ["orders-consumer-tail-1", "tail"]
    try:
        sim.call(lambda: sim.runner.server.lagging_consumer("east", "orders", 0, 1.5e9, 50e6))
        sim.advance(2)
        col.collect_once()
        sim.advance(10)
        after = sim.counters()
        c = col.collect_once()
        truth = sim.topology()
        lag_det = c.partitions[("orders", 0)]
        assert lag_det.disk_readers == [laggard]
        assert lag_det.cached_readers == tailing
        for k in (1, 2, 3):
            assert c.partitions[("orders", k)].disk_readers == []
            assert c.partitions[("orders", k)].cached_readers == tailing
        assert c.coverage.consumer_offsets["source"] == "admin"
        parts = {(p.topic, p.partition): p for t in c.snapshot.topics for p in t.partitions}
        exp = float(after["disk_read"][truth[("orders", 0)]["slot"]])  # the laggard's disk read rate
        assert exp > 1e6, "kafkasim itself serves the laggard from disk"
        assert parts[("orders", 0)].disk_read_bytes_per_s == pytest.approx(exp, rel=0.10)
        assert all(parts[("orders", k)].disk_read_bytes_per_s == 0 for k in (1, 2, 3))
        # the leader's disk shows it as user read, and the measured disk reads agree
        p0 = parts[("orders", 0)]
        assert p0.leader is not None
        beh = c.behaviours[(p0.leader, p0.log_dirs[list(p0.replicas).index(p0.leader)])]
        assert beh.user_read == pytest.approx(exp, rel=0.10)
        assert beh.measured_read == pytest.approx(beh.user_read, rel=0.10)
    finally:
        col.close()
        exporter.close()


def test_collector_loop_calls_back_and_survives_bad_rounds(sim: Sim) -> None:
    got: list[Collected] = []
    rows: list[list[dict[str, Any]]] = []
    errors: list[Exception] = []
    col = ClusterCollector(sim.endpoints())
    loop = CollectorLoop(col, interval_s=0.2, on_snapshot=got.append, on_rollup=rows.append, on_error=errors.append)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            sim.advance(5)
            time.sleep(0.1)
        assert len(got) >= 3
        assert loop.latest is not None
        pol = UsabilityPolicy(max_age_s=30)
        assert refusal_reasons(loop.latest.snapshot, pol) == []
    finally:
        loop.stop()
    assert rows, "stop() flushes the partial minute"
    kinds = {r["kind"] for r in rows[-1]}
    assert kinds == {"disk", "partition"}
    assert errors == []


def test_page_cache_from_the_admin_api_alone(sim: Sim) -> None:
    """No exporter: the laggard's committed offset (OffsetFetch through the admin client) places it; read every
    6th round, the offsets in between move on at their last rates."""
    col = ClusterCollector(sim.endpoints(), source_options=KafkaSourceOptions(groups_every=6))
    try:
        sim.call(lambda: sim.runner.server.lagging_consumer("east", "orders", 1, 1.5e9, 20e6))  # ~75 s behind
        sim.advance(2)
        col.collect_once()
        sim.advance(10)
        after = sim.counters()
        c = col.collect_once()
        slot = sim.topology()[("orders", 1)]["slot"]
        assert c.partitions[("orders", 1)].disk_readers == ["orders-consumer"]
        parts = {(p.topic, p.partition): p for t in c.snapshot.topics for p in t.partitions}
        assert parts[("orders", 1)].disk_read_bytes_per_s == pytest.approx(float(after["disk_read"][slot]), rel=0.10)
        assert sum(p.disk_read_bytes_per_s for k, p in parts.items() if k != ("orders", 1)) == 0
        # the disk the laggard reads shows it as user read
        assert sum(b.user_read for b in c.behaviours.values()) == pytest.approx(
            parts[("orders", 1)].disk_read_bytes_per_s)
        # offsets are read every 6th round after the first two: in between each group's position moves on at
        # its last rate (never past the log end) and the laggard is still seen reading the disk at its rate
        # (kafkasim serves it from the page cache once it is within ~750 MB of the log end, at t = 40 s)
        for _ in range(2):
            sim.advance(10)
            after = sim.counters()
            c3 = col.collect_once()
            assert c3.coverage.consumer_offsets["fresh"] is False and c3.coverage.consumer_offsets["source"] == "admin"
            p3 = next(p for t in c3.snapshot.topics for p in t.partitions if (p.topic, p.partition) == ("orders", 1))
            exp = float(after["disk_read"][slot])
            assert exp > 1e6, "the laggard still reads the disk"
            assert c3.partitions[("orders", 1)].disk_readers == ["orders-consumer"]
            assert p3.disk_read_bytes_per_s == pytest.approx(exp, rel=0.10)
    finally:
        col.close()
