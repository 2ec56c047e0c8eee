"""``guardian sim generate|up|fault``: simulated federations.

``generate`` writes a deterministic synthetic snapshot; ``up`` and ``fault …`` are kafkasim's own
commands (:func:`kafkasim.cli.register`), mounted on the same group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from controlplane.cli.common import EXIT_INVALID_INPUT, err, out
from controlplane.files import write_atomic
from controlplane.report import snapshot_table
from domain import dump_snapshot
from kafkasim.cli import register as register_kafkasim
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

sim_app = typer.Typer(help="Simulated federations: generate snapshots, run kafkasim.", no_args_is_help=True)


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


register_kafkasim(sim_app)
