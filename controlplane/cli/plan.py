"""``guardian plan …``: make and check plans offline (no service, cluster or network).

Every command reads a guardian.snapshot/v1 file, runs one pure planner (:mod:`planners`) and writes a
guardian.plan/v1 file atomically, then prints its summary; ``validate`` checks a plan against a snapshot.
Exit codes: 1 the checker rejects the plan (nothing written) or the plan breaks constraints, 2 an
impossible request or unreadable input.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from controlplane.cli.common import EXIT_INVALID_INPUT, EXIT_VIOLATIONS, SnapshotOpt, err, fail_input, out
from controlplane.cli.common import load_snapshot as _load
from controlplane.files import read_plan, read_snapshot, write_atomic
from controlplane.report import leaders_table, plan_table, violations_table
from domain import (
    CheckLimits,
    ContractError,
    Plan,
    check_new_topic,
    check_plan,
    dump_plan,
    dump_snapshot,
    preallocated_topic,
)
from planners import (
    Bounds,
    DrainOptions,
    InvalidPlanError,
    PlannerError,
    plan_idc_migration,
    plan_preallocation,
)
from planners import plan_drain as make_drain
from planners import plan_leaders as make_leaders
from planners import plan_pool_grow as make_pool_grow
from planners import plan_pool_shrink as make_pool_shrink
from planners import plan_rebalance as make_rebalance
from planners import plan_restore as make_restore
from planners.budget_curve import budget_curve
from planners.idc_migration import select_topics, with_placement
from planners.params import (
    DEFAULT_BALANCE_TARGET,
    BoundsParams,
    DrainParams,
    LeadersParams,
    MigrateIdcParams,
    Params,
    ParamsError,
    PoolGrowParams,
    PoolShrinkParams,
    PreallocateParams,
    RebalanceParams,
    parse_params,
)

T = TypeVar("T")
P = TypeVar("P", bound=Params)

plan_app = typer.Typer(help="Make and check plans (work offline: no service, cluster or network).",
                       no_args_is_help=True)

MaxBytesOpt = Annotated[int | None, typer.Option("--max-bytes", min=0, help="most bytes to copy in one plan")]
MaxPartsOpt = Annotated[int | None, typer.Option("--max-partitions", "--max-moves", min=0,
                                                 help="most partitions to move in one plan")]
HeadroomOpt = Annotated[float, typer.Option("--headroom", min=0.0, max=0.9, help="fraction of each disk kept free")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="where to write the guardian.plan/v1 file")]
BrokersOpt = Annotated[str, typer.Option("--brokers", "-b", help="comma-separated broker ids")]


def _params(model: type[P], **values: Any) -> P:
    """The planner kind's parameter model (:mod:`planners.params`: the rules the registry and the API use)
    built from the options given; exit 2 naming the parameter when one breaks a rule."""
    try:
        return parse_params(model, {k: v for k, v in values.items() if v is not None})
    except ParamsError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT) from None


def _bounds(max_bytes: int | None, max_partitions: int | None, headroom: float) -> Bounds:
    return _params(BoundsParams, max_bytes=max_bytes, max_partitions=max_partitions,
                   capacity_headroom=headroom).bounds()


def _ids(text: str, option: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ids = []
    if not ids:
        err.print(f"error: {option}: expected comma-separated broker ids, got {text!r}", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT)
    return ids


def _placement(text: str) -> dict[str, int]:
    try:
        pairs = [p.split("=", 1) for p in text.split(",") if p.strip()]
        placement = {idc.strip(): int(n) for idc, n in pairs}
    except ValueError:
        placement = {}
    if not placement:
        err.print(f"error: --placement: expected idc=count,... got {text!r}", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT)
    return placement


def _run(make: Callable[[], T]) -> T:
    """Run a planner; an impossible request exits 2, a plan the checker rejects exits 1 (nothing written).

    The cyclic collector stays off from here to the command's end: the planner allocates no reference cycles,
    and re-enabled behind it, it walked every object the run had made (the snapshot's index, the plan) once per
    generation — 0.6 of the 16 CPU-s of ``plan rebalance`` at 1,000 brokers. Reference counting frees as usual."""
    gc.disable()
    try:
        return make()
    except InvalidPlanError as exc:
        err.print(f"error: {exc}; nothing written", markup=False)
        raise typer.Exit(EXIT_VIOLATIONS) from None
    except PlannerError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT) from None


def _emit(plan: Plan, out_path: Path) -> None:
    write_atomic(out_path, dump_plan(plan))
    out.print(plan_table(plan))
    for note in plan.notes:  # verbatim: notes carry commands to copy (no markup, emoji, highlight or wrapping)
        out.print(f"note: {note}", markup=False, emoji=False, highlight=False, soft_wrap=True)
    out.print(f"plan written to {out_path}", markup=False)


@plan_app.command("rebalance")
def plan_rebalance(snapshot: SnapshotOpt, out_path: OutOpt, max_bytes: MaxBytesOpt = None,
                   max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10,
                   threshold: Annotated[float, typer.Option(
                       "--target", "--threshold",
                       help="peak/mean every pool ends at or under (a disk above it x the pool's mean is hot); "
                            "the plan stops there")] = DEFAULT_BALANCE_TARGET,
                   floor: Annotated[float, typer.Option(
                       help="no rebalance while a pool's hottest disk is at or under this util")]
                   = RebalanceParams.model_fields["floor"].default,
                   evacuate_dead: Annotated[bool, typer.Option("--evacuate-dead",
                                                               help="move replicas off dead brokers")] = False) -> None:
    """Plan a disk-load rebalance of SNAPSHOT (across and within brokers), write it to OUT, print its summary."""
    options = _params(RebalanceParams, max_bytes=max_bytes, max_partitions=max_partitions,
                      capacity_headroom=headroom, threshold=threshold, floor=floor,
                      evacuate_dead=evacuate_dead).options()
    snap = _load(snapshot)
    plan = _run(partial(make_rebalance, snap, options))
    del snap  # the snapshot and its index are freed before the plan is written (~0.4 GB at 3,000 brokers)
    _emit(plan, out_path)


@plan_app.command("budget-curve")
def plan_budget_curve(snapshot: SnapshotOpt, headroom: HeadroomOpt = 0.10,
                      threshold: Annotated[float, typer.Option(help="a disk above this x pool mean is hot")]
                      = DEFAULT_BALANCE_TARGET) -> None:
    """Print the worst pool's peak/mean a rebalance of SNAPSHOT reaches at each byte budget (choose --max-bytes)."""
    snap = _load(snapshot)
    options = _params(RebalanceParams, capacity_headroom=headroom, threshold=threshold).options()
    points = _run(lambda: budget_curve(snap, options))
    out.print(f"{'--max-bytes':>22} {'bytes moved':>22} {'share':>7} {'peak/mean':>9}", markup=False, highlight=False)
    for pt in points:
        out.print(f"{pt.max_bytes:>22} {pt.bytes_moved:>22} {pt.share_of_replica_bytes:>7.1%} {pt.peak_to_mean:>9.3f}",
                  markup=False, highlight=False)


@plan_app.command("leaders")
def plan_leaders(snapshot: SnapshotOpt, out_path: OutOpt,
                 tolerance: Annotated[float, typer.Option(help="stop within this factor of the mean")]
                 = LeadersParams.model_fields["tolerance"].default) -> None:
    """Plan leader balancing (leader bytes-in and count per broker) by preferred order + elections only."""
    snap = _load(snapshot)
    options = _params(LeadersParams, tolerance=tolerance).options()
    plan = _run(lambda: make_leaders(snap, options))
    _emit(plan, out_path)
    out.print(leaders_table(snap, plan))


@plan_app.command("preallocate")
def plan_preallocate(
    snapshot: SnapshotOpt, out_path: OutOpt,
    topic: Annotated[str, typer.Option("--topic", "-t", help="name of the topic to create")],
    partitions: Annotated[int, typer.Option()],
    bytes_in: Annotated[float | None, typer.Option("--bytes-in-per-s",
                                                   help="expected bytes/s in (else from --model)")] = None,
    replication_factor: Annotated[int, typer.Option("--rf")] = 3,
    pool: Annotated[str, typer.Option()] = "shared",
    placement: Annotated[str | None, typer.Option(help="IDC placement, idc=count,...")] = None,
    model: Annotated[Path | None, typer.Option(help="traffic model: JSON object topic -> expected bytes/s")] = None,
    headroom: HeadroomOpt = 0.10,
) -> None:
    """Plan the explicit assignment of a new topic onto the least-loaded valid disks."""
    snap = _load(snapshot)
    traffic: dict[str, float] = {}
    if model is not None:
        try:
            raw = json.loads(model.read_text())
            traffic = {str(k): float(v) for k, v in raw.items()}
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            err.print(f"error: --model {model}: expected a JSON object of topic -> bytes/s ({exc})", markup=False)
            raise typer.Exit(EXIT_INVALID_INPUT) from None
    params = _params(PreallocateParams, topic=topic, partitions=partitions, replication_factor=replication_factor,
                     bytes_in_per_s=bytes_in, pool=pool,
                     placement=_placement(placement) if placement is not None else None, traffic_model=traffic,
                     capacity_headroom=headroom)
    result = _run(lambda: plan_preallocation(snap, params.request(), params.options()))
    _emit(result.plan, out_path)


@plan_app.command("drain")
def plan_drain(snapshot: SnapshotOpt, out_path: OutOpt, brokers: BrokersOpt, max_bytes: MaxBytesOpt = None,
               max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10) -> None:
    """Plan the decommission of BROKERS: leadership away first, then every replica off."""
    snap = _load(snapshot)
    params = _params(DrainParams, brokers=_ids(brokers, "--brokers"), max_bytes=max_bytes,
                     max_partitions=max_partitions, capacity_headroom=headroom)
    _emit(_run(lambda: make_drain(snap, params.brokers, params.options())), out_path)


@plan_app.command("restore")
def plan_restore(snapshot: SnapshotOpt, out_path: OutOpt, brokers: BrokersOpt,
                 recorded: Annotated[Path, typer.Option("--recorded", "-r",
                                                        help="snapshot taken before the drain")],
                 max_bytes: MaxBytesOpt = None, max_partitions: MaxPartsOpt = None,
                 headroom: HeadroomOpt = 0.10) -> None:
    """Plan the recommission of BROKERS: their recorded partitions, log dirs and leadership back."""
    snap, before = _load(snapshot), _load(recorded)
    ids = _ids(brokers, "--brokers")
    options = DrainOptions(bounds=_bounds(max_bytes, max_partitions, headroom))
    _emit(_run(lambda: make_restore(snap, before, ids, options)), out_path)


@plan_app.command("migrate-idc")
def plan_migrate_idc(
    snapshot: SnapshotOpt, out_path: OutOpt,
    placement: Annotated[str, typer.Option(help="new IDC placement, idc=count,... e.g. idc-b=3")],
    topic: Annotated[list[str] | None, typer.Option("--topic", "-t", help="topic to migrate (repeatable)")] = None,
    pool: Annotated[str | None, typer.Option(help="migrate every topic of this pool")] = None,
    min_insync: Annotated[int, typer.Option(help="in-sync replicas kept at every instant")] = 2,
    snapshot_out: Annotated[Path | None, typer.Option(help="also write SNAPSHOT with the new policy set "
                                                           "(what step 1 validates against)")] = None,
    max_bytes: MaxBytesOpt = None, max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10,
) -> None:
    """Plan an IDC migration in steps; writes OUT for one step, else OUT-stepN for each step in order."""
    snap = _load(snapshot)
    params = _params(MigrateIdcParams, placement=_placement(placement), topics=topic or [], pool=pool,
                     min_insync=min_insync, max_bytes=max_bytes, max_partitions=max_partitions,
                     capacity_headroom=headroom)
    policy = params.placement
    steps = _run(lambda: plan_idc_migration(snap, policy, params.topics, params.pool, params.options()))
    if snapshot_out is not None:
        write_atomic(snapshot_out, dump_snapshot(with_placement(snap, select_topics(snap, topic or (), pool), policy)))
    if not steps:
        out.print("nothing to move: the selected topics already meet the policy")
        return
    for n, step in enumerate(steps, start=1):
        path = out_path if len(steps) == 1 else out_path.with_name(f"{out_path.stem}-step{n}{out_path.suffix}")
        _emit(step, path)


@plan_app.command("pool-shrink")
def plan_pool_shrink(
    snapshot: SnapshotOpt, out_path: OutOpt,
    pool: Annotated[str, typer.Option(help="pool to shrink")],
    brokers: Annotated[str | None, typer.Option("--brokers", "-b", help="comma-separated broker ids")] = None,
    count: Annotated[int, typer.Option(help="or: drain this many brokers (cheapest to move)")] = 0,
    max_bytes: MaxBytesOpt = None, max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10,
) -> None:
    """Plan shrinking POOL by draining brokers back to the free pool."""
    snap = _load(snapshot)
    ids = _ids(brokers, "--brokers") if brokers else []
    if not ids and count < 1:
        err.print("error: give --brokers or --count", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT)
    params = _params(PoolShrinkParams, pool=pool, brokers=ids, count=count, max_bytes=max_bytes,
                     max_partitions=max_partitions, capacity_headroom=headroom)
    _emit(_run(lambda: make_pool_shrink(snap, params.pool, params.brokers, params.count, params.options())),
          out_path)


@plan_app.command("pool-grow")
def plan_pool_grow(
    snapshot: SnapshotOpt, out_path: OutOpt,
    pool: Annotated[str, typer.Option(help="pool to grow")],
    count: Annotated[int, typer.Option(help="brokers to take from the free pool")],
    snapshot_out: Annotated[Path | None, typer.Option(help="also write the snapshot with the brokers moved")] = None,
    max_bytes: MaxBytesOpt = None, max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10,
) -> None:
    """Plan growing POOL from the free pool: pick brokers, then rebalance onto them."""
    snap = _load(snapshot)
    params = _params(PoolGrowParams, pool=pool, count=count, max_bytes=max_bytes, max_partitions=max_partitions,
                     capacity_headroom=headroom)
    growth = _run(lambda: make_pool_grow(snap, params.pool, params.count, params.options()))
    if snapshot_out is not None:
        write_atomic(snapshot_out, dump_snapshot(growth.snapshot))
    _emit(growth.plan, out_path)


@plan_app.command("validate")
def plan_validate(
    snapshot: SnapshotOpt,
    plan: Annotated[Path, typer.Option("--plan", "-p", help="guardian.plan/v1 file, or a bare Kafka reassignment "
                                                            "JSON {\"version\": 1, \"partitions\": [...]} (as "
                                                            "kafka-reassign-partitions or Cruise Control write it)")],
    headroom: Annotated[float, typer.Option(min=0.0, max=0.9, help="fraction of each disk kept free")] = 0.10,
    max_bytes: Annotated[int | None, typer.Option(min=0, help="fail if the plan copies more bytes")] = None,
    max_partitions: Annotated[int | None, typer.Option(min=0, help="fail if the plan moves more partitions")] = None,
) -> None:
    """Check PLAN against SNAPSHOT; exit 1 naming every broken constraint, 2 on unreadable input."""
    try:
        snap = read_snapshot(snapshot)
        parsed = read_plan(plan, bare_cluster=snap.cluster)
    except ContractError as exc:
        fail_input(exc)
    limits = CheckLimits(capacity_headroom=headroom, max_bytes_to_move=max_bytes,
                         max_partitions_to_move=max_partitions)
    topic = preallocated_topic(snap, parsed)
    if topic is not None:
        violations = check_new_topic(snap, topic, limits)
        what = f"pre-allocation of new topic {topic.name} (pool {topic.pool}) is valid"
    else:
        violations = check_plan(snap, parsed, limits)
        what = "plan is valid"
    if violations:
        out.print(violations_table(violations))
        raise typer.Exit(EXIT_VIOLATIONS)
    out.print(f"{what}: {len(parsed.moves)} partition moves, {len(parsed.leaders)} leader changes")
