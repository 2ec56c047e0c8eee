"""``guardian migrate-idc TOPIC... --to idc-b=3``: move topics to a new IDC placement with one command.

Goal: what ``plan migrate-idc`` + one ``exec run`` per step file + setting the policy by hand did, in one
command that runs every step to completion, in order. Two ways, like the other commands:

* **through a controller** (``--url``, ``--token``): ``POST /api/v1/migrations`` — the controller sets the
  policy, records every step as an approved plan and its executor runs them as chained executions
  (:mod:`controlplane.executor.migrations`, they survive a failover); the command follows the migration
  until it ends (``--no-wait``: return at once; Ctrl-C detaches, the migration goes on);
* **standalone** (``--bootstrap-servers`` with Kafka security flags, or ``--endpoints-file``, like
  ``exec run``): one live snapshot (:mod:`controlplane.cli.live_snapshot`), every step planned
  (:func:`planners.registry.migrate_idc`), the policy recorded in the local state file, then each step
  executed to completion in order by the same executor as ``exec run`` (resumable: run the same command
  again; an interrupted step is finished first, then the rest re-planned from a fresh snapshot).

Every ``exec run`` option applies (throttle, schedule, caps, ordering; through a controller the ones
given are sent as the migration's settings). Each step keeps ``--min-insync`` replicas in sync at every
instant and keeps offsets (a reassignment copies the log). Exit codes: 0 completed (or nothing to move),
1 failed or stopped, 2 bad input, 130 detached.
"""

from __future__ import annotations

import time
from dataclasses import fields
from functools import partial
from typing import Annotated, Any

import typer

from controlplane.cli.api_client import ApiUnavailable, TokenOpt, get_json, post_json
from controlplane.cli.common import EXIT_INVALID_INPUT, err, out
from controlplane.cli.exec import _die, _drive, _executor, _Opts, _quiet_kafka, _start_or_resume, _state_path
from controlplane.cli.exec_options import ExecOptions, exec_options
from controlplane.cli.live_snapshot import collect_snapshot
from controlplane.executor.reconcile import plan_digest
from controlplane.state.commands import meta
from domain import plan_to_dict
from domain.execution import Execution
from domain.migration import MigrationStatus
from kafkaio.endpoints import EndpointsError
from planners.registry import migrate_idc as plan_migration

ToOpt = Annotated[str, typer.Option("--to", help="new IDC placement, idc=count,... (e.g. idc-b=3)")]
UrlOpt = Annotated[str | None, typer.Option("--url", envvar="GUARDIAN_URL",
                                            help="run through this controller's API (else standalone)")]


def parse_placement(text: str) -> dict[str, int]:
    """``idc-b=3,idc-a=1`` -> ``{"idc-b": 3, "idc-a": 1}``; exit 2 naming ``--to`` when malformed."""
    try:
        pairs = [p.split("=", 1) for p in text.split(",") if p.strip()]
        placement = {idc.strip(): int(n) for idc, n in pairs}
    except ValueError:
        placement = {}
    if not placement or any(n < 1 for n in placement.values()):
        _die(f"--to: expected idc=count,... with counts >= 1, got {text!r}", EXIT_INVALID_INPUT)
    return placement


def api_settings(options: ExecOptions) -> dict[str, Any]:
    """The caps and throttle settings given on the command line (those left at their defaults are not sent,
    so the controller's configured policy applies to them)."""
    defaults = {f.name: f.default for f in fields(ExecOptions)}
    throttle: dict[str, Any] = {}
    if options.throttle != defaults["throttle"]:
        mode, _, rate = options.throttle.partition(":")
        throttle["mode"] = mode
        if rate:
            throttle["fixed_rate"] = rate
    for name in ("util_threshold", "floor", "ceiling", "initial", "schedule"):
        if getattr(options, name) != defaults[name]:
            throttle[name] = getattr(options, name)
    if options.nic:
        throttle["nic_bytes_per_s"] = options.nic
    caps = {k: getattr(options, k) for k in ("per_broker", "per_disk", "per_cluster") if getattr(options, k)}
    return {**({"throttle": throttle} if throttle else {}), **({"caps": caps} if caps else {})}


@exec_options
def migrate_idc_cmd(
    shared: ExecOptions,
    topics: Annotated[list[str], typer.Argument(help="topic(s) to migrate")],
    to: ToOpt,
    min_insync: Annotated[int, typer.Option(min=1, help="in-sync replicas every partition keeps at every instant")] = 2,
    max_bytes: Annotated[int | None, typer.Option(min=0, help="most bytes one step copies")] = None,
    max_partitions: Annotated[int | None, typer.Option(min=0, help="most partitions one step moves")] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="through a controller: follow until the end")]
    = True,
    collect_rounds: Annotated[int, typer.Option(min=1, max=10, help="standalone: collection rounds before "
                                                                    "planning (rates need 2)")] = 2,
) -> None:
    """Move TOPICS to the IDC placement --to, every step to completion, in order (offsets kept)."""
    placement = parse_placement(to)
    params: dict[str, Any] = {"topics": list(topics), "placement": placement, "min_insync": min_insync,
                              **({"max_bytes": max_bytes} if max_bytes is not None else {}),
                              **({"max_partitions": max_partitions} if max_partitions is not None else {})}
    if url is not None and not (shared.bootstrap_servers or shared.endpoints_file):
        _through_api(url, token, shared, params, wait)
    else:
        _standalone(shared, params, collect_rounds)


def _through_api(url: str, token: str | None, shared: ExecOptions, params: dict[str, Any], wait: bool) -> None:
    base = url.rstrip("/")
    body = {"cluster": shared.cluster, **params, **api_settings(shared)}
    try:
        started = post_json(base + "/api/v1/migrations", token, body,
                            why=f"guardian migrate-idc {' '.join(params['topics'])} --to "
                                f"{','.join(f'{k}={v}' for k, v in params['placement'].items())}")
    except ApiUnavailable as exc:
        _die(str(exc), 1)
    mid = started["migration_id"]
    out.print(f"migration {mid} of {', '.join(started['topics'])} to {started['placement']}: {started['steps']} "
              f"step(s), plans {started['plan_ids']}", markup=False)
    if not wait:
        return
    last = ""
    try:
        while True:
            try:
                m = get_json(f"{base}/api/v1/migrations/{mid}", token)
            except ApiUnavailable as exc:  # a controller failing over: keep following
                err.print(f"warning: {exc}", markup=False)
                time.sleep(shared.interval)
                continue
            line = _progress(m)
            if line != last:
                out.print(line, markup=False, soft_wrap=True)
                last = line
            if m["status"] != MigrationStatus.RUNNING:
                break
            time.sleep(shared.interval)
    except KeyboardInterrupt:
        err.print(f"detached: migration {mid} goes on in the controller (POST /api/v1/migrations/{mid}/stop "
                  "stops it)", markup=False)
        raise typer.Exit(130) from None
    out.print(f"migration {mid} {m['status']}{': ' + m['reason'] if m.get('reason') else ''}", markup=False)
    if m["status"] != MigrationStatus.COMPLETED:
        raise typer.Exit(1)


def _progress(m: dict[str, Any]) -> str:
    """One line: status, step k of n, the step's execution, bytes done of all steps' bytes, rate."""
    p = m["progress"]
    line = f"migration {m['id']} {m['status']}: step {p['step']}/{p['steps']}"
    if p.get("execution_id"):
        line += f" (execution {p['execution_id']} {p.get('status', '')})"
    line += f" {p['bytes_done'] / 1e6:.1f}/{p['bytes_total'] / 1e6:.1f} MB"
    rate = p.get("rate_bytes_per_s")
    return line + (f" at {rate / 1e6:.1f} MB/s" if rate else "")


def _standalone(shared: ExecOptions, params: dict[str, Any], rounds: int) -> None:
    _quiet_kafka()
    opts = _Opts(shared)
    cluster = shared.cluster
    state = _state_path(shared.state_file, cluster)
    try:
        endpoints = shared.endpoints()
    except EndpointsError as exc:
        _die(str(exc), EXIT_INVALID_INPUT)
    executor, _ = _executor(shared, state, opts)
    active = executor.active_execution()
    if active is not None and active.options.get("migration"):
        out.print(f"finishing step execution {active.id} of an interrupted migration first", markup=False)
        _drive(executor, state, active.id, opts)
    snap = collect_snapshot(endpoints, rounds)
    try:
        proposal = plan_migration(snap, params)
    except (TypeError, ValueError) as exc:
        _die(str(exc), EXIT_INVALID_INPUT)
    for topic, policy in sorted(proposal.placements.items()):
        executor.store.propose({"type": "placement.set", "meta": meta("cli", "guardian migrate-idc"),
                                "cluster": cluster, "topic": topic, "placement": policy})
    if not proposal.plans:
        out.print(f"nothing to move: {sorted(proposal.placements)} already meet {params['placement']}", markup=False)
        return
    n = len(proposal.plans)
    out.print(f"migrating {sorted(proposal.placements)} to {params['placement']} in {n} step(s)", markup=False)
    for k, plan in enumerate(proposal.plans, start=1):
        digest = plan_digest(plan_to_dict(plan))
        out.print(f"step {k}/{n}: {len(plan.moves)} partition move(s)", markup=False)
        eid = _start_or_resume(
            executor, state,
            partial(executor.start, plan, caps=opts.caps, why=f"guardian migrate-idc step {k}/{n}",
                    options={"migration": {"step": k, "of": n}}),
            partial(_runs_plan, digest))
        _drive(executor, state, eid, opts)
    out.print(f"migration completed: {n} step(s)", markup=False)


def _runs_plan(digest: str, active: Execution) -> bool:
    """True when the active execution runs the plan of ``digest`` (an interrupted step is resumed)."""
    return active.options.get("plan_digest") == digest
