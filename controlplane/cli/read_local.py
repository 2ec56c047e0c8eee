"""``guardian clusters read-local NAME [--fix]`` and ``guardian plan read-local``: nearest-replica reads (KIP-392).

Goal: the operator's two steps to keep reads in their IDC — check a cluster (racks map to IDCs, a
rack-aware replica selector, who reads across IDCs and whether they set ``client.rack``) and plan the
replicas that make those reads local. Method: ``clusters read-local`` asks a running service
(``GET /api/v1/clusters/{name}/read-local``; ``--fix``: ``POST .../read-local/fix``), or with
``--endpoints-file`` reads the cluster itself (:mod:`controlplane.service.read_local`) with audit records
from ``--audit-jsonl`` (the JSON lines a broker's audit plugin or kafkasim writes). ``plan read-local``
works offline: a snapshot file plus the read demand (``--demand``: topic -> {IDC: bytes/s}, or the
check's JSON output, or ``--audit-jsonl``) -> a ``guardian.plan/v1`` file (:mod:`planners.read_local`).
Guarantee: exit 0 ready / plan written, 1 not ready or the service refused, 2 bad input. No secret printed.
Cost: one HTTP call, or one DescribeConfigs per broker; planning is linear in the demanded partitions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from controlplane.cli.clusters import NameArg, TokenOpt, UrlOpt, _call, clusters_app
from controlplane.cli.common import EXIT_INVALID_INPUT, EXIT_VIOLATIONS, SnapshotOpt, err, out
from controlplane.cli.common import load_snapshot as _load
from controlplane.cli.plan import HeadroomOpt, MaxBytesOpt, MaxPartsOpt, OutOpt, _emit, _params, _run, plan_app
from domain.nearest_reads import FetchFlow, assess_nearest_reads, flows_from_audit
from kafkaio.endpoints import EndpointsError, load_endpoints_file
from planners import plan_read_local
from planners.params import ReadLocalParams

AuditOpt = Annotated[Path | None, typer.Option("--audit-jsonl", help="audit records, one JSON object a line")]


def read_audit(path: Path) -> list[FetchFlow]:
    """Fetch flows of an audit JSON-lines file (malformed lines skipped)."""
    records = []
    for line in path.read_text().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            records.append(obj)
    return flows_from_audit(records)


def _show(body: dict[str, Any]) -> None:
    out.print(json.dumps(body, indent=2, sort_keys=True), markup=False, highlight=False, soft_wrap=True)


@clusters_app.command("read-local")
def clusters_read_local(
    name: NameArg,
    fix: Annotated[bool, typer.Option("--fix", help="apply what brokers accept at run time; list the rest")] = False,
    endpoints_file: Annotated[Path | None, typer.Option("--endpoints-file", "-e", help="check the cluster itself "
                                                        "(no service) through this endpoints file")] = None,
    audit: AuditOpt = None,
    window_s: Annotated[float, typer.Option("--window-s", min=1.0, help="audit window (service mode)")] = 3600.0,
    url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None,
) -> None:
    """Check nearest-replica reads (KIP-392) of a cluster; exit 1 when brokers are not ready."""
    if endpoints_file is None:
        path = f"{url.rstrip('/')}/api/v1/clusters/{name}/read-local{'/fix' if fix else ''}?window_s={window_s}"
        body = _call("POST" if fix else "GET", path, token, {} if fix else None)
    else:
        try:
            endpoints = load_endpoints_file(endpoints_file, name)
        except (EndpointsError, OSError) as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(EXIT_INVALID_INPUT) from None
        # (imported here: Kafka's client and the audit store cost ~0.2 s to load, and this module is loaded with
        # every `guardian plan ...` command, whose group it adds `plan read-local` to)
        from controlplane.service.read_local import apply_fixes, check_read_local
        from kafkaio.admin import KafkaAdmin

        admin = KafkaAdmin.for_endpoints(endpoints, client_id="guardian-read-local")
        try:
            report = check_read_local(admin, endpoints, read_audit(audit) if audit else ())
            body = {"cluster": name, **report.to_json()}
            if fix:
                body["fix"] = apply_fixes(admin, report)
        finally:
            admin.close()
    _show(body)
    if not body.get("ready"):
        raise typer.Exit(EXIT_VIOLATIONS)


def _demand(demand: Path | None, audit: Path | None) -> dict[str, dict[str, float]]:
    if (demand is None) == (audit is None):
        err.print("error: give exactly one of --demand or --audit-jsonl", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT)
    if audit is not None:
        return assess_nearest_reads((), read_audit(audit)).demand
    assert demand is not None
    try:
        raw = json.loads(demand.read_text())
        raw = raw.get("demand", raw) if isinstance(raw, dict) else raw
        return {str(t): {str(i): float(r) for i, r in d.items()} for t, d in raw.items()}
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        err.print(f"error: --demand {demand}: want topic -> {{IDC: bytes/s}} ({exc})", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT) from None


@plan_app.command("read-local")
def plan_read_local_cmd(
    snapshot: SnapshotOpt, out_path: OutOpt,
    demand: Annotated[Path | None, typer.Option("--demand", help="JSON topic -> {IDC: bytes/s}, or the output of "
                                                "`clusters read-local`")] = None,
    audit: AuditOpt = None,
    threshold: Annotated[float, typer.Option("--threshold", help="bytes/s an IDC must read from a topic")]
    = ReadLocalParams.model_fields["threshold"].default,
    max_bytes: MaxBytesOpt = None, max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10,
) -> None:
    """Plan a replica in every IDC whose consumers read a topic above --threshold (KIP-392 local reads)."""
    snap = _load(snapshot)
    wanted = _demand(demand, audit)
    params = _params(ReadLocalParams, demand=wanted, threshold=threshold, max_bytes=max_bytes,
                     max_partitions=max_partitions, capacity_headroom=headroom)
    _emit(_run(lambda: plan_read_local(snap, params.demand, params.options())), out_path)
