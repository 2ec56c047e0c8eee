"""The executor's reconcile loop: desired state (the store) versus actual state (Kafka), in small batches.

Every pass re-reads the cluster (metadata, in-flight reassignments, log dirs, disk load), compares each
open task with what the cluster shows, and acts idempotently:

* a task is marked ``IN_PROGRESS`` (write-ahead, with its attempt count) *before* anything is sent, so
  a crash or failover never loses a submission; a pass that finds the move in flight or done never
  sends it again, and one that finds it neither re-sends it (bounded by ``max_attempts``);
* new tasks start as slots free up under the per-broker / per-disk / per-cluster caps (read from the
  store every pass, so they change while running; a disk's count includes the new replicas the executor
  places on it), in the chosen order, and only once live disk load is known (the first pass of a process
  only measures); broker batches wait for zero under-replicated partitions;
* throttles (KIP-73 rates and throttled-replica lists, KIP-113 rate) are recomputed every pass from
  live disk headroom (:mod:`controlplane.executor.throttle`, fed the migration bytes each disk carried,
  measured per copy and capped by what its throttle allowed) and the schedule, recorded in the store
  before they are set — a rate that rises only after the pass's new copies started — and removed as
  soon as no task needs them; leftovers recorded by an earlier run are removed on the next pass;
* a new replica the plan lets the broker place goes to the disk of its broker that finishes its copy
  work first (pending reads and writes over its budget), named before the reassignment (KIP-113);
* right before submission a task is re-checked with the replicated policies overlaid (maintenance,
  pools, placement — as the collection job sees the cluster); what only they forbid is refused with
  the reason recorded, the rest proceeds;
* a task whose old or new replica set contains a dead broker, or whose topic changed partition
  count, is cancelled (reassignment cancel) with the reason recorded; the others continue;
* ``stop`` lets in-flight moves finish and starts nothing new; ``stop`` with rollback cancels them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from collectors.disk_rates import DiskRate, DiskScraper
from controlplane.executor.live import (
    DirMap,
    IngressMeter,
    current_partitions,
    future_dir,
    live_snapshot,
    main_dir,
)
from controlplane.executor.tasks import (
    DEFAULT_CAPS,
    involved_brokers,
    order_tasks,
    ready_tasks,
    select_batch,
    tasks_from_plan,
)
from controlplane.executor.throttle import (
    Flow,
    NetRate,
    ThrottlePolicy,
    broker_rates,
    bytes_per_util,
    catch_up_floors,
    flow_roles,
)
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
from domain.execution import (
    ACTIVE_STATUSES,
    OPEN_STATES,
    RUNNING_STATES,
    Execution,
    ExecutionStatus,
    Task,
    TaskState,
)
from domain.throttles import ALTER_DIRS_RATE, FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_REPLICAS
from kafkaio.admin import AdminError, ClusterEndpoints, LiveCluster, ReplicaDir
from kafkaio.port import KafkaCluster
from raft.protocol import JsonDict

log = logging.getLogger("guardian.executor")
THROTTLE_PREFIX = "migration."
PROTECTION_KINDS = {"migration_rate": FOLLOWER_RATE, "intra_broker_rate": ALTER_DIRS_RATE}
ELECTION_ERRORS_OK = {0, 84}
PREPLACE_ANSWERS = {"ReplicaNotAvailableError", "NotLeaderForPartitionError", "NotLeaderOrFollowerError"}
FREE_SPACE_FACTOR = 1.2
"""A destination disk chosen by the executor keeps at least this many times the replica's size free."""


class PlanRejected(ValueError):
    """The plan breaks hard constraints on the live cluster (every violation listed)."""

    def __init__(self, violations: list[Violation]) -> None:
        super().__init__("; ".join(str(v) for v in violations[:20]))
        self.violations = violations


class ExecutionConflict(RuntimeError):
    """Another execution is active on the cluster."""


@dataclass
class ExecutorConfig:
    """Knobs of one executor (per cluster)."""

    cluster: str
    ordering: str = "small_first"
    throttle: ThrottlePolicy = field(default_factory=ThrottlePolicy)
    max_attempts: int = 5
    who: str = "guardian-executor"
    check_limits: CheckLimits = field(default_factory=CheckLimits)


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

    @property
    def finished(self) -> bool:
        """True once the execution reached a final status (or there is none)."""
        return self.status not in ("running", "stopping")


@dataclass
class _Submit:
    reassign: dict[tuple[str, int], list[int] | None] = field(default_factory=dict)
    log_dirs: dict[tuple[str, int, int], str] = field(default_factory=dict)
    elect: list[tuple[str, int]] = field(default_factory=list)
    owner: dict[Any, str] = field(default_factory=dict)
    preplace: set[tuple[str, int, int]] = field(default_factory=set)
    """``log_dirs`` entries for replicas a reassignment is about to create (sent first; the broker answers
    ReplicaNotAvailable and creates the replica in that dir when it arrives, as Kafka's LogManager does)."""


def _close(a: str, b: str, tolerance: float = 0.02) -> bool:
    """True when two rate config values differ by at most ``tolerance`` (relative); garbage is never close."""
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return abs(x - y) <= tolerance * max(abs(y), 1.0)


def _send(what: str, send: Callable[[Any], Mapping[Any, Any]], requests: Any,
          refused: Callable[[Any, Any], bool]) -> None:
    """Send one kind of request if there is any. A call that fails as a whole is only logged: its tasks are
    already IN_PROGRESS in the store, and the next pass, finding nothing in flight, sends them again. The
    answers ``refused`` flags are logged per item."""
    if not requests:
        return
    try:
        answers = send(requests)
    except AdminError as exc:
        log.warning("%s submission failed (will be retried next pass): %s", what, exc)
        return
    for key, err in answers.items():
        if refused(key, err):
            log.warning("%s of %s refused: %s", what, key, err)


def _recorded_dir(t: Task, broker: int) -> tuple[int, str] | None:
    """The log dir the task recorded for ``broker``'s replica when it was planned (``None`` if unknown)."""
    src, dirs = t.source_replicas, t.source_log_dirs
    if broker in src and dirs and dirs[src.index(broker)]:
        return broker, str(dirs[src.index(broker)])
    return None


@dataclass(frozen=True)
class _ThrottleKind:
    """How one kind of migration throttle is compared, recorded and named (see ``Executor._sync_kind``)."""

    kind: str
    what: str
    idle_why: str
    record_key: Callable[[Any], str]
    present: Callable[[LiveCluster, Any], bool]
    changes: Callable[[dict[str, Any], dict[str, Any], Mapping[str, str]], Any]
    merge: Callable[[dict[str, Any], dict[str, Any], Any], dict[str, Any]]
    same: Callable[[dict[str, Any], dict[str, Any]], bool]
    target: Callable[[Any, dict[str, Any]], JsonDict]
    rate: Callable[[dict[str, Any]], float]
    clear_when_absent: bool = False
    absent_why: str = ""


def _rate_changes(want: dict[str, Any], have: dict[str, Any], actual: Mapping[str, str]) -> dict[str, str | None]:
    """Broker rate configs to SET (value) or DELETE (``None``) so the broker shows ``want``."""
    out: dict[str, str | None] = {}
    for k in set(want) | set(have):
        if k not in want:
            if k in actual:
                out[k] = None
        elif k not in actual or not _close(want[k], actual[k]):
            out[k] = want[k]
    return out


def _list_changes(want: dict[str, Any], have: dict[str, Any], actual: Mapping[str, str]
                  ) -> dict[str, tuple[set[str], set[str]]]:
    """Throttled-replica entries to APPEND / SUBTRACT per list (only what this executor recorded is removed)."""
    out = {}
    for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
        cur = actual.get(k, "")
        cur_set = {e.strip() for e in cur.split(",") if e.strip()}
        adds = set() if cur.strip() == "*" else set(want.get(k, set())) - cur_set
        subs = (set(have.get(k, set())) - set(want.get(k, set()))) & cur_set
        if adds or subs:
            out[k] = (adds, subs)
    return out


_BROKER_RATES = _ThrottleKind(
    kind=THROTTLE_PREFIX + "broker", what="migration throttle", idle_why="no migration on this broker",
    record_key=lambda b: f"mig.b{b}", present=lambda live, b: b in live.alive, changes=_rate_changes,
    merge=lambda want, have, changes: {**have, **{k: v for k, v in changes.items() if v is not None}},
    same=lambda want, have: set(want) == set(have) and all(_close(want[k], have[k]) for k in want),
    target=lambda b, configs: {"broker": b, "configs": configs},
    rate=lambda configs: max((float(v) for v in configs.values()), default=0.0))

_REPLICA_LISTS = _ThrottleKind(
    kind=THROTTLE_PREFIX + "topic", what="throttled replicas", idle_why="no migration on this topic",
    record_key=lambda t: f"mig.t.{t}", present=lambda live, t: t in live.topic_sizes, changes=_list_changes,
    merge=lambda want, have, changes: {k: set(want.get(k, set())) | set(have.get(k, set()))
                                       for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS)},
    same=lambda want, have: all(set(want.get(k, set())) == set(have.get(k, set()))
                                for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS)),
    target=lambda t, lists: {"topic": t, **{k: sorted(lists.get(k, set()))
                                           for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS)}},
    rate=lambda lists: 0.0, clear_when_absent=True, absent_why="topic deleted")


class TaskChanges:
    """The task changes one pass decides, written ahead in one ``execution.tasks`` command.

    Each change is a named transition of the task's record (repeating the state a task already reached
    this pass only replaces its reason); measurements given are sent even when unchanged. The update of a
    task is the jump from its stored state to the pass's last one, except that a PENDING task found
    already done when started is recorded IN_PROGRESS (it is completed by the next pass).
    """

    def __init__(self, tasks: Mapping[str, Task]) -> None:
        self.base = tasks
        self.now: dict[str, Task] = {}
        self.fields: dict[str, dict[str, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self.now)

    def state(self, key: str) -> TaskState:
        """The task's state after this pass's changes so far."""
        return (self.now.get(key) or self.base[key]).state

    def changed(self, key: str) -> bool:
        """True when this pass changed the task's state."""
        return key in self.now and self.now[key].state != self.base[key].state

    def merged(self) -> dict[str, Task]:
        """Every task as stored, with this pass's state."""
        return {k: replace(t, state=self.now[k].state) if k in self.now else t for k, t in self.base.items()}

    def _apply(self, t: Task, target: TaskState | None, reason: str, fields: Mapping[str, Any],
               step: Callable[[Task], Task] | None = None) -> None:
        cur = self.now.get(t.key, t)
        if target is not None and step is not None:
            cur = step(cur) if cur.state != target else replace(cur, reason=reason or cur.reason)
        self.now[t.key] = cur
        self.fields.setdefault(t.key, {}).update(fields)

    def start(self, t: Task, **fields: Any) -> None:
        self._apply(t, TaskState.IN_PROGRESS, "", fields, lambda x: x.start())

    def complete(self, t: Task, reason: str, **fields: Any) -> None:
        self._apply(t, TaskState.COMPLETED, reason, fields, lambda x: x.complete(reason))

    def abort(self, t: Task, reason: str) -> None:
        self._apply(t, TaskState.ABORTING, reason, {}, lambda x: x.abort(reason))

    def aborted(self, t: Task, reason: str) -> None:
        self._apply(t, TaskState.ABORTED, reason, {}, lambda x: x.aborted(reason))

    def kill(self, t: Task, reason: str) -> None:
        self._apply(t, TaskState.DEAD, reason, {}, lambda x: x.kill(reason))

    def progress(self, t: Task, **fields: Any) -> None:
        """Measurements only (no state change)."""
        self._apply(t, None, "", fields)

    def updates(self) -> list[JsonDict]:
        """The ``execution.tasks`` updates (task-key order of first change)."""
        out = []
        for key, now in self.now.items():
            base = self.base[key]
            state = now.state
            if state == TaskState.COMPLETED and base.state == TaskState.PENDING:
                state = TaskState.IN_PROGRESS  # found already done when started: completed by the next pass
            row: JsonDict = {"key": key, "state": state.value}
            if now.reason and now.reason != base.reason:
                row["reason"] = now.reason
            row.update(self.fields.get(key, {}))
            out.append(row)
        return out


def plan_digest(plan_doc: Mapping[str, Any]) -> str:
    """Stable digest of a plan document (to recognise the same plan on resume)."""
    doc = {k: v for k, v in plan_doc.items() if k in ("cluster", "kind", "reassignment", "leaders")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


class Executor:
    """Drives the active execution of one cluster to completion; safe to restart at any point."""

    def __init__(self, store: StateStore, admin: KafkaCluster, config: ExecutorConfig,
                 scraper: DiskScraper | None = None, endpoints: ClusterEndpoints | None = None,
                 clock: Callable[[], float] = time.time,
                 ingress: Callable[[str, int], float] | None = None) -> None:
        self.store = store
        self.admin = admin
        self.meter = IngressMeter()
        self.ingress: Callable[[str, int], float] = ingress or self.meter
        """Producers' bytes/s into a partition: the service reads it from the latest snapshot; without one
        (``guardian exec run``) it is measured from the live cluster between passes (:class:`IngressMeter`)."""
        self.config = config
        self.scraper = scraper
        self.endpoints = endpoints
        self.clock = clock
        self._last_bytes: dict[tuple[str, int], tuple[float, int]] = {}
        self._flow_rate: dict[tuple[str, int], float] = {}
        self._interval_rate: dict[str, float] = {}
        """Task key -> bytes/s it copied over the last pass interval (tasks that completed in it included)."""
        self._prev_flows: list[Flow] = []
        self._remaining: dict[str, int] = {}
        self._commanded: dict[str, float] = {}
        self._in_force: dict[tuple[int, str], float] = {}
        """Flow key -> bytes/s its throttles allowed since the last pass (an upper bound on what it copied)."""
        self._pass_clock: tuple[float | None, float | None] = (None, None)
        """(previous, latest) time base of passes with a fresh measurement: their gap predicts the next one."""
        self._chosen: dict[tuple[int, str], float] = {}
        """Bytes headed to each disk by the destinations chosen this pass."""
        self._placement: dict[tuple[str, int], str] = {}
        """(task key, broker) -> the log dir chosen this pass for a new replica (while selecting the batch)."""
        self._backlog: dict[tuple[int, str], float] = {}
        self._capacity: dict[tuple[int, str], tuple[int, int]] | None = None
        self._suspect: dict[str, int] = {}
        self.last_disks: dict[tuple[int, str], DiskRate] = {}
        self._scrapes = 0
        """Disk scrapes this process has made: live load needs two, so the first pass starts nothing."""

    # ------------------------------------------------------------------ store helpers
    def _propose(self, command_type: str, why: str = "", **payload: Any) -> Any:
        return self.store.propose({"type": command_type, "meta": meta(self.config.who, why), **payload})

    def active_execution(self) -> JsonDict | None:
        """The running or stopping execution of this cluster (a copy), if any."""
        def find(state: JsonDict) -> JsonDict | None:
            for e in state["executions"].values():
                if e["cluster"] == self.config.cluster and e["status"] in ACTIVE_STATUSES:
                    return json.loads(json.dumps(e))
            return None

        return self.store.read(find)

    def execution(self, execution_id: int) -> JsonDict | None:
        """A copy of one execution."""
        return self.store.read(lambda s: json.loads(json.dumps(s["executions"].get(str(execution_id)))))

    def _read(self, execution_id: int) -> Execution | None:
        doc = self.store.read(lambda s: s["executions"].get(str(execution_id)))
        return Execution.from_json(doc) if doc is not None else None

    def _owned_throttles(self) -> dict[str, JsonDict]:
        return self.store.read(lambda s: {k: json.loads(json.dumps(v))
                                          for k, v in s["throttles"].get(self.config.cluster, {}).items()
                                          if str(v.get("kind", "")).startswith(THROTTLE_PREFIX)})

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
              why: str = "operator ran the plan") -> int:
        """Check ``plan`` against the live cluster, record it approved and start an execution.

        Idempotent: the same plan (same digest) already executing returns its execution id. Raises
        :class:`PlanRejected` (hard constraints broken) or :class:`ExecutionConflict`.
        """
        doc = plan_to_dict(plan)
        digest = plan_digest(doc)
        active = self._check_idle(digest)
        if active is not None:
            return active
        tasks, counts = self._prepare(plan, batches)
        plan_id = self._propose("plan.propose", why, cluster=self.config.cluster, kind=plan.kind, plan=doc)["plan_id"]
        self._propose("plan.approve", why, plan_id=plan_id)
        return self._start_execution(plan_id, tasks, counts, digest, caps, options, why)

    def start_approved(self, plan_id: int, plan: Plan, *, caps: Mapping[str, int] | None = None,
                       why: str = "approved plan executed") -> int:
        """Start an execution of a plan already proposed and approved in the store (the service's path)."""
        digest = plan_digest(plan_to_dict(plan))
        active = self._check_idle(digest)
        if active is not None:
            return active
        tasks, counts = self._prepare(plan, None)
        return self._start_execution(plan_id, tasks, counts, digest, caps, None, why)

    def _check_idle(self, digest: str) -> int | None:
        active = self.active_execution()
        if active is None:
            return None
        if active.get("options", {}).get("plan_digest") == digest:
            return int(active["id"])
        raise ExecutionConflict(f"cluster {self.config.cluster!r} already runs execution {active['id']} "
                                f"(plan {active['plan_id']}); stop it or wait for it to finish")

    def _prepare(self, plan: Plan, batches: Mapping[tuple[str, int], int] | None
                 ) -> tuple[list[Task], dict[str, int]]:
        """Check the plan against the live cluster (shared invariant checker) and derive its tasks."""
        if plan.cluster != self.config.cluster:
            raise PlanRejected([Violation("cluster-mismatch", f"plan is for cluster {plan.cluster!r}, "
                                                              f"executor for {self.config.cluster!r}")])
        live, dirs = self.read_cluster()
        capacity = self.admin.disk_capacity(live.alive)
        snapshot = live_snapshot(self.config.cluster, live, dirs, capacity, self.endpoints)
        violations = check_plan(snapshot, plan, self.config.check_limits)
        if violations:
            raise PlanRejected(violations)
        tasks = tasks_from_plan(plan, current_partitions(live, dirs), batches)
        return tasks, {t: live.topic_sizes[t] for t in sorted({t.topic for t in tasks})}

    def _start_execution(self, plan_id: int, tasks: list[Task], counts: Mapping[str, int], digest: str,
                         caps: Mapping[str, int] | None, options: Mapping[str, Any] | None, why: str) -> int:
        opts = {"plan_digest": digest, "ordering": self.config.ordering, **(options or {})}
        if self.scraper is not None:  # a first sample now: the first pass already sees live disk load
            self.scraper.scrape()
        result = self._propose("execution.start", why, plan_id=plan_id, tasks=[t.spec_json() for t in tasks],
                               caps={**DEFAULT_CAPS, **(caps or {})}, partition_counts=dict(counts), options=opts)
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
        doc = self.active_execution()
        if doc is None:
            live = self.admin.live()
            self._sync_throttles({}, {}, live)  # leftovers of an earlier run
            return PassReport(None, "idle")
        ex = Execution.from_json(doc)
        eid = ex.id
        tasks = ex.tasks
        live = self.admin.live()
        working = ex.in_states(RUNNING_STATES)
        dir_brokers = set().union(*(involved_brokers(t) for t in working)) & set(live.alive) if working else set()
        dirs = self.admin.log_dirs(dir_brokers, {t.topic for t in working}) if dir_brokers else {}
        now = self._measure(live)
        if self.ingress is self.meter and now is not None:
            self.meter.observe(live, dirs, now, {t.tp for t in working})
        if now is not None:
            self._pass_clock = (self._pass_clock[1], now)
        self._chosen, self._capacity, self._backlog = {}, None, {}  # per pass (free space read lazily)
        self._placement = {}
        if now is not None:
            self._interval_rate = {}  # refilled by this pass's observations
        update = TaskChanges(tasks)
        submit = _Submit()
        report = PassReport(eid, ex.status.value)

        stopping = ex.stopping
        rollback = ex.rollback
        # 1. cancellations (dead brokers, partition count changes, stop)
        for t in tasks.values():
            if t.state not in (TaskState.PENDING, TaskState.IN_PROGRESS):
                continue
            reason = self._cancel_reason(t, live, ex)
            if reason is None and stopping and (t.state == TaskState.PENDING or rollback):
                reason = "execution stopped" + (" with rollback" if rollback else "")
            if reason is None:
                continue
            report.cancelled += 1
            if t.state == TaskState.PENDING:
                update.aborted(t, reason)
            else:
                update.abort(t, reason)
                self._cancel(t, live, dirs, submit)
        # 2. observe running tasks
        for t in tasks.values():
            if update.changed(t.key):
                continue
            if t.state == TaskState.ABORTING:
                if t.tp not in live.reassignments and not self._has_future(t, dirs):
                    update.aborted(t, t.reason or "cancelled")
                else:
                    self._cancel(t, live, dirs, submit)
            elif t.state == TaskState.IN_PROGRESS:
                self._drive(t, live, dirs, now, update, submit, resubmit=True)
        # 3. new submissions
        # new copies wait for live disk load (two scrapes; one pass): placed blind, a new replica may land
        # on the disk that bounds the whole execution. Without metrics they start on the second pass anyway.
        if ex.status == ExecutionStatus.RUNNING and (self.scraper is None or self._scrapes >= 2):
            merged = update.merged()
            ready = ready_tasks(merged, urp_zero=live.under_replicated == 0,
                                leadership_first=bool(ex.options.get("leadership_first")))
            urp = {tp for tp, p in live.partitions.items() if len(set(p.isr)) < len(set(p.replicas))}
            leaders = {tp: p.leader for tp, p in live.partitions.items()}
            caps = {**DEFAULT_CAPS, **ex.caps}
            ordered = order_tasks(ready, ex.options.get("ordering", self.config.ordering), urp,
                                  [t for t in merged.values() if t.state in OPEN_STATES], leaders, caps["per_disk"])
            running = [t for t in merged.values() if t.state in RUNNING_STATES]
            if ordered:
                self._backlog = self._disk_backlog(merged, live, dirs)
            batch = select_batch(ordered, running, caps, leaders,
                                 placed=self._placed_dirs(running, dirs), place=self._place)
            refused = self._policy_refusals(batch, live, dirs)
            for t in batch:
                if t.key in refused:  # a policy set since the plan was proposed forbids it; the rest go on
                    log.warning("task %s: %s", t.key, refused[t.key])
                    update.aborted(t, refused[t.key])
                    report.cancelled += 1
                    continue
                update.start(t, attempts=t.attempts)
                self._drive(t, live, dirs, now, update, submit, resubmit=False)
                report.submitted += 1
        # 4. write-ahead: every state change and attempt count is committed before the cluster is touched
        rows = update.updates()
        if rows:
            self._propose("execution.tasks", "reconcile pass", execution_id=eid, updates=rows)
        ex = self._read(eid) or ex
        tasks = ex.tasks
        # 5. throttles for what is (about to be) in flight, then submit
        # cancels go first: a copy must never run unthrottled between its throttle's removal and its cancel
        cancels = _Submit(reassign={tp: None for tp, r in submit.reassign.items() if r is None},
                          log_dirs={k: d for k, d in submit.log_dirs.items() if self._is_cancel(k, tasks, submit)})
        for tp in cancels.reassign:
            del submit.reassign[tp]
        for k in cancels.log_dirs:
            del submit.log_dirs[k]
        self._submit(cancels)
        flows, topic_lists = self._flows(tasks, live, dirs, submit)
        rates = self._rates(flows, live, now)
        # a rate that rises waits until the new copies have started: before, the copies already running
        # would split it among fewer and run faster than planned
        safe = {k: min(v, self._in_force.get(k, v)) for k, v in rates.items()}
        failed = self._sync_throttles(safe, topic_lists, live)
        if failed:  # never start a copy whose throttle is not in force: it is retried next pass
            held = [tp for tp, r in submit.reassign.items() if r is not None
                    and (tp[0] in failed or failed & set(r) or (tp in live.partitions
                                                                and live.partitions[tp].leader in failed))]
            for tp in held:
                del submit.reassign[tp]
            for key3 in [k for k in submit.log_dirs if k[2] in failed]:
                del submit.log_dirs[key3]
        self._submit(submit)
        if safe != rates and not failed:
            self._sync_throttles(rates, topic_lists, live)  # what fails is retried next pass
        # 6. progress and completion
        report.completed = sum(1 for u in rows if u["state"] == TaskState.COMPLETED
                               and u["key"] in tasks and tasks[u["key"]].state == TaskState.COMPLETED)
        self._progress(ex, flows, rates, live, report)
        if not ex.open_tasks():
            self._sync_throttles({}, {}, live)
            status, why = ex.final_status()
            self._propose("execution.finish", why, execution_id=eid, status=status.value)
            report.status = status.value
            self.forget()  # one execution per cluster at a time
        return report

    def forget(self) -> None:
        """Drop this process's per-task memory (copy rates, passes a task went unseen). Called when an
        execution ends and when this node (re)gains leadership: memory from an earlier term could make
        a resubmission one pass early."""
        self._last_bytes.clear()
        self._flow_rate.clear()
        self._interval_rate.clear()
        self._prev_flows = []
        self._remaining.clear()
        self._commanded.clear()
        self.meter.forget()
        self._suspect.clear()

    def _now(self) -> float:
        return self.clock()

    def _measure(self, live: LiveCluster) -> float | None:
        """Scrape disk load once per pass; the time base of rates is the hosts' clock when they export one.

        Returns ``None`` when the scrape gave no clock this pass (rates are then not updated).
        """
        if self.scraper is None:
            return time.monotonic()
        before = self.scraper.clock
        self.last_disks = dict(self.scraper.scrape(set(live.alive)))
        self._scrapes += 1
        if self.scraper.clock is None or self.scraper.clock == before:
            return None
        return self.scraper.clock

    # ------------------------------------------------------------------ policies
    def _policies(self) -> tuple[JsonDict, JsonDict] | None:
        """This cluster's replicated record and maintenance flags, when they could change a check (a
        standalone run's local state has none)."""
        def read(state: JsonDict) -> tuple[JsonDict, JsonDict]:
            return (json.loads(json.dumps(state["clusters"].get(self.config.cluster) or {})),
                    json.loads(json.dumps(state.get("maintenance", {}).get(self.config.cluster) or {})))

        cluster, maintenance = self.store.read(read)
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

    # ------------------------------------------------------------------ per-task logic
    def _cancel_reason(self, t: Task, live: LiveCluster, ex: Execution) -> str | None:
        dead = sorted(b for b in involved_brokers(t) if b not in live.alive)
        if dead:
            return f"broker {dead[0]} of the old/new replica set is dead"
        expected = ex.partition_counts.get(t.topic)
        actual = live.topic_sizes.get(t.topic)
        if actual is None:
            return f"topic {t.topic} was deleted"
        if expected is not None and actual != expected:
            return f"topic {t.topic} changed partition count {expected} -> {actual}"
        return None

    @staticmethod
    def _has_future(t: Task, dirs: DirMap) -> bool:
        return any(future_dir(dirs, t.topic, t.partition, b) is not None
                   for b in set(t.target_replicas) | set(t.source_replicas))

    def _cancel(self, t: Task, live: LiveCluster, dirs: DirMap, submit: _Submit) -> None:
        tp = t.tp
        if tp in live.reassignments:
            submit.reassign[tp] = None
            submit.owner[tp] = t.key
        for b in set(t.target_replicas) | set(t.source_replicas):
            cur = main_dir(dirs, t.topic, t.partition, b)
            if future_dir(dirs, t.topic, t.partition, b) is not None and cur is not None:
                submit.log_dirs[(t.topic, t.partition, b)] = cur.log_dir  # back to where it is: no future
                submit.owner[(t.topic, t.partition, b)] = t.key

    def _drive(self, t: Task, live: LiveCluster, dirs: DirMap, now: float | None,
               update: TaskChanges, submit: _Submit, *, resubmit: bool) -> None:
        """Compare one started task with the cluster; complete it, record progress or (re)submit."""
        suspect_before = self._suspect.get(t.key, 0)
        self._drive_once(t, live, dirs, now, update, submit, resubmit=resubmit)
        if self._suspect.get(t.key, 0) == suspect_before:
            self._suspect.pop(t.key, None)  # seen in flight or done this pass: start counting afresh

    def _drive_once(self, t: Task, live: LiveCluster, dirs: DirMap, now: float | None,
                    update: TaskChanges, submit: _Submit, *, resubmit: bool) -> None:
        tp = t.tp
        p = live.partitions.get(tp)
        attempts = t.attempts
        if p is None:
            update.kill(t, "partition no longer exists")
            return

        def send(kind: str, key: Any, value: Any) -> None:
            nonlocal attempts
            if resubmit:
                # a started task the cluster shows neither in flight nor done: act only when two passes
                # agree, so a stale metadata read never causes a duplicate submission
                seen = self._suspect.get(t.key, 0) + 1
                self._suspect[t.key] = seen
                if seen < 2:
                    return
            self._suspect.pop(t.key, None)
            if resubmit and attempts >= self.config.max_attempts:
                update.kill(t, f"gave up after {attempts} submissions ({kind} did not take effect)")
                return
            attempts += 1
            update.progress(t, attempts=attempts)
            started = now if now is not None else (self.scraper.clock if self.scraper is not None else None)
            if not resubmit and started is not None:  # a new copy starts from zero: its first interval counts
                self._last_bytes[(t.key, 0)] = (started, 0)
            if kind == "reassign":
                submit.reassign[key] = value
            elif kind == "log_dir":
                submit.log_dirs[key] = value
            submit.owner[key] = t.key

        if t.action == "elect_leader":
            want = int(t.leader or 0)
            if p.leader == want and p.replicas and p.replicas[0] == want:
                update.complete(t, f"broker {want} leads")
            elif want not in p.replicas:
                update.kill(t, f"broker {want} is not a replica of {tp[0]}-{tp[1]}")
            elif tp in live.reassignments:
                pass  # the reorder (or another move) is still being applied
            elif p.replicas[0] != want:
                send("reassign", tp, [want, *[b for b in p.replicas if b != want]])
            elif want in p.isr:
                submit.elect.append(tp)
                submit.owner[tp] = t.key
            return

        target = list(t.target_replicas)
        dirs_wanted = list(t.target_log_dirs) or [None] * len(target)
        if t.action == "reassign" and tp in live.reassignments:
            ra = live.reassignments[tp]
            done, total = self._copy_progress(t, ra.adding, dirs, live)
            self._remaining[t.key] = max(total - done, 0)
            update.progress(t, bytes_done=done, bytes_total=total, rate_bytes_per_s=self._observe_rate(t, now, done))
            return
        if t.action == "reassign" and list(p.replicas) != target:
            send("reassign", tp, target)
            if submit.reassign.get(tp) == target and submit.owner.get(tp) == t.key:
                self._preplace(t, p.replicas, live, submit)
            return
        # replica set is right: log dirs next (KIP-113)
        pending_dirs: list[tuple[int, str, ReplicaDir | None]] = []
        done = total = 0
        for b, d in zip(target, dirs_wanted, strict=True):
            if d is None:
                continue
            cur = main_dir(dirs, t.topic, t.partition, b)
            fut = future_dir(dirs, t.topic, t.partition, b)
            if cur is None and b in live.alive:
                pending_dirs.append((b, d, None))
                continue
            if cur is not None and cur.log_dir == d and fut is None:
                continue
            size = cur.size if cur is not None else 0
            total += size
            if fut is not None and fut.log_dir == d:
                done += min(fut.size, size)
                pending_dirs.append((b, d, fut))
            else:
                pending_dirs.append((b, d, None))
        if not pending_dirs:
            self._final_rate(t, now)
            update.complete(t, "target replicas and log dirs reached", bytes_done=max(t.bytes_total, t.bytes_done))
            return
        if t.action == "move_log_dir":
            update.progress(t, bytes_done=done, bytes_total=max(total, t.size_bytes),
                            rate_bytes_per_s=self._observe_rate(t, now, done))
        for b, d, fut in pending_dirs:
            known = main_dir(dirs, t.topic, t.partition, b) is not None
            if fut is None and (known or not resubmit):
                send("log_dir", (t.topic, t.partition, b), d)

    def _preplace(self, t: Task, current: tuple[int, ...], live: LiveCluster, submit: _Submit) -> None:
        """Choose the log dir of every replica the reassignment adds: the plan's, or else (the plan lets the
        broker pick) the destination disk with the most live migration headroom that has room for it."""
        target = list(t.target_replicas)
        wanted = list(t.target_log_dirs) or [None] * len(target)
        for b, d in zip(target, wanted, strict=True):
            if b in current or b not in live.alive:
                continue
            early = None if d else self._placement.get((t.key, b))
            chosen = d or early or self._roomiest_dir(b, t.size_bytes // max(
                sum(1 for x in target if x not in current), 1))
            if chosen is None:
                continue
            key3 = (t.topic, t.partition, b)
            submit.log_dirs[key3] = chosen
            submit.owner[key3] = t.key
            submit.preplace.add(key3)
            if early is None:  # an early choice was counted when it was made
                self._chosen[(b, chosen)] = self._chosen.get((b, chosen), 0.0) + float(t.size_bytes)

    def _placed_dirs(self, running: Iterable[Task], dirs: DirMap) -> dict[str, set[tuple[int, str]]]:
        """Per running reassignment: the disks its new replicas live on (the executor or broker chose them)."""
        out: dict[str, set[tuple[int, str]]] = {}
        for t in running:
            if t.action != "reassign":
                continue
            for b in t.target_replicas:
                if b in t.source_replicas:
                    continue
                cur = main_dir(dirs, t.topic, t.partition, b)
                if cur is not None:
                    out.setdefault(t.key, set()).add((b, cur.log_dir))
        return out

    def _place(self, t: Task, full: Callable[[tuple[int, str]], bool]) -> set[tuple[int, str]] | None:
        """Choose now (while selecting the batch) the log dir of each new replica the plan leaves to the
        executor, among its broker's disks with a free per-disk slot; ``None`` when a broker with live disk
        data has none free. The choice is kept for :meth:`_preplace`."""
        if t.action != "reassign":
            return set()
        target, src = list(t.target_replicas), t.source_replicas
        wanted = list(t.target_log_dirs) or [None] * len(target)
        adding = [(b, d) for b, d in zip(target, wanted, strict=True) if b not in src]
        out: set[tuple[int, str]] = set()
        picks: list[tuple[int, str]] = []
        for b, d in adding:
            if d:
                continue  # the plan's dir: counted by copy_endpoints
            disks = [k for k in self.last_disks if k[0] == b]
            free = {k[1] for k in disks if not full(k)}
            if disks and not free:
                return None
            chosen = self._roomiest_dir(b, t.size_bytes // max(len(adding), 1), exclude=
                                        {k[1] for k in disks} - free)
            if chosen is None:
                continue  # no live data or free-space figures: the broker picks
            picks.append((b, chosen))
            out.add((b, chosen))
        for b, chosen in picks:
            self._placement[(t.key, b)] = chosen
            self._chosen[(b, chosen)] = self._chosen.get((b, chosen), 0.0) + float(t.size_bytes)
        return out

    def _roomiest_dir(self, broker: int, size: int, exclude: set[str] | frozenset[str] = frozenset()) -> str | None:
        """The broker's disk that would finish its copy work first: least ``(bytes still to read from or
        write to it + this replica) / its migration budget`` (live util, measured migration, the policy's
        threshold), among disks keeping ``FREE_SPACE_FACTOR x size`` free. A disk that many pending moves
        must still read from is thereby spared new writes. ``None`` without live disk data or free-space
        figures (the broker then picks)."""
        disks = {d: r for d, r in self.last_disks.items() if d[0] == broker}
        if not disks:
            return None
        if self._capacity is None:
            try:
                self._capacity = self.admin.disk_capacity({d[0] for d in self.last_disks})
            except AdminError as exc:
                log.warning("reading free space failed (brokers pick new replicas' dirs): %s", exc)
                self._capacity = {}
        policy = self.config.throttle
        migration = self._disk_migration([])
        best: tuple[float, str] | None = None
        for (b, path), rate in sorted(disks.items()):
            usable = self._capacity.get((b, path), (0, -1))[1]
            if path in exclude or usable < FREE_SPACE_FACTOR * size:
                continue
            k = bytes_per_util(rate)
            u0 = max(rate.util - migration.get((b, path), 0.0) / k, 0.0)
            budget = max((policy.util_threshold - policy.headroom - u0) * k, 1e6)
            finish = (self._backlog.get((b, path), 0.0) + self._chosen.get((b, path), 0.0) + size) / budget
            if best is None or finish < best[0]:
                best = (finish, path)
        return best[1] if best else None

    def _disk_backlog(self, tasks: Mapping[str, Task], live: LiveCluster, dirs: DirMap) -> dict[tuple[int, str], float]:
        """Bytes every disk must still read (as a copy source) or write (as the destination of a running
        copy) for the open data tasks of the execution."""
        out: dict[tuple[int, str], float] = {}
        for t in tasks.values():
            if t.state not in (TaskState.PENDING, TaskState.IN_PROGRESS) or t.action == "elect_leader":
                continue
            tp = t.tp
            p = live.partitions.get(tp)
            if p is None or p.leader < 0:
                continue
            size = float(t.size_bytes)
            left = float(self._remaining.get(t.key, size)) if t.state == TaskState.IN_PROGRESS else size
            src = main_dir(dirs, tp[0], tp[1], p.leader)
            src_disk = (p.leader, src.log_dir) if src else _recorded_dir(t, p.leader)
            if src_disk is not None:
                out[src_disk] = out.get(src_disk, 0.0) + left
            if t.state == TaskState.IN_PROGRESS:
                adding = [b for b in t.target_replicas if b not in t.source_replicas]
                for b in adding:
                    dst = main_dir(dirs, tp[0], tp[1], b)
                    if dst is not None:
                        out[(b, dst.log_dir)] = out.get((b, dst.log_dir), 0.0) + left / len(adding)
        return out

    def _copy_progress(self, t: Task, adding: tuple[int, ...], dirs: DirMap, live: LiveCluster) -> tuple[int, int]:
        p = live.partitions[t.tp]
        lead = main_dir(dirs, t.topic, t.partition, p.leader) if p.leader >= 0 else None
        size = lead.size if lead is not None else t.size_bytes // max(len(adding), 1)
        done = 0
        for b in adding:
            d = main_dir(dirs, t.topic, t.partition, b)
            done += min(d.size, size) if d is not None else 0
        return done, size * len(adding)

    def _final_rate(self, t: Task, now: float | None) -> None:
        """A task found complete: what it copied since its last observation, over that whole interval."""
        prev = self._last_bytes.pop((t.key, 0), None)
        total = t.bytes_total or t.size_bytes
        if now is not None and prev is not None and now > prev[0] and total >= prev[1]:
            self._interval_rate[t.key] = (total - prev[1]) / (now - prev[0])

    def _observe_rate(self, t: Task, now: float | None, done: int) -> float:
        key = (t.key, 0)
        if now is None:
            return self._flow_rate.get(key, 0.0)
        prev = self._last_bytes.get(key)
        self._last_bytes[key] = (now, done)
        rate = self._flow_rate.get(key, 0.0)
        if prev is not None and now > prev[0] and done >= prev[1]:
            inst = (done - prev[1]) / (now - prev[0])
            self._interval_rate[t.key] = inst
            rate = inst if rate == 0.0 else 0.5 * rate + 0.5 * inst
            self._flow_rate[key] = rate
        return float(rate) if math.isfinite(rate) else 0.0

    # ------------------------------------------------------------------ throttles
    def _flows(self, tasks: Mapping[str, Task], live: LiveCluster, dirs: DirMap, submit: _Submit
               ) -> tuple[list[Flow], dict[str, dict[str, set[str]]]]:
        """Copy flows of every in-flight task and the throttled-replica entries they need per topic."""
        flows: list[Flow] = []
        lists: dict[str, dict[str, set[str]]] = {}
        for t in tasks.values():
            if t.state != TaskState.IN_PROGRESS or t.action == "elect_leader":
                continue
            tp = t.tp
            p = live.partitions.get(tp)
            if p is None:
                continue
            rate = self._interval_rate.get(t.key, 0.0)
            if t.action == "reassign" and (tp in live.reassignments or submit.reassign.get(tp) is not None):
                ra = live.reassignments.get(tp)
                adding = list(ra.adding) if ra else [b for b in t.target_replicas if b not in p.replicas]
                if not adding:
                    continue
                sources = list(ra.removing) + [b for b in p.replicas if ra is None or b not in ra.adding] \
                    if ra else list(p.replicas)
                entry = lists.setdefault(t.topic, {LEADER_REPLICAS: set(), FOLLOWER_REPLICAS: set()})
                entry[LEADER_REPLICAS].update(f"{tp[1]}:{b}" for b in sorted(set(sources)))
                entry[FOLLOWER_REPLICAS].update(f"{tp[1]}:{b}" for b in adding)
                lead = p.leader
                src = main_dir(dirs, tp[0], tp[1], lead) if lead >= 0 else None
                src_disk = (lead, src.log_dir) if src else _recorded_dir(t, lead)  # new this pass: dirs not read
                for b in adding:
                    dst = main_dir(dirs, tp[0], tp[1], b)
                    i = t.target_replicas.index(b) if b in t.target_replicas else -1
                    want = t.target_log_dirs[i] if i >= 0 and t.target_log_dirs else None
                    want = want or submit.log_dirs.get((tp[0], tp[1], b))
                    flows.append(Flow(f"{t.key}>{b}", "move", lead, b,
                                      src_disk, (b, dst.log_dir) if dst else ((b, want) if want else None),
                                      rate / len(adding), self.ingress(tp[0], tp[1]),
                                      self._remaining.get(t.key, t.size_bytes) / len(adding)))
            else:
                for b in set(t.target_replicas):
                    cur = main_dir(dirs, tp[0], tp[1], b)
                    fut = future_dir(dirs, tp[0], tp[1], b)
                    key3 = (tp[0], tp[1], b)
                    if fut is None and key3 not in submit.log_dirs:
                        continue
                    dst_dir = fut.log_dir if fut else submit.log_dirs[key3]
                    left = max(cur.size - (fut.size if fut else 0), 0) if cur else None
                    flows.append(Flow(f"{t.key}>{b}", "future", b, b, (b, cur.log_dir) if cur else None,
                                      (b, dst_dir), rate, self.ingress(tp[0], tp[1]), left))
        return flows, lists

    def _rates(self, flows: list[Flow], live: LiveCluster, now: float | None) -> dict[tuple[int, str], float]:
        if not flows:
            return {}
        policy = self.config.throttle
        epoch = now if now is not None and now > 1e9 else time.time()
        previous = {}
        for rec in self._owned_throttles().values():
            if rec["kind"] == THROTTLE_PREFIX + "broker":
                for k, v in rec["target"].get("configs", {}).items():
                    previous[(int(rec["target"]["broker"]), k)] = float(v)
        network = None
        if self.scraper is not None and policy.nic_bytes_per_s:
            network = {b: NetRate(*v) for b, v in self.scraper.network.items()}
        migration = self._disk_migration(flows)
        if now is not None:
            self._prev_flows = list(flows)
        last, latest = self._pass_clock
        horizon = 1.25 * (latest - last) if last is not None and latest is not None and latest > last else None
        self._in_force = previous
        rates = broker_rates(flows, self.last_disks, policy, previous, epoch, network, migration, horizon)
        floors = catch_up_floors(flows)
        for (b, key), ceiling in self._protection_ceilings().items():  # disk protection wins over migration ...
            if (b, key) in rates:  # ... down to the rate the copies need to ever finish
                rates[(b, key)] = max(min(rates[(b, key)], ceiling), floors.get((b, key), 0.0))
        if now is not None:
            count: dict[tuple[int, str], int] = {}
            for f in flows:
                for r in flow_roles(f):
                    count[r] = count.get(r, 0) + 1
            self._commanded = {f.key: min(rates[r] / count[r] for r in flow_roles(f)) for f in flows}
        return rates

    def _disk_migration(self, flows: list[Flow]) -> dict[tuple[int, str], float]:
        """Migration bytes/s each disk carried over the last interval: every copy that ran in it (the
        previous pass's flows, finished ones included) at the rate its task measured, on its source and
        destination disks (a destination placed since then is taken from this pass's flow)."""
        now_dst = {f.key: f.dst_disk for f in flows}
        per_task: dict[str, int] = {}
        for f in self._prev_flows:
            task = f.key.rsplit(">", 1)[0]
            per_task[task] = per_task.get(task, 0) + 1
        out: dict[tuple[int, str], float] = {}
        for f in self._prev_flows:
            task = f.key.rsplit(">", 1)[0]
            rate = min(self._interval_rate.get(task, 0.0) / per_task[task], self._commanded.get(f.key, math.inf))
            for d in {f.src_disk, f.dst_disk or now_dst.get(f.key)}:
                if d is not None and rate > 0:
                    out[d] = out.get(d, 0.0) + rate
        return out

    def _protection_ceilings(self) -> dict[tuple[int, str], float]:
        """Migration rates the throttle protection (issue 5) has in force, as ceilings per broker."""
        def read(state: JsonDict) -> dict[tuple[int, str], float]:
            out: dict[tuple[int, str], float] = {}
            for v in state["throttles"].get(self.config.cluster, {}).values():
                key = PROTECTION_KINDS.get(str(v.get("kind")))
                broker = (v.get("target") or {}).get("broker")
                if key is None or not isinstance(broker, int):
                    continue
                rate = float(v.get("rate_bytes_per_s", 0.0))
                out[(broker, key)] = min(out.get((broker, key), math.inf), rate)
            return out

        return self.store.read(read)

    def _sync_throttles(self, rates: Mapping[tuple[int, str], float],
                        lists: Mapping[str, Mapping[str, set[str]]], live: LiveCluster) -> set[Any]:
        """Make the cluster's migration throttles exactly ``rates`` and ``lists``; record before setting.

        Level-based: compares with the configs *read from the cluster* this pass, so a throttle someone
        else removed or changed is put back, and only entries this executor recorded are ever removed
        (list entries of others are left alone). Returns the brokers (ids) and topics (names) whose
        change failed (retried next pass).
        """
        owned = self._owned_throttles()
        want_b: dict[Any, dict[str, Any]] = {}
        for (b, key), r in rates.items():
            want_b.setdefault(b, {})[key] = str(int(r))
        have_b: dict[Any, dict[str, Any]] = {int(v["target"]["broker"]): dict(v["target"].get("configs", {}))
                                             for v in owned.values() if v["kind"] == THROTTLE_PREFIX + "broker"}
        empty: dict[str, set[str]] = {LEADER_REPLICAS: set(), FOLLOWER_REPLICAS: set()}
        want_t: dict[Any, dict[str, Any]] = {t: {k: set(v.get(k, set())) for k in empty} for t, v in lists.items()}
        have_t: dict[Any, dict[str, Any]] = {str(v["target"]["topic"]): {k: set(v["target"].get(k, [])) for k in empty}
                                             for v in owned.values() if v["kind"] == THROTTLE_PREFIX + "topic"}
        failed = self._sync_kind(_BROKER_RATES, want_b, have_b, live, self.admin.broker_configs,
                                 lambda b, changes: self.admin.set_broker_configs({b: changes}))
        return failed | self._sync_kind(_REPLICA_LISTS, want_t, have_t, live, self.admin.topic_configs,
                                        self._apply_lists)

    def _apply_lists(self, topic: str, changes: Mapping[str, tuple[set[str], set[str]]]) -> None:
        for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
            adds, subs = changes.get(k, (set(), set()))
            self.admin.alter_topic_lists(topic, k, append=adds, subtract=subs)

    def _sync_kind(self, kind: _ThrottleKind, want: Mapping[Any, dict[str, Any]], have: Mapping[Any, dict[str, Any]],
                   live: LiveCluster, read: Callable[[list[Any]], Mapping[Any, Mapping[str, str]]],
                   apply: Callable[[Any, Any], None]) -> set[Any]:
        """One read-compare-record-apply round over the targets (brokers or topics) of one kind of throttle.

        Per target: the desired value, what this executor recorded, and what the cluster shows are compared;
        a needed change is recorded first (the union of desired and recorded, so a crash between record and
        apply still knows to clean it), then applied; the record is then set to the desired value, or
        cleared when nothing is desired. Targets the cluster cannot show (dead broker, deleted topic) keep
        or drop their record as ``kind`` says. Returns the targets whose read or change failed.
        """
        cluster = self.config.cluster
        targets = sorted(set(want) | set(have))
        present = [x for x in targets if kind.present(live, x)]
        failed: set[Any] = set()
        actual: Mapping[Any, Mapping[str, str]] | None = {}
        if present:
            try:
                actual = read(present)
            except AdminError as exc:
                log.warning("reading %s failed: %s", kind.what, exc)
                failed.update(present)
                actual = None
        for x in targets:
            key, w, h = kind.record_key(x), want.get(x, {}), have.get(x, {})
            if not kind.present(live, x):
                if kind.clear_when_absent and x in have:
                    self._propose("throttle.clear", kind.absent_why, cluster=cluster, key=key)
                continue  # a dead broker cannot be altered: keep the record, clear it once it is back
            if actual is None:
                continue
            changes = kind.changes(w, h, actual.get(x, {}))
            if changes:
                merged = kind.merge(w, h, changes)
                self._propose("throttle.set", f"{kind.what} (write-ahead)", cluster=cluster, key=key,
                              kind=kind.kind, target=kind.target(x, merged), rate_bytes_per_s=kind.rate(merged))
                try:
                    apply(x, changes)
                except AdminError as exc:  # recorded (write-ahead): retried next pass
                    log.warning("%s change on %s failed: %s", kind.what, x, exc)
                    failed.add(x)
                    continue
            elif kind.same(w, h):
                continue
            if any(w.values()):
                self._propose("throttle.set", kind.what, cluster=cluster, key=key, kind=kind.kind,
                              target=kind.target(x, w), rate_bytes_per_s=kind.rate(w))
            elif x in have or changes:
                self._propose("throttle.clear", kind.idle_why, cluster=cluster, key=key)
        return failed

    # ------------------------------------------------------------------ submission
    @staticmethod
    def _is_cancel(key: tuple[str, int, int], tasks: Mapping[str, Task], submit: _Submit) -> bool:
        """True when a log-dir request cancels a future replica (its task is being aborted)."""
        owner = tasks.get(submit.owner.get(key, ""))
        return owner is not None and owner.state == TaskState.ABORTING

    def _submit(self, submit: _Submit) -> None:
        """Send what the pass decided: log-dir moves first (a new replica's dir must be known before its
        reassignment creates it), then reassignments, then preferred elections."""
        _send("log dir move", self.admin.alter_log_dirs, submit.log_dirs,
              lambda k, err: bool(err) and not (k in submit.preplace and err in PREPLACE_ANSWERS))
        _send("reassignment", self.admin.alter_reassignments, submit.reassign,
              lambda tp, err: bool(err) and err != "NoReassignmentInProgressError")
        _send("preferred election", self.admin.elect_preferred, submit.elect,
              lambda tp, code: code not in ELECTION_ERRORS_OK and code != 80)

    # ------------------------------------------------------------------ progress / finish
    def _progress(self, ex: Execution, flows: list[Flow], rates: Mapping[tuple[int, str], float],
                  live: LiveCluster, report: PassReport) -> None:
        tasks = ex.tasks.values()
        counts = ex.counts()
        done = total = 0
        for t in tasks:
            if t.state in (TaskState.ABORTED, TaskState.DEAD):
                continue
            t_total = t.bytes_total or t.size_bytes
            t_done = t_total if t.state == TaskState.COMPLETED else min(t.bytes_done, t_total)
            total += t_total
            done += t_done
        rate = sum(self._flow_rate.get((t.key, 0), 0.0) for t in tasks if t.state == TaskState.IN_PROGRESS)
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
        """Run passes every ``interval_s`` (fixed delay) until the execution finishes.

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
            time.sleep(interval_s)
