"""The shared invariant checker: each violation is detected, valid plans pass."""

from __future__ import annotations

import pytest

from domain import (
    CheckLimits,
    LeaderChange,
    Partition,
    PartitionMove,
    Plan,
    Topic,
    apply_plan,
    check_new_topic,
    check_plan,
    parse_snapshot,
)
from tests.support.snapshots import GIB, dumps, mutated, small_doc

SNAP = parse_snapshot(dumps(small_doc()))


def move(topic: str, part: int, replicas: tuple[int, ...], dirs: tuple[str | None, ...]) -> PartitionMove:
    return PartitionMove(topic=topic, partition=part, replicas=replicas, log_dirs=dirs)


def codes(plan: Plan, snap: object = SNAP, limits: CheckLimits | None = None) -> list[str]:
    return [v.code for v in check_plan(snap, plan, limits)]  # type: ignore[arg-type]


def test_valid_inter_and_intra_broker_moves_pass() -> None:
    plan = Plan(cluster="c1", kind="rebalance", moves=(
        move("orders", 0, (3, 2, 4), ("/data2", "/data1", "/data1")),  # 1 -> 3 (same IDC, free rack)
        move("orders", 1, (2, 1, 4), ("/data2", "/data2", "/data2")),  # intra-broker on broker 2
    ), leaders=(LeaderChange("orders", 0, 2),))
    assert check_plan(SNAP, plan) == []


def test_any_log_dir_is_accepted() -> None:
    plan = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (3, 2, 4), (None, None, None)),))
    assert check_plan(SNAP, plan) == []


@pytest.mark.parametrize(
    ("moves", "code"),
    [
        ((move("orders", 0, (1, 2), ("/data1", "/data1")),), "replication-factor"),
        ((move("orders", 0, (1, 1, 4), ("/data1", "/data2", "/data1")),), "duplicate-broker"),
        ((move("orders", 0, (1, 2, 44), ("/data1", "/data1", "/data1")),), "unknown-broker"),
        ((move("orders", 0, (1, 2, 6), ("/data1", "/data1", "/data1")),), "target-not-alive"),
        ((move("orders", 0, (1, 2, 4), ("/data1", "/data1", "/nope")),), "unknown-log-dir"),
        ((move("orders", 0, (1, 2, 5), ("/data1", "/data1", "/data1")),), "pool-isolation"),
        ((move("orders", 0, (1, 2, 3), ("/data1", "/data1", "/data1")),), "idc-placement"),
        ((move("orders", 9, (1, 2, 4), ("/data1", "/data1", "/data1")),), "unknown-partition"),
        ((move("nope", 0, (1, 2, 4), ("/data1", "/data1", "/data1")),), "unknown-partition"),
        ((move("orders", 0, (3, 2, 4), (None, None, None)), move("orders", 0, (1, 2, 4), (None, None, None))),
         "duplicate-entry"),
    ],
)
def test_each_broken_constraint_is_detected(moves: tuple[PartitionMove, ...], code: str) -> None:
    assert code in codes(Plan(cluster="c1", kind="rebalance", moves=moves))


def test_cluster_mismatch() -> None:
    assert codes(Plan(cluster="other", kind="rebalance")) == ["cluster-mismatch"]


def test_maintenance_and_draining_brokers_are_not_targets() -> None:
    for state in ("maintenance", "draining"):
        snap = parse_snapshot(dumps(mutated(small_doc(), "brokers.2.state", state)))
        plan = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (3, 2, 4), (None, None, None)),))
        assert codes(plan, snap) == ["target-not-alive"]


def test_staying_on_a_dead_broker_is_not_a_new_target() -> None:
    doc = mutated(small_doc(), "brokers.3.state", "dead")  # broker 4 dies; orders-0 keeps a replica there
    snap = parse_snapshot(dumps(doc))
    plan = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (3, 2, 4), ("/data1", "/data1", "/data1")),))
    assert codes(plan, snap) == []


def test_rack_spread_within_an_idc() -> None:
    doc = mutated(small_doc(), "brokers.2.rack", "a-r2")  # broker 3 now shares rack a-r2 with broker 2
    snap = parse_snapshot(dumps(doc))
    plan = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (3, 2, 4), (None, None, None)),))
    assert codes(plan, snap) == ["rack-spread"]


def test_a_new_topic_shares_a_rack_only_where_no_placement_avoids_it() -> None:
    """A new topic's partition is judged by the plans' rule from no replicas: it may share a rack only where every
    set meeting the topic's placement must (before, only where its own IDC counts forced it, so three replicas
    in an IDC of two racks passed while another IDC had a free rack)."""
    snap = parse_snapshot(dumps(mutated(small_doc(), "brokers.2.rack", "a-r2")))  # idc-a: 2 racks, idc-b: 1

    def violations(replicas: tuple[int, ...], placement: dict[str, int] | None) -> list[str]:
        topic = Topic("new", pool="shared", placement=placement, partitions=(
            Partition("new", 0, replicas, replicas[0], replicas, ("/data1",) * len(replicas)),))
        return [v.code for v in check_new_topic(snap, topic)]

    assert violations((1, 2, 3), None) == ["rack-spread"]  # brokers 2 and 3 share a-r2; broker 4's rack is free
    assert violations((1, 2, 4), None) == []
    assert violations((1, 2, 3), {"idc-a": 3}) == []  # the policy forces a third replica into two racks


def test_fixing_a_broken_partition_step_by_step_is_allowed() -> None:
    # orders-0 starts with all three replicas in idc-a (deficit 1 for idc-b); moving one to idc-b fixes it,
    # and a move that keeps the deficit unchanged but touches the partition is refused.
    doc = mutated(small_doc(), "topics.0.partitions.0.replicas", [1, 2, 3])
    doc = mutated(doc, "topics.0.partitions.0.isr", [1, 2, 3])
    snap = parse_snapshot(dumps(doc))
    fixing = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (1, 2, 4), (None, None, None)),))
    assert codes(fixing, snap) == []
    not_fixing = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (1, 3, 2), (None, None, None)),))
    assert codes(not_fixing, snap) == []  # same replica set, reordered: not a placement change
    shuffling = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (1, 2, 3), ("/data2", None, None)),))
    assert codes(shuffling, snap) == []  # intra-broker only, IDC counts unchanged


def test_capacity_headroom() -> None:
    doc = mutated(small_doc(), "brokers.2.disks.1.used_bytes", 950 * GIB)  # broker 3 /data2 is 95% full
    snap = parse_snapshot(dumps(doc))
    plan = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (3, 2, 4), ("/data2", "/data1", "/data1")),))
    assert codes(plan, snap) == ["capacity-headroom"]
    assert codes(plan, snap, CheckLimits(capacity_headroom=0.0)) == []


def test_leader_changes() -> None:
    bad = Plan(cluster="c1", kind="leaders", leaders=(LeaderChange("orders", 0, 3), LeaderChange("orders", 7, 1)))
    assert codes(bad) == ["leader-not-replica", "unknown-partition"]
    snap = parse_snapshot(dumps(mutated(small_doc(), "brokers.3.state", "maintenance")))
    assert codes(Plan(cluster="c1", kind="leaders", leaders=(LeaderChange("orders", 0, 4),)), snap) == [
        "leader-not-alive"]
    # a leader change onto a replica that the same plan adds is fine
    ok = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (3, 2, 4), (None, None, None)),),
              leaders=(LeaderChange("orders", 0, 3),))
    assert codes(ok) == []


def test_plan_limits() -> None:
    plan = Plan(cluster="c1", kind="rebalance", moves=(
        move("orders", 0, (3, 2, 4), (None, None, None)),
        move("orders", 1, (2, 1, 4), ("/data2", "/data2", "/data2")),
    ))
    assert codes(plan, limits=CheckLimits(max_bytes_to_move=GIB)) == ["plan-limit"]
    assert codes(plan, limits=CheckLimits(max_partitions_to_move=1)) == ["plan-limit"]
    assert codes(plan, limits=CheckLimits(max_bytes_to_move=2 * GIB, max_partitions_to_move=2)) == []


def test_violation_messages_name_the_partition() -> None:
    plan = Plan(cluster="c1", kind="rebalance", moves=(move("orders", 0, (1, 2, 6), (None, None, None)),))
    (violation,) = check_plan(SNAP, plan)
    assert str(violation) == "[target-not-alive] orders-0: broker 6 is dead"


def test_apply_plan_follows_kafka_leader_rules() -> None:
    plan = Plan(cluster="c1", kind="rebalance", moves=(
        move("orders", 0, (3, 2, 4), (None, "/data1", "/data1")),  # leader 1 removed -> first target (3)
        move("orders", 1, (4, 2, 3), (None, None, None)),  # leader 2 stays -> keeps leadership
    ))
    after = apply_plan(SNAP, plan).index
    assert after.partition_by_id[("orders", 0)].leader == 3
    assert after.partition_by_id[("orders", 0)].log_dirs == ("/data1", "/data1", "/data1")
    assert after.partition_by_id[("orders", 1)].leader == 2
    # used bytes follow the moves: broker 1 /data1 loses orders-0 (1 GiB), broker 3 /data1 gains it
    assert after.disk_by_id[(3, "/data1")].used_bytes == 2 * GIB  # orders-0 and orders-1 ("any" -> first disk)
    assert after.disk_by_id[(1, "/data1")].used_bytes == 0


def _drained_with_broken_original() -> object:
    """Brokers 1 and 2 share rack a-r2, so orders-0's original replicas (1, 2, 4) broke rack spread; a drain
    of broker 1 moved its replica to broker 3 (3, 2, 4), which holds the rule."""
    doc = mutated(small_doc(), "brokers.0.rack", "a-r2")
    doc = mutated(doc, "topics.0.partitions.0.replicas", [3, 2, 4])
    doc = mutated(doc, "topics.0.partitions.0.isr", [3, 2, 4])
    return parse_snapshot(dumps(mutated(doc, "topics.0.partitions.0.leader", 3)))


def test_a_restore_may_bring_back_a_recorded_placement_that_breaks_a_rule() -> None:
    snap = _drained_with_broken_original()
    recorded = {("orders", 0): (1, 2, 4)}
    back = move("orders", 0, (1, 2, 4), (None, None, None))
    restore = Plan(cluster="c1", kind="restore", moves=(back,))
    assert codes(restore, snap) == ["rack-spread"]  # without the recorded state: "worse than before"
    assert check_plan(snap, restore, recorded=recorded) == []  # type: ignore[arg-type]
    # only a restore, only exactly the recorded set, and every absolute rule still holds
    rebalance = Plan(cluster="c1", kind="rebalance", moves=(back,))
    assert [v.code for v in check_plan(snap, rebalance, recorded=recorded)] == ["rack-spread"]  # type: ignore[arg-type]
    elsewhere = Plan(cluster="c1", kind="restore", moves=(move("orders", 0, (2, 1, 4), (None, None, None)),))
    assert [v.code for v in check_plan(snap, elsewhere, recorded=recorded)] == ["rack-spread"]  # type: ignore[arg-type]
    doc = mutated(mutated(small_doc(), "brokers.0.rack", "a-r2"), "topics.0.partitions.0.replicas", [3, 2, 4])
    doc = mutated(mutated(doc, "topics.0.partitions.0.isr", [3, 2, 4]), "topics.0.partitions.0.leader", 3)
    dead = parse_snapshot(dumps(mutated(doc, "brokers.0.state", "dead")))
    assert [v.code for v in check_plan(dead, restore, recorded=recorded)] == ["target-not-alive"]


def test_checker_shortcuts_give_the_plain_rules() -> None:
    """#20: bytes counted by pair membership when every dir is named, the rack rule's old count skipped when no rack
    is shared after the move, pool isolation by one pass: random moves (other pools, dead and unknown brokers,
    duplicate brokers, "any" dirs) get the plain rules' verdicts."""
    import random

    from domain.spread import rack_spread_broken, racks_by_idc
    from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

    snap = generate_snapshot(GeneratorSpec(brokers=16, disks_per_broker=3, partitions=300, seed=4, racks_per_idc=2,
                                           pools={"a": 0.7, "b": 0.3}, dead_brokers=2))
    index = snap.index
    place = {b.id: (b.idc, b.rack) for b in snap.brokers}
    pool_of = {b.id: b.pool for b in snap.brokers}
    dirs_of = {b.id: [d.path for d in b.disks] for b in snap.brokers}
    rng = random.Random(9)
    seen = set()
    for _ in range(1500):
        p = rng.choice(index.partitions)
        replicas, dirs = list(p.replicas), list[str | None](p.log_dirs)
        for _ in range(rng.randrange(1, 3)):
            k = rng.randrange(len(replicas))
            replicas[k] = rng.choice(list(dirs_of))
            dirs[k] = rng.choice([*dirs_of[replicas[k]], None]) if rng.random() < 0.9 else None
        m = move(p.topic, p.partition, tuple(replicas), tuple(dirs))
        old_pairs = set(zip(p.replicas, p.log_dirs, strict=True))
        copies = sum(1 for b, d in zip(m.replicas, m.log_dirs, strict=True)
                     if b not in p.replicas or (d is not None and (b, d) not in old_pairs))
        plan = Plan(cluster=snap.cluster, kind="rebalance", moves=(m,))
        found = codes(plan, snap, CheckLimits(max_bytes_to_move=copies * p.size_bytes - 1))
        assert "plan-limit" in found
        assert "plan-limit" not in codes(plan, snap, CheckLimits(max_bytes_to_move=copies * p.size_bytes))
        if any(c in found for c in ("unknown-broker", "unknown-log-dir")):
            continue
        pool = index.topic_by_name[p.topic].pool
        outside = sum(1 for b in m.replicas if pool_of[b] != pool)
        want_pool = bool(outside and m.replicas != p.replicas
                         and outside >= sum(1 for b in p.replicas if pool_of.get(b) != pool))
        assert ("pool-isolation" in found) == want_pool
        if len(set(m.replicas)) == len(m.replicas) and set(m.replicas) == set(p.replicas):
            assert "rack-spread" not in found
            continue
        racks = racks_by_idc((b.idc, b.rack) for b in snap.brokers if b.pool == pool and b.is_alive)
        want_rack = bool(rack_spread_broken(p.replicas, m.replicas, place, racks,
                                            snap.placement_of(index.topic_by_name[p.topic])))
        assert ("rack-spread" in found) == want_rack
        seen.add((want_pool, want_rack))
    assert {(False, False), (False, True), (True, False)} <= seen
