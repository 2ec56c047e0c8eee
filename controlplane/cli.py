"""``guardian``: the operator's command line. Every command has ``--help``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer
from rich.console import Console

from controlplane.cli_throttle import throttle_app
from controlplane.exec_cli import exec_app
from controlplane.files import read_plan, read_snapshot, write_atomic
from controlplane.report import leaders_table, plan_table, snapshot_table, violations_table
from domain import (
    CheckLimits,
    ClusterSnapshot,
    ContractError,
    Partition,
    Plan,
    Topic,
    check_new_topic,
    check_plan,
    dump_plan,
    dump_snapshot,
    plan_json_schema,
    snapshot_json_schema,
)
from planners import Bounds, InvalidPlanError, PlannerError

T = TypeVar("T")

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
analytics_app = typer.Typer(help="Audit analytics: ClickHouse (chdb) + PySpark traffic models.", no_args_is_help=True)
app.add_typer(analytics_app, name="analytics")
app.add_typer(throttle_app, name="throttle")
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
    from kafkaio.endpoints import EndpointsError, endpoints_from_options, load_endpoints_file

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


MaxBytesOpt = Annotated[int | None, typer.Option("--max-bytes", min=0, help="most bytes to copy in one plan")]
MaxPartsOpt = Annotated[int | None, typer.Option("--max-partitions", "--max-moves", min=0,
                                                 help="most partitions to move in one plan")]
HeadroomOpt = Annotated[float, typer.Option("--headroom", min=0.0, max=0.9, help="fraction of each disk kept free")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="where to write the guardian.plan/v1 file")]
BrokersOpt = Annotated[str, typer.Option("--brokers", "-b", help="comma-separated broker ids")]


def _load(path: Path) -> ClusterSnapshot:
    try:
        return read_snapshot(path)
    except ContractError as exc:
        fail_input(exc)


def _bounds(max_bytes: int | None, max_partitions: int | None, headroom: float) -> Bounds:
    return Bounds(max_bytes=max_bytes, max_partitions=max_partitions, capacity_headroom=headroom)


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
    """Run a planner; an impossible request exits 2, a plan the checker rejects exits 1 (nothing written)."""
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
    for note in plan.notes:
        out.print(f"note: {note}", markup=False)
    out.print(f"plan written to {out_path}", markup=False)


@plan_app.command("rebalance")
def plan_rebalance(snapshot: SnapshotOpt, out_path: OutOpt, max_bytes: MaxBytesOpt = None,
                   max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10,
                   threshold: Annotated[float, typer.Option(min=1.0, help="a disk above this x pool mean is hot")]
                   = 1.10) -> None:
    """Plan a disk-load rebalance of SNAPSHOT (across and within brokers), write it to OUT, print its summary."""
    from planners import BalanceOptions
    from planners import plan_rebalance as make

    snap = _load(snapshot)
    options = BalanceOptions(bounds=_bounds(max_bytes, max_partitions, headroom), threshold=threshold,
                             target=min(threshold, max(1.0, threshold - 0.03)))
    _emit(_run(lambda: make(snap, options)), out_path)


@plan_app.command("leaders")
def plan_leaders(snapshot: SnapshotOpt, out_path: OutOpt,
                 tolerance: Annotated[float, typer.Option(min=1.0, help="stop within this factor of the mean")]
                 = 1.05) -> None:
    """Plan leader balancing (leader bytes-in and count per broker) by preferred order + elections only."""
    from planners import LeaderOptions
    from planners import plan_leaders as make

    snap = _load(snapshot)
    plan = _run(lambda: make(snap, LeaderOptions(tolerance=tolerance)))
    _emit(plan, out_path)
    out.print(leaders_table(snap, plan))


@plan_app.command("preallocate")
def plan_preallocate(
    snapshot: SnapshotOpt, out_path: OutOpt,
    topic: Annotated[str, typer.Option("--topic", "-t", help="name of the topic to create")],
    partitions: Annotated[int, typer.Option(min=1)],
    bytes_in: Annotated[float | None, typer.Option("--bytes-in-per-s", min=0.0,
                                                   help="expected bytes/s in (else from --model)")] = None,
    replication_factor: Annotated[int, typer.Option("--rf", min=1, max=10)] = 3,
    pool: Annotated[str, typer.Option()] = "shared",
    placement: Annotated[str | None, typer.Option(help="IDC placement, idc=count,...")] = None,
    model: Annotated[Path | None, typer.Option(help="traffic model: JSON object topic -> expected bytes/s")] = None,
    headroom: HeadroomOpt = 0.10,
) -> None:
    """Plan the explicit assignment of a new topic onto the least-loaded valid disks."""
    from planners import NewTopic, PreallocateOptions, plan_preallocation

    snap = _load(snapshot)
    traffic: dict[str, float] = {}
    if model is not None:
        try:
            raw = json.loads(model.read_text())
            traffic = {str(k): float(v) for k, v in raw.items()}
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            err.print(f"error: --model {model}: expected a JSON object of topic -> bytes/s ({exc})", markup=False)
            raise typer.Exit(EXIT_INVALID_INPUT) from None
    request = NewTopic(name=topic, partitions=partitions, replication_factor=replication_factor,
                       bytes_in_per_s=bytes_in, pool=pool,
                       placement=_placement(placement) if placement is not None else None)
    result = _run(lambda: plan_preallocation(snap, request, PreallocateOptions(
        bounds=Bounds(capacity_headroom=headroom), traffic_model=traffic)))
    _emit(result.plan, out_path)


@plan_app.command("drain")
def plan_drain(snapshot: SnapshotOpt, out_path: OutOpt, brokers: BrokersOpt, max_bytes: MaxBytesOpt = None,
               max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10) -> None:
    """Plan the decommission of BROKERS: leadership away first, then every replica off."""
    from planners import DrainOptions
    from planners import plan_drain as make

    snap = _load(snapshot)
    ids = _ids(brokers, "--brokers")
    _emit(_run(lambda: make(snap, ids, DrainOptions(bounds=_bounds(max_bytes, max_partitions, headroom)))),
          out_path)


@plan_app.command("restore")
def plan_restore(snapshot: SnapshotOpt, out_path: OutOpt, brokers: BrokersOpt,
                 recorded: Annotated[Path, typer.Option("--recorded", "-r",
                                                        help="snapshot taken before the drain")],
                 max_bytes: MaxBytesOpt = None, max_partitions: MaxPartsOpt = None,
                 headroom: HeadroomOpt = 0.10) -> None:
    """Plan the recommission of BROKERS: their recorded partitions, log dirs and leadership back."""
    from planners import DrainOptions
    from planners import plan_restore as make

    snap, before = _load(snapshot), _load(recorded)
    ids = _ids(brokers, "--brokers")
    _emit(_run(lambda: make(snap, before, ids, DrainOptions(bounds=_bounds(max_bytes, max_partitions, headroom)))),
          out_path)


@plan_app.command("migrate-idc")
def plan_migrate_idc(
    snapshot: SnapshotOpt, out_path: OutOpt,
    placement: Annotated[str, typer.Option(help="new IDC placement, idc=count,... e.g. idc-b=3")],
    topic: Annotated[list[str] | None, typer.Option("--topic", "-t", help="topic to migrate (repeatable)")] = None,
    pool: Annotated[str | None, typer.Option(help="migrate every topic of this pool")] = None,
    min_insync: Annotated[int, typer.Option(min=1, help="in-sync replicas kept at every instant")] = 2,
    snapshot_out: Annotated[Path | None, typer.Option(help="also write SNAPSHOT with the new policy set "
                                                           "(what step 1 validates against)")] = None,
    max_bytes: MaxBytesOpt = None, max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10,
) -> None:
    """Plan an IDC migration in steps; writes OUT for one step, else OUT-stepN for each step in order."""
    from planners import MigrationOptions, plan_idc_migration
    from planners.idc_migration import select_topics, with_placement

    snap = _load(snapshot)
    policy = _placement(placement)
    options = MigrationOptions(bounds=_bounds(max_bytes, max_partitions, headroom), min_insync=min_insync)
    steps = _run(lambda: plan_idc_migration(snap, policy, topic or (), pool, options))
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
    count: Annotated[int, typer.Option(min=0, help="or: drain this many brokers (cheapest to move)")] = 0,
    max_bytes: MaxBytesOpt = None, max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10,
) -> None:
    """Plan shrinking POOL by draining brokers back to the free pool."""
    from planners import ResizeOptions
    from planners import plan_pool_shrink as make

    snap = _load(snapshot)
    ids = _ids(brokers, "--brokers") if brokers else []
    if not ids and count < 1:
        err.print("error: give --brokers or --count", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT)
    _emit(_run(lambda: make(snap, pool, ids, count, ResizeOptions(bounds=_bounds(max_bytes, max_partitions,
                                                                                 headroom)))), out_path)


@plan_app.command("pool-grow")
def plan_pool_grow(
    snapshot: SnapshotOpt, out_path: OutOpt,
    pool: Annotated[str, typer.Option(help="pool to grow")],
    count: Annotated[int, typer.Option(min=1, help="brokers to take from the free pool")],
    snapshot_out: Annotated[Path | None, typer.Option(help="also write the snapshot with the brokers moved")] = None,
    max_bytes: MaxBytesOpt = None, max_partitions: MaxPartsOpt = None, headroom: HeadroomOpt = 0.10,
) -> None:
    """Plan growing POOL from the free pool: pick brokers, then rebalance onto them."""
    from planners import ResizeOptions
    from planners import plan_pool_grow as make

    snap = _load(snapshot)
    growth = _run(lambda: make(snap, pool, count, ResizeOptions(bounds=_bounds(max_bytes, max_partitions,
                                                                               headroom))))
    if snapshot_out is not None:
        write_atomic(snapshot_out, dump_snapshot(growth.snapshot))
    _emit(growth.plan, out_path)


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
    limits = CheckLimits(capacity_headroom=headroom, max_bytes_to_move=max_bytes,
                         max_partitions_to_move=max_partitions)
    new_topics = {m.topic for m in parsed.moves} - set(snap.index.topic_by_name)
    if parsed.kind == "preallocate" and len(new_topics) == 1 and not parsed.leaders:
        topic = _preallocated_topic(snap, parsed)
        violations = check_new_topic(snap, topic, limits)
        what = f"pre-allocation of new topic {topic.name} (pool {topic.pool}) is valid"
    else:
        violations = check_plan(snap, parsed, limits)
        what = "plan is valid"
    if violations:
        out.print(violations_table(violations))
        raise typer.Exit(EXIT_VIOLATIONS)
    out.print(f"{what}: {len(parsed.moves)} partition moves, {len(parsed.leaders)} leader changes")


def _preallocated_topic(snap: ClusterSnapshot, plan: Plan) -> Topic:
    """The topic a pre-allocation plan creates; its pool is the pool of its first replica's broker."""
    brokers = snap.index.broker_by_id
    first = brokers.get(plan.moves[0].replicas[0])
    parts = tuple(Partition(topic=m.topic, partition=m.partition, replicas=m.replicas, leader=m.replicas[0],
                            isr=m.replicas, log_dirs=tuple(d if d is not None else "" for d in m.log_dirs))
                  for m in plan.moves)
    return Topic(name=plan.moves[0].topic, partitions=parts, pool=first.pool if first else "shared")


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


@app.command("serve")
def serve_cmd(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML settings file")] = None,
    node_id: Annotated[int | None, typer.Option(min=1, help="this node's position (1-based) in --peers")] = None,
    peers: Annotated[str | None, typer.Option(help="comma-separated Raft addresses of ALL nodes")] = None,
    http_peers: Annotated[str | None, typer.Option(help="comma-separated HTTP base URLs, same order as --peers "
                                                        "(followers redirect writes there)")] = None,
    host: Annotated[str | None, typer.Option(help="HTTP bind address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(min=0, max=65535, help="HTTP port (default 8080)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="journal, snapshots, tokens (default var/guardian[-N])")] = None,
) -> None:
    """Run a controller node: Raft-replicated state, REST API, leader-only scheduler."""
    from controlplane.bootstrap import serve, token_path
    from controlplane.config import load_settings

    try:
        settings = load_settings(config)
    except ContractError as exc:
        fail_input(exc)
    raft = settings.raft.model_copy()
    http_of: dict[str, str] = {}
    if peers:
        addrs = [p.strip() for p in peers.split(",") if p.strip()]
        if node_id is None or node_id > len(addrs):
            err.print(f"error: --node-id must be 1..{len(addrs)} with --peers", markup=False)
            raise typer.Exit(EXIT_INVALID_INPUT)
        raft = raft.model_copy(update={"self_addr": addrs[node_id - 1],
                                       "peers": [a for i, a in enumerate(addrs) if i != node_id - 1]})
        if http_peers:
            urls = [u.strip() for u in http_peers.split(",")]
            if len(urls) != len(addrs):
                err.print("error: --http-peers needs one URL per --peers entry", markup=False)
                raise typer.Exit(EXIT_INVALID_INPUT)
            http_of = dict(zip(addrs, urls, strict=True))
    http = settings.http.model_copy(update={k: v for k, v in (("host", host), ("port", port)) if v is not None})
    default_dir = Path(f"var/guardian-{node_id}") if node_id else settings.data_dir
    settings = settings.model_copy(update={"raft": raft, "http": http, "data_dir": data_dir or default_dir})
    if not settings.tokens:
        err.print(f"no tokens configured: admin token in {token_path(settings)}", markup=False)
    out.print(f"guardian node {raft.self_addr} (peers {raft.peers or 'none'}) "
              f"http://{http.host}:{http.port}", markup=False)
    serve(settings, http_of=http_of)


@app.command("cluster")
def cluster_cmd(
    nodes: Annotated[int, typer.Option(min=1, max=7, help="controller nodes (3 or 5 for HA)")] = 3,
    root: Annotated[Path, typer.Option(help="data dirs and logs of the nodes")] = Path("var/cluster"),
) -> None:
    """Run a local HA controller group (N `guardian serve` processes) until Ctrl-C; prints its endpoints."""
    import signal
    import time

    from controlplane.launcher import TOKEN, ServiceCluster

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # `kill` stops the group as Ctrl-C does
    root.mkdir(parents=True, exist_ok=True)
    group = ServiceCluster(root.resolve(), size=nodes, clickhouse=True)
    group.start_all()
    try:
        group.wait_up(timeout=60)
        leader = group.leader(timeout=30)
        print(json.dumps({"nodes": [f"http://127.0.0.1:{p}" for p in group.http_ports], "leader": leader,
                          "token": TOKEN, "logs": str(root)}), flush=True)
        while all(p.poll() is None for p in group.procs.values()):
            time.sleep(1)
        err.print("a node exited; stopping the group", markup=False)
        raise typer.Exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        group.close()


@app.command("token-hash")
def token_hash(token: Annotated[str, typer.Argument(help="the bearer token to hash for the config file")]) -> None:
    """Print the SHA-256 of a bearer token (what the config's [[tokens]] sha256 holds)."""
    from controlplane.config import hash_token

    print(hash_token(token))


def _mount_subsystems() -> None:
    from analytics_spark.cli import register as register_analytics
    from kafkasim.cli import register as register_sim

    register_analytics(analytics_app)
    register_sim(sim_app)


_mount_subsystems()


def main() -> None:
    """Entry point of the ``guardian`` console script."""
    app()


if __name__ == "__main__":
    main()
