"""ProtectionService with fake ports: recording with evidence, stale/failed observations, reconcile, retries."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from controlplane.service.protection import AlertRecord, ClusterBinding, ProtectionService
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain.throttles import MIGRATION, PARTITION_FETCH, Lever
from planners.protection import WHO, Observation, Transfer
from tests.support.throttle_support import MB, hot_snapshot


class FakeSource:
    def __init__(self) -> None:
        self.snapshot = hot_snapshot()
        self.fail: Exception | None = None
        self.transfers: tuple[Transfer, ...] = ()

    def observe(self) -> Observation:
        if self.fail is not None:
            raise self.fail
        return Observation(snapshot=replace(self.snapshot, taken_at=datetime.now(UTC)), partition_throttle=True,
                           transfers=self.transfers)


class FakeActuator:
    def __init__(self) -> None:
        self.levers: dict[tuple[str, str], float] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail_remove = False

    @staticmethod
    def _k(kind: str, target: Mapping[str, Any]) -> tuple[str, str]:
        return kind, repr(sorted(target.items()))

    def apply(self, lever: Lever) -> None:
        assert lever.rate is not None
        self.calls.append(("apply", lever.kind))
        self.levers[self._k(lever.kind, lever.target)] = lever.rate

    def remove(self, lever: Lever) -> None:
        self.calls.append(("remove", lever.kind))
        if self.fail_remove:
            raise ConnectionError("broker unreachable")
        self.levers.pop(self._k(lever.kind, lever.target), None)


def setup() -> tuple[LocalStateStore, ProtectionService, FakeSource, FakeActuator]:
    store = LocalStateStore()
    store.propose({"type": "cluster.register", "meta": meta("admin"), "name": "c1",
                   "bootstrap_servers": ["127.0.0.1:9"]})
    service = ProtectionService(store)
    source, actuator = FakeSource(), FakeActuator()
    service.bind("c1", ClusterBinding(source, actuator))
    return store, service, source, actuator


def throttles(store: LocalStateStore) -> dict[str, Any]:
    return dict(store.read(lambda s: dict(s["throttles"].get("c1", {}))))


def test_two_hot_samples_throttle_with_evidence_then_release_after_recovery() -> None:
    store, service, source, actuator = setup()
    assert service.job()[0]["decisions"] == []  # k = 2: one hot sample is not enough
    result = service.job()[0]
    assert [d["action"] for d in result["decisions"]] == ["set"]
    t = throttles(store)["fetch:orders:0"]
    assert t["set_by"] == WHO and t["kind"] == PARTITION_FETCH
    assert t["evidence"]["util"] == 0.95 and t["evidence"]["queue"][0]["topic"] == "orders"
    assert actuator.levers == {(PARTITION_FETCH, repr(sorted({"topic": "orders", "partition": 0}.items()))):
                               t["rate_bytes_per_s"]}
    # the consumer caught up: no more disk reads, disk calm -> released after the hysteresis
    source.snapshot = hot_snapshot(util=0.2, read=0.0, await_ms=3.0)
    service.job()
    service.job()
    assert throttles(store) == {} and actuator.levers == {}
    actions = store.read(lambda s: [a["type"] for a in s["actions"] if a["who"] == WHO])
    assert actions == ["throttle.set", "throttle.clear"]


def test_failed_or_stale_observation_skips_without_acting() -> None:
    store, service, source, actuator = setup()
    source.fail = TimeoutError("scrape timed out")
    assert "observation failed" in service.job()[0]["skipped"]
    source.fail = None
    source.snapshot = replace(source.snapshot)
    service.clock = lambda: datetime.now(UTC) + timedelta(hours=1)  # snapshot looks an hour old
    assert "old" in service.job()[0]["skipped"]
    assert actuator.calls == [] and throttles(store) == {}
    assert service.explain("c1")["skipped"]


def test_nan_metrics_are_missing_samples_not_crashes() -> None:
    _store, service, source, _ = setup()
    nan_disk = replace(source.snapshot.brokers[0].disks[0], util=math.nan, await_ms=math.inf)
    broker = replace(source.snapshot.brokers[0], disks=(nan_disk, *source.snapshot.brokers[0].disks[1:]))
    source.snapshot = replace(source.snapshot, brokers=(broker, *source.snapshot.brokers[1:]))
    for _ in range(3):
        assert service.job()[0]["decisions"] == []
    assert service.health["c1"][(1, "/d1")].missing == 3


def test_release_failure_is_retried_and_new_leader_reapplies() -> None:
    store, service, source, _actuator = setup()
    service.job()
    service.job()
    assert throttles(store)
    # a new leader (fresh service, same replicated state) re-applies what the state says is in force
    fresh_actuator = FakeActuator()
    new_leader = ProtectionService(store)
    new_leader.bind("c1", ClusterBinding(source, fresh_actuator))
    new_leader.job()
    assert list(fresh_actuator.levers.values()) == [throttles(store)["fetch:orders:0"]["rate_bytes_per_s"]]
    # removal fails: the throttle stays recorded (not left behind silently) and is retried next pass
    source.snapshot = hot_snapshot(util=0.2, read=0.0, await_ms=3.0)
    fresh_actuator.fail_remove = True
    new_leader.job()
    out = new_leader.job()[0]
    assert any("error" in d for d in out["decisions"]) and throttles(store)
    fresh_actuator.fail_remove = False
    new_leader.job()
    assert throttles(store) == {} and fresh_actuator.levers == {}


def test_manual_throttles_are_applied_and_removed_by_the_loop() -> None:
    store, service, source, actuator = setup()
    source.snapshot = hot_snapshot(util=0.2, read=0.0, await_ms=3.0)
    store.propose({"type": "throttle.set", "meta": meta("alice", "noisy neighbour"), "cluster": "c1",
                   "key": "manual-1", "kind": PARTITION_FETCH, "target": {"topic": "events", "partition": 1},
                   "rate_bytes_per_s": 1 * MB})
    service.job()
    assert list(actuator.levers.values()) == [1 * MB]
    service.job()
    assert "manual-1" in throttles(store)  # the protection never releases someone else's throttle
    store.propose({"type": "throttle.clear", "meta": meta("alice"), "cluster": "c1", "key": "manual-1"})
    service.job()
    assert actuator.levers == {}


def test_alerts_are_idempotent_and_unknown_clusters_are_skipped() -> None:
    _, service, _, _ = setup()
    alert = AlertRecord("f1", "c1", (1, "/d1"), "firing", "t0", {}, "now")
    first = service.on_alerts([alert])
    assert first["firing"] == 1 and first["evaluations"][0]["decisions"][0]["key"] == "fetch:orders:0"
    again = service.on_alerts([alert])
    assert again["duplicates"] == 1 and again["evaluations"] == []
    ghost = service.on_alerts([AlertRecord("f2", "nope", (1, "/d1"), "firing", "t0", {}, "now")])
    assert "unknown cluster" in ghost["evaluations"][0]["skipped"]


def test_thresholds_come_from_the_settings_file(tmp_path) -> None:
    from controlplane.config import load_settings
    from controlplane.service.protection import throttle_config
    from domain import ContractError, DiskKind

    good = tmp_path / "g.toml"
    good.write_text("[throttle]\ntarget_util = 0.6\n[throttle.thresholds.ssd]\nutil_high = 0.9\nutil_low = 0.5\n"
                    "await_high_ms = 8\nawait_low_ms = 2\nenter_samples = 3\n")
    cfg = throttle_config(load_settings(good).throttle)
    assert cfg.target_util == 0.6 and cfg.thresholds[DiskKind.SSD].enter_samples == 3
    assert cfg.thresholds[DiskKind.HDD].util_high == 0.85  # unconfigured kinds keep the defaults
    bad = tmp_path / "b.toml"
    bad.write_text("[throttle.thresholds.hdd]\nutil_high = 0.5\nutil_low = 0.7\n")
    try:
        load_settings(bad)
    except ContractError as exc:
        assert any(p.path.startswith("$.throttle.thresholds.hdd") for p in exc.problems), exc.problems
    else:
        raise AssertionError("inverted marks must be rejected")


def test_during_an_execution_the_migration_lever_is_a_recorded_ceiling_for_the_executor() -> None:
    store, service, source, actuator = setup()
    source.snapshot = hot_snapshot(read=0.0)
    source.transfers = (Transfer("reassign", "events", 1, (3, "/d1"), (1, "/d1"), 150 * MB),)
    plan_id = store.propose({"type": "plan.propose", "meta": meta("op"), "cluster": "c1", "kind": "rebalance",
                             "plan": {}})["plan_id"]
    store.propose({"type": "plan.approve", "meta": meta("op"), "plan_id": plan_id})
    execution = store.propose({"type": "execution.start", "meta": meta("op"), "plan_id": plan_id,
                               "tasks": []})["execution_id"]
    service.job()
    out = service.job()[0]
    (decision,) = out["decisions"]
    assert decision["kind"] == MIGRATION and decision["deferred_to_executor"] is True
    assert "executor" in throttles(store)["migration:broker:1"]["evidence"]["enforced_by"]
    assert actuator.calls == []  # the executor owns KIP-73 rates while it runs
    store.propose({"type": "execution.finish", "meta": meta("op"), "execution_id": execution,
                   "status": "completed"})
    service.job()  # no execution any more: the recorded lever is applied by the reconcile
    assert ("apply", MIGRATION) in actuator.calls
