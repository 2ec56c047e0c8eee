"""Everything a request handler or a scheduled job needs, wired once by :mod:`controlplane.bootstrap`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controlplane.config import Settings
from controlplane.service.cluster_status import ClusterStatus
from controlplane.service.metrics import ServiceMetrics
from controlplane.service.snapshots import SnapshotCache
from controlplane.state.store import StateStore

if TYPE_CHECKING:
    from controlplane.service.scheduler import LeaderScheduler
    from controlplane.service.throttle_loop import ThrottleService
    from planners.load_basis import ModelledLoad


@dataclass
class ServiceContext:
    """The service's shared parts. ``http_of`` maps a Raft address to that node's HTTP base URL."""

    settings: Settings
    store: StateStore
    snapshots: SnapshotCache = field(default_factory=SnapshotCache)
    metrics: ServiceMetrics = field(default_factory=ServiceMetrics)
    http_of: dict[str, str] = field(default_factory=dict)
    cluster_status: ClusterStatus = field(default_factory=ClusterStatus)
    """Per cluster and loop: last success, last error by kind, error counts (API, UI, /metrics)."""
    clickhouse: Any = None
    """:class:`analytics_spark.clickhouse.ClickHouse` when configured (rollups, analytics)."""
    executor: Any = None
    """:class:`controlplane.executor.service.ExecutorService` (None: plans cannot be executed here)."""
    throttle: ThrottleService | None = None
    load_model: Callable[[str], ModelledLoad | None] | None = None
    """Port: cluster -> the traffic model's per-partition peak write rates (``load_basis="modelled_peak"``
    plans); wired to ClickHouse by :mod:`controlplane.bootstrap`."""
    analytics: Any = None
    """:class:`controlplane.service.analytics_job.AnalyticsJob` when scheduled analytics is configured."""
    tiered: Any = None
    """:class:`tiered.node.TieredNode` when ``[tiered]`` is enabled (REST reads, /metrics)."""
    loops: LeaderScheduler | None = None
    """The leader-only loops (set by the scheduler itself): their last runs, for /readyz."""
    imbalance_seen: dict[str, datetime] = field(default_factory=dict)
    """Per cluster, when the snapshot that first showed imbalance above its auto-rebalance threshold was
    observed; auto-rebalance acts when a later one confirms it. Per node: a new leader waits one snapshot more."""

    @property
    def access_log(self) -> Path:
        """JSON-lines record of every mutating HTTP call on this node (who, what, when, result)."""
        return self.settings.data_dir / "access.jsonl"
