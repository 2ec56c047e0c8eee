"""``guardian exec``: run plans against a live cluster without the service (local, resumable state file).

``run`` executes a plan file, ``drain`` / ``restore`` do a smooth release of brokers, ``stop`` and
``caps`` steer a running executor, ``watch`` shows progress from the state file (or, with ``--url``, of
a service's execution through its API, in the same view). The cluster is
reached through an endpoints file or ``--bootstrap-servers`` with Kafka-style security flags
(:mod:`controlplane.cli.connect_options`). Exit codes: 0 done, 1 refused / failed, 2 bad input or a
login the cluster refuses (one line naming the cluster, protocol, mechanism and user), 130 detached
(Ctrl-C: the execution stays resumable). The options ``run``, ``drain`` and ``restore`` share are
declared once, in :mod:`controlplane.cli.exec_options`.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.live import Live

from controlplane.cli.api_client import ApiUnavailable, TokenOpt, get_json, post_json
from controlplane.cli.common import err, out
from controlplane.cli.connect_options import ConnectOptions
from controlplane.cli.exec_options import ExecOptions, StateOpt, exec_options
from controlplane.executor.control import (
    apply_requests,
    progress_line,
    progress_view,
    queue_request,
    take_requests,
)
from controlplane.executor.lease import ExecutionLease, LeaseHeld, LeaseOwner, client_id, leftovers
from controlplane.executor.live import FactsSource
from controlplane.executor.migration_rate import MigrationRatePolicy, Schedule, parse_rate
from controlplane.executor.observed import standalone
from controlplane.executor.reconcile import (
    ExecutionConflict,
    Executor,
    ExecutorConfig,
    PassReport,
    PlanRejected,
    plan_digest,
)
from controlplane.executor.release import ReleaseError, drain_plan, recorded_replicas, restore_plan
from controlplane.executor.tasks import ORDERINGS
from controlplane.files import read_plan
from controlplane.state.reads import executions_of
from controlplane.state.store import LocalStateStore
from domain import ContractError, Plan, plan_to_dict
from domain.execution import ACTIVE_STATUSES, Execution, ExecutionStatus
from kafkaio.admin import KafkaAdmin
from kafkaio.endpoints import EndpointsError
from kafkaio.errors import AdminError, KafkaAuthError

exec_app = typer.Typer(help="Execute plans on a live cluster (incremental, throttled, resumable).",
                       no_args_is_help=True)


def _state_path(state_file: Path | None, cluster: str | None) -> Path:
    if state_file is not None:
        return state_file
    if not cluster:
        _die("give --state-file or --cluster", 2)
    return Path(".guardian") / f"exec-{cluster}.json"


def _die(message: str, code: int) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(code)


class _Opts:
    """The options shared by run / drain / restore, checked: ordering, throttle policy, caps (exit 2 if bad)."""

    def __init__(self, options: ExecOptions) -> None:
        self.options = options
        ordering, throttle, nic = options.ordering, options.throttle, options.nic
        if ordering not in ORDERINGS:
            _die(f"--ordering must be one of {', '.join(ORDERINGS)}", 2)
        try:
            mode, fixed = "adaptive", 50e6
            if throttle.startswith("fixed:"):
                mode, fixed = "fixed", parse_rate(throttle.removeprefix("fixed:"))
            elif throttle != "adaptive":
                raise ValueError(f"--throttle must be adaptive or fixed:RATE, got {throttle!r}")
            self.policy = MigrationRatePolicy(mode=mode, util_threshold=options.util_threshold,
                                         floor=parse_rate(options.floor), ceiling=parse_rate(options.ceiling),
                                         initial=parse_rate(options.initial), fixed_rate=fixed,
                                         schedule=Schedule.parse(options.schedule),
                                         nic_bytes_per_s=parse_rate(nic) if nic else None,
                                         follower_reads=options.follower_reads)
        except ValueError as exc:
            _die(str(exc), 2)
        self.ordering = ordering
        self.caps = {k: v for k, v in (("per_broker", options.per_broker), ("per_disk", options.per_disk),
                                       ("per_cluster", options.per_cluster)) if v is not None}
        self.interval = options.interval
        self.quiet = options.quiet
        self.lease_ttl = max(options.lease_intervals * options.interval, MIN_LEASE_TTL_S)


MIN_LEASE_TTL_S = 5.0
"""A pass on a large cluster can take seconds: a lease shorter than this would expire mid-pass."""


def _executor(connect: ConnectOptions, state: Path, opts: _Opts) -> tuple[Executor, FactsSource]:
    """The executor and where its broker facts come from: its observer is a collector run once per pass (one
    scrape of each broker endpoint per pass; disk load, IDC, pool, disk kind and speed from that round),
    with the endpoints file's declarations filling what the round lacks. Its Kafka client connects with
    the endpoints file's ``security`` object or the security flags."""
    cluster = connect.cluster
    try:
        endpoints = connect.endpoints()
    except EndpointsError as exc:
        _die(str(exc), 2)
    try:
        store = LocalStateStore(state)
    except (OSError, ValueError) as exc:
        _die(f"cannot read state file {state}: {exc}", 2)
    cid = client_id("cli")
    admin = KafkaAdmin.for_endpoints(endpoints, client_id=cid)
    view = standalone(endpoints) if endpoints.metrics_urls else None
    facts: FactsSource = view if view is not None else endpoints
    owner = LeaseOwner.this_process("cli", cid, identity=f"{socket.gethostname()}:{state.resolve()}")
    executor = Executor(store, admin, ExecutorConfig(cluster, ordering=opts.ordering, throttle=opts.policy,
                                                     interval_s=opts.interval),
                        view, facts, lease=ExecutionLease(admin, cluster, owner, opts.lease_ttl))
    try:
        executor.ensure_cluster(endpoints.bootstrap_servers)
    except Exception as exc:
        _die(f"cannot record cluster: {exc}", 2)
    return executor, facts


def _start_or_resume(executor: Executor, state: Path, build: Callable[[], int],
                     resume_if: Callable[[Execution], bool]) -> int:
    active = executor.active_execution()
    if active is not None:
        if resume_if(active):
            out.print(f"resuming execution {active.id} from {state}", markup=False)
            return active.id
        _die(f"execution {active.id} is active on {executor.config.cluster} with another plan; "
             f"stop it first (guardian exec stop --state-file {state})", 1)
    try:
        try:
            return int(build())
        except BaseException:
            executor.release_lease()  # a refused start leaves the cluster to others at once
            raise
    except PlanRejected as exc:
        err.print("error: the plan breaks hard constraints on the live cluster; nothing started", markup=False)
        for v in exc.violations[:50]:
            err.print(f"  {v}", markup=False)
        raise typer.Exit(1) from None
    except (ExecutionConflict, ReleaseError) as exc:
        _die(str(exc), 1)
    except KeyError as exc:
        _die(f"the plan names a partition the cluster does not have: {exc}", 1)
    except KafkaAuthError as exc:
        _die(str(exc), 2)
    except AdminError as exc:
        _die(f"cannot reach cluster {executor.config.cluster}: {exc}", 1)


def _drive(executor: Executor, state: Path, execution_id: int, opts: _Opts) -> None:
    """Run passes until the execution finishes; a live progress bar on a terminal, lines otherwise."""
    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    errors = 0
    report = PassReport(execution_id, "running")
    live_view = out.is_terminal and not opts.quiet
    ctx = Live(console=out, refresh_per_second=4, transient=False) if live_view else None
    try:
        if ctx is not None:
            ctx.start()
        while True:
            for msg in apply_requests(executor, take_requests(state)):
                err.print(msg, markup=False)
            try:
                report = executor.run_pass()
                errors = 0
            except ExecutionConflict as exc:  # another executor holds the cluster's lease
                _die(f"{exc} (execution {execution_id} stays resumable)", 1)
            except KafkaAuthError as exc:  # retrying does not help: the operator must fix the credentials
                _die(f"{exc} (the execution is resumable: run the same command again once fixed)", 2)
            except Exception as exc:  # a pass never kills the run: the state is resumable, retry
                errors += 1
                if not isinstance(exc, AdminError):
                    logging.getLogger("guardian.executor").exception("pass failed")
                err.print(f"pass failed ({errors}/30, retrying): {exc}", markup=False)
                if errors >= 30:
                    _die("cluster unreachable; the execution is resumable (run the same command again)", 1)
            execution = executor.execution(execution_id)
            if execution is not None:
                if ctx is not None:
                    ctx.update(progress_view(execution))
                else:
                    out.print(progress_line(execution), markup=False, soft_wrap=True)
            if report.finished and report.error is None and report.execution_id is not None:
                break
            if report.execution_id is None:
                break
            time.sleep(min(opts.interval, report.next_pass_s or opts.interval))
    except KeyboardInterrupt:
        if ctx is not None:
            ctx.stop()
        err.print(f"detached: execution {execution_id} stays resumable (run the same command again, or "
                  f"guardian exec stop --state-file {state})", markup=False)
        raise typer.Exit(130) from None
    finally:
        if ctx is not None:
            ctx.stop()
        executor.release_lease()
        executor.admin.close()
        close_view = getattr(executor.scraper, "close", None)
        if close_view is not None:  # the standalone collector's https sessions ("Unclosed client session")
            close_view()
    final = executor.execution(execution_id) or {}
    out.print(f"execution {execution_id} {final.get('status')}: {final.get('reason', '')}", markup=False)
    if final.get("status") not in ("completed", "stopped"):
        raise typer.Exit(1)


def _quiet_kafka() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)


@exec_app.command("run")
@exec_options
def exec_run(
    shared: ExecOptions,
    plan: Annotated[Path, typer.Option("--plan", "-p", help="guardian.plan/v1 file")],
) -> None:
    """Run PLAN on CLUSTER to completion (resumable: run the same command again after a crash)."""
    _run_impl(shared, plan, _Opts(shared))


def _run_impl(shared: ExecOptions, plan: Path, opts: _Opts) -> None:
    cluster, state_file = shared.cluster, shared.state_file
    _quiet_kafka()
    try:
        parsed: Plan = read_plan(plan)
    except ContractError as exc:
        err.print(f"error: invalid {exc.what}", markup=False)
        for problem in exc.problems:
            err.print(f"  {problem.path}: {problem.message}", markup=False)
        raise typer.Exit(2) from None
    if parsed.cluster != cluster:
        _die(f"the plan is for cluster {parsed.cluster!r}, not {cluster!r}", 2)
    state = _state_path(state_file, cluster)
    executor, _ = _executor(shared, state, opts)
    digest = plan_digest(plan_to_dict(parsed))
    done = executor.store.read(lambda s: [e for e in s["executions"].values()
                                          if e["cluster"] == cluster and e.get("options", {}).get("plan_digest")
                                          == digest and e["status"] not in ACTIVE_STATUSES])
    if done and executor.active_execution() is None:
        last = max(done, key=lambda e: e["id"])
        out.print(f"execution {last['id']} of this plan already {last['status']}: {last.get('reason', '')}",
                  markup=False)
        raise typer.Exit(0 if last["status"] in (ExecutionStatus.COMPLETED, ExecutionStatus.STOPPED) else 1)
    eid = _start_or_resume(executor, state,
                           lambda: executor.start(parsed, caps=opts.caps, why=f"guardian exec run {plan.name}"),
                           lambda a: a.options.get("plan_digest") == digest)
    _drive(executor, state, eid, opts)


@exec_app.command("drain")
@exec_options
def exec_drain(
    shared: ExecOptions,
    brokers: Annotated[str, typer.Option(help="comma-separated broker ids to drain, in order")],
    batch_size: Annotated[int, typer.Option(min=1, help="brokers drained together")] = 1,
) -> None:
    """Drain BROKERS leadership-first, in batches, waiting for zero under-replicated partitions between."""
    _drain_impl(shared, brokers, batch_size, _Opts(shared))


def _drain_impl(shared: ExecOptions, brokers: str, batch_size: int, opts: _Opts) -> None:
    cluster, state_file = shared.cluster, shared.state_file
    _quiet_kafka()
    try:
        ids = [int(x) for x in brokers.split(",") if x.strip()]
    except ValueError:
        _die(f"--brokers: expected comma-separated integers, got {brokers!r}", 2)
    state = _state_path(state_file, cluster)
    executor, facts = _executor(shared, state, opts)

    def build() -> int:
        executor.hold_lease()  # first: the lease log is a topic the drain must move too
        live = executor.admin.live()
        plan, batches, options = drain_plan(cluster, live, ids, batch_size, facts)
        return executor.start(plan, batches=batches, caps=opts.caps, options=options,
                              why=f"drain brokers {ids}")

    eid = _start_or_resume(executor, state, build, lambda a: a.options.get("release") == "drain"
                           and a.options.get("brokers") == ids)
    _drive(executor, state, eid, opts)


@exec_app.command("restore")
@exec_options
def exec_restore(
    shared: ExecOptions,
    execution: Annotated[int | None, typer.Option(help="drain execution to undo (default: the latest)")] = None,
) -> None:
    """Restore what a drain moved: replicas, log dirs and leadership, batch by batch."""
    _restore_impl(shared, execution, _Opts(shared))


def _restore_impl(shared: ExecOptions, execution: int | None, opts: _Opts) -> None:
    cluster = shared.cluster
    _quiet_kafka()
    state = _state_path(shared.state_file, cluster)
    executor, _ = _executor(shared, state, opts)

    def build() -> int:
        drains = [e for e in executor.store.read(lambda s: executions_of(s, cluster))
                  if e.options.get("release") == "drain"
                  and e.status in (ExecutionStatus.COMPLETED, ExecutionStatus.STOPPED)
                  and (execution is None or e.id == execution)]
        if not drains:
            raise ReleaseError(f"no finished drain execution{f' {execution}' if execution else ''} in {state}")
        drain = max(drains, key=lambda e: e.id).to_json()
        executor.hold_lease()
        plan, batches, options = restore_plan(cluster, drain, executor.admin.live())
        return executor.start(plan, batches=batches, caps=opts.caps, options=options,
                              why=f"restore brokers drained by execution {drain['id']}",
                              recorded=recorded_replicas(drain))

    eid = _start_or_resume(executor, state, build, lambda a: a.options.get("release") == "restore")
    _drive(executor, state, eid, opts)


@exec_app.command("cleanup")
@exec_options
def exec_cleanup(shared: ExecOptions) -> None:
    """Undo what an executor whose lease on CLUSTER expired left behind — its moves in flight cancelled (they
    revert), its throttles removed — then hand the lease back. Exit 1 while another executor holds the lease.
    ``exec run|drain|restore`` do the same when they take the lease; the controller's loop sweeps every
    registered cluster with nothing to do."""
    _quiet_kafka()
    opts = _Opts(shared)
    executor, _ = _executor(shared, _state_path(shared.state_file, shared.cluster), opts)
    try:
        lease = executor.lease
        tip = lease.peek() if lease is not None else None
        left = leftovers(tip) if tip is not None and lease is not None and tip.token != lease.token else {}
        try:
            executor.hold_lease()
        except LeaseHeld as exc:
            _die(str(exc), 1)
        executor.release_lease()
    except AdminError as exc:
        _die(f"cannot read the execution lease of {shared.cluster}: {exc}", 2)
    finally:
        executor.admin.close()
        close_view = getattr(executor.scraper, "close", None)
        if close_view is not None:
            close_view()
    if not left:
        out.print(f"{shared.cluster}: no executor left moves or throttles behind", markup=False)
        return
    throttles = left.get("throttles") or {}
    assert tip is not None
    out.print(f"{shared.cluster}: cleaned up after {tip.describe()}: {len(left.get('moves') or [])} move(s) "
              f"cancelled, throttles removed on {len(throttles.get('brokers') or {})} broker(s) and "
              f"{len(throttles.get('topics') or {})} topic(s)", markup=False)


@exec_app.command("stop")
def exec_stop(
    state_file: StateOpt = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c")] = None,
    rollback: Annotated[bool, typer.Option(help="also cancel in-flight moves (they revert)")] = False,
    url: Annotated[str | None, typer.Option("--url", help="stop a controller's execution through its API (base "
                                                          "URL) instead of a local state file's")] = None,
    execution: Annotated[int | None, typer.Option(help="with --url: the execution id (default: the one running, "
                                                       "of --cluster if given)")] = None,
    token: Annotated[str | None, typer.Option("--token", envvar="GUARDIAN_TOKEN",
                                              help="with --url: an operator token")] = None,
    reason: Annotated[str, typer.Option(help="with --url: why (recorded in the action log)")] = "guardian exec stop",
    ca_file: Annotated[str | None, typer.Option("--ca-file", envvar="GUARDIAN_CA_FILE",
                                                help="with --url: CA of an https API")] = None,
) -> None:
    """Stop an execution: no new moves; with --rollback cancel in-flight ones (they revert, their throttles go).

    With ``--url`` the controller's execution (``--execution N``, or the one running); without it, the local
    ``exec run`` owning the state file (applied on its next pass)."""
    if url is None:
        if execution is not None:
            _die("--execution needs --url (a local stop acts on the state file's running execution)", 2)
        state = _state_path(state_file, cluster)
        queue_request(state, {"op": "stop", "rollback": rollback, "why": reason})
        out.print(f"stop{' with rollback' if rollback else ''} queued for {state} (applied on the executor's next "
                  f"pass, or when the execution is resumed)", markup=False)
        return
    base = url.rstrip("/") + "/api/v1/executions"
    try:
        if execution is None:
            query = "?" + urllib.parse.urlencode({"cluster": cluster}) if cluster else ""
            running = [e for e in get_json(base + query, token, ca_file) if e["status"] in ACTIVE_STATUSES]
            if len(running) != 1:
                listed = ", ".join(f"{e['id']} ({e['cluster']}, {e['status']})" for e in running) or "none"
                _die(f"give --execution: {len(running)} execution(s) running{f' on {cluster}' if cluster else ''} "
                     f"({listed})", 2)
            execution = int(running[0]["id"])
        answer = post_json(f"{base}/{execution}/stop", token, {"rollback": rollback}, why=reason, cafile=ca_file)
    except ApiUnavailable as exc:
        _die(str(exc), 1)
    result = answer if isinstance(answer, dict) else {}
    if result.get("changed") is False:
        out.print(f"execution {execution} is {result.get('status')}: nothing to stop", markup=False)
        return
    out.print(f"execution {execution}: stop{' with rollback' if result.get('rollback') else ''} recorded "
              f"(status {result.get('status', 'stopping')}); the executor applies it on its next pass — follow it "
              f"with: guardian exec watch --url {url} --execution {execution}", markup=False, soft_wrap=True)


@exec_app.command("caps")
def exec_caps(
    state_file: StateOpt = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c")] = None,
    per_broker: Annotated[int | None, typer.Option(min=1)] = None,
    per_disk: Annotated[int | None, typer.Option(min=1)] = None,
    per_cluster: Annotated[int | None, typer.Option(min=1)] = None,
) -> None:
    """Change concurrency caps of the running execution."""
    caps = {k: v for k, v in (("per_broker", per_broker), ("per_disk", per_disk), ("per_cluster", per_cluster))
            if v is not None}
    if not caps:
        _die("give at least one of --per-broker, --per-disk, --per-cluster", 2)
    state = _state_path(state_file, cluster)
    queue_request(state, {"op": "caps", "caps": caps})
    out.print(f"caps {caps} queued for {state}", markup=False)


def _read_state(path: Path) -> dict[str, Any] | None:
    for _ in range(5):
        try:
            doc = json.loads(path.read_text())
            return doc if isinstance(doc, dict) else None
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, OSError):
            time.sleep(0.05)
    return None


def _service_execution(url: str, token: str | None, cluster: str | None, execution: int | None
                       ) -> dict[str, Any] | None:
    """The execution ``execution`` (default: the newest, of ``cluster`` if given) as the service's API
    returns it, tasks included."""
    base = url.rstrip("/") + "/api/v1/executions"
    if execution is None:
        listed = get_json(base + (f"?cluster={urllib.parse.quote(cluster)}" if cluster else ""), token)
        if not listed:
            return None
        execution = max(int(e["id"]) for e in listed)
    return dict(get_json(f"{base}/{execution}", token))


@exec_app.command("watch")
def exec_watch(
    state_file: StateOpt = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c")] = None,
    execution: Annotated[int | None, typer.Option(help="execution id (default: the latest)")] = None,
    once: Annotated[bool, typer.Option(help="print once and exit")] = False,
    interval: Annotated[float, typer.Option(min=0.1)] = 1.0,
    url: Annotated[str | None, typer.Option("--url", help="follow a service's execution through its API "
                                                          "(base URL) instead of a state file")] = None,
    token: TokenOpt = None,
) -> None:
    """Show progress of an execution from its state file, or with ``--url`` from a running service (the
    same view): bytes copied / total, rate, ETA, tasks in flight."""
    where = url or str(_state_path(state_file, cluster))

    def pick() -> dict[str, Any] | None:
        if url is not None:
            return _service_execution(url, token, cluster, execution)
        doc = _read_state(Path(where))
        if doc is None:
            return None
        execs = list(doc.get("executions", {}).values())
        if execution is not None:
            execs = [e for e in execs if e["id"] == execution]
        return max(execs, key=lambda e: e["id"]) if execs else None

    def refresh(last: dict[str, Any]) -> dict[str, Any]:
        try:
            return pick() or last
        except ApiUnavailable as exc:  # a service failing over: keep the last view, try again
            err.print(f"warning: {exc}", markup=False)
            return last

    try:
        current = pick()
    except ApiUnavailable as exc:
        _die(str(exc), 1)
    if current is None:
        _die(f"no execution found in {where}", 1)
    if once or not out.is_terminal:
        out.print(progress_view(current) if out.is_terminal else progress_line(current), soft_wrap=True)
        try:
            while not once and current["status"] in ACTIVE_STATUSES:
                time.sleep(interval)
                current = refresh(current)
                out.print(progress_line(current), soft_wrap=True, markup=False)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        return
    try:
        with Live(progress_view(current), console=out, refresh_per_second=4) as live:
            while current["status"] in ACTIVE_STATUSES:
                time.sleep(interval)
                current = refresh(current)
                live.update(progress_view(current))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
