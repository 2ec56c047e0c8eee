"""Migration throttle maths, schedules, rate parsing, and the Prometheus text scrape."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from collectors.disk_rates import DiskRate, DiskScraper, HostSample, parse_host
from controlplane.executor.live import IngressMeter
from controlplane.executor.migration_levers import side_floors
from controlplane.executor.migration_rate import (
    DELIVERY_MAX,
    CopyFlow,
    MigrationRatePolicy,
    NetRate,
    Schedule,
    broker_rates,
    catch_up_floors,
    fair_shares,
    heal_floors,
    parse_rate,
    resources,
)
from controlplane.executor.migration_sides import FOLLOWER
from domain.throttles import ALTER_DIRS_RATE, FOLLOWER_RATE, LEADER_RATE
from kafkaio.endpoints import parse_endpoints
from kafkaio.types import LiveCluster, PartitionMeta, ReplicaDir

NOON = datetime(2026, 11, 22, 12, 0, tzinfo=UTC).timestamp()
NIGHT = datetime(2026, 11, 22, 3, 0, tzinfo=UTC).timestamp()


def test_parse_rate() -> None:
    assert parse_rate("50MB") == 50e6
    assert parse_rate("1.5G") == 1.5e9
    assert parse_rate("800k") == 800e3
    assert parse_rate("1234") == 1234
    with pytest.raises(ValueError, match="bad rate"):
        parse_rate("fast")


def test_schedule_windows_wrap_midnight_and_reject_garbage() -> None:
    s = Schedule.parse("22:00-06:00=200MB,06:00-22:00=40MB")
    assert s.ceiling(NIGHT) == 200e6 and s.ceiling(NOON) == 40e6
    assert Schedule.parse("").ceiling(NOON) == math.inf
    with pytest.raises(ValueError, match="HH:MM"):
        Schedule.parse("nights=1MB")
    with pytest.raises(ValueError, match="bad time"):
        Schedule.parse("25:00-26:00=1MB")


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        MigrationRatePolicy(mode="turbo")
    with pytest.raises(ValueError):
        MigrationRatePolicy(floor=10e6, ceiling=1e6)


FLOW = CopyFlow("a:0>2", "move", 1, 2, (1, "/d1"), (2, "/d1"), 10e6)


def test_adaptive_rate_comes_from_the_headroom_of_the_busiest_disk() -> None:
    disks = {(1, "/d1"): DiskRate(util=0.5, bytes_per_s=100e6, max_bytes_per_s=200e6),   # 10% of it is us
             (2, "/d1"): DiskRate(util=0.3, bytes_per_s=60e6, max_bytes_per_s=200e6)}
    policy = MigrationRatePolicy(util_threshold=0.7, headroom=0.0, gain=1.0, initial=5e6)
    rates = broker_rates([FLOW], disks, policy, {}, NOON)
    # source: u0 = 0.5 * (1 - 0.1) = 0.45 -> (0.7 - 0.45) * 200 MB/s = 50 MB/s; destination allows more
    assert rates[(2, FOLLOWER_RATE)] == pytest.approx(50e6, rel=1e-6)
    assert rates[(1, LEADER_RATE)] == pytest.approx(50e6, rel=1e-6)


def test_adaptive_rate_backs_off_at_once_rises_gradually_and_stays_within_floor_and_schedule() -> None:
    hot = {(1, "/d1"): DiskRate(util=0.95, bytes_per_s=190e6, max_bytes_per_s=200e6)}
    policy = MigrationRatePolicy(util_threshold=0.7, headroom=0.0, floor=2e6, gain=0.5)
    down = broker_rates([FLOW], hot, policy, {(2, FOLLOWER_RATE): 80e6, (1, LEADER_RATE): 80e6}, NOON)
    assert down[(2, FOLLOWER_RATE)] == 2e6  # no headroom: straight to the floor
    cool = {(1, "/d1"): DiskRate(util=0.1, bytes_per_s=20e6, max_bytes_per_s=200e6),
            (2, "/d1"): DiskRate(util=0.1, bytes_per_s=20e6, max_bytes_per_s=200e6)}
    up = broker_rates([FLOW], cool, policy, {(2, FOLLOWER_RATE): 20e6, (1, LEADER_RATE): 20e6}, NOON)
    assert 20e6 < up[(2, FOLLOWER_RATE)] < 120e6  # halfway towards ~ (0.7 - 0.05) * 200 MB/s
    blind = {(1, "/d1"): cool[(1, "/d1")]}  # nothing known of the destination disk: no rise
    assert broker_rates([FLOW], blind, policy, {(2, FOLLOWER_RATE): 20e6, (1, LEADER_RATE): 20e6},
                        NOON)[(2, FOLLOWER_RATE)] == 20e6
    night = MigrationRatePolicy(util_threshold=0.7, headroom=0.0, gain=1.0, schedule=Schedule.parse("06:00-22:00=10MB"))
    assert broker_rates([FLOW], cool, night, {}, NOON)[(2, FOLLOWER_RATE)] == 10e6
    assert broker_rates([FLOW], cool, night, {}, NIGHT)[(2, FOLLOWER_RATE)] > 100e6


def test_flows_share_a_broker_rate_and_unknown_disks_keep_the_previous_rate() -> None:
    flows = [CopyFlow("a>2", "move", 1, 2, None, (2, "/d1"), 0), CopyFlow("b>2", "move", 3, 2, None, (2, "/d2"), 0),
             CopyFlow("c>4", "future", 4, 4, (4, "/d1"), (4, "/d2"), 0)]
    disks = {(2, "/d1"): DiskRate(0.6, 120e6, 200e6), (2, "/d2"): DiskRate(0.2, 40e6, 200e6)}
    policy = MigrationRatePolicy(util_threshold=0.7, headroom=0.0, gain=1.0, initial=7e6)
    rates = broker_rates(flows, disks, policy, {}, NOON)
    assert rates[(2, FOLLOWER_RATE)] == pytest.approx(2 * 20e6)  # the tighter disk's allowance x 2 flows
    assert rates[(4, ALTER_DIRS_RATE)] == 7e6  # no live data for its disks: previous (initial) rate
    assert rates[(1, LEADER_RATE)] == pytest.approx(20e6)  # its one flow is bounded by the destination disk
    fixed = broker_rates(flows, disks, MigrationRatePolicy(mode="fixed", fixed_rate=33e6), {}, NOON)
    assert set(fixed.values()) == {33e6} and len(fixed) == 4


def test_a_fixed_rate_is_raised_until_kafka_delivers_it_and_no_further() -> None:
    """Kafka's quota delivers ~0.8 of a KIP-73 rate: fixed mode sets the rate so the copies get what was asked."""
    policy = MigrationRatePolicy(mode="fixed", fixed_rate=4e6)
    role = (2, FOLLOWER_RATE)

    def rates(observed: float, prev: float | None) -> float:
        flow = CopyFlow("a>2", "move", 1, 2, None, (2, "/d1"), observed)
        return broker_rates([flow], {}, policy, {} if prev is None else {role: prev}, NOON)[role]

    assert rates(0.0, None) == 4e6  # nothing measured yet: the rate asked
    assert rates(3.9e6, 4e6) == 4e6  # within 5 %: unchanged
    rate, delivered = 4e6, 0.0
    for _ in range(8):  # a Kafka that delivers 80 % of the rate in force
        delivered = 0.8 * rate
        rate = rates(delivered, rate)
    assert 0.95 * 4e6 <= 0.8 * rate <= 1.05 * 4e6  # the copies get what was asked, within the deadband
    assert rates(1e6, 4e6) == 4e6 * DELIVERY_MAX  # a copy slow for another reason: bounded rise
    assert rates(6e6, 5e6) < 5e6 and rates(9e6, 4.4e6) == 4e6  # a copy faster than asked: back toward it, not below


PROM = """# HELP x
node_disk_io_time_seconds_total{device="dm-0"} 50 1795000100000
node_disk_read_bytes_total{device="dm-0"} 1000 1795000100000
node_disk_written_bytes_total{device="dm-0"} 9000 1795000100000
node_disk_io_time_seconds_total{device="sdb"} NaN 1795000100000
node_disk_io_time_seconds_total{device="sdc"} 7 1795000100000
node_disk_device_mapper_info{device="dm-0",name="vg_data1-kafka",lv_name="kafka",vg_name="vg_data1"} 1 1795000100000
node_filesystem_size_bytes{device="/dev/mapper/vg_data1-kafka",fstype="xfs",mountpoint="/data1"} 1e12 1795000100000
node_filesystem_size_bytes{device="/dev/sdc",fstype="xfs",mountpoint="/data2"} 1e12 1795000100000
node_filesystem_size_bytes{device="/dev/sda1",fstype="ext4",mountpoint="/"} 1e11 1795000100000
kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99"} 12.5 1795000100000
garbage line
"""


def test_parse_host_maps_devices_to_log_dirs_and_skips_bad_values() -> None:
    hardware = parse_endpoints({"clusters": {"c": {"bootstrap_servers": "h:1", "hardware": [
        {"brokers": [1], "log_dirs": "/data1", "kind": "hdd", "max_bytes_per_s": 2e8}]}}}, "c").hardware
    s = parse_host(PROM, now=5.0, hardware=hardware, broker=1)
    assert s.at == 1795000100 and s.io_time == {"/data1": 50.0, "/data2": 7.0}
    assert s.read_bytes == {"/data1": 1000.0} and s.max_bytes_per_s == {"/data1": 2e8}
    assert s.produce_p99_ms == 12.5
    assert parse_host(PROM, now=5.0).max_bytes_per_s == {}  # nothing declared: no ceiling assumed


def test_scraper_rates_use_measured_time_and_ignore_counter_resets() -> None:
    scraper = DiskScraper({1: "http://127.0.0.1:1/metrics"})
    samples = iter([HostSample(100.0, {"/d": 10.0}, {"/d": 0.0}, {"/d": 0.0}, {"/d": 2e8}),
                    HostSample(110.0, {"/d": 15.0}, {"/d": 0.0}, {"/d": 1e9}, {"/d": 2e8}),
                    HostSample(120.0, {"/d": 1.0}, {"/d": 0.0}, {"/d": 2e9}, {"/d": 2e8}),
                    HostSample(120.0, {"/d": 2.0}, {"/d": 0.0}, {"/d": 3e9}, {"/d": 2e8})])
    scraper._fetch = lambda ids: [next(samples)]  # type: ignore[method-assign]
    scraper.scrape()
    assert scraper.rates == {}
    scraper.scrape()
    assert scraper.rates[(1, "/d")] == DiskRate(0.5, 1e8, 2e8)
    scraper.scrape()  # io counter went backwards: keep the last good rate
    assert scraper.rates[(1, "/d")] == DiskRate(0.5, 1e8, 2e8)
    scraper.scrape()  # zero elapsed time: no rate
    assert scraper.rates[(1, "/d")] == DiskRate(0.5, 1e8, 2e8)
    assert scraper.clock == 120.0


def test_network_headroom_bounds_inter_broker_flows_only() -> None:
    flows = [CopyFlow("a>2", "move", 1, 2, None, None, 30e6), CopyFlow("b>2", "move", 3, 2, None, None, 10e6),
             CopyFlow("c>4", "future", 4, 4, None, None, 0)]
    network = {2: NetRate(in_bytes_per_s=90e6, out_bytes_per_s=0, migration_in_bytes_per_s=40e6),
               1: NetRate(in_bytes_per_s=0, out_bytes_per_s=100e6)}
    res = {r.name: r for r in resources(flows, {}, 0.8, network=network, nic_bytes_per_s=125e6)}
    # broker 2 in: 0.8 * 125 - (90 - 40) = 50 MB/s; broker 1 out: 100 - (100 - 30) = 30 MB/s left
    assert res["nic-in 2"].budget == pytest.approx(50e6) and res["nic-out 1"].budget == pytest.approx(30e6)
    assert all(i != 2 for r in res.values() for i, _ in r.members)  # the intra-broker copy uses no network
    policy = MigrationRatePolicy(util_threshold=0.8, headroom=0.0, gain=1.0, nic_bytes_per_s=125e6, initial=99e6)
    rates = broker_rates(flows, {}, policy, {}, NOON, network)
    assert rates[(2, FOLLOWER_RATE)] == pytest.approx(50e6)  # 25 MB/s for each of its two copies
    assert rates[(1, LEADER_RATE)] == pytest.approx(25e6)  # its NIC would allow 30: the destination holds it at 25
    assert rates[(4, ALTER_DIRS_RATE)] == 99e6


def test_fair_shares_give_what_one_copy_cannot_use_to_the_others() -> None:
    # broker 9 writes three copies to one disk with 90 MB/s left; one of them is held at 10 MB/s by its
    # source's disk, so the other two share the remaining 80 (max-min fair), not 30 each
    flows = [CopyFlow(f"t{i}>9", "move", i, 9, (i, "/d"), (9, "/d")) for i in (1, 2, 3)]
    disks = {(9, "/d"): DiskRate(0.25, 50e6, 200e6), (1, "/d"): DiskRate(0.65, 130e6, 200e6),
             (2, "/d"): DiskRate(0.1, 20e6, 200e6), (3, "/d"): DiskRate(0.1, 20e6, 200e6)}
    res = resources(flows, disks, 0.7)
    shares = fair_shares(flows, res, {r: 1e9 for f in flows for r in ((f.dst_broker, FOLLOWER_RATE),
                                                                        (f.src_broker, LEADER_RATE))})
    assert shares[(1, LEADER_RATE)] == pytest.approx(10e6)
    assert shares[(9, FOLLOWER_RATE)] == pytest.approx(40e6)  # 10 + 40 + 40 = 90 on broker 9's disk
    assert shares[(2, LEADER_RATE)] == pytest.approx(40e6)  # lowered to what its copy can use
    rates = broker_rates(flows, disks, MigrationRatePolicy(util_threshold=0.7, headroom=0.0, gain=1.0), {}, NOON)
    assert rates[(9, FOLLOWER_RATE)] == pytest.approx(120e6)  # 3 copies x 40 (Kafka splits it equally)


def test_measured_migration_per_disk_overrides_the_flows_estimate() -> None:
    # the disk ran at 0.7 util, 60 MB/s of it migration (a copy that finished in the interval included)
    disks = {(2, "/d1"): DiskRate(util=0.7, bytes_per_s=140e6, max_bytes_per_s=200e6)}
    flow = CopyFlow("a>2", "move", 1, 2, None, (2, "/d1"), 0.0)
    policy = MigrationRatePolicy(util_threshold=0.75, headroom=0.0, gain=1.0)
    assert broker_rates([flow], disks, policy, {}, NOON)[(2, FOLLOWER_RATE)] == pytest.approx(10e6)
    rates = broker_rates([flow], disks, policy, {}, NOON, migration={(2, "/d1"): 60e6})
    assert rates[(2, FOLLOWER_RATE)] == pytest.approx(70e6)  # (0.75 - (0.7 - 0.3)) x 200 MB/s


def test_parse_host_reads_broker_network_counters() -> None:
    text = PROM + ("kafka_server_brokertopicmetrics_bytesin_total 100\n"
                   'kafka_server_brokertopicmetrics_bytesin_total{topic="a"} 100\n'
                   "kafka_server_brokertopicmetrics_replicationbytesin_total 50\n"
                   "kafka_server_brokertopicmetrics_reassignmentbytesin_total 25\n"
                   "kafka_server_brokertopicmetrics_bytesout_total 300\n")
    assert parse_host(text, 0).net == {"in": 175.0, "reassign_in": 25.0, "out": 300.0}


def test_a_replica_not_placed_yet_is_bounded_by_its_brokers_busiest_disk() -> None:
    flow = CopyFlow("a>2", "move", 1, 2, None, None, 0.0)
    disks = {(2, "/d1"): DiskRate(0.2, 40e6, 200e6), (2, "/d2"): DiskRate(0.6, 120e6, 200e6)}
    rates = broker_rates([flow], disks, MigrationRatePolicy(util_threshold=0.7, headroom=0.0, gain=1.0), {}, NOON)
    assert rates[(2, FOLLOWER_RATE)] == pytest.approx(20e6)  # (0.7 - 0.6) x 200 MB/s on /d2


def test_a_copy_is_never_throttled_below_what_producers_write_to_its_partition() -> None:
    # the source disk is saturated: headroom alone would pin the rate to the floor (1 MB/s), and a KIP-73
    # throttled follower fetching slower than the partition's 10 MB/s of writes would never catch up
    hot = {(1, "/d1"): DiskRate(util=0.99, bytes_per_s=198e6, max_bytes_per_s=200e6),
           (2, "/d1"): DiskRate(util=0.1, bytes_per_s=20e6, max_bytes_per_s=200e6)}
    flow = CopyFlow("t-0>2", "move", 1, 2, (1, "/d1"), (2, "/d1"), 0.0, ingress_bytes_per_s=10e6)
    for policy in (MigrationRatePolicy(), MigrationRatePolicy(mode="fixed", fixed_rate=2e6)):
        rates = broker_rates([flow], hot, policy, {}, NOON)
        assert rates[(2, FOLLOWER_RATE)] == pytest.approx(12e6)
        assert rates[(1, LEADER_RATE)] == pytest.approx(12e6)
    without = broker_rates([CopyFlow("t-0>2", "move", 1, 2, (1, "/d1"), (2, "/d1"))], hot, MigrationRatePolicy(), {},
                           NOON)
    assert without[(2, FOLLOWER_RATE)] == pytest.approx(MigrationRatePolicy().floor)


def test_ingress_meter_turns_leader_log_growth_into_bytes_per_second_and_skips_shrinks() -> None:

    live = LiveCluster(frozenset({1, 2}), {("t", 0): PartitionMeta("t", 0, (1, 2), 1, (1, 2))}, {"t": 1}, {})

    def dirs(size: int) -> dict[tuple[str, int, int], list[ReplicaDir]]:
        return {("t", 0, 1): [ReplicaDir("/d1", size, 0, False)], ("t", 0, 2): [ReplicaDir("/d1", 5, 0, False)]}

    meter = IngressMeter(smoothing=0.5)
    meter.observe(live, dirs(1_000), 100.0, [("t", 0), ("t", 9)])
    assert meter("t", 0) == 0.0  # one sample: no rate yet
    meter.observe(live, dirs(21_000), 110.0, [("t", 0)])
    assert meter("t", 0) == pytest.approx(2_000)  # the leader's log, not the follower's
    meter.observe(live, dirs(500), 120.0, [("t", 0)])  # retention deleted a segment: the last rate stays
    assert meter("t", 0) == pytest.approx(2_000)
    meter.observe(live, dirs(40_500), 130.0, [("t", 0)])
    assert meter("t", 0) == pytest.approx(3_000)  # smoothed halfway towards 4,000
    meter.observe(live, dirs(50_000), 130.0, [("t", 0)])  # the clock did not move: no rate
    assert meter("t", 0) == pytest.approx(3_000)
    meter.forget()
    assert meter("t", 0) == 0.0


def test_copies_that_end_in_any_order_leave_no_disk_over_its_budget() -> None:
    # broker 6's /d1 is the tight disk (60 MB/s left). x (1 -> 6:/d1) keeps copying; y (4 -> 6:/d1) and
    # z (4 -> 6:/d2) both end before the next pass and share broker 4's leader and broker 6's follower rate
    calm = DiskRate(0.1, 20e6, 200e6)
    disks = {(6, "/d1"): DiskRate(0.45, 90e6, 200e6), (6, "/d2"): calm, (1, "/d1"): calm, (4, "/d1"): calm}
    flows = [CopyFlow("x>6", "move", 1, 6, (1, "/d1"), (6, "/d1"), remaining_bytes=5e9),
             CopyFlow("y>6", "move", 4, 6, (4, "/d1"), (6, "/d1"), remaining_bytes=20e6),
             CopyFlow("z>6", "move", 4, 6, (4, "/d1"), (6, "/d2"), remaining_bytes=10e6)]
    rates = broker_rates(flows, disks, MigrationRatePolicy(util_threshold=0.75, headroom=0.0), {}, NOON,
                         migration={}, horizon_s=5.0)
    follower6, leader4, leader1 = rates[(6, FOLLOWER_RATE)], rates[(4, LEADER_RATE)], rates[(1, LEADER_RATE)]
    budget = (0.75 - 0.45) * 200e6
    x, y = min(follower6 / 3, leader1), min(follower6 / 3, leader4 / 2)
    assert x + y <= budget * 1.001  # all three running
    x, y = min(follower6 / 2, leader1), min(follower6 / 2, leader4)
    assert x + y <= budget * 1.001  # z ended first: y runs on alone at both brokers' bigger shares
    assert x > 0.3 * budget  # and the copy that keeps going still gets a fair part


def test_heal_floors_split_the_allowed_rate_and_lift_the_catch_up_floor() -> None:
    flows = [CopyFlow("t:0>5", "move", 1, 5, (1, "/d1"), (5, "/d1"), ingress_bytes_per_s=1e6),
             CopyFlow("t:1>5", "move", 2, 5, (2, "/d1"), (5, "/d2"), ingress_bytes_per_s=1e6)]
    assert heal_floors(flows, 0.0) == flows
    healed = heal_floors(flows, 100e6)
    assert [f.floor_bytes_per_s for f in healed] == [50e6, 50e6]
    floors = catch_up_floors(healed)
    assert floors[(5, FOLLOWER_RATE)] == 2 * 1.2e6 + 100e6 and floors[(1, LEADER_RATE)] == 1.2e6 + 50e6
    sides = side_floors(healed, {f.key: FOLLOWER for f in healed})
    assert sides[(5, FOLLOWER_RATE)] == 2 * 1.2e6 + 100e6
