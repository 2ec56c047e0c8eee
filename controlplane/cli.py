"""``guardian``: the operator's command line. Every command has ``--help``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from controlplane.domain import (
    CheckLimits,
    ContractError,
    check_plan,
    dump_plan,
    dump_snapshot,
    plan_json_schema,
    snapshot_json_schema,
)
from controlplane.files import read_plan, read_snapshot, write_atomic
from controlplane.report import plan_table, snapshot_table, violations_table

app = typer.Typer(help="Guardian: control plane for a federation of Kafka clusters.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
plan_app = typer.Typer(help="Make and check plans (work offline: no service, cluster or network).",
                       no_args_is_help=True)
schema_app = typer.Typer(help="Print the JSON Schemas of the contract files.", no_args_is_help=True)
sim_app = typer.Typer(help="Simulated federations: generate snapshots, run kafkasim.", no_args_is_help=True)
snapshot_app = typer.Typer(help="Take and inspect snapshot files.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")
app.add_typer(schema_app, name="schema")
app.add_typer(sim_app, name="sim")
app.add_typer(snapshot_app, name="snapshot")

out = Console()
err = Console(stderr=True)

EXIT_INVALID_INPUT = 2
EXIT_VIOLATIONS = 1

SnapshotOpt = Annotated[Path, typer.Option("--snapshot", "-s", help="guardian.snapshot/v1 file")]


def fail_input(exc: ContractError) -> NoReturn:
    """Print every problem of a rejected input (JSON path: reason) and exit 2."""
    err.print(f"[red]error:[/] invalid {exc.what}")
    for problem in exc.problems:
        err.print(f"  {problem.path}: {problem.message}", markup=False)
    raise typer.Exit(EXIT_INVALID_INPUT)


@schema_app.command("snapshot")
def schema_snapshot() -> None:
    """Print the JSON Schema of guardian.snapshot/v1."""
    print(json.dumps(snapshot_json_schema(), indent=2))


@schema_app.command("plan")
def schema_plan() -> None:
    """Print the JSON Schema of guardian.plan/v1."""
    print(json.dumps(plan_json_schema(), indent=2))


@snapshot_app.command("show")
def snapshot_show(snapshot: SnapshotOpt) -> None:
    """Summarise a snapshot: per pool brokers, disks, replicas and estimated disk utilisation."""
    try:
        snap = read_snapshot(snapshot)
    except ContractError as exc:
        fail_input(exc)
    out.print(snapshot_table(snap))


@snapshot_app.command("take")
def snapshot_take(
    out_path: Annotated[Path, typer.Option("--out", "-o", help="guardian.snapshot/v1 file to write")],
    cluster: Annotated[str, typer.Option("--cluster", "-c", help="cluster name")],
    endpoints_file: Annotated[Path | None, typer.Option(
        "--endpoints-file", "-e", help="endpoints JSON as `guardian sim up` writes it")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(
        help="host:port,... of a real cluster (instead of --endpoints-file)")] = None,
    metrics_url: Annotated[list[str] | None, typer.Option(
        help="a broker's Prometheus endpoint, http://host:port/metrics or ID=URL (repeatable)")] = None,
    exporter_url: Annotated[list[str] | None, typer.Option(
        help="cluster-level exporter (e.g. kafka_exporter for consumer offsets), repeatable")] = None,
    rounds: Annotated[int, typer.Option(min=1, max=1000, help="collection rounds (rates need 2)")] = 2,
    interval: Annotated[float, typer.Option(min=0.5, max=3600, help="seconds between rounds")] = 10.0,
    timeout: Annotated[float, typer.Option(min=0.1, max=300, help="per-endpoint scrape timeout (s)")] = 5.0,
    strict: Annotated[bool, typer.Option(help="exit 3 and write nothing if the snapshot is stale/incomplete")] = False,
) -> None:
    """Collect a live snapshot of CLUSTER (Kafka admin API + Prometheus scrapes) and write it to OUT."""
    import time as _time

    from collectors.collector import ClusterCollector, CollectionError
    from collectors.completeness import UsabilityPolicy, refusal_reasons
    from collectors.endpoints import EndpointsError, endpoints_from_options, load_endpoints_file

    try:
        if endpoints_file is not None:
            eps = load_endpoints_file(endpoints_file, cluster)
        elif bootstrap_servers:
            eps = endpoints_from_options(cluster, bootstrap_servers, list(metrics_url or []), list(exporter_url or []))
        else:
            raise EndpointsError("give --endpoints-file, or --bootstrap-servers with --metrics-url")
    except EndpointsError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT) from None
    collector = ClusterCollector(eps, scrape_timeout_s=timeout)
    result = None
    try:
        for k in range(1, rounds + 1):
            started = _time.monotonic()
            with err.status(f"round {k}/{rounds}: collecting {cluster} "
                            f"({len(eps.metrics_urls)} metrics endpoints)..."):
                try:
                    result = collector.collect_once()
                except CollectionError as exc:
                    err.print(f"round {k}/{rounds}: failed: {exc}", markup=False)
                    result = None
            if result is not None:
                cov = result.coverage
                rs = result.round_seconds
                err.print(f"round {k}/{rounds}: {len(cov.brokers_with_metrics)}/{len(cov.brokers_alive)} brokers "
                          f"scraped, {len(cov.brokers_dead)} dead, {cov.partitions_with_rates}/{cov.partitions_total} "
                          f"partitions with rates, {sum(sum(v.values()) for v in cov.drops.values())} values dropped "
                          f"(admin {rs.get('admin', 0):.2f} s, scrape {rs.get('scrape', 0):.2f} s)", markup=False)
            if k < rounds:
                wait = max(interval - (_time.monotonic() - started), 0.0)
                with err.status(f"waiting {wait:.1f} s for round {k + 1}/{rounds}..."):
                    _time.sleep(wait)
    finally:
        collector.close()
    if result is None:
        err.print("error: no snapshot could be collected", markup=False)
        raise typer.Exit(EXIT_VIOLATIONS)
    reasons = refusal_reasons(result.snapshot, UsabilityPolicy(allow_first_round=rounds == 1))
    for reason in reasons:
        err.print(f"warning: {reason}", markup=False)
    if reasons and strict:
        err.print("error: snapshot refused (--strict); nothing written", markup=False)
        raise typer.Exit(3)
    write_atomic(out_path, json.dumps(result.to_dict(), allow_nan=False))
    out.print(snapshot_table(result.snapshot))
    out.print(f"snapshot written to {out_path}", markup=False)


@plan_app.command("rebalance")
def plan_rebalance(
    snapshot: SnapshotOpt,
    out_path: Annotated[Path, typer.Option("--out", "-o", help="where to write the guardian.plan/v1 file")],
    max_moves: Annotated[int, typer.Option(min=0, help="most replica moves in one plan")] = 2000,
    max_bytes: Annotated[int | None, typer.Option(min=0, help="most bytes to copy in one plan")] = None,
    headroom: Annotated[float, typer.Option(min=0.0, max=0.9, help="fraction of each disk kept free")] = 0.10,
) -> None:
    """Plan a disk-load rebalance of SNAPSHOT, write it to OUT and print its summary."""
    from planners.greedy import GreedyOptions, plan_greedy_rebalance

    try:
        snap = read_snapshot(snapshot)
    except ContractError as exc:
        fail_input(exc)
    plan = plan_greedy_rebalance(snap, GreedyOptions(max_moves=max_moves, max_bytes=max_bytes,
                                                     capacity_headroom=headroom))
    violations = check_plan(snap, plan, CheckLimits(capacity_headroom=headroom, max_bytes_to_move=max_bytes))
    if violations:  # a planner bug must never reach a cluster
        err.print(violations_table(violations))
        err.print("[red]error:[/] the planner produced an invalid plan; nothing written")
        raise typer.Exit(EXIT_VIOLATIONS)
    write_atomic(out_path, dump_plan(plan))
    out.print(plan_table(plan))
    for note in plan.notes:
        out.print(f"note: {note}", markup=False)
    out.print(f"plan written to {out_path}", markup=False)


@plan_app.command("validate")
def plan_validate(
    snapshot: SnapshotOpt,
    plan: Annotated[Path, typer.Option("--plan", "-p", help="guardian.plan/v1 file")],
    headroom: Annotated[float, typer.Option(min=0.0, max=0.9, help="fraction of each disk kept free")] = 0.10,
    max_bytes: Annotated[int | None, typer.Option(min=0, help="fail if the plan copies more bytes")] = None,
    max_partitions: Annotated[int | None, typer.Option(min=0, help="fail if the plan moves more partitions")] = None,
) -> None:
    """Check PLAN against SNAPSHOT; exit 1 naming every broken constraint, 2 on unreadable input."""
    try:
        snap = read_snapshot(snapshot)
        parsed = read_plan(plan)
    except ContractError as exc:
        fail_input(exc)
    violations = check_plan(snap, parsed, CheckLimits(capacity_headroom=headroom, max_bytes_to_move=max_bytes,
                                                      max_partitions_to_move=max_partitions))
    if violations:
        out.print(violations_table(violations))
        raise typer.Exit(EXIT_VIOLATIONS)
    out.print(f"plan is valid: {len(parsed.moves)} partition moves, {len(parsed.leaders)} leader changes")


@sim_app.command("generate")
def sim_generate(
    out_path: Annotated[Path, typer.Option("--out", "-o", help="snapshot file to write")],
    brokers: Annotated[int, typer.Option(min=1, max=40_000)] = 12,
    disks_per_broker: Annotated[int, typer.Option(min=1, max=64)] = 4,
    partitions: Annotated[int, typer.Option(min=0)] = 600,
    replication_factor: Annotated[int, typer.Option("--rf", min=1, max=10)] = 3,
    skew: Annotated[str, typer.Option(help="zipf (heavy-tailed traffic, skewed placement) or uniform")] = "zipf",
    seed: Annotated[int, typer.Option()] = 0,
    idcs: Annotated[str, typer.Option(help="comma-separated IDC names")] = "idc-a,idc-b",
    pools: Annotated[str, typer.Option(help="pool=fraction,... of brokers ('free' hosts no topic)")] = "shared=1",
    dead_brokers: Annotated[int, typer.Option(min=0)] = 0,
    cluster: Annotated[str, typer.Option()] = "sim",
) -> None:
    """Write a deterministic synthetic snapshot (same arguments, same bytes)."""
    from kafkasim.generator import GeneratorSpec, generate_snapshot

    try:
        pool_map = {name.strip(): float(frac) for name, frac in (p.split("=", 1) for p in pools.split(","))}
    except ValueError:
        err.print(f"[red]error:[/] --pools: expected name=fraction,... got {pools!r}", markup=True)
        raise typer.Exit(EXIT_INVALID_INPUT) from None
    try:
        spec = GeneratorSpec(brokers=brokers, disks_per_broker=disks_per_broker, partitions=partitions,
                             replication_factor=replication_factor, skew=skew,  # type: ignore[arg-type]
                             seed=seed, idcs=tuple(i.strip() for i in idcs.split(",") if i.strip()),
                             pools=pool_map, dead_brokers=dead_brokers, cluster=cluster)
        snap = generate_snapshot(spec)
    except ValueError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT) from None
    write_atomic(out_path, dump_snapshot(snap))
    out.print(snapshot_table(snap))
    out.print(f"snapshot written to {out_path}", markup=False)


def main() -> None:
    """Entry point of the ``guardian`` console script."""
    app()


if __name__ == "__main__":
    main()
