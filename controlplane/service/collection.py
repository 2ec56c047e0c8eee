"""The leader's collection loop: one :class:`collectors.ClusterCollector` per registered cluster.

Each pass collects every cluster once, overlays the replicated policies (maintenance flags, pool
membership, IDC placement) on the collected snapshot, and keeps it in the snapshot cache when the
collector's completeness check allows acting on it; a refused or failed round is logged and
counted, never raised. Collectors of clusters that were removed are closed.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from collectors.builder import Collected
from collectors.collector import ClusterCollector
from collectors.completeness import UsabilityPolicy, refusal_reasons
from controlplane.service.context import ServiceContext
from domain.policies import apply_policies
from kafkaio.endpoints import BrokerInfo, ClusterEndpoints
from kafkaio.source import KafkaSourceOptions

log = logging.getLogger(__name__)


def endpoints_of(name: str, cluster: Mapping[str, Any]) -> ClusterEndpoints:
    """Collector endpoints from a registered cluster (``metrics_urls``: broker id -> URL; other keys are
    scraped and mapped to brokers by the payload's ``broker_id`` label)."""
    urls: Mapping[str, str] = cluster.get("metrics_urls") or {}
    brokers = tuple(BrokerInfo(id=int(k), metrics_url=u) for k, u in sorted(urls.items()) if k.isdigit())
    unmapped = tuple(u for k, u in sorted(urls.items()) if not k.isdigit())
    return ClusterEndpoints(cluster=name, bootstrap_servers=",".join(cluster["bootstrap_servers"]),
                            brokers=brokers, unmapped_metrics_urls=unmapped, control_url=cluster.get("control_url"))


def default_collector(endpoints: ClusterEndpoints, timeout_s: float = 5.0) -> ClusterCollector:
    """A collector whose admin requests and scrapes give up after ``timeout_s`` (an unreachable cluster
    must not hold up a pass for the admin client's 30 s default)."""
    ms = int(timeout_s * 1000)
    options = KafkaSourceOptions(request_timeout_ms=ms, bootstrap_timeout_ms=ms)
    return ClusterCollector(endpoints, source_options=options, scrape_timeout_s=timeout_s)


class CollectionJob:
    """Scheduler job ``collect``: keeps one collector per cluster across passes (rates need history);
    clusters are collected concurrently, so a slow one does not delay the others."""

    def __init__(self, policy: UsabilityPolicy | None = None,
                 make_collector: Callable[[ClusterEndpoints], ClusterCollector] = default_collector,
                 on_collected: Callable[[str, Collected], None] | None = None) -> None:
        self.policy = policy or UsabilityPolicy(max_age_s=math.inf)
        self._make = make_collector
        self._on_collected = on_collected
        self._collectors: dict[str, tuple[ClusterEndpoints, ClusterCollector]] = {}
        self._lock = threading.Lock()
        self.last_refusal: dict[str, list[str]] = {}

    def __call__(self, ctx: ServiceContext) -> None:
        clusters, maintenance = ctx.store.read(lambda s: (
            {n: dict(c) for n, c in s["clusters"].items()},
            {n: dict(m) for n, m in s["maintenance"].items()}))
        with self._lock:
            for gone in set(self._collectors) - set(clusters):
                self._collectors.pop(gone)[1].close()
            if not clusters:
                return
            with ThreadPoolExecutor(max_workers=min(8, len(clusters)), thread_name_prefix="collect") as pool:
                for name, cluster in sorted(clusters.items()):
                    pool.submit(self._collect, ctx, name, cluster, maintenance.get(name, {}))

    def _collect(self, ctx: ServiceContext, name: str, cluster: Mapping[str, Any],
                 maintenance: Mapping[str, Any]) -> None:
        if not ctx.store.is_leader:
            return  # lost leadership: stop acting
        endpoints = endpoints_of(name, cluster)
        try:
            held = self._collectors.get(name)
            if held is None or held[0] != endpoints:
                if held is not None:
                    held[1].close()
                held = (endpoints, self._make(endpoints))
                self._collectors[name] = held
            collected = held[1].collect_once()
        except Exception as exc:  # one cluster's failure never stops the others
            ctx.metrics.loop_errors.labels("collect").inc()
            log.warning("collection of %s failed: %s", name, exc)
            return
        reasons = refusal_reasons(collected.snapshot, self.policy, now=collected.snapshot.taken_at.timestamp(),
                                  coverage=collected.coverage)
        self.last_refusal[name] = reasons
        if reasons:
            log.info("snapshot of %s not used: %s", name, "; ".join(reasons))
            return
        ctx.snapshots.put(apply_policies(collected.snapshot, cluster, maintenance), observed_at=datetime.now(UTC))
        ctx.metrics.snapshot_age.labels(name).set(0.0)
        if self._on_collected is not None:
            self._on_collected(name, collected)

    def close(self) -> None:
        """Close every collector (admin clients, threads)."""
        with self._lock:
            for _, collector in self._collectors.values():
                collector.close()
            self._collectors.clear()
