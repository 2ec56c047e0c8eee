"""Per-execution throttle settings and chained migration steps, against the in-memory Kafka fake."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.reconcile import Executor, ExecutorConfig
from controlplane.executor.service import ExecutorService
from controlplane.executor.settings import SettingsError, policy_for, throttle_settings
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain import PartitionMove, Plan, plan_to_dict
from domain.throttles import FOLLOWER_RATE
from kafkaio.fake import FakeKafkaCluster

GB = 1_000_000_000
BASE = MigrationRatePolicy(mode="fixed", fixed_rate=10e6)


def test_settings_are_normalised_and_bad_ones_name_their_key() -> None:
    assert throttle_settings({"mode": "fixed", "fixed_rate": "40MB", "schedule": "22:00-06:00=200MB",
                              "util_threshold": 0.6, "ceiling": 3e8}) == {
        "mode": "fixed", "fixed_rate": 40e6, "schedule": "22:00-06:00=200MB", "util_threshold": 0.6, "ceiling": 3e8}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"mode": "fast"}, "mode"), ({"floor": "lots"}, "floor"), ({"schedule": "25:00-01:00=1MB"}, "schedule"),
        ({"util_threshold": 2}, "util_threshold"), ({"speed": 1}, "speed"), ({"fixed_rate": -1}, "fixed_rate"),
        ({"floor": "500MB"}, "throttle"), ({"follower_reads": "yes"}, "follower_reads")]
    for bad, key in cases:
        with pytest.raises(SettingsError, match=f"^{key}:"):
            throttle_settings(bad)


def test_policy_for_lays_the_recorded_settings_over_the_configured_policy() -> None:
    policy = policy_for(BASE, {"throttle": {"fixed_rate": 25e6, "schedule": "00:00-24:00=5MB"}})
    assert (policy.mode, policy.fixed_rate, policy.util_threshold) == ("fixed", 25e6, BASE.util_threshold)
    assert policy.schedule.ceiling(1_800_000_000) == 5e6
    assert policy_for(BASE, {}) is BASE
    adaptive = MigrationRatePolicy()
    assert policy_for(adaptive, {"throttle": throttle_settings({"follower_reads": True}, adaptive)}).follower_reads
    assert not adaptive.follower_reads  # opt-in: two leader changes per partition that uses it
    with pytest.raises(SettingsError, match=r"^throttle: follower reads need the adaptive throttle"):
        throttle_settings({"follower_reads": True}, BASE)  # asked for, but a fixed rate would silently ignore it
    assert throttle_settings({"follower_reads": True, "mode": "adaptive"}, BASE)["follower_reads"]
    assert policy_for(BASE, {"throttle": {"floor": 9e9}}) is BASE  # never accepted by the API: ignored, logged


def start(options: dict[str, Any] | None) -> tuple[FakeKafkaCluster, LocalStateStore, int]:
    """Brokers 1-4; topic ``t`` partition 0 on [1, 2] moving to [3, 2], started as an approved plan."""
    fake = FakeKafkaCluster({b: ("/d1", "/d2") for b in (1, 2, 3, 4)})
    fake.add_topic("t", [[1, 2]], size_bytes=GB)
    store = LocalStateStore()
    executor = Executor(store, fake, ExecutorConfig("c1", throttle=BASE))
    executor.ensure_cluster(fake.bootstrap_servers)
    plan = Plan("c1", "rebalance", (PartitionMove("t", 0, (3, 2), (None, None)),))
    plan_id = store.propose({"type": "plan.propose", "meta": meta("op"), "cluster": "c1", "kind": "rebalance",
                             "plan": plan_to_dict(plan)})["plan_id"]
    store.propose({"type": "plan.approve", "meta": meta("op"), "plan_id": plan_id})
    return fake, store, executor.start_approved(plan_id, plan, options=options, by="op")


def test_an_execution_runs_under_its_recorded_throttle_and_so_does_the_next_leader() -> None:
    fake, store, _ = start({"throttle": {"fixed_rate": 25e6}})
    first = Executor(store, fake, ExecutorConfig("c1", throttle=BASE))
    for _ in range(3):
        first.run_pass()
    assert fake.broker_cfg[3] == {FOLLOWER_RATE: "25000000"}  # the execution's rate, not the configured 10 MB/s
    fake.broker_cfg[3] = {FOLLOWER_RATE: "1"}  # a new leader (a new process) takes over from the record alone
    second = Executor(store, fake.view(), ExecutorConfig("c1", throttle=BASE))
    second.run_pass()
    assert fake.broker_cfg[3] == {FOLLOWER_RATE: "25000000"}


def test_the_schedule_recorded_on_an_execution_caps_its_rate() -> None:
    fake, store, _ = start({"throttle": {"fixed_rate": 50e6, "schedule": "00:00-24:00=5MB"}})
    executor = Executor(store, fake, ExecutorConfig("c1", throttle=BASE))
    for _ in range(3):
        executor.run_pass()
    assert fake.broker_cfg[3] == {FOLLOWER_RATE: "5000000"}


def steps_service(moves: list[tuple[int, ...]]) -> tuple[FakeKafkaCluster, LocalStateStore, ExecutorService, int]:
    """A migration of ``t``-0 through the replica sets ``moves`` (one approved plan per step)."""
    fake = FakeKafkaCluster({b: ("/d1", "/d2") for b in (1, 2, 3, 4, 5, 6)})
    fake.add_topic("t", [[1, 2, 3]], size_bytes=GB)
    store = LocalStateStore()
    store.propose({"type": "cluster.register", "meta": meta("op"), "name": "c1", "bootstrap_servers": ["fake:9092"]})
    service = ExecutorService(store, BASE, bind=lambda name, rec: (fake, None, None))
    steps = []
    for replicas in moves:
        plan = Plan("c1", "migrate-idc", (PartitionMove("t", 0, replicas, (None,) * len(replicas)),))
        plan_id = store.propose({"type": "plan.propose", "meta": meta("op"), "cluster": "c1", "kind": plan.kind,
                                 "plan": plan_to_dict(plan)})["plan_id"]
        store.propose({"type": "plan.approve", "meta": meta("op"), "plan_id": plan_id})
        steps.append(plan_id)
    mid = store.propose({"type": "migration.start", "meta": meta("alice", "to idc-b"), "cluster": "c1",
                         "topics": ["t"], "placement": {"idc-b": 3}, "steps": steps, "caps": {"per_broker": 2},
                         "options": {"throttle": {"fixed_rate": 30e6}}})["migration_id"]
    return fake, store, service, mid


def migration(store: LocalStateStore, mid: int) -> dict[str, Any]:
    return dict(store.read(lambda s: dict(s["migrations"][str(mid)])))


def test_steps_run_one_after_another_each_after_the_previous_completed() -> None:
    fake, store, service, mid = steps_service([(4, 2, 3), (4, 5, 3), (6, 5, 4)])
    running: list[tuple[int, ...]] = []
    for _ in range(60):
        service.run_once()
        m = migration(store, mid)
        active = store.read(lambda s: [e for e in s["executions"].values() if e["status"] == "running"])
        assert len(active) <= 1
        if active:
            running.append(tuple(active[0]["tasks"]["t:0"]["target_replicas"]))
        if m["status"] != "running":
            break
        fake.finish()
    assert m["status"] == "completed", m
    assert list(dict.fromkeys(running)) == [(4, 2, 3), (4, 5, 3), (6, 5, 4)]
    assert fake.live().partitions[("t", 0)].replicas == (6, 5, 4)
    records = store.read(lambda s: {k: dict(v) for k, v in s["executions"].items()})
    executions = [records[str(e)] for e in m["executions"]]
    assert [e["options"]["migration"]["step"] for e in executions] == [1, 2, 3]
    assert all(e["started_by"] == "alice" and e["caps"]["per_broker"] == 2 for e in executions)
    assert all(e["options"]["throttle"] == {"fixed_rate": 30e6} for e in executions)


def test_a_step_the_cluster_refuses_fails_the_migration_and_nothing_further_starts() -> None:
    fake, store, service, mid = steps_service([(4, 2, 3), (9, 2, 3)])  # broker 9 does not exist
    for _ in range(30):
        service.run_once()
        fake.finish()
        if migration(store, mid)["status"] != "running":
            break
    m = migration(store, mid)
    assert m["status"] == "failed" and "step 2 of 2" in m["reason"] and "refuses" in m["reason"]
    assert len(m["executions"]) == 1


def test_a_stopped_migration_starts_no_further_step() -> None:
    fake, store, service, mid = steps_service([(4, 2, 3), (4, 5, 3)])
    service.run_once()
    store.propose({"type": "migration.stop", "meta": meta("bob", "change of plan"), "migration_id": mid})
    for _ in range(20):
        service.run_once()
        fake.finish()
    m = migration(store, mid)
    assert m["status"] == "stopped" and m["reason"] == "change of plan" and len(m["executions"]) == 1
    assert store.read(lambda s: s["plans"][str(m["steps"][1])]["status"]) == "approved"
