"""The executor's reconcile loop: desired state (the store) versus actual state (Kafka), in small batches.

Goal: drive the active execution of one cluster to completion — every move within the caps, throttled,
cancelled when the cluster changes under it — and be safe to stop, crash or fail over at any instant.

Method: level-based reconcile (controller-runtime's). Every pass re-reads the cluster and runs the same
named phases (:meth:`Executor.run_pass` reads like this list):

1. **read** — the cluster's execution lease held (:mod:`.lease`: another executor's lease stops the pass),
   metadata, in-flight reassignments, the log dirs of started tasks, live disk load;
2. **cancel** — a task whose old or new replica set has a dead broker, or whose topic was deleted or
   changed partition count, is cancelled with the reason recorded (the others continue); ``stop``
   aborts what has not started (with rollback, what has; a started task is ABORTED once the cluster shows
   nothing of it and, for a follower read, its old order and leader are back: :meth:`~.drive.TaskDriver.undo`);
3. **drive** — each started task is compared with the cluster (:mod:`.drive`): completed, progress
   recorded, or — when the cluster shows it neither in flight nor done on two passes running — re-sent
   (bounded by ``max_attempts``);
4. **select** — ready tasks (batches, dependencies, leadership first) in the chosen order, as slots free
   up under the per-broker / per-disk / per-cluster caps (read from the store every pass), once live disk
   load is known (the first pass of a process only measures); the new replicas the plan lets the broker
   place are **placed** here (:mod:`.placement`), since the per-disk cap counts them; with follower reads
   (an opt-in of the adaptive throttle) each pending copy's reader is chosen first (:mod:`.read_source`),
   and the ordering, caps, placement and rates count its reads on that reader's disk (a started task's
   on its recorded reader's, also while the reader is being made leader);
5. **start** — each selected task is re-checked with the replicated policies overlaid (what only they
   forbid is refused with the reason recorded), started, and its requests prepared (:mod:`.submit`);
6. **write ahead** — every state change and attempt count is committed (:mod:`.changes`), and the moves in
   flight recorded in the lease, *before* the cluster is touched; cancels are sent first;
7. **rates** — KIP-73 / KIP-113 rates from live disk headroom, the migration each disk carried
   (:mod:`.copy_meter`), the work left per disk and the schedule, with the side each copy is throttled on
   (:mod:`.migration_sides`, :mod:`.migration_rate`);
8. **throttles** — the cluster's migration throttles made equal to them, recorded before set
   (:mod:`.migration_levers`); then **submit** — copies whose throttle failed are held, the rest sent, and a
   rate that rises is raised only after its new copies started;
9. **progress** — bytes, rate and ETA recorded; with nothing open, the throttles are removed and the
   execution finishes; else the pass says when the next is due if sooner than the loop's interval — when a
   copy is expected to end, so its slots and disk budget go to the next copy at once (``next_pass_s``).

Guarantee: a pass that finds a move in flight or done never sends it again, so a crash or failover
never loses nor duplicates a submission (tasks are IN_PROGRESS in the store before anything is sent); a
copy never runs unthrottled; no throttle outlives the execution (leftovers of an earlier run are removed
by the next pass); one executor per cluster at a time — a start takes the cluster's lease and is refused
while another executor holds it or reassignments it does not own are in flight. Each collaborator owns
its state: :class:`~.copy_meter.CopyMeter` (copy rates),
:class:`~.placement.Placement` (this pass's disk choices), :class:`~.migration_levers.MigrationLevers`
(rates in force and commanded), :class:`~.drive.TaskDriver` (the passes a task went unseen); the executor
keeps only the disk load and this pass's readers (a started task's reader and its leader changes' requests
are task fields, replicated).

Cost: per pass one metadata read, one log-dir read of the brokers of started tasks, one disk scrape, a
config read per throttle kind, at most five write calls, and a lease renewal (append + read) every TTL/3
or when the moves or throttles it records change; O(tasks) work.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from collectors.disk_rates import DiskLoad, DiskRate
from controlplane.executor.changes import TaskChanges
from controlplane.executor.conflicts import ExecutionConflict
from controlplane.executor.copy_meter import CopyMeter
from controlplane.executor.drive import REFUSED, TaskDriver, cancel_reason
from controlplane.executor.lease import ExecutionLease, LeaseGuard, throttle_record
from controlplane.executor.live import (
    DirMap,
    FactsSource,
    IngressMeter,
    current_partitions,
    live_snapshot,
)
from controlplane.executor.migration_levers import THROTTLE_PREFIX, MigrationLevers
from controlplane.executor.migration_rate import CopyFlow, MigrationRatePolicy, NetRate, heal_floors
from controlplane.executor.placement import Placement, pending_work
from controlplane.executor.read_source import copy_source, plan_readers
from controlplane.executor.settings import policy_for
from controlplane.executor.submit import Submission, send
from controlplane.executor.tasks import (
    DEFAULT_CAPS,
    involved_brokers,
    order_tasks,
    ready_tasks,
    select_batch,
    tasks_from_plan,
)
from controlplane.state import reads
from controlplane.state.commands import meta
from controlplane.state.store import StateStore
from domain import (
    CheckLimits,
    LeaderChange,
    PartitionMove,
    Plan,
    Violation,
    apply_policies,
    check_plan,
    has_policies,
    plan_to_dict,
)
from domain.cluster_record import ClusterRecord
from domain.execution import (
    ACTIVE_STATUSES,
    OPEN_STATES,
    RUNNING_STATES,
    Execution,
    ExecutionStatus,
    Task,
    TaskState,
    bytes_progress,
)
from kafkaio.errors import AdminError
from kafkaio.port import KafkaCluster
from kafkaio.types import LiveCluster
from raft.protocol import JsonDict

log = logging.getLogger("guardian.executor")
HEALING_PREFIX = "heal-"
"""Plans of these kinds (self-healing's) keep moving replicas off dead brokers instead of cancelling."""
__all__ = ["THROTTLE_PREFIX", "ExecutionConflict", "Executor", "ExecutorConfig", "PassReport", "PlanRejected",
           "plan_digest"]


class PlanRejected(ValueError):
    """The plan breaks hard constraints on the live cluster (every violation listed)."""

    def __init__(self, violations: list[Violation]) -> None:
        super().__init__("; ".join(str(v) for v in violations[:20]))
        self.violations = violations


@dataclass
class ExecutorConfig:
    """Knobs of one executor (per cluster)."""

    cluster: str
    ordering: str = "small_first"
    throttle: MigrationRatePolicy = field(default_factory=MigrationRatePolicy)
    max_attempts: int = 5
    who: str = "guardian-executor"
    check_limits: CheckLimits = field(default_factory=CheckLimits)
    interval_s: float = 5.0
    """The longest the loop waits between passes; copies' rates are planned to hold that long."""
    min_interval_s: float = 1.0
    """The shortest: the next pass comes sooner than ``interval_s`` — when a copy is expected to end (its slots
    and disk budget then go to the next copy at once, not at the end of the interval), or while the first disk
    rates are one scrape away — but never sooner than this (:attr:`PassReport.next_pass_s`)."""


@dataclass
class PassReport:
    """What one pass saw and did."""

    execution_id: int | None
    status: str
    submitted: int = 0
    completed: int = 0
    cancelled: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    bytes_done: int = 0
    bytes_total: int = 0
    rate_bytes_per_s: float = 0.0
    eta_s: float | None = None
    error: str | None = None
    next_pass_s: float | None = None
    """Seconds until the next pass is due when sooner than the loop's interval (``None``: the interval)."""

    @property
    def finished(self) -> bool:
        """True once the execution reached a final status (or there is none)."""
        return self.status not in ACTIVE_STATUSES


@dataclass
class _Pass:
    """What one pass read and decided so far (handed from phase to phase)."""

    ex: Execution
    live: LiveCluster
    dirs: DirMap
    now: float | None
    """Time base of this pass's measurements (``None``: the scrape gave no fresh clock)."""
    update: TaskChanges
    submit: Submission = field(default_factory=Submission)
    rows: list[JsonDict] = field(default_factory=list)
    """The task updates committed by the write-ahead."""
    flows: list[CopyFlow] = field(default_factory=list)
    report: PassReport = field(init=False)

    def __post_init__(self) -> None:
        self.report = PassReport(self.ex.id, self.ex.status.value)

    @property
    def tasks(self) -> Mapping[str, Task]:
        return self.ex.tasks


def plan_digest(plan_doc: Mapping[str, Any]) -> str:
    """Stable digest of a plan document (to recognise the same plan on resume)."""
    doc = {k: v for k, v in plan_doc.items() if k in ("cluster", "kind", "reassignment", "leaders")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


class Executor:
    """Drives the active execution of one cluster to completion; safe to restart at any point."""

    def __init__(self, store: StateStore, admin: KafkaCluster, config: ExecutorConfig,
                 scraper: DiskLoad | None = None, endpoints: FactsSource | None = None,
                 clock: Callable[[], float] = time.time,
                 ingress: Callable[[str, int], float] | None = None, lease: ExecutionLease | None = None) -> None:
        self.store = store
        self.lease = lease
        """The cluster's execution lease (``None``: this executor does not take one, e.g. in unit tests)."""
        self.admin = admin
        self.meter = IngressMeter()
        self.ingress: Callable[[str, int], float] = ingress or self.meter
        """Producers' bytes/s into a partition: the service reads it from the latest snapshot; without one
        (``guardian exec run``) it is measured from the live cluster between passes (:class:`IngressMeter`)."""
        self.config = config
        self.scraper = scraper
        self.endpoints = endpoints
        self.clock = clock
        self.copies = CopyMeter()
        self.throttles = MigrationLevers(store, admin, config.cluster, config.throttle, self.copies,
                                            self._propose, lambda: self.guard.announce_throttles(),
                                            interval_s=config.interval_s)
        self.placement = Placement(admin, config.throttle, self.copies,
                                   lambda: self.copies.disk_migration([], self.throttles.commanded))
        self.driver = TaskDriver(self.copies, self.placement, scraper, config.max_attempts)
        self._readers: dict[tuple[str, int], int] = {}
        """This pass's pending copies that read from a follower, and which (:mod:`.read_source`)."""
        self.last_disks: dict[tuple[int, str], DiskRate] = {}
        self._scrapes = 0
        """Disk scrapes this process has made: live load needs two, so the first pass starts nothing."""
        self._measured_clock: float | None = None
        """The sample clock the last pass with a fresh clock measured at."""
        self.guard = LeaseGuard(lease, admin, config.cluster, self._own_tasks,
                                lambda: throttle_record(self.throttles.owned()))

    # ------------------------------------------------------------------ store helpers
    def _propose(self, command_type: str, why: str = "", **payload: Any) -> Any:
        return self.store.propose({"type": command_type, "meta": meta(self.config.who, why), **payload})

    def active_execution(self) -> Execution | None:
        """The running or stopping execution of this cluster (a frozen record), if any."""
        return self.store.read(lambda s: reads.active_execution(s, self.config.cluster))

    def execution(self, execution_id: int) -> JsonDict | None:
        """One execution's stored form (a fresh copy, for views)."""
        record = self._read_execution(execution_id)
        return None if record is None else record.to_json()

    def _read_execution(self, execution_id: int) -> Execution | None:
        """The record of one execution, as the store holds it now."""
        return self.store.read(lambda s: reads.execution_record(s, execution_id))

    # ------------------------------------------------------------------ start
    def ensure_cluster(self, bootstrap_servers: str) -> None:
        """Register the cluster in the store when it is not known yet."""
        known = self.store.read(lambda s: self.config.cluster in s["clusters"])
        if not known:
            self._propose("cluster.register", "executor target", name=self.config.cluster,
                          bootstrap_servers=[s for s in bootstrap_servers.split(",") if s])

    def read_cluster(self, all_dirs: bool = True) -> tuple[LiveCluster, DirMap]:
        """Metadata plus log dirs of every alive broker."""
        live = self.admin.live()
        dirs = self.admin.log_dirs(live.alive) if all_dirs else {}
        return live, dirs

    def start(self, plan: Plan, *, batches: Mapping[tuple[str, int], int] | None = None,
              caps: Mapping[str, int] | None = None, options: Mapping[str, Any] | None = None,
              why: str = "operator ran the plan",
              recorded: Mapping[tuple[str, int], tuple[int, ...]] | None = None) -> int:
        """Check ``plan`` against the live cluster, record it approved and start an execution.

        ``recorded``: for a restore, the replica sets the drain recorded (a move back to one is judged
        against it, :func:`~domain.check_plan`). Idempotent: the same plan (same digest) already executing
        returns its execution id. Raises :class:`PlanRejected` (hard constraints broken) or
        :class:`ExecutionConflict`.
        """
        doc = plan_to_dict(plan)
        digest = plan_digest(doc)
        active = self._check_idle(digest)
        if active is not None:
            return active

        def begin() -> int:
            tasks, counts = self._prepare(plan, batches, recorded)
            plan_id = self._propose("plan.propose", why, cluster=self.config.cluster, kind=plan.kind,
                                    plan=doc)["plan_id"]
            self._propose("plan.approve", why, plan_id=plan_id)
            return self._start_execution(plan_id, tasks, counts, digest, caps, options, why)

        return self.guard.start(begin)

    def start_approved(self, plan_id: int, plan: Plan, *, caps: Mapping[str, int] | None = None,
                       why: str = "approved plan executed", by: str | None = None,
                       options: Mapping[str, Any] | None = None,
                       batches: Mapping[tuple[str, int], int] | None = None,
                       recorded: Mapping[tuple[str, int], tuple[int, ...]] | None = None) -> int:
        """Start an execution of a plan already proposed and approved in the store (the service's path);
        ``by``: the human (token) who started it, recorded as the execution's ``started_by`` and in the
        action log (default: this executor). ``options`` are recorded on the execution (e.g. ``throttle``
        settings, :mod:`.settings`); ``batches`` and ``recorded`` as for :meth:`start` (a restore)."""
        digest = plan_digest(plan_to_dict(plan))
        active = self._check_idle(digest)
        if active is not None:
            return active

        def begin() -> int:
            tasks, counts = self._prepare(plan, batches, recorded)
            opts = {**({"keep_dead_sources": True} if plan.kind.startswith(HEALING_PREFIX) else {}), **(options or {})}
            return self._start_execution(plan_id, tasks, counts, digest, caps, opts or None, why, by)

        return self.guard.start(begin)

    # ------------------------------------------------------------------ the lease (:class:`~.lease.LeaseGuard`)
    def hold_lease(self) -> None:
        """Take (or renew) the cluster's lease before planning from the live cluster (a drain must also move
        the lease log's replicas); :meth:`start` then goes on under it. Raises :class:`~.lease.LeaseHeld`."""
        self.guard.take()

    def release_lease(self) -> None:
        """Hand the cluster's lease back (what is still in flight or set stays listed for the next holder)."""
        self.guard.release()

    def _own_tasks(self, started: bool) -> set[tuple[str, int]]:
        ex = self.active_execution()
        if ex is None:
            return set()
        return {t.tp for t in (ex.in_states(RUNNING_STATES) if started else ex.tasks.values())}

    def _check_idle(self, digest: str) -> int | None:
        active = self.active_execution()
        if active is None:
            return None
        if active.options.get("plan_digest") == digest:
            return active.id
        raise ExecutionConflict(f"cluster {self.config.cluster!r} already runs execution {active.id} "
                                f"(plan {active.plan_id}); stop it or wait for it to finish")

    def _prepare(self, plan: Plan, batches: Mapping[tuple[str, int], int] | None,
                 recorded: Mapping[tuple[str, int], tuple[int, ...]] | None = None
                 ) -> tuple[list[Task], dict[str, int]]:
        """Check the plan against the live cluster (shared invariant checker) and derive its tasks."""
        if plan.cluster != self.config.cluster:
            raise PlanRejected([Violation("cluster-mismatch", f"plan is for cluster {plan.cluster!r}, "
                                                              f"executor for {self.config.cluster!r}")])
        live, dirs = self.read_cluster()
        capacity = self.admin.disk_capacity(live.alive)
        snapshot = live_snapshot(self.config.cluster, live, dirs, capacity, self.endpoints)
        violations = check_plan(snapshot, plan, self.config.check_limits, recorded=recorded)
        if violations:
            raise PlanRejected(violations)
        tasks = tasks_from_plan(plan, current_partitions(live, dirs), batches)
        return tasks, {t: live.topic_sizes[t] for t in sorted({t.topic for t in tasks})}

    def _start_execution(self, plan_id: int, tasks: list[Task], counts: Mapping[str, int], digest: str,
                         caps: Mapping[str, int] | None, options: Mapping[str, Any] | None, why: str,
                         by: str | None = None) -> int:
        opts = {"plan_digest": digest, "ordering": self.config.ordering, **(options or {})}
        if self.scraper is not None:  # a first sample now: the first pass already sees live disk load
            self.scraper.scrape()
        result = self.store.propose({"type": "execution.start", "meta": meta(by or self.config.who, why),
                                     "plan_id": plan_id, "tasks": [t.spec_json() for t in tasks],
                                     "caps": {**DEFAULT_CAPS, **(caps or {})}, "partition_counts": dict(counts),
                                     "options": opts})
        return int(result["execution_id"])

    def stop(self, execution_id: int, rollback: bool = False, why: str = "operator stop") -> None:
        """Ask the execution to stop (the next pass acts on it)."""
        self._propose("execution.stop", why, execution_id=execution_id, rollback=rollback)

    def set_caps(self, execution_id: int, caps: Mapping[str, int], why: str = "operator changed caps") -> None:
        """Change concurrency caps of a running execution."""
        self._propose("execution.caps", why, execution_id=execution_id, caps=dict(caps))

    # ------------------------------------------------------------------ the pass
    def run_pass(self) -> PassReport:
        """One reconcile pass. Raises :class:`AdminError` when the cluster cannot be read.

        Only the leader of a replicated store acts; on a follower the pass does nothing.
        """
        if not self.store.is_leader:
            return PassReport(None, "follower")
        p = self._read()                        # 1. read the cluster (no active execution: clean up)
        if p is None:
            return PassReport(None, "idle")
        self._cancel(p)                         # 2. cancel what the cluster's changes or a stop rule out
        self._drive_started(p)                  # 3. drive started tasks: complete, measure, resubmit
        batch = self._select(p)                 # 4. select new tasks within the caps, placing new replicas
        self._start(p, batch)                   # 5. re-check policies, start, prepare requests
        self._write_ahead(p)                    # 6. commit every change; send the cancels
        rates, lists = self._rates(p)           # 7. migration rates of the copies in flight
        failed = self._throttles(p, rates, lists)  # 8. throttles in force (rises wait) ...
        self._submit(p, failed, rates, lists)   #    ... then submit, then raise the rates
        self._progress(p, rates)                # 9. record progress; finish when nothing is open
        self._finish(p)
        p.report.next_pass_s = self._next_pass(p)
        return p.report

    def _read(self) -> _Pass | None:
        """Phase 1: the active execution, the cluster's metadata, the log dirs of the started tasks' brokers
        and live disk load. Without an active execution, leftover throttles of an earlier run are removed
        and ``None`` is returned."""
        ex = self.active_execution()
        if ex is None:
            self._clean_idle()
            return None
        self.guard.take()  # another executor's lease: this pass does nothing (LeaseHeld)
        self._use_policy(policy_for(self.config.throttle, ex.options))
        live = self.admin.live()
        working = ex.in_states(RUNNING_STATES)
        dir_brokers = set().union(*(involved_brokers(t) for t in working)) & set(live.alive) if working else set()
        dirs = self.admin.log_dirs(dir_brokers, {t.topic for t in working}) if dir_brokers else {}
        now = self._measure(live)
        if self.ingress is self.meter and now is not None:
            self.meter.observe(live, dirs, now, {t.tp for t in working})
        self.throttles.tick(now)
        self.placement.begin_pass(self.last_disks)
        self.copies.begin_pass(now)  # a fresh clock: interval rates are refilled by this pass's observations
        return _Pass(ex, live, dirs, now, TaskChanges(ex.tasks))

    def _use_policy(self, policy: MigrationRatePolicy) -> None:
        """This pass's throttle policy: the executor's, with the execution's recorded settings over it
        (:mod:`.settings`; read from the replicated record every pass, so they survive a failover)."""
        self.throttles.policy = policy
        self.placement.policy = policy

    def _clean_idle(self) -> None:
        """No active execution: remove this executor's leftover throttles of an earlier run (under the lease)
        and hand the lease back."""
        self.guard.clean_idle(bool(self.throttles.owned()), lambda: self.throttles.sync({}, {}, self.admin.live()))

    def _cancel(self, p: _Pass) -> None:
        """Phase 2: cancel the open tasks the cluster's changes (dead brokers, deleted or grown topics) or a
        stop make impossible or unwanted: a PENDING one is aborted at once, a started one starts aborting."""
        rollback = p.ex.rollback
        for t in p.tasks.values():
            if t.state not in (TaskState.PENDING, TaskState.IN_PROGRESS):
                continue
            reason = cancel_reason(t, p.live, p.ex)
            if reason is None and p.ex.stopping and (t.state == TaskState.PENDING or rollback):
                reason = "execution stopped" + (" with rollback" if rollback else "")
            if reason is None:
                continue
            p.report.cancelled += 1
            if t.state == TaskState.PENDING:
                p.update.aborted(t, reason)
            else:
                self.driver.abort(t, reason, p.live, p.dirs, p.update, p.submit)

    def _drive_started(self, p: _Pass) -> None:
        """Phase 3: compare every started task with the cluster (an aborting one is aborted once the cluster
        shows nothing of it and a follower read's leadership is back, else its cancel or restore goes on)."""
        for t in p.tasks.values():
            if p.update.changed(t.key):
                continue
            if t.state == TaskState.ABORTING:
                self.driver.undo(t, p.live, p.dirs, p.update, p.submit)
            elif t.state == TaskState.IN_PROGRESS:
                self.driver.drive(t, p.live, p.dirs, p.now, p.update, p.submit, resubmit=True)

    def _select(self, p: _Pass) -> list[Task]:
        """Phase 4: the ready tasks that fit the caps now, in the execution's order, with the new replicas
        the plan leaves to the executor placed (:class:`Placement`). Nothing while stopping, and nothing
        before live disk load is known: placed blind, a new replica may land on the disk that bounds the
        whole execution (without metrics, tasks start on the second pass anyway)."""
        if p.ex.status != ExecutionStatus.RUNNING or (self.scraper is not None and self._scrapes < 2):
            return []
        live, ex = p.live, p.ex
        merged = p.update.merged()
        ready = ready_tasks(merged, urp_zero=live.under_replicated == 0,
                            leadership_first=bool(ex.options.get("leadership_first")))
        urp = {tp for tp, part in live.partitions.items() if len(set(part.isr)) < len(set(part.replicas))}
        self._readers = plan_readers(merged, live, p.dirs, {d: self.placement.budget(d) for d in self.last_disks},
                                     self.copies.remaining) if self._follower_reads() else {}
        leaders = {tp: part.leader for tp, part in live.partitions.items()} | {
            t.tp: copy_source(t, live.partitions[t.tp], self._readers) for t in merged.values()
            if t.action == "reassign" and t.state in OPEN_STATES and t.tp in live.partitions}
        caps = {**DEFAULT_CAPS, **ex.caps}
        ordered = order_tasks(ready, ex.options.get("ordering", self.config.ordering), urp,
                              [t for t in merged.values() if t.state in OPEN_STATES], leaders, caps["per_disk"])
        running = [t for t in merged.values() if t.state in RUNNING_STATES]
        if ordered:
            self.placement.measure_backlog(merged, live, p.dirs, self._readers)
        return select_batch(ordered, running, caps, leaders,
                            placed=self.placement.placed_dirs(running, p.dirs), place=self.placement.place)

    def _next_pass(self, p: _Pass) -> float | None:
        """When the next pass is due, if sooner than the interval: the earliest end the throttle expects of a copy
        (ended, it is seen complete and its slots go to the next task), or — the first disk rates being one scrape
        away — at once; both bounded below by ``min_interval_s``."""
        if p.report.finished:
            return None
        waiting = self.scraper is not None and self._scrapes < 2 and p.ex.status == ExecutionStatus.RUNNING
        soon = 0.0 if waiting else self.throttles.next_end_s if p.flows else None  # no copy: its last value is old
        if soon is None:
            return None
        return min(max(soon, self.config.min_interval_s), self.config.interval_s)

    def _follower_reads(self) -> bool:
        """Copies may read from a follower (:mod:`.read_source`): asked for, and rates follow disk headroom."""
        policy = self.throttles.policy
        return policy.follower_reads and policy.mode == "adaptive"

    def _start(self, p: _Pass, batch: list[Task]) -> None:
        """Phase 5: refuse what the replicated policies now forbid (reason recorded), start the rest and
        prepare their requests."""
        refused = self._policy_refusals(batch, p.live, p.dirs)
        for t in batch:
            if t.key in refused:  # a policy set since the plan was proposed forbids it; the rest go on
                log.warning("task %s: %s", t.key, refused[t.key])
                p.update.aborted(t, refused[t.key])
                p.report.cancelled += 1
                continue
            p.update.start(t, attempts=t.attempts)
            self.driver.drive(t, p.live, p.dirs, p.now, p.update, p.submit, resubmit=False,
                              reader=self._readers.get(t.tp))
            p.report.submitted += 1

    def _write_ahead(self, p: _Pass) -> None:
        """Phase 6: commit every state change and attempt count before the cluster is touched, re-read the
        execution, and send the cancels (a copy must never run unthrottled between its throttle's removal
        and its cancel)."""
        p.rows = p.update.updates()
        if p.rows:
            self._propose("execution.tasks", "reconcile pass", execution_id=p.ex.id, updates=p.rows)
        p.ex = self._read_execution(p.ex.id) or p.ex
        self.guard.keep(moves=[t.tp for t in p.ex.in_states(RUNNING_STATES)], execution=p.ex.id)
        send(self.admin, p.submit.take_cancels(p.tasks))

    def _rates(self, p: _Pass) -> tuple[dict[tuple[int, str], float], dict[str, dict[str, set[str]]]]:
        """Phase 7: the copy flows in flight (or about to be), their migration rates (NIC headroom too when
        the policy has one) and the throttled-replica entries they need per topic."""
        p.flows, lists = self.copies.flows(p.tasks, p.live, p.dirs, p.submit, self.ingress, self._readers)
        heal = p.ex.options.get("heal") or {}
        p.flows = heal_floors(p.flows, float(heal.get("rate_bytes_per_s") or 0.0))
        network = None
        if self.scraper is not None and self.throttles.policy.nic_bytes_per_s:
            network = {b: NetRate(*v) for b, v in self.scraper.network.items()}
        if not p.flows:
            return {}, lists
        pending = pending_work(p.tasks, p.live, p.dirs, self._readers)
        return self.throttles.rates(p.flows, p.now, self.last_disks, network, lists, pending)

    def _throttles(self, p: _Pass, rates: Mapping[tuple[int, str], float],
                   lists: Mapping[str, Mapping[str, set[str]]]) -> set[Any]:
        """Phase 8: put the throttles in force, every rise held at the rate in force (a rate that rises waits
        until the new copies have started: before, the copies already running would split it among fewer
        and run faster than planned). Returns the brokers and topics whose change failed."""
        return self.throttles.sync(self.throttles.safe(rates), lists, p.live)

    def _submit(self, p: _Pass, failed: set[Any], rates: Mapping[tuple[int, str], float],
                lists: Mapping[str, Mapping[str, set[str]]]) -> None:
        """Phase 8 (after the throttles): hold the copies whose throttle change failed (retried next pass: a
        copy never starts unthrottled), send the rest, then raise the rates that rise."""
        p.submit.hold(failed, p.live)
        self._record_refusals(p, send(self.admin, p.submit))
        if self.throttles.safe(rates) != rates and not failed:
            self.throttles.sync(rates, lists, p.live)  # what fails is retried next pass

    def _record_refusals(self, p: _Pass, refused: Mapping[str, str]) -> None:
        """Record why the cluster refused a started task's request (the task stays IN_PROGRESS: the next
        passes find it neither in flight nor done and send it again, up to ``max_attempts``) or an aborting
        task's restore step (it stays ABORTING; the refusal follows why it was cancelled, replacing the last
        one, so the reason it is finally ABORTED with names both)."""
        rows = []
        for k, why in sorted(refused.items()):
            t = p.tasks.get(k)
            if t is None or t.state not in (TaskState.IN_PROGRESS, TaskState.ABORTING):
                continue
            if t.state == TaskState.ABORTING:
                why = f"{t.reason.split(REFUSED)[0] or 'cancelled'}{REFUSED}{why}"
            rows.append({"key": k, "state": t.state.value, "reason": why})
        if rows:
            self._propose("execution.tasks", "submission refused", execution_id=p.ex.id, updates=rows)

    def _finish(self, p: _Pass) -> None:
        """Phase 9 (end): with no open task left, remove every migration throttle and finish the execution."""
        if p.ex.open_tasks():
            return
        self.throttles.sync({}, {}, p.live)
        status, why = p.ex.final_status()
        self._propose("execution.finish", why, execution_id=p.ex.id, status=status.value)
        p.report.status = status.value
        self.forget()  # one execution per cluster at a time
        self.guard.finished(bool(self.throttles.owned()))

    def forget(self) -> None:
        """Drop this process's per-task memory (copy rates, passes a task went unseen). Called when an
        execution ends and when this node (re)gains leadership: memory from an earlier term could make
        a resubmission one pass early."""
        self.copies.forget()
        self.throttles.commanded.clear()
        self.meter.forget()
        self.driver.forget()
        self._measured_clock = None

    def _now(self) -> float:
        return self.clock()

    def _measure(self, live: LiveCluster) -> float | None:
        """Scrape disk load once per pass; the time base of rates is the hosts' clock when they export one.

        Returns ``None`` when no round newer than the previous pass's gave a clock (rates are then not
        updated). Compared with the clock the previous pass measured, not with the one read just before
        this scrape: in the service the view reads the observer's published round (the scrape collects
        nothing), so the clock moves between passes, never within one.
        """
        if self.scraper is None:
            return time.monotonic()
        self.last_disks = dict(self.scraper.scrape(set(live.alive)))
        self._scrapes += 1
        clock = self.scraper.clock
        if clock is None or clock == self._measured_clock:
            return None
        self._measured_clock = clock
        return clock

    # ------------------------------------------------------------------ policies
    def _policies(self) -> tuple[JsonDict, JsonDict] | None:
        """This cluster's replicated record and maintenance flags, when they could change a check (a
        standalone run's local state has none)."""
        def read(state: JsonDict) -> tuple[ClusterRecord | None, JsonDict]:
            return reads.cluster_record(state, self.config.cluster), reads.maintenance_flags(state, self.config.cluster)

        record, maintenance = self.store.read(read)
        cluster = record.to_json() if record is not None else {}
        return (cluster, maintenance) if has_policies(cluster, maintenance) else None

    def _policy_refusals(self, batch: list[Task], live: LiveCluster, dirs: DirMap) -> dict[str, str]:
        """Task key -> why, for the tasks of ``batch`` that break a constraint only the replicated policies
        reveal (maintenance flags, pool membership, IDC placement — e.g. set after the plan was proposed).

        The batch is checked twice by the shared invariant checker against the live cluster, with and
        without the policies overlaid as the service's collection job overlays them
        (:func:`~domain.apply_policies`); what only the overlaid check finds is refused.
        """
        policies = self._policies() if batch else None
        if policies is None:
            return {}
        moves = [PartitionMove(t.topic, t.partition, t.target_replicas,
                               t.target_log_dirs or (None,) * len(t.target_replicas))
                 for t in batch if t.action != "elect_leader"]
        changes = [LeaderChange(t.topic, t.partition, int(t.leader or 0))
                   for t in batch if t.action == "elect_leader"]
        plan = Plan(self.config.cluster, "submission", tuple(moves), tuple(changes))
        try:
            capacity = self.admin.disk_capacity(live.alive)
        except AdminError as exc:
            log.warning("reading disk capacity for the submission check failed: %s", exc)
            capacity = {}
        snapshot = live_snapshot(self.config.cluster, live, dirs, capacity, self.endpoints)
        plain = {(v.code, v.topic, v.partition) for v in check_plan(snapshot, plan, self.config.check_limits)}
        out: dict[str, str] = {}
        for v in check_plan(apply_policies(snapshot, *policies), plan, self.config.check_limits):
            if v.topic is None or (v.code, v.topic, v.partition) in plain:
                continue
            for t in batch:
                if t.tp == (v.topic, v.partition):
                    out.setdefault(t.key, f"refused at submission: {v}")
        return out

    # ------------------------------------------------------------------ progress
    def _progress(self, p: _Pass, rates: Mapping[tuple[int, str], float]) -> None:
        """Phase 9: record the execution's progress (bytes, rate, ETA, URPs, worst disk, throttles)."""
        ex, live, report = p.ex, p.live, p.report
        report.completed = sum(1 for u in p.rows if u["state"] == TaskState.COMPLETED
                               and u["key"] in ex.tasks and ex.tasks[u["key"]].state == TaskState.COMPLETED)
        tasks = ex.tasks.values()
        counts = ex.counts()
        done, total = bytes_progress(tasks)
        rate = sum(self.copies.rate(t.key) for t in tasks if t.state == TaskState.IN_PROGRESS)
        eta = (total - done) / rate if rate > 0 else None
        report.counts, report.bytes_done, report.bytes_total = counts, done, total
        report.rate_bytes_per_s, report.eta_s = rate, eta
        worst = max((d.util for d in self.last_disks.values()), default=None)
        self._propose("execution.progress", "progress", execution_id=ex.id, progress={
            "counts": counts, "bytes_done": done, "bytes_total": total, "rate_bytes_per_s": rate,
            "eta_s": eta, "under_replicated": live.under_replicated, "max_disk_util": worst,
            "throttles": {f"{b}:{k}": r for (b, k), r in sorted(rates.items())},
            "clock": self.scraper.clock if self.scraper and self.scraper.clock else self._now()})

    # ------------------------------------------------------------------ loop
    def run(self, interval_s: float = 1.0, on_pass: Callable[[PassReport], None] | None = None,
            should_stop: Callable[[], bool] | None = None, max_errors: int = 30) -> PassReport:
        """Run passes every ``interval_s`` (fixed delay; sooner when a pass asks, :attr:`PassReport.next_pass_s`)
        until the execution finishes.

        A pass that cannot reach the cluster is retried; ``max_errors`` consecutive failures give up
        (the execution stays resumable).
        """
        errors = 0
        report = PassReport(None, "idle")
        while True:
            if should_stop is not None and should_stop():
                return report
            try:
                report = self.run_pass()
                errors = 0
            except AdminError as exc:
                errors += 1
                log.warning("pass failed (%d/%d): %s", errors, max_errors, exc)
                report = PassReport(report.execution_id, report.status if report.execution_id else "running",
                                    error=str(exc))
                if errors >= max_errors:
                    raise
            if on_pass is not None:
                on_pass(report)
            if report.finished and report.error is None:
                return report
            time.sleep(min(interval_s, report.next_pass_s) if report.next_pass_s is not None else interval_s)
