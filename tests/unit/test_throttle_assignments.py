"""Partition-level protection on stock Kafka: the client quotas of the consumer-group members assigned the hot
partition (planner with plain data; the round source over the fake's DescribeGroups answers; the service and
``guardian throttle explain`` naming the lever and why)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from collectors.build.records import PartitionDetail
from controlplane.cli.throttle import _print_explain
from controlplane.service.observation import RoundBoard
from controlplane.service.protection import ClusterBinding, ProtectionService
from controlplane.service.protection_source import GroupAssignments, RoundProtectionSource, assignments_of
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain.throttles import CONSUMER_QUOTA, PT_ENABLE
from kafkaio.fake import FakeKafkaCluster
from kafkaio.throttle_writer import ThrottleWriter
from kafkaio.types import GroupDescription, GroupMember
from planners.protection import (
    AssignedClient,
    ClientShare,
    DiskHealth,
    Lineage,
    ProtectionConfig,
    ProtectionInput,
    plan_throttles,
)
from tests.support.throttle_support import MB, hot_snapshot
from tests.unit.test_observation import collected

HOT = {(1, "/d1"): DiskHealth(unhealthy=True)}
AUDIT_TOPIC_CLIENTS = {"orders": (ClientShare("dashboard", 30 * MB), ClientShare("replayer", 10 * MB))}


def quota_plan(lineage: Lineage) -> dict[str, Any]:
    plan = plan_throttles(hot_snapshot(), ProtectionInput(lineage=lineage, partition_throttle=False), HOT)
    return {d.key: d for d in plan.decisions if d.kind == CONSUMER_QUOTA}


# ---------------------------------------------------------------------------------------------- the planner
def test_the_lagging_groups_members_are_throttled_not_the_tailing_ones_nor_the_topics_top_clients() -> None:
    lineage = Lineage(topic_consumers=AUDIT_TOPIC_CLIENTS, assignments={("orders", 0): (
        AssignedClient("replay", "replay-1", reads_disk=True), AssignedClient("tail", "tail-1"))})
    decisions = quota_plan(lineage)
    assert set(decisions) == {"consumer-quota:replay-1"}
    d = decisions["consumer-quota:replay-1"]
    assert d.target["client_id"] == "replay-1" and d.target["quota"] == "consumer_byte_rate"
    assert d.target["lineage"] == "consumer-group assignment"
    assert ("client quota of group replay's members assigned orders-0 (consumer-group assignment): "
            "the cluster has no partition-level throttle") in d.why
    assert d.evidence["mechanism"].startswith("client quota of group replay's members assigned orders-0")
    # its rate: below what the group reads from broker 1 now (half of orders-0's bytes out: two groups read it)
    assert ProtectionConfig().min_rate_bytes_per_s <= d.rate_bytes_per_s < (40 + 120) * MB / 2


def test_without_a_disk_reading_group_every_group_assigned_the_partition_is_throttled_and_it_says_so() -> None:
    lineage = Lineage(assignments={("orders", 0): (AssignedClient("a", "a-1"), AssignedClient("b", "b-1"),
                                                   AssignedClient("b", "b-2"))})
    decisions = quota_plan(lineage)
    assert set(decisions) == {"consumer-quota:a-1", "consumer-quota:b-1", "consumer-quota:b-2"}
    assert all("groups a, b's members assigned orders-0" in d.why and "every group assigned it" in d.why
               for d in decisions.values())


def test_an_undescribable_group_falls_back_to_the_audit_lineage_and_says_why() -> None:
    lineage = Lineage(topic_consumers=AUDIT_TOPIC_CLIENTS,
                      unassigned={("orders", 0): ("group g848 is a KIP-848 consumer group: ...",)})
    decisions = quota_plan(lineage)
    assert "consumer-quota:dashboard" in decisions
    why = decisions["consumer-quota:dashboard"].why
    assert "top clients of the topic" in why and "no member assignment for orders-0: group g848 is a KIP-848" in why
    assert why.endswith("the cluster has no partition-level throttle")


def test_a_cluster_with_the_partition_throttle_ignores_assignments() -> None:
    lineage = Lineage(assignments={("orders", 0): (AssignedClient("replay", "replay-1", True),)})
    plan = plan_throttles(hot_snapshot(), ProtectionInput(lineage=lineage, partition_throttle=True), HOT)
    assert {d.kind for d in plan.decisions} == {"partition_fetch"}
    assert all("partition-level throttle" in d.why for d in plan.decisions)


# ---------------------------------------------------------------------------------------------- the source
def hot_round(board: RoundBoard, util: float = 0.95, capable: bool = False,
              readers: dict[tuple[str, int], PartitionDetail] | None = None) -> None:
    """A round in which broker 1's /d1 (util ``util``) measures 100 MB/s of reads, all attributed to orders-0."""
    snap = hot_snapshot(util=util, await_ms=80.0 if util > 0.85 else 5.0)
    snap = replace(snap, brokers=tuple(
        replace(b, disks=tuple(replace(d, read_bytes_per_s=100 * MB) if (b.id, d.path) == (1, "/d1") else d
                               for d in b.disks)) for b in snap.brokers))
    c = collected(snap, configs={1: {PT_ENABLE: "true"}} if capable else {1: {}})
    c.partitions = readers if readers is not None else {
        ("orders", 0): PartitionDetail(disk_readers=["replay"], cached_readers=["g848", "tail"]),
        ("orders", 1): PartitionDetail(cached_readers=["calm"])}
    board.publish(c, c.snapshot, datetime.now(UTC))


def kafka() -> FakeKafkaCluster:
    fake = FakeKafkaCluster({1: ["/d1", "/d2"], 2: ["/d1", "/d2"], 3: ["/d1"]})
    fake.set_group("replay", [("replay-1", [("orders", 0), ("events", 0)])])
    fake.set_group("tail", [("tail-1", [("orders", 1)]), ("tail-2", [("orders", 0)])])
    fake.set_group("g848", classic=False)
    fake.set_group("calm", [("calm-1", [("orders", 1)])])
    return fake


def test_the_source_describes_only_the_groups_reading_a_warm_disks_partitions_once_per_ttl() -> None:
    board, fake = RoundBoard(), kafka()
    clock = [100.0]
    source = RoundProtectionSource(board, "c1", groups=fake)
    assert source.assignments is not None
    source.assignments.clock = lambda: clock[0]
    hot_round(board)
    lin = source.observe().lineage
    assert fake.calls == [("describe_groups", ("g848", "replay", "tail"))]  # not "calm": orders-1 reads no disk
    assert lin.assignments == {("orders", 0): (AssignedClient("replay", "replay-1", True),
                                               AssignedClient("tail", "tail-2", False))}
    (why,) = lin.unassigned[("orders", 0)]
    assert why.startswith("group g848 is a KIP-848 consumer group") and "ConsumerGroupDescribe" in why
    assert "kafka-python 3.x does not implement" in why
    hot_round(board)
    source.observe()
    assert len(fake.calls) == 1  # within the TTL: no second DescribeGroups
    clock[0] += 31
    hot_round(board)
    source.observe()
    assert len(fake.calls) == 2
    # a calm disk (util under its low mark) costs the cluster nothing
    hot_round(board, util=0.5)
    clock[0] += 31
    assert source.observe().lineage.assignments == {} and len(fake.calls) == 2


def test_a_cluster_with_the_partition_throttle_is_never_asked_for_groups() -> None:
    board, fake = RoundBoard(), kafka()
    hot_round(board, capable=True)
    obs = RoundProtectionSource(board, "c1", groups=fake).observe()
    assert obs.partition_throttle and obs.lineage.assignments == {} and fake.calls == []


def test_a_failed_describe_leaves_the_observation_usable() -> None:
    board, fake = RoundBoard(), kafka()
    fake.fail_next["describe_groups"] = 1
    hot_round(board)
    obs = RoundProtectionSource(board, "c1", groups=fake).observe()
    assert obs.lineage.assignments == {}
    assert obs.lineage.unassigned[("orders", 0)] == ("group g848 was not described", "group replay was not described",
                                                      "group tail was not described")


@pytest.mark.parametrize(("description", "why"), [
    (GroupDescription("g", "Empty", "consumer"), "group g has no member (Empty)"),
    (GroupDescription("g", "Stable", "connect", (GroupMember("m", "w", "/h", ()),)),
     "group g has protocol type 'connect', not a consumer group's"),
    (GroupDescription("g", "PreparingRebalance", "consumer", (GroupMember("m", "c", "/h", (("orders", 1),)),)),
     "no member of group g is assigned orders-0 (PreparingRebalance)"),
    (GroupDescription("g", "Dead", "", (), "GroupIdNotFoundError: Group g not found."),
     "group g: GroupIdNotFoundError: Group g not found."),
])
def test_every_group_that_names_nobody_says_why(description: GroupDescription, why: str) -> None:
    assigned, missing = assignments_of({("orders", 0): (["g"], [])}, {"g": description})
    assert assigned == {} and missing == {("orders", 0): (why,)}


# ---------------------------------------------------------------------------------------------- service + explain
def test_the_service_sets_the_assigned_clients_quota_and_explain_names_the_lever(capsys: pytest.CaptureFixture[str]
                                                                                  ) -> None:
    store = LocalStateStore()
    store.propose({"type": "cluster.register", "meta": meta("admin"), "name": "c1",
                   "bootstrap_servers": ["127.0.0.1:9"]})
    board, fake = RoundBoard(), kafka()
    service = ProtectionService(store)
    service.bind("c1", ClusterBinding(RoundProtectionSource(board, "c1", groups=fake), ThrottleWriter(fake)))
    hot_round(board)
    service.job()
    hot_round(board)
    service.job()
    assert set(fake.quotas) == {"replay-1"} and fake.quotas["replay-1"]["consumer_byte_rate"] > 0
    data = service.explain("c1")
    assert "client-id quotas" in data["levers"] and "no partition-level throttle" in data["levers"]
    assert data["lineage"]["member_assignments"] == {"orders-0": ["replay/replay-1", "tail/tail-2"]}
    _print_explain({**data, "throttles": list(store.read(lambda s: list(s["throttles"]["c1"].values())))})
    printed = " ".join(capsys.readouterr().out.split())
    assert "levers: client-id quotas" in printed
    assert ("client quota of group replay's members assigned orders-0 (consumer-group assignment): the cluster has "
            "no partition-level throttle") in printed
    assert "nothing throttled" not in printed


def test_explain_says_when_nothing_is_throttled(capsys: pytest.CaptureFixture[str]) -> None:
    store = LocalStateStore()
    store.propose({"type": "cluster.register", "meta": meta("admin"), "name": "c1",
                   "bootstrap_servers": ["127.0.0.1:9"]})
    board, fake = RoundBoard(), kafka()
    service = ProtectionService(store)
    service.bind("c1", ClusterBinding(RoundProtectionSource(board, "c1", groups=fake), ThrottleWriter(fake)))
    hot_round(board, util=0.4)
    service.job()
    _print_explain({**service.explain("c1"), "throttles": []})
    printed = " ".join(capsys.readouterr().out.split())
    assert "nothing throttled: 5 disk(s) evaluated, 0 unhealthy; hottest 1:/d1 util 0.40" in printed
    assert fake.quotas == {} and fake.calls == []


def test_group_assignments_caps_the_groups_it_asks_for() -> None:
    board, fake = RoundBoard(), kafka()
    many = {("orders", 0): PartitionDetail(disk_readers=[f"g{i:03d}" for i in range(80)])}
    hot_round(board, readers=many)
    r = board.latest("c1")
    assert r is not None
    GroupAssignments(fake, max_groups=50).lineage(r, ProtectionConfig(), Lineage())
    assert len(fake.calls[0][1]) == 50


def test_a_client_quota_outlasts_the_silences_of_kafkas_muting_and_goes_once_the_flow_stays_gone() -> None:
    """Kafka mutes a throttled client for its throttle time: a quiet evaluation holds the quota; a quota is
    released after ``quota_quiet_samples`` quiet evaluations in a row, and relaxed only while the rate it lets
    through (the lagging client reads all of it) plus the step stays under the low mark."""
    from planners.protection import ActiveThrottle, parse_active  # noqa: F401  (parse_active: the state's shape)

    cfg = ProtectionConfig()
    quiet_disk = hot_snapshot(util=0.05, read=0.0, await_ms=2.0)  # the consumer is muted: no reads this sample
    active = (ActiveThrottle("consumer-quota:replay-1", CONSUMER_QUOTA,
                             {"client_id": "replay-1", "quota": "consumer_byte_rate"}, 80 * MB,
                             {"disk": [1, "/d1"], "original_rate_bytes_per_s": 160 * MB,
                              "causes": [{"topic": "orders", "partition": 0}]}),)
    healthy = {(1, "/d1"): DiskHealth(below=3)}

    def plan(snap: Any, quiet: int) -> Any:
        return plan_throttles(snap, ProtectionInput(active=active, quiet={"consumer-quota:replay-1": quiet}),
                              healthy, cfg)

    held = plan(quiet_disk, 0)
    assert held.decisions == () and held.lever_flows == {"consumer-quota:replay-1": 0.0}
    gone = plan(quiet_disk, cfg.quota_quiet_samples - 1)
    assert [d.action for d in gone.decisions] == ["release"]
    # reading again at its quota (80 MB/s of a 200 MB/s disk), though this sample caught it muted (util 0.05):
    # doubling would let 0.8 through, over the low mark
    reading = hot_snapshot(util=0.05, read=80 * MB, await_ms=2.0)
    assert plan(reading, 0).decisions == ()
