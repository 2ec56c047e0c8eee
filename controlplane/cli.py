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
from controlplane.exec_cli import exec_app
from controlplane.files import read_plan, read_snapshot, write_atomic
from controlplane.report import plan_table, snapshot_table, violations_table

app = typer.Typer(help="Guardian: control plane for a federation of Kafka clusters.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
plan_app = typer.Typer(help="Make and check plans (work offline: no service, cluster or network).",
                       no_args_is_help=True)
schema_app = typer.Typer(help="Print the JSON Schemas of the contract files.", no_args_is_help=True)
sim_app = typer.Typer(help="Simulated federations: generate snapshots, run kafkasim.", no_args_is_help=True)
snapshot_app = typer.Typer(help="Inspect snapshot files.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")
app.add_typer(schema_app, name="schema")
app.add_typer(sim_app, name="sim")
app.add_typer(snapshot_app, name="snapshot")
app.add_typer(exec_app, name="exec")

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
