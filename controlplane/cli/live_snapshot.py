"""A snapshot of a live cluster for a command that plans and acts at once (no service, no snapshot file).

Goal: ``guardian migrate-idc`` and ``guardian topic create`` without ``--url`` plan over the cluster as
it is now, as ``guardian snapshot take`` would collect it. Method: the collectors' rounds (Kafka admin API
+ the brokers' Prometheus endpoints) through :class:`~collectors.collector.ClusterCollector`, ``rounds``
of them ``interval`` seconds apart (rates need two), the last round's planning snapshot (moving
partitions at their targets). Guarantee: a refused login or an empty round exits 2 / 1 with one line, as
``snapshot take`` does. Cost: ``rounds`` collection rounds.
"""

from __future__ import annotations

import time

import typer

from collectors.collector import ClusterCollector, CollectionError
from controlplane.cli.common import EXIT_INVALID_INPUT, EXIT_VIOLATIONS, err
from domain import ClusterSnapshot
from kafkaio.endpoints import ClusterEndpoints


def collect_snapshot(endpoints: ClusterEndpoints, rounds: int = 2, interval: float = 2.0) -> ClusterSnapshot:
    """The cluster's planning snapshot after ``rounds`` collection rounds (exits on failure)."""
    collector = ClusterCollector(endpoints)
    result = None
    try:
        for k in range(rounds):
            if k:
                time.sleep(interval)
            try:
                result = collector.collect_once()
            except CollectionError as exc:
                refused = exc.auth
                if refused is not None:
                    err.print(f"error: {refused}", markup=False)
                    raise typer.Exit(EXIT_INVALID_INPUT) from None
                err.print(f"collection round {k + 1}/{rounds} failed: {exc}", markup=False)
    finally:
        collector.close()
    if result is None:
        err.print(f"error: no snapshot of cluster {endpoints.cluster} could be collected", markup=False)
        raise typer.Exit(EXIT_VIOLATIONS)
    return result.planning_snapshot()
