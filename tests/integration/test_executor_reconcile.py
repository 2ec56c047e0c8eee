"""The executor against kafkasim over TCP: full rebalance, broker death, partition expansion."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from kafka.admin import NewPartitions

from controlplane.executor.live import main_dir
from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.reconcile import Executor, ExecutorConfig, PassReport
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain import PartitionMove, Plan
from tests.support.executor_support import Sim, one_replica_plan, scenario

pytestmark = pytest.mark.timeout(120)


def make_executor(sim: Sim, policy: MigrationRatePolicy, store: LocalStateStore | None = None) -> Executor:
    view = sim.standalone_view()
    ex = Executor(store or LocalStateStore(), sim.kafka_admin(),
                  ExecutorConfig("c1", throttle=policy), view, view)
    ex.ensure_cluster(sim.cluster.bootstrap_servers)
    return ex


def tasks_of(ex: Executor, eid: int) -> dict[str, dict[str, Any]]:
    execution = ex.execution(eid)
    assert execution is not None
    return dict(execution["tasks"])


@pytest.mark.parametrize("follower_reads", [False, True])
def test_200_partition_rebalance_completes_within_caps_and_removes_every_throttle(make_sim: Any,
                                                                                  follower_reads: bool) -> None:
    sim = make_sim(scenario(brokers=6, topics=4, partitions=50, rf=2, size_gb=0.05, speed=20))
    live = sim.live()
    plan = one_replica_plan(live)
    assert len(plan.moves) == 200
    ex = make_executor(sim, MigrationRatePolicy(initial=10e6, follower_reads=follower_reads))
    eid = ex.start(plan, caps={"per_broker": 3})
    seen_throttles: list[dict[str, Any]] = []
    max_dest: Counter[int] = Counter()

    def on_pass(report: PassReport) -> None:
        running = [t for t in tasks_of(ex, eid).values() if t["state"] == "IN_PROGRESS"]
        per_dest = Counter(b for t in running for b in t["target_replicas"] if b not in t["source_replicas"])
        for b, n in per_dest.items():
            max_dest[b] = max(max_dest[b], n)
        if len(seen_throttles) < 3 and running:
            seen_throttles.append(sim.leftover_throttles())

    report = ex.run(interval_s=0.2, on_pass=on_pass)
    assert report.status == "completed"
    tasks = tasks_of(ex, eid)
    assert Counter(t["state"] for t in tasks.values()) == {"COMPLETED": 200}
    after = sim.live()
    for move in plan.moves:
        assert after.partitions[move.id].replicas == move.replicas
    assert after.reassignments == {}
    assert max(max_dest.values()) <= 3, f"per-broker cap exceeded: {max_dest}"
    assert any(seen_throttles), "migration throttles were never set while moves ran"
    assert any("follower.replication.throttled.replicas" in str(s) for s in seen_throttles)
    assert sim.leftover_throttles() == {}
    assert ex.store.read(lambda s: s["throttles"].get("c1", {})) == {}
    assert all(n == 1 for n in sim.copy_submissions().values()) and len(sim.submissions) == 200
    led = {tp for tp, lists in sim.submitted.items() if len(lists) > 1}  # a follower read the copy
    assert bool(led) == follower_reads, sorted(led)[:5]
    for tp in led:  # the reader made leader by a reorder (no copy), the copy with it first, the plan's order back
        lists = sim.submitted[tp]  # a reorder is sent again when a pass does not see it yet
        i = next(i for i, r in enumerate(lists) if sorted(r) != sorted(live.partitions[tp].replicas))
        reorders, copy, backs = lists[:i], lists[i], lists[i + 1:]
        assert reorders and all(r == reorders[0] for r in reorders) and reorders[0][0] == copy[0], lists
        assert backs and all(r == list(after.partitions[tp].replicas) != copy for r in backs), lists
    for move in plan.moves:  # every partition ends with the plan's order and its first replica leading
        assert after.partitions[move.id].leader == move.replicas[0] or move.id not in led


def test_stop_with_rollback_gives_follower_reads_their_old_order_and_leader_back(make_sim: Any) -> None:
    sim = make_sim(scenario(brokers=6, topics=2, partitions=30, rf=2, size_gb=0.2, speed=10))
    live = sim.live()
    plan = one_replica_plan(live)
    ex = make_executor(sim, MigrationRatePolicy(initial=4e6, follower_reads=True))
    eid = ex.start(plan, caps={"per_broker": 3})
    for _ in range(40):  # until some follower reads are under way: lead-in done or copying
        ex.run_pass()
        reading = [t for t in tasks_of(ex, eid).values() if t["reader"] is not None and t["state"] == "IN_PROGRESS"]
        if any(t["attempts"] for t in reading):
            break
        time.sleep(0.1)
    assert reading
    ex.stop(eid, rollback=True)
    report = ex.run(interval_s=0.2)
    assert report.status == "stopped"
    after = sim.live()
    assert after.reassignments == {} and sim.leftover_throttles() == {}
    aborted = [t for t in tasks_of(ex, eid).values() if t["reader"] is not None and t["state"] == "ABORTED"]
    assert aborted
    for t in aborted:  # the copy cancelled: the old order, its first replica leading (done: the plan's)
        p = after.partitions[(t["topic"], t["partition"])]
        want = t["source_replicas"] if sorted(p.replicas) == sorted(t["source_replicas"]) else t["target_replicas"]
        assert (list(p.replicas), p.leader) == (want, want[0]), (t["key"], t["reason"], p)


def test_killing_a_destination_broker_cancels_exactly_its_tasks(make_sim: Any) -> None:
    sim = make_sim(scenario(brokers=6, topics=2, partitions=20, rf=2, size_gb=0.5, speed=10))
    live = sim.live()

    def dest(tp: tuple[str, int], p: Any, others: list[int]) -> int:
        rest = [b for b in others if b != 6]
        return 6 if 6 in others and tp[1] % 3 == 0 else rest[tp[1] % len(rest)]

    plan = one_replica_plan(live, dest=dest)
    ex = make_executor(sim, MigrationRatePolicy(mode="fixed", fixed_rate=4e6))
    eid = ex.start(plan, caps={"per_broker": 4, "per_disk": 4})
    affected = {k for k, t in tasks_of(ex, eid).items() if 6 in t["source_replicas"] or 6 in t["target_replicas"]}
    assert affected and len(affected) < len(plan.moves)
    for _ in range(20):
        ex.run_pass()
        if any(tasks_of(ex, eid)[k]["state"] == "IN_PROGRESS" for k in affected
               if 6 in tasks_of(ex, eid)[k]["target_replicas"]):
            break
    in_flight_at_kill = {k for k, t in tasks_of(ex, eid).items() if t["state"] == "IN_PROGRESS"}
    assert in_flight_at_kill & affected
    sim.control("/fault/kill-broker", {"cluster": "c1", "broker": 6})
    sim.control("/speed", {"speed": 300})
    report = ex.run(interval_s=0.2)
    assert report.status == "completed"
    tasks = tasks_of(ex, eid)
    for key, t in tasks.items():
        if key in affected:
            assert t["state"] == "ABORTED", (key, t["state"])
            assert "broker 6" in t["reason"]
        else:
            assert t["state"] == "COMPLETED", (key, t["state"], t["reason"])
    after = sim.live()
    assert after.reassignments == {}
    for key in affected & in_flight_at_kill:
        t = tasks[key]
        assert list(after.partitions[(t["topic"], t["partition"])].replicas) == t["source_replicas"]
    cancelled = {f"{tp[0]}:{tp[1]}" for tp in sim.cancels}
    assert cancelled and cancelled <= affected
    sim.control("/fault/revive-broker", {"cluster": "c1", "broker": 6})
    for _ in range(20):  # no execution left: clears what it still owns (broker 6 was unreachable)
        ex.run_pass()
        if not ex.store.read(lambda s: s["throttles"].get("c1", {})):
            break
        time.sleep(0.2)
    assert sim.leftover_throttles() == {}
    assert ex.store.read(lambda s: s["throttles"].get("c1", {})) == {}


def test_partition_expansion_cancels_only_that_topics_tasks(make_sim: Any) -> None:
    sim = make_sim(scenario(brokers=6, topics=2, partitions=10, rf=2, size_gb=0.5, speed=10))
    plan = one_replica_plan(sim.live())
    ex = make_executor(sim, MigrationRatePolicy(mode="fixed", fixed_rate=4e6))
    eid = ex.start(plan, caps={"per_broker": 5, "per_disk": 5})
    ex.run_pass()
    ex.run_pass()
    started = {k for k, t in tasks_of(ex, eid).items() if t["state"] == "IN_PROGRESS"}
    assert any(k.startswith("t-0:") for k in started)
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(**sim.client_kwargs())
    try:
        client.create_partitions({"t-0": NewPartitions(total_count=12)})
    finally:
        client.close()
    sim.control("/speed", {"speed": 300})
    report = ex.run(interval_s=0.2)
    assert report.status == "completed"
    tasks = tasks_of(ex, eid)
    for key, t in tasks.items():
        if t["topic"] == "t-0":
            assert t["state"] == "ABORTED" and "partition count 10 -> 12" in t["reason"], (key, t)
        else:
            assert t["state"] == "COMPLETED", (key, t)
    after = sim.live()
    assert after.reassignments == {}
    for key in started:
        t = tasks[key]
        if t["topic"] == "t-0":
            assert list(after.partitions[(t["topic"], t["partition"])].replicas) == t["source_replicas"]
    assert sim.leftover_throttles() == {}


def test_caps_change_while_running_and_a_slow_move_does_not_block_others(make_sim: Any) -> None:
    sim = make_sim(scenario(brokers=6, topics=1, partitions=12, rf=2, size_gb=0.2, speed=5))
    plan = one_replica_plan(sim.live())
    ex = make_executor(sim, MigrationRatePolicy(mode="fixed", fixed_rate=1e6))
    eid = ex.start(plan, caps={"per_broker": 1, "per_disk": 9, "per_cluster": 50})

    def in_flight() -> list[dict[str, Any]]:
        return [t for t in tasks_of(ex, eid).values() if t["state"] == "IN_PROGRESS"]

    ex.run_pass()
    assert not in_flight()  # the first pass only measures disk load (a rate needs two scrapes)
    ex.run_pass()
    first = in_flight()
    dests = Counter(b for t in first for b in t["target_replicas"] if b not in t["source_replicas"])
    assert first and max(dests.values()) == 1
    ex.set_caps(eid, {"per_broker": 3, "per_cluster": 4})
    ex.run_pass()
    second = in_flight()
    assert len(second) == 4 > len(first)  # more slots: new moves start while the first ones still copy
    assert {t["key"] for t in first} <= {t["key"] for t in second}
    ex.stop(eid, rollback=True)
    report = ex.run(interval_s=0.1)
    assert report.status == "stopped"
    assert sim.live().reassignments == {} and sim.leftover_throttles() == {}


def test_intra_broker_log_dir_moves_complete_under_the_alter_log_dirs_throttle(make_sim: Any) -> None:
    sim = make_sim(scenario(brokers=4, topics=1, partitions=8, rf=2, size_gb=0.2, speed=10))
    live = sim.live()
    dirs = sim.admin.log_dirs(live.alive)
    moves = []
    for tp, p in sorted(live.partitions.items()):
        lead = p.replicas[0]
        cur = main_dir(dirs, tp[0], tp[1], lead)
        assert cur is not None
        other = "/data2" if cur.log_dir == "/data1" else "/data1"
        moves.append(PartitionMove(tp[0], tp[1], p.replicas, (other, None)))
    plan = Plan("c1", "disk-balance", tuple(moves))
    ex = make_executor(sim, MigrationRatePolicy(mode="fixed", fixed_rate=20e6))
    eid = ex.start(plan, caps={"per_disk": 1})
    assert {t["action"] for t in tasks_of(ex, eid).values()} == {"move_log_dir"}
    saw_rate = False

    def on_pass(report: PassReport) -> None:
        nonlocal saw_rate
        saw_rate = saw_rate or "replica.alter.log.dirs.io.max.bytes.per.second" in str(sim.leftover_throttles())

    report = ex.run(interval_s=0.2, on_pass=on_pass)
    assert report.status == "completed", tasks_of(ex, eid)
    after = sim.admin.log_dirs(live.alive)
    for move in plan.moves:
        got = main_dir(after, *move.id, move.replicas[0])
        assert got is not None and got.log_dir == move.log_dirs[0]
    assert saw_rate, "the intra-broker throttle was never set"
    assert sim.submissions == Counter()  # no inter-broker reassignment for a log-dir move
    assert sim.leftover_throttles() == {}


def test_throttles_are_level_based_respect_protection_and_leave_foreign_entries(make_sim: Any) -> None:
    sim = make_sim(scenario(brokers=6, topics=1, partitions=6, rf=2, size_gb=0.5, speed=5))
    plan = one_replica_plan(sim.live())
    ex = make_executor(sim, MigrationRatePolicy(mode="fixed", fixed_rate=4e6))
    eid = ex.start(plan, caps={"per_broker": 5})
    ex.run_pass()  # measures disk load
    ex.run_pass()
    running = [t for t in tasks_of(ex, eid).values() if t["state"] == "IN_PROGRESS"]
    dest = next(b for b in running[0]["target_replicas"] if b not in running[0]["source_replicas"])
    assert sim.admin.broker_configs([dest])[dest]["follower.replication.throttled.rate"] == "4000000"
    # someone else removes our throttle and adds their own list entry: the next pass puts ours back
    sim.admin.set_broker_configs({dest: {"follower.replication.throttled.rate": None}})
    listed = sim.admin.topic_configs(["t-0"])["t-0"]["follower.replication.throttled.replicas"]
    sim.admin.alter_topic_lists("t-0", "follower.replication.throttled.replicas", append=["5:1"],
                                subtract=listed.split(","))
    # and the disk-protection loop caps migration into `dest`
    ex.store.propose({"type": "throttle.set", "meta": {"who": "throttle-protection", "at": "2026-11-22T01:00:00Z"},
                      "cluster": "c1", "key": f"migration:broker:{dest}", "kind": "migration_rate",
                      "target": {"broker": dest}, "rate_bytes_per_s": 1e6})
    ex.run_pass()
    assert sim.admin.broker_configs([dest])[dest]["follower.replication.throttled.rate"] == "1000000"
    entries = set(sim.admin.topic_configs(["t-0"])["t-0"]["follower.replication.throttled.replicas"].split(","))
    assert set(listed.split(",")) | {"5:1"} <= entries
    ex.stop(eid, rollback=True)
    assert ex.run(interval_s=0.1).status == "stopped"
    leftovers = sim.leftover_throttles()
    assert leftovers == {"topic t-0": {"follower.replication.throttled.replicas": "5:1"}}


def test_stop_without_rollback_lets_in_flight_moves_finish_and_starts_nothing_new(make_sim: Any) -> None:
    sim = make_sim(scenario(brokers=6, topics=1, partitions=12, rf=2, size_gb=0.2, speed=5))
    plan = one_replica_plan(sim.live())
    ex = make_executor(sim, MigrationRatePolicy(mode="fixed", fixed_rate=2e6))
    eid = ex.start(plan, caps={"per_broker": 1})
    ex.run_pass()  # measures disk load
    ex.run_pass()
    in_flight = {k for k, t in tasks_of(ex, eid).items() if t["state"] == "IN_PROGRESS"}
    assert in_flight and len(in_flight) < len(plan.moves)
    ex.stop(eid)
    sim.control("/speed", {"speed": 300})
    assert ex.run(interval_s=0.1).status == "stopped"
    for key, t in tasks_of(ex, eid).items():
        assert t["state"] == ("COMPLETED" if key in in_flight else "ABORTED"), (key, t["state"])
    assert len(sim.submissions) == len(in_flight) and sim.cancels == Counter()
    assert sim.leftover_throttles() == {}


def test_a_move_onto_a_broker_put_in_maintenance_after_proposal_is_refused_and_the_rest_proceed(
        make_sim: Any) -> None:
    sim = make_sim(scenario(brokers=6, topics=2, partitions=10, rf=2, size_gb=0.05, speed=20))
    live = sim.live()
    plan = one_replica_plan(live)
    onto = {m.id: next(b for b in m.replicas if b not in live.partitions[m.id].replicas) for m in plan.moves}
    target = Counter(onto.values()).most_common(1)[0][0]
    ex = make_executor(sim, MigrationRatePolicy(mode="fixed", fixed_rate=50e6))
    eid = ex.start(plan, caps={"per_broker": 2})  # proposed and approved against a cluster without the flag
    ex.store.propose({"type": "maintenance.set", "meta": meta("operator", "rolling restart"), "cluster": "c1",
                      "broker": target, "enabled": True})
    report = ex.run(interval_s=0.2)
    assert report.status == "completed"
    tasks = tasks_of(ex, eid)
    refused = {k for k, t in tasks.items() if t["state"] == "ABORTED"}
    assert refused == {f"{tp[0]}:{tp[1]}" for tp, b in onto.items() if b == target} != set()
    for k in refused:
        assert "refused at submission" in tasks[k]["reason"] and "target-not-alive" in tasks[k]["reason"]
    assert all(t["state"] == "COMPLETED" for k, t in tasks.items() if k not in refused)
    after = sim.live()
    for move in plan.moves:
        expected = live.partitions[move.id].replicas if onto[move.id] == target else move.replicas
        assert after.partitions[move.id].replicas == expected
    assert all(sim.submissions.get(tp, 0) == 0 for tp, b in onto.items() if b == target)
    assert sim.leftover_throttles() == {}
