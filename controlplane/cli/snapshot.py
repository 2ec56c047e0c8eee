"""``guardian snapshot show|take``: inspect a snapshot file, or collect one from a live cluster.

``take`` runs the collectors' rounds (Kafka admin API + Prometheus scrapes) against an endpoints file or
explicit servers with Kafka-style security flags (:mod:`controlplane.cli.connect_options`), prints each
round's coverage on stderr and writes the snapshot atomically. Exit codes: 1 nothing collected, 2 bad
input or a login the cluster refuses (one line naming the cluster, protocol, mechanism and user), 3
refused as stale/incomplete with ``--strict`` (nothing written).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from collectors.collector import ClusterCollector, CollectionError
from collectors.completeness import UsabilityPolicy, refusal_reasons
from controlplane.cli.common import EXIT_INVALID_INPUT, EXIT_VIOLATIONS, SnapshotOpt, err, load_snapshot, out
from controlplane.cli.connect_options import ConnectOptions
from controlplane.cli.option_set import option_set
from controlplane.files import write_atomic
from controlplane.report import hottest_tables, snapshot_summary, snapshot_table
from kafkaio.endpoints import EndpointsError

snapshot_app = typer.Typer(help="Take and inspect snapshot files.", no_args_is_help=True)


@snapshot_app.command("show")
def snapshot_show(
    snapshot: SnapshotOpt,
    as_json: Annotated[bool, typer.Option("--json", help="print the figures as one JSON document")] = False,
    top: Annotated[int, typer.Option(min=0, max=100_000, help="hottest disks and brokers listed")] = 10,
) -> None:
    """Summarise a snapshot: per pool brokers, disks, replicas and estimated disk utilisation; the hottest disks
    and brokers."""
    snap = load_snapshot(snapshot)
    summary = snapshot_summary(snap, top)
    if as_json:
        print(json.dumps(summary, indent=2, allow_nan=False))
        return
    out.print(snapshot_table(snap))
    for table in hottest_tables(summary):
        out.print(table)


@snapshot_app.command("take")
@option_set(ConnectOptions, ("cluster",))
def snapshot_take(
    connect: ConnectOptions,
    out_path: Annotated[Path, typer.Option("--out", "-o", help="guardian.snapshot/v1 file to write")],
    rounds: Annotated[int, typer.Option(min=1, max=1000, help="collection rounds (rates need 2)")] = 2,
    interval: Annotated[float, typer.Option(min=0.5, max=3600, help="seconds between rounds")] = 10.0,
    timeout: Annotated[float, typer.Option(min=0.1, max=300, help="per-endpoint scrape timeout (s)")] = 5.0,
    strict: Annotated[bool, typer.Option(help="exit 3 and write nothing if the snapshot is stale/incomplete")] = False,
) -> None:
    """Collect a live snapshot of CLUSTER (Kafka admin API + Prometheus scrapes) and write it to OUT."""
    cluster = connect.cluster
    try:
        eps = connect.endpoints()
    except EndpointsError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(EXIT_INVALID_INPUT) from None
    collector = ClusterCollector(eps, scrape_timeout_s=timeout)
    result = None
    try:
        for k in range(1, rounds + 1):
            started = time.monotonic()
            with err.status(f"round {k}/{rounds}: collecting {cluster} "
                            f"({len(eps.metrics_urls)} metrics endpoints)..."):
                try:
                    result = collector.collect_once()
                except CollectionError as exc:
                    refused = exc.auth
                    if refused is not None:  # retrying does not help: one line, exit 2
                        err.print(f"error: {refused}", markup=False)
                        raise typer.Exit(EXIT_INVALID_INPUT) from None
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
                wait = max(interval - (time.monotonic() - started), 0.0)
                with err.status(f"waiting {wait:.1f} s for round {k + 1}/{rounds}..."):
                    time.sleep(wait)
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
    result = replace(result, snapshot=result.planning_snapshot())  # moving partitions at their targets
    write_atomic(out_path, json.dumps(result.to_dict(), allow_nan=False))
    out.print(snapshot_table(result.snapshot))
    out.print(f"snapshot written to {out_path}", markup=False)
