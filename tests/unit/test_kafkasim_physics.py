"""Physics of kafkasim's engine: copies under throttles, page cache misses, quotas, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kafkasim.cluster.configs import PT_FETCH, PT_PRODUCE
from kafkasim.cluster.model import Cluster, SimError
from kafkasim.physics.engine import Client, Engine
from kafkasim.scenarios.scenario import build_federation

GiB = 1024**3


def make(n_brokers: int = 4, capable: bool = False, memory: float = 8e9, seed: int = 1) -> tuple[Engine, Cluster]:
    e = Engine(seed=seed, burst_rate_per_hour=0.0)
    c = Cluster("c1", partition_throttle=capable)
    e.add_cluster(c)
    for i in range(1, n_brokers + 1):
        e.add_broker(c, i, "idc-a", f"r{i}", "shared", memory,
                     [{"path": f"/data{k + 1}", "kind": "hdd", "capacity_bytes": 4e12, "max_bytes_per_s": 200e6,
                       "base_latency_ms": 5.0} for k in range(2)])
    e.rebuild()
    return e, c


def reassign_seconds(rate: float | None, size: float = 10 * GiB) -> tuple[int, list[int], Cluster]:
    e, c = make()
    t = c.create_topic("big", 1, 2, assignments={0: [1, 2]})
    p = t.partitions[0]
    e.f["size"][p.slot] = size
    if rate is not None:
        c.alter_broker_configs("3", [("follower.replication.throttled.rate", 0, str(rate))])
        c.alter_broker_configs("1", [("leader.replication.throttled.rate", 0, str(rate))])
        c.alter_topic_configs("big", [("follower.replication.throttled.replicas", 0, "0:3"),
                                      ("leader.replication.throttled.replicas", 0, "0:1")])
    c.alter_reassignment("big", 0, [1, 3])
    secs = 0
    while p.reassignment is not None and secs < 10_000:
        e.step(1.0)
        secs += 1
    return secs, list(p.replicas), c


def test_reassignment_under_10mb_throttle_takes_size_over_rate() -> None:
    secs, replicas, _ = reassign_seconds(10e6)
    assert 1000 <= secs <= 1100  # 10 GiB / 10 MB/s = 1074 s
    assert replicas == [1, 3]


def test_raising_the_throttle_shortens_the_move() -> None:
    slow, _, _ = reassign_seconds(10e6)
    fast, replicas, _ = reassign_seconds(40e6)
    assert fast < slow / 3
    assert replicas == [1, 3]
    unthrottled, _, _ = reassign_seconds(None)
    assert unthrottled < fast  # limited by disk headroom only


def test_throttle_only_applies_to_listed_replicas() -> None:
    e, c = make()
    t = c.create_topic("big", 1, 2, assignments={0: [1, 2]})
    p = t.partitions[0]
    e.f["size"][p.slot] = 2 * GiB
    c.alter_broker_configs("3", [("follower.replication.throttled.rate", 0, "1000000")])
    c.alter_reassignment("big", 0, [1, 3])  # not listed in follower.replication.throttled.replicas
    e.advance(60, 1.0)
    assert p.reassignment is None


def test_cancel_reverts_and_copy_progress_is_visible() -> None:
    e, c = make()
    t = c.create_topic("big", 1, 2, assignments={0: [1, 2]})
    p = t.partitions[0]
    e.f["size"][p.slot] = 10 * GiB
    c.alter_broker_configs("3", [("follower.replication.throttled.rate", 0, "10000000")])
    c.alter_topic_configs("big", [("follower.replication.throttled.replicas", 0, "*")])
    c.alter_reassignment("big", 0, [1, 3])
    e.advance(100, 1.0)
    assert p.reassignment is not None
    assert p.reassignment.copied[3] == pytest.approx(1e9, rel=0.02)
    reassign_in = e.b_reassign_in_total[c.brokers[3].gidx]
    assert reassign_in == pytest.approx(1e9, rel=0.02)
    c.alter_reassignment("big", 0, None)
    assert p.replicas == [1, 2] and 3 not in p.log_dirs and p.reassignment is None
    with pytest.raises(SimError):
        c.alter_reassignment("big", 0, None)


def test_intra_broker_move_honours_alter_log_dirs_throttle() -> None:
    e, c = make()
    t = c.create_topic("x", 1, 1, assignments={0: [1]})
    p = t.partitions[0]
    e.f["size"][p.slot] = 1e9
    src = p.log_dirs[1]
    dest = next(d for d in c.brokers[1].disks if d.gidx != src)
    c.alter_broker_configs("1", [("replica.alter.log.dirs.io.max.bytes.per.second", 0, "50000000")])
    c.alter_log_dir(1, "x", 0, dest.path)
    e.advance(10, 1.0)
    assert p.futures[1].copied == pytest.approx(5e8, rel=0.02)
    e.advance(15, 1.0)
    assert not p.futures and p.log_dirs[1] == dest.gidx


def lagging_setup(lag: float) -> tuple[Engine, Cluster, int]:
    e, c = make(memory=4e9)
    t = c.create_topic("logs", 1, 1, assignments={0: [1]})
    s = t.partitions[0].slot
    e.f["base_rate"][s] = 20e6
    e.f["tail_groups"][s] = 1
    e.f["size"][s] = 500e9
    e.f["lag"][s] = lag
    e.f["lag_rate"][s] = 80e6 if lag > 0 else 0.0
    e.advance(30, 1.0)
    return e, c, t.partitions[0].log_dirs[1]


def test_lagging_consumer_reads_disk_and_raises_util_and_latency() -> None:
    e0, _, d0 = lagging_setup(0.0)
    e1, _, d1 = lagging_setup(200e9)  # 200 GB behind: far beyond the 2.4 GB page cache
    assert e0.d_read_rate[d0] == 0.0
    assert e1.d_read_rate[d1] > 50e6
    assert e1.d_util[d1] > e0.d_util[d1] + 0.2
    assert e1.d_await[d1] > 1.5 * e0.d_await[d0]
    assert e1.d_read_total[d1] > 1e9
    # a consumer only slightly behind reads from the page cache
    e2, _, d2 = lagging_setup(20e6)  # 1 s of production
    assert e2.d_read_rate[d2] == 0.0


def test_latency_rises_steeply_near_saturation() -> None:
    utils = []
    awaits = []
    for rate in (20e6, 100e6, 180e6):
        e, c = make()
        t = c.create_topic("w", 1, 1, assignments={0: [1]})
        e.f["base_rate"][t.partitions[0].slot] = rate / 1.35  # diurnal peak factor stays below 1.35
        e.advance(5, 1.0)
        d = t.partitions[0].log_dirs[1]
        utils.append(float(e.d_util[d]))
        awaits.append(float(e.d_await[d]))
    assert utils[0] < utils[1] < utils[2] <= 1.0
    assert awaits[2] - awaits[1] > 2 * (awaits[1] - awaits[0])


def quota_rate(quota: float | None) -> float:
    e, c = make()
    t = c.create_topic("q", 4, 1, assignments={i: [1] for i in range(4)})
    cid = e.client(Client("svc", "alice", "10.0.0.1", "idc-a"))
    for p in t.partitions:
        e.f["base_rate"][p.slot] = 5e6
        e.i["prod_client"][p.slot] = cid
    if quota is not None:
        c.alter_quota((("client-id", "svc"),), "producer_byte_rate", quota)
    e.advance(10, 1.0)
    return float(e.f["in_rate"][[p.slot for p in t.partitions]].sum())


def test_producer_quota_cuts_the_clients_rate() -> None:
    free = quota_rate(None)
    capped = quota_rate(4e6)
    assert free > 10e6
    assert capped == pytest.approx(4e6, rel=1e-6)


def test_consumer_quota_and_partition_fetch_throttle() -> None:
    e, c = make(capable=True)
    t = c.create_topic("f", 2, 1, assignments={0: [1], 1: [1]})
    cid = e.client(Client("reader", "bob", "10.0.0.2", "idc-b"))
    for p in t.partitions:
        e.f["base_rate"][p.slot] = 2e6
        e.f["tail_groups"][p.slot] = 3
        e.i["cons_client"][p.slot] = cid
    e.advance(5, 1.0)
    s0, s1 = (p.slot for p in t.partitions)
    assert e.f["out_rate"][s0] == pytest.approx(3 * e.f["in_rate"][s0])
    c.alter_topic_configs("f", [(PT_FETCH, 0, "0:1000000")])
    c.alter_topic_configs("f", [(PT_PRODUCE, 0, "1:500000")])
    e.advance(5, 1.0)
    assert e.f["out_rate"][s0] == pytest.approx(1e6)
    assert e.f["in_rate"][s1] == pytest.approx(5e5)
    c.alter_quota((("user", "bob"),), "consumer_byte_rate", 1.2e6)
    e.advance(5, 1.0)
    assert e.f["out_rate"][[s0, s1]].sum() == pytest.approx(1.2e6, rel=1e-6)


def test_partition_throttle_keys_rejected_without_capability() -> None:
    _, c = make(capable=False)
    c.create_topic("v", 1, 1)
    with pytest.raises(SimError) as ei:
        c.alter_topic_configs("v", [(PT_PRODUCE, 0, "0:1000")])
    assert ei.value.code == 40


def test_dead_broker_moves_leadership_and_stops_its_writes() -> None:
    e, c = make()
    t = c.create_topic("d", 1, 2, assignments={0: [1, 2]})
    p = t.partitions[0]
    e.f["base_rate"][p.slot] = 10e6
    e.advance(3, 1.0)
    d1 = p.log_dirs[1]
    c.set_broker_alive(1, False)
    assert p.leader == 2 and p.isr == [2]
    before = e.d_written_total[d1]
    e.advance(3, 1.0)
    assert e.d_written_total[d1] == before
    assert e.f["in_rate"][p.slot] > 0
    c.set_broker_alive(1, True)
    assert p.isr == [2] and p.catchup[1] == pytest.approx(e.f["in_rate"][p.slot] * 3, rel=0.2)
    e.advance(3, 1.0)
    assert sorted(p.isr) == [1, 2] and not p.catchup


def test_revived_follower_catches_up_under_throttle_before_rejoining_isr() -> None:
    e, c = make()
    t = c.create_topic("cu", 1, 2, assignments={0: [1, 2]})
    p = t.partitions[0]
    e.f["base_rate"][p.slot] = 10e6
    e.advance(2, 1.0)
    c.set_broker_alive(2, False)
    e.advance(600, 10.0)  # ~6 GB produced while broker 2 was down
    c.alter_broker_configs("2", [("follower.replication.throttled.rate", 0, "40000000")])
    c.alter_topic_configs("cu", [("follower.replication.throttled.replicas", 0, "0:2")])
    c.set_broker_alive(2, True)
    missed = p.catchup[2]
    assert 5e9 < missed < 9e9
    secs = 0
    while p.catchup and secs < 2000:
        e.step(1.0)
        secs += 1
    rate = float(e.f["in_rate"][p.slot])
    expected = missed / (40e6 - rate)  # the follower gains (throttle - produce rate) per second
    assert expected * 0.8 < secs < expected * 1.2
    assert sorted(p.isr) == [1, 2]
    # the oldest missed bytes had left the leader's page cache (4.8 GB = 480 s of writes): disk reads;
    # the newest were still cached
    assert 0.2 * missed < e.d_read_total[p.log_dirs[1]] < 0.8 * missed


def test_same_seed_same_run() -> None:
    from kafkasim.scenarios.scenario import DEFAULT_SCENARIO

    def run() -> np.ndarray:
        fed = build_federation(DEFAULT_SCENARIO)
        fed.engine.burst_rate_per_hour = 20.0
        fed.engine.advance(600, 10.0)
        return np.concatenate([fed.engine.d_written_total, fed.engine.f["bytes_in_total"]])

    a, b = run(), run()
    assert np.array_equal(a, b)
    assert math.isfinite(float(a.sum())) and a.sum() > 0


def test_slow_disk_raises_util_and_latency() -> None:
    e, c = make()
    t = c.create_topic("s", 1, 1, assignments={0: [1]})
    e.f["base_rate"][t.partitions[0].slot] = 10e6
    e.advance(3, 1.0)
    d = t.partitions[0].log_dirs[1]
    u0, a0 = float(e.d_util[d]), float(e.d_await[d])
    e.d_slow[d] = 10.0
    e.advance(3, 1.0)
    assert e.d_util[d] == pytest.approx(10 * u0, rel=0.05)
    assert e.d_await[d] > 10 * a0


def test_a_log_dir_named_before_the_replica_exists_is_where_the_reassignment_creates_it() -> None:
    # as Kafka's LogManager: AlterReplicaLogDirs for a replica the broker does not host answers
    # ReplicaNotAvailable but remembers the dir; the reassignment that adds the replica then uses it
    for wanted in ("/data1", "/data2"):
        e, c = make()
        t = c.create_topic("y", 1, 2, assignments={0: [1, 2]})
        p = t.partitions[0]
        with pytest.raises(SimError) as err:
            c.alter_log_dir(3, "y", 0, wanted)
        assert err.value.code == 9  # REPLICA_NOT_AVAILABLE
        c.alter_reassignment("y", 0, [1, 3])
        assert p.reassignment is not None
        assert e.disks[p.reassignment.dest_disk[3]].path == wanted
    with pytest.raises(SimError):
        c.alter_log_dir(3, "y", 0, "/nope")  # an unknown dir is still refused outright
