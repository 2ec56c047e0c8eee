"""The per-cluster execution lease and Cruise Control's foreign-reassignment rule, against the in-memory cluster.

Two executors are two :class:`Executor` objects with their own stores over two views of one fake cluster
(shared topics, configs and lease log); the lease log's clock is the fake's, moved by the test.
"""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.executor.conflicts import ForeignReassignments
from controlplane.executor.lease import ExecutionLease, LeaseHeld, LeaseLost, LeaseOwner
from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.reconcile import Executor, ExecutorConfig
from controlplane.executor.service import ExecutorService
from controlplane.state.store import LocalStateStore
from domain import PartitionMove, Plan, plan_to_dict
from domain.lease import CLAIM, RELEASE, RENEW, LeaseRecord, child, fold
from domain.throttles import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS
from kafkaio.fake import FakeKafkaCluster

GB = 1_000_000_000
TTL_S = 10.0


def cluster() -> FakeKafkaCluster:
    fake = FakeKafkaCluster({b: ("/d1", "/d2") for b in (1, 2, 3, 4)})
    fake.add_topic("t", [[1, 2], [2, 1], [1, 3]], size_bytes=GB)
    return fake


def executor(fake: FakeKafkaCluster, name: str, kind: str = "cli") -> Executor:
    view = fake.view()
    owner = LeaseOwner(kind, f"host-{name}", 100 + len(name), f"guardian-exec-{name}", identity=f"{name}-state")
    lease = ExecutionLease(view, "c1", owner, TTL_S, clock=lambda: fake.clock_ms / 1000,
                           monotonic=lambda: fake.clock_ms / 1000)
    ex = Executor(LocalStateStore(), view,
                  ExecutorConfig("c1", throttle=MigrationRatePolicy(mode="fixed", fixed_rate=10e6)), lease=lease)
    ex.ensure_cluster(fake.bootstrap_servers)
    return ex


def plan(*moves: tuple[int, tuple[int, ...]]) -> Plan:
    return Plan("c1", "rebalance", tuple(PartitionMove("t", p, r, (None,) * len(r)) for p, r in moves))


def record(op: str, token: str, tip: LeaseRecord | None, offset: int, ts: int, ttl: int = 1000) -> LeaseRecord:
    r = child(tip, op, token, ttl)
    return LeaseRecord.from_bytes(r.to_bytes(), offset, ts)  # type: ignore[return-value]


# ---------------------------------------------------------------------- the fold (pure)
def test_the_first_claim_on_the_log_wins_a_race_and_renewals_chain() -> None:
    a = record(CLAIM, "A", None, 0, 100)
    b = record(CLAIM, "B", None, 1, 101)  # B read the same empty log: it lost
    assert fold([a, b]) == a
    a2 = record(RENEW, "A", a, 2, 500)
    assert fold([a, b, a2]) == a2
    early = record(CLAIM, "B", a2, 3, 1400)  # before A's renewal expires (500 + 1000)
    assert fold([a, b, a2, early]) == a2
    late = record(CLAIM, "B", a2, 4, 1500)
    assert fold([a, b, a2, early, late]) == late
    stale = record(RENEW, "A", a2, 5, 1600)  # A paused past its TTL: its renewal no longer counts
    assert fold([a, b, a2, early, late, stale]) == late
    released = record(RELEASE, "B", late, 6, 1700)
    again = record(CLAIM, "A", released, 7, 1701)  # a release frees the lease at once
    assert fold([a, b, a2, early, late, stale, released, again]) == again


def test_a_log_cut_by_retention_still_folds_to_the_same_holder() -> None:
    a = record(CLAIM, "A", None, 0, 100)
    a2 = record(RENEW, "A", a, 1, 500)
    loser = record(CLAIM, "B", a, 2, 600)  # premature claim on A's first record, before it expired
    a3 = record(RENEW, "A", a2, 3, 900)
    full = fold([a, a2, loser, a3])
    assert full == a3
    # retention deleted offsets 0 and 1: the loser's parent and A's renewal's parent are gone
    assert fold([loser, a3], first_offset=2) == a3
    # incremental folding from a known tip gives the same answer as folding everything
    assert fold([loser, a3], fold([a, a2])) == a3
    # garbage in the log is ignored
    assert LeaseRecord.from_bytes(b"kafkasim-simulated-record", 9, 0) is None


# ---------------------------------------------------------------------- two executors
def test_a_second_executor_refuses_naming_the_holder_until_it_finishes() -> None:
    fake = cluster()
    first, second = executor(fake, "first"), executor(fake, "second", kind="service")
    eid = first.start(plan((0, (3, 2))))
    with pytest.raises(LeaseHeld) as refused:
        second.start(plan((1, (4, 1))))
    message = str(refused.value)
    assert "cli executor pid 105 on host-first" in message and f"execution {eid}" in message and "until" in message
    assert second.active_execution() is None
    assert fake.submissions == {}
    for _ in range(10):  # the holder runs to completion and hands the lease back
        fake.finish()
        if first.run_pass().finished:
            break
    assert first.execution(eid)["status"] == "completed"  # type: ignore[index]
    assert not first.lease.held  # type: ignore[union-attr]
    assert second.execution(second.start(plan((1, (4, 1)))))["status"] == "running"  # type: ignore[index]


def test_an_executor_whose_lease_was_taken_acts_no_more() -> None:
    fake = cluster()
    first, second = executor(fake, "first"), executor(fake, "second")
    first.start(plan((0, (3, 2))))
    first.run_pass()
    fake.clock_ms += int(TTL_S * 1000) + 1  # the first one stalls past its TTL
    second.start(plan((1, (4, 1))))
    sent = dict(fake.submissions)
    with pytest.raises(LeaseLost):
        first.run_pass()
    assert fake.submissions == sent


def test_a_resumed_executor_with_the_same_identity_reclaims_its_lease_at_once() -> None:
    fake = cluster()
    first = executor(fake, "first")
    first.start(plan((0, (3, 2))))
    first.run_pass()
    again = executor(fake, "first")  # same state identity (a CLI run again on the same state file)
    again.store = first.store
    again.throttles.store = first.store
    again.run_pass()
    assert again.lease.held  # type: ignore[union-attr]
    assert fake.cancels == {}  # its own move is not an orphan


# ---------------------------------------------------------------------- foreign reassignments
def test_foreign_reassignments_in_flight_refuse_a_start() -> None:
    fake = cluster()
    fake.alter_reassignments({("t", 2): [4, 3]})  # someone else's kafka-reassign-partitions run
    ex = executor(fake, "first")
    with pytest.raises(ForeignReassignments) as refused:
        ex.start(plan((0, (3, 2))))
    assert "t-2 (adding [4], removing [1])" in str(refused.value)
    assert ex.active_execution() is None and not ex.lease.held  # type: ignore[union-attr]
    assert executor(fake, "second").lease.holder() is None  # type: ignore[union-attr]  # handed back: free
    fake.finish()
    assert ex.execution(ex.start(plan((0, (3, 2)))))["status"] == "running"  # type: ignore[index]


# ---------------------------------------------------------------------- a dead executor's leftovers
def run_until_copying(fake: FakeKafkaCluster, ex: Executor) -> None:
    for _ in range(3):
        ex.run_pass()
    assert fake.live().reassignments


def test_the_next_executor_cancels_a_dead_ones_moves_and_removes_its_throttles() -> None:
    fake = cluster()
    fake.topic_cfg["t"] = {FOLLOWER_REPLICAS: "9:9"}  # someone else's entry: never removed
    dead = executor(fake, "dead")
    dead.start(plan((0, (3, 2)), (1, (4, 1))))
    run_until_copying(fake, dead)
    assert fake.broker_cfg[3].get(FOLLOWER_RATE) and LEADER_REPLICAS in fake.topic_cfg["t"]
    on_cluster: Any = dead.lease.tip.throttles  # type: ignore[union-attr]
    assert set(on_cluster["brokers"]) >= {"3", "4"} and "t" in on_cluster["topics"]
    assert set(dead.lease.tip.moves) == {"t:0", "t:1"}  # type: ignore[union-attr]
    # the process dies (kill -9): nothing more from it. Before its lease expires, others are refused.
    successor = executor(fake, "next")
    with pytest.raises(LeaseHeld, match="host-dead"):
        successor.start(plan((2, (4, 3))))
    fake.clock_ms += int(TTL_S * 1000) + 1
    eid = successor.start(plan((2, (4, 3))))
    cancels = successor.admin.cancels  # type: ignore[attr-defined]
    assert cancels[("t", 0)] == 1 and cancels[("t", 1)] == 1  # reverted, never left unthrottled
    assert fake.live().reassignments == {}
    assert all(not {LEADER_RATE, FOLLOWER_RATE} & set(cfg) for cfg in fake.broker_cfg.values())
    assert fake.topic_cfg["t"] == {FOLLOWER_REPLICAS: "9:9"}
    assert successor.lease.tip.inherited == {}  # type: ignore[union-attr]
    assert successor.execution(eid)["status"] == "running"  # type: ignore[index]


def test_the_service_records_a_refused_start_in_the_action_log() -> None:
    fake = cluster()
    holder = executor(fake, "cli-run")
    holder.start(plan((0, (3, 2))))
    store = LocalStateStore()
    service = ExecutorService(store, bind=lambda name, rec: (fake.view(), None, None), group="raft-a,raft-b")
    store.propose({"type": "cluster.register", "meta": {"who": "t", "why": "", "at": "2026-01-01T00:00:00Z"},
                   "name": "c1", "bootstrap_servers": ["fake:9092"]})
    pid = store.propose({"type": "plan.propose", "meta": {"who": "t", "why": "", "at": "2026-01-01T00:00:00Z"},
                         "cluster": "c1", "kind": "rebalance", "plan": plan_to_dict(plan((1, (4, 1))))})["plan_id"]
    store.propose({"type": "plan.approve", "meta": {"who": "t", "why": "", "at": "2026-01-01T00:00:00Z"},
                   "plan_id": pid})
    with pytest.raises(LeaseHeld):
        service.start_approved(pid, why="operator asked")
    refused = store.read(lambda s: [a for a in s["actions"] if a["type"] == "execution.refused"])
    assert len(refused) == 1 and "host-cli-run" in refused[0]["result"]["reason"]
    assert refused[0]["result"]["plan_id"] == pid


def test_the_service_loop_cleans_up_after_an_executor_whose_lease_expired() -> None:
    fake = cluster()
    fake.clock_ms = int(__import__("time").time() * 1000) - 60_000  # the dead executor ran a minute ago
    dead = executor(fake, "dead")
    dead.start(plan((0, (3, 2))))
    run_until_copying(fake, dead)
    assert any(cfg for cfg in fake.broker_cfg.values()) and fake.live().reassignments
    fake.clock_ms += int(TTL_S * 1000) + 1  # its lease expired (the log leader's clock moved on)
    store = LocalStateStore()
    store.propose({"type": "cluster.register", "meta": {"who": "t", "why": "", "at": "2026-01-01T00:00:00Z"},
                   "name": "c1", "bootstrap_servers": ["fake:9092"]})
    service = ExecutorService(store, bind=lambda name, rec: (fake.view(), None, None), group="raft-a")
    service.run_once()  # nothing to execute; the sweep finds the expired lease with leftovers
    assert fake.live().reassignments == {}
    assert all(not cfg for cfg in fake.broker_cfg.values())
    assert LEADER_REPLICAS not in fake.topic_cfg.get("t", {})
    holder = executor(fake, "other").lease.holder()  # type: ignore[union-attr]
    assert holder is None  # handed back after cleaning
