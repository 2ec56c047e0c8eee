"""Reconcile loop: desired state (Raft) versus actual state (Kafka), in small idempotent batches.

* :mod:`.reconcile` — :class:`Executor`: start a checked plan, run passes of named phases (read, cancel,
  drive, select + place, start, write ahead, rates, throttles, submit, progress); restart-safe through
  write-ahead task states in the :class:`StateStore`. Its collaborators own their state:
  :mod:`.drive` (one started task compared with the cluster: completed, measured or (re)submitted),
  :mod:`.changes` (the pass's write-ahead task transitions), :mod:`.submit` (the pass's requests and how
  they are sent), :mod:`.copy_meter` (copy progress and measured rates), :mod:`.placement` (new replicas'
  log dirs), :mod:`.read_source` (a copy may read from a kept follower made leader for the move),
  :mod:`.migration_levers` (migration rates recorded, then set).
* :mod:`.tasks` — pure: plan -> per-partition tasks, orderings, batch/dependency readiness, caps.
* :mod:`.migration_rate` — pure: KIP-73 / KIP-113 rates from live disk (and optional NIC) headroom and a
  time-of-day schedule, or a fixed rate.
* :mod:`.release` — leadership-first drain of brokers in batches and restore of what a drain moved.
* :mod:`.live` — live cluster read overlaid on observed/declared broker facts -> domain snapshot (for
  ``check_plan``) and current assignments.
* :mod:`.observed` — the executor's view of the observer's round (disk load, broker facts); standalone, a
  collector run once per pass.
* :mod:`.control` — request queue of a local state file (``guardian exec stop/caps``), progress views.
* :mod:`.service` — :class:`ExecutorService`: the service's leader-only loop over every cluster and
  ``start_approved(plan_id)`` for the API, on the Raft-backed store.

The CLI is ``guardian exec run|drain|restore|stop|caps|watch`` (:mod:`controlplane.cli.exec`).
"""

from controlplane.executor.migration_rate import MigrationRatePolicy, Schedule
from controlplane.executor.reconcile import (
    ExecutionConflict,
    Executor,
    ExecutorConfig,
    PassReport,
    PlanRejected,
)

__all__ = [
    "ExecutionConflict",
    "Executor",
    "ExecutorConfig",
    "MigrationRatePolicy",
    "PassReport",
    "PlanRejected",
    "Schedule",
]
