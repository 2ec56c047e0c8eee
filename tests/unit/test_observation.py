"""The published round and its consumers, with fakes: throttle protection's mapping and once-per-round
evaluation, the executor's disk load and broker facts, the live snapshot's facts (no guessed IDC or disk
kind), and the levers over a fake Kafka port."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from collectors.builder import PLACEHOLDER_DIR, Collected, CopyInFlight
from collectors.completeness import Coverage
from collectors.disk_rates import DiskRate
from collectors.pagecache import attributed_disk_reads
from controlplane.executor.live import live_snapshot
from controlplane.executor.observed import ObservedCluster
from controlplane.executor.release import drain_plan
from controlplane.service.observation import RoundBoard
from controlplane.service.protection import ClusterBinding, ProtectionService
from controlplane.service.protection_source import ObserveError, RoundProtectionSource, lineage_of, observation_of
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain import PartitionMove, Plan, check_plan
from domain.throttles import FOLLOWER_RATE, FOLLOWER_REPLICAS, MIGRATION, PARTITION_FETCH, PT_ENABLE, PT_FETCH, Lever
from kafkaio.endpoints import BrokerInfo, ClusterEndpoints
from kafkaio.throttle_writer import ThrottleWriter
from kafkaio.types import LiveCluster, PartitionMeta, Reassignment, ReplicaDir
from tests.support.throttle_support import MB, disk, hot_snapshot, part, snapshot
from tests.unit.test_protection_service import FakeActuator


def collected(snap: Any = None, *, first: bool = False, metrics: Iterable[int] = (1, 2, 3),
              copies: Iterable[CopyInFlight] = (), clock: float | None = 500.0,
              configs: Mapping[int, dict[str, str]] | None = None) -> Collected:
    snap = snap if snap is not None else hot_snapshot()
    cov = Coverage(cluster=snap.cluster, taken_at=snap.taken_at.timestamp(),
                   brokers_alive=[b.id for b in snap.brokers], brokers_with_metrics=list(metrics), first_round=first)
    return Collected(snapshot=snap, coverage=cov, behaviours={}, partitions={}, throttles={}, quotas=[],
                     copies=list(copies), broker_configs=dict(configs or {1: {PT_ENABLE: "true"}}), sample_clock=clock)


def publish(board: RoundBoard, c: Collected) -> None:
    board.publish(c, c.snapshot, datetime.now(UTC))


# ---------------------------------------------------------------------- the two estimates, named apart
def test_round_carries_both_disk_read_estimates_under_their_own_names() -> None:
    board = RoundBoard()
    publish(board, collected())
    r = board.latest("c1")
    assert r is not None and r.seq == 1
    # the collectors' position estimate is the snapshot's field as collected
    assert r.position_disk_reads == {("orders", 0): 120 * MB, ("events", 0): 2 * MB}
    # the attribution estimate splits the disks' measured reads (none measured here): nothing attributed
    assert r.attributed_disk_reads == {}
    hot = replace(hot_snapshot(), brokers=tuple(
        replace(b, disks=tuple(replace(d, read_bytes_per_s=100 * MB) if (b.id, d.path) == (1, "/d1") else d
                               for d in b.disks)) for b in hot_snapshot().brokers))
    publish(board, collected(hot))
    r2 = board.latest("c1")
    assert r2 is not None and r2.seq == 2
    reads = r2.attributed_disk_reads
    assert set(reads) <= {("orders", 0), ("events", 0)}  # the partitions led on 1:/d1
    assert sum(reads.values()) == pytest.approx(100 * MB)
    assert r2.position_disk_reads == r.position_disk_reads  # the other estimate is untouched


def test_attribution_subtracts_copy_reads_and_never_exceeds_fetch_traffic() -> None:
    snap = snapshot({1: [replace(disk("/d1"), read_bytes_per_s=50 * MB)], 2: [disk("/d1")]},
                    [part("t", 0, [1, 2], ["/d1", "/d1"], bytes_in=1 * MB, bytes_out=4 * MB)])
    assert attributed_disk_reads(list(snap.iter_partitions()), snap.brokers, {}) == {("t", 0): 4 * MB}
    assert attributed_disk_reads(list(snap.iter_partitions()), snap.brokers, {(1, "/d1"): 50 * MB}) == {}


# ---------------------------------------------------------------------- throttle protection
def test_observation_maps_the_round_for_the_planner() -> None:
    snap = hot_snapshot()
    snap = replace(snap, brokers=(*snap.brokers[:2], replace(snap.brokers[2], disks=(
        *snap.brokers[2].disks, disk(PLACEHOLDER_DIR)))))
    copies = [CopyInFlight("reassign", "orders", 1, (2, "/d2"), (3, "/d1"), 5 * MB),
              CopyInFlight("intra_broker", "events", 1, (3, PLACEHOLDER_DIR), (3, "/d1"), 1 * MB),
              CopyInFlight("reassign", "events", 0, (1, "/d1"), (2, PLACEHOLDER_DIR), 1 * MB)]
    board = RoundBoard()
    publish(board, collected(snap, copies=copies))
    r = board.latest("c1")
    assert r is not None
    obs = observation_of(r, partition_throttle=True)
    assert obs.round_seq == 1 and obs.partition_throttle
    assert all(d.path != PLACEHOLDER_DIR for b in obs.snapshot.brokers for d in b.disks)
    assert [(t.kind, t.source, t.dest) for t in obs.transfers] == [
        ("reassign", (2, "/d2"), (3, "/d1")), ("intra_broker", None, (3, "/d1"))]
    # the planner weighs the attribution estimate, not the collectors' position estimate
    assert all(p.disk_read_bytes_per_s == r.attributed_disk_reads.get(p.id, 0.0)
               for p in obs.snapshot.iter_partitions())


def test_lineage_sums_clients_per_partition_and_topic() -> None:
    lin = lineage_of({("fetch", "orders", 0): {"billing": 3.0, "": 1.0}, ("fetch", "orders", 1): {"billing": 2.0},
                      ("produce", "orders", 0): {"svc": 4.0}})
    assert [s.client_id for s in lin.fetch[("orders", 0)]] == ["billing"]
    assert lin.topic_consumers["orders"][0].bytes_per_s == 5.0
    assert lin.topic_producers["orders"][0].client_id == "svc"


def test_throttle_source_refuses_without_a_usable_round() -> None:
    board = RoundBoard()
    source = RoundProtectionSource(board, "c1")
    with pytest.raises(ObserveError, match="no collection round"):
        source.observe()
    publish(board, collected(metrics=()))
    with pytest.raises(ObserveError, match="no broker metrics"):
        source.observe()
    publish(board, collected(first=True))  # protection acts on a first (partial) round; planning would not
    assert source.observe().round_seq == 2


def test_the_throttle_loop_evaluates_each_round_once_and_alerts_at_once() -> None:
    store = LocalStateStore()
    store.propose({"type": "cluster.register", "meta": meta("admin"), "name": "c1",
                   "bootstrap_servers": ["127.0.0.1:9"]})
    board = RoundBoard()
    service = ProtectionService(store)
    actuator = FakeActuator()
    service.bind("c1", ClusterBinding(RoundProtectionSource(board, "c1"), actuator))
    publish(board, collected(replace(hot_snapshot(), taken_at=datetime.now(UTC))))
    first = service.evaluate("c1")
    assert "skipped" not in first
    again = service.evaluate("c1")
    assert again["skipped"] == "no new collection round since the last evaluation"
    assert service.last["c1"].plan is not None  # explain keeps the evaluation of the round
    assert "skipped" not in service.evaluate("c1", trigger="alert", only={(1, "/d1")})
    publish(board, collected(replace(hot_snapshot(), taken_at=datetime.now(UTC))))
    assert "skipped" not in service.evaluate("c1")


# ---------------------------------------------------------------------- the executor's view
def test_executor_view_reads_disk_load_clock_and_facts_from_the_round() -> None:
    board = RoundBoard()
    declared = ClusterEndpoints("c1", "x:1", (BrokerInfo(1, idc="idc-declared", pool="pay"),
                                              BrokerInfo(9, idc="idc-z")))

    def latest() -> Collected | None:
        r = board.latest("c1")
        return None if r is None else r.collected

    view = ObservedCluster(latest, declared=declared)
    assert view.scrape() == {} and view.clock is None
    assert view.facts()[9].idc == "idc-z"  # no round: the declared facts alone
    publish(board, collected(first=True))
    assert view.scrape() == {}  # a first round has no rates
    snap = hot_snapshot()
    publish(board, collected(snap, metrics=(1, 2), clock=610.0))
    rates = view.scrape()
    assert set(rates) == {(1, "/d1"), (1, "/d2"), (2, "/d1"), (2, "/d2")}  # broker 3 was not scraped
    assert rates[(1, "/d1")] == DiskRate(0.95, 0.0, 200 * MB)
    assert view.scrape({2}).keys() == {(2, "/d1"), (2, "/d2")}
    assert view.clock == 610.0
    facts = view.facts()
    assert facts[1].idc == "idc-a" and facts[1].pool == "shared"  # observed wins over declared
    assert facts[1].disks["/d1"].max_bytes_per_s == 200 * MB and facts[9].idc == "idc-z"


def live(alive: Iterable[int], parts: Mapping[tuple[str, int], tuple[int, ...]],
         racks: Mapping[int, str]) -> LiveCluster:
    return LiveCluster(frozenset(alive), {tp: PartitionMeta(tp[0], tp[1], r, r[0], r) for tp, r in parts.items()},
                       {t: 1 for t, _ in parts}, {}, dict(racks))


def test_live_snapshot_guesses_no_idc_and_no_disk_kind() -> None:
    lc = live({1, 2, 3}, {("orders", 0): (1, 2)}, {1: "idc-a-r1", 2: "idc-b-r1", 3: "idc-b-r2"})
    dirs = {("orders", 0, 1): [ReplicaDir("/d1", 10, 0, False)], ("orders", 0, 2): [ReplicaDir("/d1", 10, 0, False)]}
    capacity = {(b, "/d1"): (10**12, 10**12) for b in (1, 2, 3)}
    declared = ClusterEndpoints("c1", "x:1", (BrokerInfo(1, idc="idc-a"), BrokerInfo(2, idc="idc-b")))
    snap = live_snapshot("c1", lc, dirs, capacity, declared)
    idc = {b.id: b.idc for b in snap.brokers}
    assert idc == {1: "idc-a", 2: "idc-b", 3: "unknown"}  # broker 3's rack "idc-b-r2" names no IDC
    assert all(not b.disks for b in snap.brokers)  # nobody observed or declared the disks' kind and speed
    # a placement policy touching the broker of unknown IDC is refused, not silently valid
    placed = replace(snap, topics=tuple(replace(t, placement={"idc-a": 1, "idc-b": 1}) for t in snap.topics))
    to_unknown = Plan("c1", "rebalance", (PartitionMove("orders", 0, (1, 3), (None, None)),))
    assert [v.code for v in check_plan(placed, to_unknown)] == ["idc-placement"]
    # with the round's facts the same broker's disks and IDC are known
    view = ObservedCluster(lambda: collected(snapshot({1: [disk("/d1")], 2: [disk("/d1")], 3: [disk("/d1")]}, [])))
    observed = live_snapshot("c1", lc, dirs, capacity, view)
    assert {b.idc for b in observed.brokers} == {"idc-a"} and all(len(b.disks) == 1 for b in observed.brokers)


def test_drain_keeps_replicas_in_their_idc_only_when_an_idc_is_known() -> None:
    lc = live({1, 2, 3}, {("t", 0): (1, 3)}, {1: "idc-a-r1", 2: "idc-b-r1", 3: "idc-a-r2"})
    declared = ClusterEndpoints("c1", "x:1", (BrokerInfo(1, idc="idc-a"), BrokerInfo(2, idc="idc-b"),
                                              BrokerInfo(3, idc="idc-a")))
    plan, _, _ = drain_plan("c1", lc, [1], endpoints=declared)
    assert plan.moves[0].replicas == (3, 2)  # no idc-a broker left but 3 (already a replica): least loaded
    unknown = ClusterEndpoints("c1", "x:1", ())
    plan2, _, _ = drain_plan("c1", lc, [1], endpoints=unknown)
    assert plan2.moves[0].replicas == (3, 2)


# ---------------------------------------------------------------------- levers over the port
class FakeKafka:
    """The lever-facing part of :class:`kafkaio.port.KafkaCluster`, in memory."""

    bootstrap_servers = "fake:1"

    def __init__(self) -> None:
        self.topic: dict[str, dict[str, str]] = {"orders": {PT_FETCH: "1:500"}, "events": {}}
        self.broker: dict[int, dict[str, str]] = {}
        self.quotas: dict[str, dict[str, float]] = {}
        self.moving: dict[tuple[str, int], Reassignment] = {("orders", 0): Reassignment((1, 2), (2,), ())}

    def topic_configs(self, topics: Iterable[str], keys: Iterable[str] = ()) -> dict[str, dict[str, str]]:
        return {t: {k: v for k, v in self.topic.get(t, {}).items() if k in set(keys)} for t in topics}

    def set_topic_configs(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        for t, cfg in changes.items():
            for k, v in cfg.items():
                if v is None:
                    self.topic[t].pop(k, None)
                else:
                    self.topic[t][k] = v

    def set_broker_configs(self, changes: Mapping[int, Mapping[str, str | None]]) -> None:
        for b, cfg in changes.items():
            for k, v in cfg.items():
                if v is None:
                    self.broker.setdefault(b, {}).pop(k, None)
                else:
                    self.broker.setdefault(b, {})[k] = v

    def alter_topic_lists(self, topic: str, key: str, append: Iterable[str] = (), subtract: Iterable[str] = ()) -> None:
        have = [e for e in self.topic[topic].get(key, "").split(",") if e]
        have = [e for e in have if e not in set(subtract)] + [e for e in append if e not in have]
        self.topic[topic][key] = ",".join(have)

    def set_client_quotas(self, client_id: str, quotas: Mapping[str, float | None]) -> None:
        for k, v in quotas.items():
            if v is None:
                self.quotas.setdefault(client_id, {}).pop(k, None)
            else:
                self.quotas.setdefault(client_id, {})[k] = v

    def live(self) -> LiveCluster:
        return LiveCluster(frozenset({1, 2}), {("orders", 0): PartitionMeta("orders", 0, (1, 2), 1, (1,)),
                                               ("events", 0): PartitionMeta("events", 0, (1, 2), 1, (1, 2))},
                           {"orders": 1, "events": 1}, dict(self.moving))


def test_levers_merge_partition_rates_and_leave_nothing_behind() -> None:
    kafka = FakeKafka()
    levers = ThrottleWriter(kafka)  # type: ignore[arg-type]
    levers.apply(Lever(PARTITION_FETCH, {"topic": "orders", "partition": 0}, 1234.7))
    assert kafka.topic["orders"][PT_FETCH] == "0:1234,1:500"
    levers.remove(Lever(PARTITION_FETCH, {"topic": "orders", "partition": 1}))
    levers.remove(Lever(PARTITION_FETCH, {"topic": "orders", "partition": 0}))
    assert PT_FETCH not in kafka.topic["orders"]
    levers.apply(Lever(MIGRATION, {"broker": 2}, 5e6))
    assert kafka.broker[2][FOLLOWER_RATE] == "5000000" and kafka.topic["orders"][FOLLOWER_REPLICAS] == "0:2"
    kafka.topic["events"][FOLLOWER_REPLICAS] = "0:2,0:1"  # an entry of a move that finished meanwhile
    levers.remove(Lever(MIGRATION, {"broker": 2}))
    assert FOLLOWER_RATE not in kafka.broker[2]
    assert kafka.topic["orders"][FOLLOWER_REPLICAS] == "" and kafka.topic["events"][FOLLOWER_REPLICAS] == "0:1"
    levers.apply(Lever.of("consumer_quota", {"client_id": "billing"}, 1e6))
    assert kafka.quotas["billing"] == {"consumer_byte_rate": 1e6}
    levers.remove(Lever.of("consumer_quota", {"client_id": "billing"}))
    assert kafka.quotas["billing"] == {}
    with pytest.raises(ValueError):
        levers.apply(Lever.of("nonsense", {}, 1.0))
    with pytest.raises(ValueError, match="needs broker"):  # nothing is sent for a lever without its target
        levers.apply(Lever(MIGRATION, {}, 5e6))
    with pytest.raises(ValueError):  # a lever without a rate is a removal, never an apply
        levers.apply(Lever(MIGRATION, {"broker": 2}))
    with pytest.raises(ValueError):  # the executor's verbs take throttle keys only
        levers.set_migration_rates(2, {"log.retention.ms": "1"})
    with pytest.raises(ValueError):
        levers.change_throttled_replicas("orders", "cleanup.policy", append=["0:2"])
