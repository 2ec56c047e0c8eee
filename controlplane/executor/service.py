"""The executor inside the service: one :class:`Executor` per registered cluster, on the Raft leader only.

``ExecutorService.start_approved(plan_id)`` is what an API endpoint calls to execute an approved plan;
``run_once`` (or the background thread from ``start``) starts the next step of every multi-step migration
whose previous step completed (:mod:`.migrations`), then runs a reconcile pass for every cluster that has
an active execution or migration throttles left to clean. Followers do nothing: after a failover the
new leader's passes pick every execution up from the replicated state (write-ahead task states make
that safe).

Every executor takes the cluster's execution lease (:mod:`.lease`) under the controller group's identity,
so the group's next leader renews it at once while a CLI or another group is refused: a start refused
because of another executor's lease or of reassignments it does not own is recorded in the action log
(``execution.refused``) and raised (the API answers 409). Every ``sweep_every`` passes the loop also reads
the lease of each registered cluster with nothing to do and, when its holder's lease expired with moves
or throttles left behind, takes it, cleans them up and hands it back. In the service each cluster's pass
or sweep runs on its own through the ``fanout`` port (a per-cluster deadline, bounded concurrency): a
cluster whose lease read hangs is that cluster's ``timeout``, never a late pass for another cluster nor a
loop that looks dead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol

from collectors.disk_rates import DiskLoad
from controlplane.executor.conflicts import ExecutionConflict
from controlplane.executor.lease import ExecutionLease, LeaseOwner, client_id, leftovers
from controlplane.executor.live import FactsSource
from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.migrations import MigrationDriver
from controlplane.executor.observed import standalone
from controlplane.executor.reconcile import THROTTLE_PREFIX, Executor, ExecutorConfig, PassReport
from controlplane.executor.release import KIND_RESTORE, ReleaseError, recorded_replicas, restore_plan
from controlplane.logs import cluster_scope
from controlplane.state.commands import meta
from controlplane.state.reads import cluster_record, execution_record, plan_to_execute
from controlplane.state.registration import endpoints_of
from controlplane.state.store import StateStore
from domain.execution import ACTIVE_STATUSES
from domain.plan_record import PlanStatus
from kafkaio.admin import KafkaAdmin
from kafkaio.port import KafkaCluster
from raft.protocol import JsonDict

log = logging.getLogger("guardian.executor")
Binding = tuple[KafkaCluster, DiskLoad | None, FactsSource | None]
"""A cluster's admin client, its live disk load and where its broker facts come from."""


class ClusterWork(Protocol):
    """Port: runs each cluster's work on its own (:class:`controlplane.service.fanout.ClusterFanout`)."""

    def run(self, work: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run ``work[cluster]()`` per cluster; the results of those that ended in time."""
        ...


def bind_cluster(name: str, record: Mapping[str, Any]) -> Binding | None:
    """Standalone binding of a registered cluster (no observer in the process): an admin client of its own
    and a collector run once per pass (None without bootstrap servers). The service binds through the
    observer instead (:func:`controlplane.bootstrap.build_service`)."""
    if not record.get("bootstrap_servers"):
        return None
    endpoints = endpoints_of(name, record)
    view = standalone(endpoints) if endpoints.metrics_urls else None
    return KafkaAdmin.for_endpoints(endpoints, client_id=client_id("service")), view, (view or endpoints)


class ExecutorService:
    """Leader-only executor loop over every cluster in the replicated state."""

    def __init__(self, store: StateStore, policy: MigrationRatePolicy | None = None, interval_s: float = 5.0,
                 bind: Callable[[str, Mapping[str, Any]], Binding | None] = bind_cluster,
                 ordering: str = "small_first",
                 ingress: Callable[[str], Callable[[str, int], float]] | None = None,
                 group: str = "", lease_intervals: int = 10, sweep_every: int = 12,
                 fanout: ClusterWork | None = None) -> None:
        self.store = store
        self.fanout = fanout
        """Runs each cluster's pass or sweep on its own (deadline, bounded concurrency); None: in turn."""
        self._bind_lock = threading.Lock()
        self.group = group
        """The controller group's identity (its nodes share one lease token)."""
        self.lease_ttl_s = max(lease_intervals * interval_s, 5.0)
        self.sweep_every = sweep_every
        self._passes = 0
        self.ingress = ingress
        self.policy = policy or MigrationRatePolicy()
        self.interval_s = interval_s
        self.bind = bind
        self.ordering = ordering
        self._executors: dict[str, Executor] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: dict[str, PassReport] = {}
        self._leading = False
        self.migrations = MigrationDriver(store, self.start_approved)
        """Chains the steps of multi-step migrations (:mod:`.migrations`), once per loop, before the passes."""

    def executor(self, cluster: str) -> Executor:
        """The executor of ``cluster`` (created on first use). Raises KeyError for an unknown cluster."""
        with self._bind_lock:
            return self._executor(cluster)

    def _executor(self, cluster: str) -> Executor:
        if cluster not in self._executors:
            record = self.store.read(lambda s: cluster_record(s, cluster))
            if record is None:
                raise KeyError(f"unknown cluster {cluster!r}")
            binding = self.bind(cluster, record.to_json())
            if binding is None:
                raise KeyError(f"cluster {cluster!r} has no bootstrap servers")
            admin, scraper, endpoints = binding
            owner = LeaseOwner.this_process("service", getattr(admin, "client_id", None) or client_id("service"),
                                            identity=self.group)
            self._executors[cluster] = Executor(self.store, admin, ExecutorConfig(cluster, ordering=self.ordering,
                                                                                  throttle=self.policy,
                                                                                  interval_s=self.interval_s),
                                                scraper, endpoints,
                                                ingress=self.ingress(cluster) if self.ingress else None,
                                                lease=ExecutionLease(admin, cluster, owner, self.lease_ttl_s))
        return self._executors[cluster]

    def start_approved(self, plan_id: int, caps: Mapping[str, int] | None = None, why: str = "",
                       by: str | None = None, options: Mapping[str, Any] | None = None) -> int:
        """Execute an approved plan of the store; returns the execution id (idempotent while it runs).
        ``by``: the human (token name) who started it, recorded on the execution and in the action log;
        ``options``: recorded on the execution (e.g. ``throttle`` settings, :mod:`.settings`, or the
        ``migration`` it is a step of). A ``restore`` plan (``params.drain_execution``) runs in the drain's
        batches and is judged against the placement the drain recorded, as ``guardian exec restore`` is."""
        found = self.store.read(lambda s: plan_to_execute(s, plan_id))  # no deep copy of the moves first
        if found is None:
            raise KeyError(f"unknown plan {plan_id}")
        plan_rec, plan = found
        if plan_rec.status == PlanStatus.EXECUTING and plan_rec.execution_id:
            return plan_rec.execution_id
        opts: dict[str, Any] = {"kind": plan.kind, **(options or {})}
        batches = recorded = None
        drain_id = plan_rec.params.get("drain_execution")
        if plan.kind == KIND_RESTORE and drain_id is not None:
            drain_rec = self.store.read(lambda s: execution_record(s, int(drain_id)))
            if drain_rec is None:
                raise ReleaseError(f"drain execution {drain_id} is no longer recorded")
            drain = drain_rec.to_json()
            _, batches, release = restore_plan(plan_rec.cluster, drain, {(m.topic, m.partition)
                                                                            for m in plan.moves})
            recorded = recorded_replicas(drain)
            opts.update(release)
        try:
            return self.executor(plan_rec.cluster).start_approved(plan_id, plan, caps=caps,
                                                                     why=why or f"execute plan {plan_id}", by=by,
                                                                     options=opts, batches=batches,
                                                                     recorded=recorded)
        except ExecutionConflict as exc:  # recorded: who asked, and why nothing started
            self.store.propose({"type": "execution.refused",
                                "meta": meta(by or "executor", why or f"execute plan {plan_id}"),
                                "cluster": plan_rec.cluster, "plan_id": plan_id, "reason": str(exc)[:4000]})
            raise

    def _clusters_needing_passes(self) -> list[str]:
        def find(state: JsonDict) -> list[str]:
            busy = {e["cluster"] for e in state["executions"].values() if e["status"] in ACTIVE_STATUSES}
            owned = {c for c, ts in state["throttles"].items()
                     if any(str(t.get("kind", "")).startswith(THROTTLE_PREFIX) for t in ts.values())}
            return sorted((busy | owned) & set(state["clusters"]))

        return self.store.read(find)

    def run_once(self) -> dict[str, PassReport]:
        """One pass per cluster that needs one (nothing on a follower); failures are logged, not raised."""
        if not self.store.is_leader:
            self._leading = False
            return {}
        if not self._leading:  # a new term for this node: nothing it remembers from before is current
            for executor in self._executors.values():
                executor.forget()
            self._leading = True
        self._passes += 1
        busy = self._clusters_needing_passes()
        failed: dict[str, PassReport] = {}
        work: dict[str, Callable[[], PassReport | None]] = {c: partial(self._pass, c, failed) for c in busy}
        if self.sweep_every and self._passes % self.sweep_every == 1:
            registered = self.store.read(lambda s: list(s["clusters"]))
            work.update({c: partial(self._sweep_one, c) for c in sorted(set(registered) - set(busy))})
        self.migrations.run_once()
        if self.fanout is not None:
            done = self.fanout.run(work)
        else:
            done = {}
            for cluster, call in sorted(work.items()):
                with cluster_scope(cluster):
                    try:
                        done[cluster] = call()
                    except Exception as exc:  # one cluster's trouble never stops the others
                        log.warning("executor %s on %s failed: %s", "pass" if cluster in failed else "lease sweep",
                                    cluster, exc)
        out = {**failed, **{c: r for c, r in done.items() if isinstance(r, PassReport)}}
        self.last.update(out)
        return out

    def _pass(self, cluster: str, failed: dict[str, PassReport]) -> PassReport:
        """One reconcile pass on ``cluster``; a failure is put in ``failed`` as an ``error`` report and raised
        (the fan-out counts it as the cluster's error)."""
        try:
            report = self.executor(cluster).run_pass()
        except Exception as exc:
            failed[cluster] = self.last[cluster] = PassReport(None, "error", error=str(exc))
            raise
        before = self.last.get(cluster)
        self.last[cluster] = report
        if report.submitted or report.completed or report.cancelled or report.error or before is None or (
                (before.execution_id, before.status) != (report.execution_id, report.status)):
            log.info("executor %s: execution %s %s; submitted %d, completed %d, cancelled %d; %s/%s bytes%s",
                     cluster, report.execution_id, report.status, report.submitted, report.completed,
                     report.cancelled, report.bytes_done, report.bytes_total,
                     f"; error: {report.error}" if report.error else "")
        return report

    def _sweep(self) -> None:
        """Clean up after dead executors on every registered cluster with nothing to do (in turn)."""
        busy = set(self._clusters_needing_passes())
        for cluster in sorted(set(self.store.read(lambda s: list(s["clusters"]))) - busy):
            try:
                self._sweep_one(cluster)
            except Exception as exc:  # one cluster's trouble never stops the others
                log.warning("lease sweep of %s failed: %s", cluster, exc)

    def _sweep_one(self, cluster: str) -> None:
        """A registered cluster with nothing to do whose lease expired with moves or throttles left behind is
        taken over (which cleans them) and handed back."""
        executor = self.executor(cluster)
        lease = executor.lease
        if lease is None or lease.held:
            return
        tip = lease.peek()
        if tip is None or tip.token == lease.token or tip.holds_at(time.time() * 1000) or not leftovers(tip):
            return
        log.warning("execution lease of %s expired with leftovers of %s: cleaning up", cluster, tip.describe())
        executor.hold_lease()
        executor.release_lease()

    def start(self) -> None:
        """Run passes every ``interval_s`` (fixed delay; sooner when a cluster's pass asks for it,
        :attr:`PassReport.next_pass_s`) in a daemon thread."""
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                reports = self.run_once()
                self._stop.wait(min([self.interval_s, *(r.next_pass_s for r in reports.values()
                                                         if r.next_pass_s is not None)]))

        self._thread = threading.Thread(target=loop, name="guardian-executor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close every admin client (and collector) this service bound."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
        for ex in self._executors.values():
            ex.admin.close()
            close = getattr(ex.scraper, "close", None)
            if close is not None:
                close()
        self._executors.clear()
