"""The one observer per cluster: the leader's collection job, publishing every round it completes.

Goal: observe each registered cluster once per collection interval — one scrape of each broker
endpoint, one admin round — and let every consumer read that round instead of observing on its own.

Method: one :class:`collectors.ClusterCollector` per cluster, kept across passes (rates need history)
and built on the cluster's shared clients (:class:`~controlplane.service.clusters.ClusterBindings`).
Clusters are collected through the loop's :class:`~controlplane.service.fanout.ClusterFanout`:
each on its own, with a per-cluster deadline and bounded concurrency, so an unreachable or hanging cluster
never delays another's round nor makes the loop look dead; each cluster's outcome is its status
(:class:`~controlplane.service.cluster_status.ClusterStatus`: a refused login is ``auth``, failed metrics
endpoints are ``metrics_auth`` / ``metrics`` under the ``scrape`` row). Each round gets the
replicated policies (maintenance flags, pool membership, IDC placement) overlaid on its snapshot and is
published to the :class:`~controlplane.service.observation.RoundBoard` — whatever its completeness:
each consumer judges it by its own usability policy (throttle protection acts on a partial round, the
executor's disk load takes the disks the round measured). The planning side's policy (this job's
``policy``) decides whether the round also becomes the cluster's snapshot in the cache (auto-rebalance,
the API's plans: moving partitions at their target replica sets, :func:`domain.settle_moves`) and goes to
the rollups.

Guarantee: a refused or failed round is logged and counted, never raised (a round refused by the
cluster's login is also recorded in the snapshot cache, so the API says why there is no snapshot);
collectors and clients of clusters that were removed are closed. Cost: one collector round per cluster per pass (see
:mod:`collectors.collector`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

from collectors.builder import Collected
from collectors.collector import ClusterCollector
from collectors.completeness import UsabilityPolicy
from controlplane.logs import cluster_scope
from controlplane.service.cluster_status import error_kind, metrics_error
from controlplane.service.clusters import ClusterBindings, ClusterClients, endpoints_of
from controlplane.service.context import ServiceContext
from controlplane.service.fanout import ClusterFanout, loop_fanout
from controlplane.service.observation import Round, RoundBoard
from domain.inflight import settle_moves
from domain.policies import apply_policies
from kafkaio.endpoints import ClusterEndpoints

log = logging.getLogger(__name__)

__all__ = ["CollectionJob", "default_collector", "endpoints_of"]


def default_collector(clients: ClusterClients, timeout_s: float = 5.0) -> ClusterCollector:
    """The cluster's collector on its shared bulk reader; scrapes give up after ``timeout_s``."""
    return ClusterCollector(clients.endpoints, source=clients.source, scrape_timeout_s=timeout_s)


class CollectionJob:
    """Scheduler job ``collect``: the one observer of every registered cluster (see the module docstring)."""

    def __init__(self, policy: UsabilityPolicy | None = None,
                 make_collector: Callable[[ClusterClients], ClusterCollector] = default_collector,
                 on_collected: Callable[[str, Collected], None] | None = None,
                 bindings: ClusterBindings | None = None, board: RoundBoard | None = None) -> None:
        self.policy = policy or UsabilityPolicy(max_age_s=math.inf)
        self._make = make_collector
        self._on_collected = on_collected
        self.bindings = bindings or ClusterBindings()
        self.board = board or RoundBoard()
        self._collectors: dict[str, tuple[ClusterEndpoints, ClusterCollector]] = {}
        self._lock = threading.Lock()
        self.last_refusal: dict[str, list[str]] = {}
        self.fanout: ClusterFanout | None = None

    def __call__(self, ctx: ServiceContext) -> None:
        clusters, maintenance = ctx.store.read(lambda s: (
            {n: dict(c) for n, c in s["clusters"].items()},
            {n: dict(m) for n, m in s["maintenance"].items()}))
        ctx.cluster_status.retain(clusters)
        ctx.cluster_status.awaited_since(clusters)
        with self._lock:
            for gone in set(self._collectors) - set(clusters):
                self._collectors.pop(gone)[1].close()
                self.board.drop(gone)
            self.bindings.retain(clusters)
        if not clusters:
            return
        fanout = self._fanout_of(ctx)
        fanout.forget(set(clusters))
        fanout.run({name: partial(self._collect, ctx, name, cluster, maintenance.get(name, {}))
                    for name, cluster in clusters.items()})

    def _fanout_of(self, ctx: ServiceContext) -> ClusterFanout:
        if self.fanout is None:
            self.fanout = loop_fanout("collect", ctx.settings.intervals, ctx.cluster_status,
                                      count_error=ctx.metrics.loop_errors.labels("collect").inc)
        return self.fanout

    def collect(self, ctx: ServiceContext, name: str) -> Round | None:
        """Collect and publish one round of ``name`` now (tests, step-driven scenarios); None when it failed."""
        cluster, maintenance = ctx.store.read(lambda s: (dict(s["clusters"].get(name) or {}),
                                                         dict(s["maintenance"].get(name) or {})))
        if not cluster:
            raise KeyError(f"unknown cluster {name!r}")
        try:
            self._collect(ctx, name, cluster, maintenance)
        except Exception as exc:
            log.warning("collection of %s failed: %s", name, exc)
            ctx.cluster_status.error(name, "collect", error_kind(exc), f"collect: {exc}")
            return None
        ctx.cluster_status.ok(name, "collect")
        return self.board.latest(name)

    def _collect(self, ctx: ServiceContext, name: str, cluster: Mapping[str, Any],
                 maintenance: Mapping[str, Any]) -> None:
        with cluster_scope(name):
            self._collect_one(ctx, name, cluster, maintenance)

    def _collect_one(self, ctx: ServiceContext, name: str, cluster: Mapping[str, Any],
                     maintenance: Mapping[str, Any]) -> None:
        if not ctx.store.is_leader:
            return  # lost leadership: stop acting
        clients: ClusterClients | None = None
        try:
            clients = self.bindings.get(name, cluster)
            with self._lock:
                held = self._collectors.get(name)
                if held is None or held[0] != clients.endpoints or held[1].source is not clients.source:
                    if held is not None:
                        held[1].close()
                    held = (clients.endpoints, self._make(clients))
                    self._collectors[name] = held
            collected = held[1].collect_once()
        except Exception as exc:  # raised to the fan-out: this cluster's status, never another's
            auth = clients.connection.auth_failure if clients is not None else None
            ctx.snapshots.refuse(name, auth)
            if auth is not None and auth is not exc:
                raise auth from exc
            raise
        cov = collected.coverage
        scrape = metrics_error({**cov.metrics_failed_urls, **cov.endpoints_failed, **cov.exporters_failed})
        if scrape is None:
            ctx.cluster_status.ok(name, "scrape")
        else:
            ctx.cluster_status.error(name, "scrape", *scrape)
        ctx.snapshots.refuse(name, None)
        observed_at = datetime.now(UTC)
        published = self.board.publish(collected, apply_policies(collected.snapshot, cluster, maintenance), observed_at)
        reasons = published.refusals(self.policy)
        refused_before = self.last_refusal.get(name)
        self.last_refusal[name] = reasons
        if reasons:
            log.info("snapshot of %s not used for planning: %s", name, "; ".join(reasons))
            return
        if refused_before is None or refused_before:  # first usable round, or usable again: say so once
            snap = published.snapshot
            log.info("snapshot of %s in use for planning: %d brokers, %d partitions", name, len(snap.brokers),
                     sum(len(t.partitions) for t in snap.topics))
        ctx.snapshots.put(settle_moves(published.snapshot, collected.removing), observed_at=observed_at)
        ctx.metrics.federation.observe(published.snapshot, observed_at)
        if self._on_collected is not None:
            self._on_collected(name, collected)

    def close(self) -> None:
        """Close every collector and every cluster's clients."""
        with self._lock:
            for _, collector in self._collectors.values():
                collector.close()
            self._collectors.clear()
            self.bindings.close()
