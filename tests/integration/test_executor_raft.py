"""The service's path: the same executor on the Raft-backed store, restarted mid-run on its journal."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.reconcile import Executor, ExecutorConfig
from controlplane.state.raft_store import RaftStateStore
from raft.localcluster import free_ports
from tests.support.executor_support import Sim, one_replica_plan, scenario

pytestmark = pytest.mark.timeout(120)


def leader_store(addr: str, data: Path) -> RaftStateStore:
    store = RaftStateStore(addr, [], data)
    deadline = time.monotonic() + 10
    while not store.is_leader:
        assert time.monotonic() < deadline, "single-node raft did not become leader"
        time.sleep(0.05)
    return store


def executor(store: RaftStateStore, sim: Sim) -> Executor:
    view = sim.standalone_view()
    return Executor(store, sim.kafka_admin(),
                    ExecutorConfig("c1", throttle=MigrationRatePolicy(mode="fixed", fixed_rate=10e6)), view, view)


def test_executor_on_raft_state_resumes_after_restart_without_duplicates(tmp_path: Path) -> None:
    sim = Sim(scenario(brokers=6, topics=2, partitions=10, rf=2, size_gb=0.1, speed=20), tmp_path)
    (port,) = free_ports(1)
    addr = f"127.0.0.1:{port}"
    stores: list[RaftStateStore] = []
    try:
        stores.append(leader_store(addr, tmp_path / "raft"))
        first = executor(stores[0], sim)
        first.ensure_cluster(sim.cluster.bootstrap_servers)
        plan = one_replica_plan(sim.live())
        eid = first.start(plan, caps={"per_broker": 2})
        first.run_pass()
        first.run_pass()
        before = Counter(t["state"] for t in (first.execution(eid) or {})["tasks"].values())
        assert before["IN_PROGRESS"] > 0 and before["PENDING"] > 0
        first.admin.close()
        stores.pop().close()  # the node goes away mid-run; its journal stays

        stores.append(leader_store(addr, tmp_path / "raft"))
        second = executor(stores[0], sim)
        active = second.active_execution()
        assert active is not None and active.id == eid
        report = second.run(interval_s=0.2)
        second.admin.close()
        assert report.status == "completed"
        final = second.execution(eid) or {}
        assert Counter(t["state"] for t in final["tasks"].values()) == {"COMPLETED": len(plan.moves)}
        assert set(sim.submissions.values()) == {1} and len(sim.submissions) == len(plan.moves)
        assert sim.leftover_throttles() == {}
        assert stores[0].read(lambda s: s["throttles"].get("c1", {})) == {}
        assert stores[0].read(lambda s: s["plans"][str(final["plan_id"])]["status"]) == "completed"
    finally:
        for s in stores:
            s.close()
        sim.stop()
