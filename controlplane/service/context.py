"""Everything a request handler or a scheduled job needs, wired once by :mod:`controlplane.bootstrap`.

The optional parts are typed by what their users ask of them: small :class:`~typing.Protocol` s for the
executor service (:class:`PlanExecutor`), the scheduled analytics job (:class:`ScheduledAnalytics`) and the
tiered metadata node (:class:`TieredReads`), and the ClickHouse client class itself (its readers in
:mod:`analytics_spark.clickhouse.store` take that class).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from controlplane.config import Settings
from controlplane.service.cluster_status import ClusterStatus
from controlplane.service.metrics import ServiceMetrics
from controlplane.service.snapshots import SnapshotCache
from controlplane.state.store import StateStore

if TYPE_CHECKING:
    from analytics_spark.clickhouse import ClickHouse
    from controlplane.service.protection import ProtectionService
    from controlplane.service.scheduler import LeaderScheduler
    from kafkaio.port import KafkaCluster
    from planners.load_basis import ModelledLoad
    from tiered.store import TieredStore


class ClusterConnection(Protocol):
    """One cluster's executor as the service uses it: its Kafka connection (topic creation)."""

    @property
    def admin(self) -> KafkaCluster: ...


class PlanExecutor(Protocol):
    """The executor service (:class:`controlplane.executor.service.ExecutorService`) as request handlers and
    jobs use it: start an approved plan, reach a cluster's connection, run one pass of every cluster."""

    def start_approved(self, plan_id: int, caps: Mapping[str, int] | None = None, why: str = "",
                       by: str | None = None, options: Mapping[str, Any] | None = None) -> int: ...

    def executor(self, cluster: str) -> ClusterConnection: ...

    def run_once(self) -> object: ...


class ScheduledAnalytics(Protocol):
    """The scheduled analytics job (:class:`controlplane.service.analytics_job.AnalyticsJob`): a leader loop's
    job, its last pass for the API, closed at shutdown."""

    last: dict[str, Any] | None

    def __call__(self, ctx: ServiceContext) -> object: ...

    def close(self) -> None: ...


class TieredReads(Protocol):
    """The tiered metadata node (:class:`tiered.node.TieredNode`) as the REST reads and shutdown use it."""

    @property
    def store(self) -> TieredStore: ...

    def status(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


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
    clickhouse: ClickHouse | None = None
    """This node's ClickHouse when configured (rollups, analytics)."""
    executor: PlanExecutor | None = None
    """The executor service (None: plans cannot be executed here)."""
    throttle: ProtectionService | None = None
    load_model: Callable[[str], ModelledLoad | None] | None = None
    """Port: cluster -> the traffic model's per-partition peak write rates (``load_basis="modelled_peak"``
    plans); wired to ClickHouse by :mod:`controlplane.bootstrap`."""
    analytics: ScheduledAnalytics | None = None
    """The scheduled analytics job when ``[analytics]`` is configured."""
    tiered: TieredReads | None = None
    """The tiered metadata node when ``[tiered]`` is enabled (REST reads, /metrics)."""
    loops: LeaderScheduler | None = None
    """The leader-only loops (set by the scheduler itself): their last runs, for /readyz."""
    imbalance_seen: dict[str, datetime] = field(default_factory=dict)
    """Per cluster, when the snapshot that first showed imbalance above its auto-rebalance threshold was
    observed; auto-rebalance acts when a later one confirms it. Per node: a new leader waits one snapshot more."""

    @property
    def access_log(self) -> Path:
        """JSON-lines record of every mutating HTTP call on this node (who, what, when, result)."""
        return self.settings.data_dir / "access.jsonl"
