"""How ``make test`` schedules the suite: most modules on two pytest-xdist workers, some alone.

Goal: the whole CI run within ~30 minutes on two cores without making timing-sensitive tests flaky.

Method: every test gets a marker from the module it is in, so that ``make test`` runs two phases —
``-m "not lab and not serial"`` on two workers (``--dist loadfile``: a module's tests and its module-scoped
fixtures stay on one worker), then ``-m "lab or serial"`` in one process:

* ``lab``: the modules that start real Kafka brokers (``guardian lab``: four JVMs that take both cores) —
  the port conformance suite under ``tests/contract/`` and every ``test_lab_*.py``;
* ``serial``: the modules whose assertions are about time under faults (Raft elections and failover,
  lease expiry, heal deadlines, a Spark standalone cluster's start) and that a second busy worker slows
  past their bounds; each is listed in :data:`SERIAL_MODULES` with why.

The first phase hands out whole modules (xdist's ``loadfile``), biggest first by test count; the modules in
:data:`LONG_WAITS_FIRST` (one test that mostly waits for minutes) go out before all others instead, so the other
worker carries the rest meanwhile and the phase never ends waiting for one of them alone.

Guarantee: a module is in exactly one phase, so each test runs once. Cost: nothing at collection.
"""

from __future__ import annotations

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

SERIAL_MODULES = {
    # Raft elections, failover and damaged journals: election and heartbeat timeouts against the wall clock
    "integration/test_raft_cluster.py", "integration/test_raft_damage.py", "integration/test_service_reliability.py",
    "integration/test_executor_failover.py", "integration/test_service_stalls.py", "integration/test_read_bursts.py",
    "integration/test_rolling_upgrade.py", "integration/test_raft_node.py", "integration/test_raft_big_plan.py",
    # execution leases that must (or must not) have expired by a deadline
    "integration/test_executor_lease.py", "integration/test_executor_cli.py",
    # heal deadlines on kafkasim's clock
    "integration/test_self_healing.py",
    # a Spark standalone master and worker (two JVMs) per test
    "integration/test_analytics_spark_cluster.py",
}


LONG_WAITS_FIRST = {
    # issue 38's error budget: guardian serve against sim up --realistic for 5 minutes (~25 CPU-s)
    "integration/test_serve_error_budget.py",
}


class LongWaitsFirst(LoadFileScheduling):
    """xdist's ``loadfile`` scheduling with the modules of :data:`LONG_WAITS_FIRST` handed out first."""

    def _assign_work_unit(self, node: WorkerController) -> None:
        for scope in [s for s in self.workqueue if any(s.endswith("/" + m) for m in LONG_WAITS_FIRST)]:
            self.workqueue.move_to_end(scope, last=False)
        super()._assign_work_unit(node)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadFileScheduling | None:
    return LongWaitsFirst(config, log) if config.getvalue("dist") == "loadfile" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path
        if "contract" in path.parts or path.name.startswith("test_lab_"):
            item.add_marker(pytest.mark.lab)
        elif f"{path.parent.name}/{path.name}" in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
