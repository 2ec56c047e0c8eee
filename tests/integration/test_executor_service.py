"""The service's executor loop: an approved plan in the store runs to completion on the leader only."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.service import ExecutorService
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain import plan_to_dict
from tests.support.executor_support import Sim, one_replica_plan, scenario
from tests.support.kafkasim_support import register_fields

pytestmark = pytest.mark.timeout(120)


class FollowerView:
    """The same store seen from a follower node (is_leader False)."""

    def __init__(self, store: LocalStateStore) -> None:
        self._store = store
        self.is_leader = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_approved_plan_executes_on_the_leader_and_not_on_a_follower(tmp_path: Path) -> None:
    sim = Sim(scenario(brokers=5, topics=2, partitions=8, rf=2, size_gb=0.05, speed=20), tmp_path)
    store = LocalStateStore(tmp_path / "state.json")
    service = ExecutorService(store, MigrationRatePolicy(initial=50e6), interval_s=0.1)
    follower = ExecutorService(FollowerView(store), interval_s=0.1)
    try:
        store.propose({"type": "cluster.register", "meta": meta("op"), "name": "c1",
                       **register_fields(sim.endpoints["clusters"]["c1"])})
        plan = one_replica_plan(sim.live())
        plan_id = store.propose({"type": "plan.propose", "meta": meta("planner"), "cluster": "c1",
                                 "kind": "rebalance", "plan": plan_to_dict(plan)})["plan_id"]
        with pytest.raises(Exception, match="approve it"):
            service.start_approved(plan_id)
        store.propose({"type": "plan.approve", "meta": meta("alice", "looks good"), "plan_id": plan_id})
        eid = service.start_approved(plan_id)
        assert service.start_approved(plan_id) == eid  # idempotent while it runs
        assert follower.run_once() == {} and sum(sim.submissions.values()) == 0
        service.start()
        deadline = time.monotonic() + 60
        while store.read(lambda s: s["executions"][str(eid)]["status"]) == "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        service.stop()
        execution = store.read(lambda s: s["executions"][str(eid)])
        assert execution["status"] == "completed"
        assert Counter(t["state"] for t in execution["tasks"].values()) == {"COMPLETED": len(plan.moves)}
        assert store.read(lambda s: s["plans"][str(plan_id)]["status"]) == "completed"
        assert set(sim.submissions.values()) == {1}
        assert sim.leftover_throttles() == {}
    finally:
        service.stop()
        sim.stop()
