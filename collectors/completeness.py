"""Completeness and freshness of a collected snapshot, and the refusal helper.

Every snapshot built by :class:`collectors.builder.LoadModel` carries a :class:`Coverage` (in
``ClusterSnapshot.extra["coverage"]`` and as the optional ``coverage`` member of the file).
Planners and executors call :func:`refusal_reasons` (or :func:`require_usable`) before acting: a
snapshot that is too old, misses brokers' metrics, lacks partition rates or is the first round
(no rates yet) is refused with the reasons spelled out.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from domain import ClusterSnapshot


@dataclass
class Coverage:
    """Which brokers, disks and partitions a snapshot covers, and how fresh it is."""

    cluster: str
    taken_at: float
    brokers_total: list[int] = field(default_factory=list)
    brokers_alive: list[int] = field(default_factory=list)
    brokers_dead: list[int] = field(default_factory=list)
    brokers_with_metrics: list[int] = field(default_factory=list)
    metrics_failed: dict[int, str] = field(default_factory=dict)
    metrics_failed_urls: dict[str, str] = field(default_factory=dict)
    """Endpoints no broker declares (not used), url -> why."""
    endpoints_failed: dict[str, str] = field(default_factory=dict)
    """Declared broker endpoints that gave no usable payload this round, url -> error."""
    exporters_failed: dict[str, str] = field(default_factory=dict)
    kafka_errors: dict[str, str] = field(default_factory=dict)
    offline_log_dirs: dict[int, list[str]] = field(default_factory=dict)
    """Alive broker -> its log dirs DescribeLogDirs reports failed (KAFKA_STORAGE_ERROR)."""
    offline_replicas: dict[str, list[int]] = field(default_factory=dict)
    """``topic-partition`` -> replicas Metadata lists offline on alive brokers (on a failed log dir)."""
    controller: int | None = None
    disks_total: int = 0
    disks_with_metrics: int = 0
    partitions_total: int = 0
    partitions_with_rates: int = 0
    partitions_held: int = 0
    partitions_without_rates: list[str] = field(default_factory=list)
    partitions_offline: list[str] = field(default_factory=list)
    unknown_log_dirs: int = 0
    reassignments_in_flight: int = 0
    bytes_in_methods: dict[str, int] = field(default_factory=dict)
    bytes_out_methods: dict[str, int] = field(default_factory=dict)
    drops: dict[str, dict[str, int]] = field(default_factory=dict)
    drop_examples: list[str] = field(default_factory=list)
    first_round: bool = False
    admin_details_age_s: float = 0.0
    parse_seconds: float = 0.0
    memory: dict[str, int] = field(default_factory=dict)
    facts: dict[str, dict[str, int]] = field(default_factory=dict)
    """Where the static facts came from, per fact and source, counted: ``idc`` (brokers: ``declared`` by
    the broker's own entry, ``rack`` through the cluster's rack→IDC rule, ``unknown``), ``disk_kind`` and
    ``max_bytes_per_s`` (disks: ``declared`` by a hardware rule, ``default`` of the profile, ``measured``,
    ``assumed`` = Guardian's built-in default when nothing was declared)."""
    brokers_without_idc: list[int] = field(default_factory=list)
    """Brokers whose IDC is unknown (no per-broker IDC, no rack the rule maps)."""
    consumer_offsets: dict[str, Any] = field(default_factory=dict)
    """Where consumer positions came from: ``{"source": "admin" | "exporter" | "none", "groups": n,
    "partitions": n, "age_s": s, "error": ...}``."""

    @property
    def broker_fraction(self) -> float:
        """Alive brokers whose metrics were scraped this round / alive brokers."""
        alive = len(self.brokers_alive)
        return 1.0 if alive == 0 else len(set(self.brokers_with_metrics) & set(self.brokers_alive)) / alive

    @property
    def partition_fraction(self) -> float:
        """Partitions with a fresh (this round) bytes-in rate / partitions."""
        return 1.0 if self.partitions_total == 0 else self.partitions_with_rates / self.partitions_total

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (with the two fractions)."""
        d = asdict(self)
        d["metrics_failed"] = {str(k): v for k, v in self.metrics_failed.items()}
        d["offline_log_dirs"] = {str(k): v for k, v in self.offline_log_dirs.items()}
        d["broker_fraction"] = round(self.broker_fraction, 4)
        d["partition_fraction"] = round(self.partition_fraction, 4)
        if len(d["partitions_without_rates"]) > 50:
            d["partitions_without_rates"] = [*d["partitions_without_rates"][:50], "..."]
        return d


@dataclass(frozen=True)
class UsabilityPolicy:
    """Thresholds for acting on a snapshot (configurable per caller)."""

    max_age_s: float = 60.0
    min_broker_fraction: float = 0.95
    min_partition_fraction: float = 0.95
    allow_first_round: bool = False
    allow_kafka_errors: bool = True
    max_unknown_log_dirs: int = 0
    """Replicas whose log dir no DescribeLogDirs answer names yet (a move just submitted) sit on a
    placeholder disk of unknown speed; the disk loads of such a snapshot are not trustworthy."""


class SnapshotRefused(Exception):
    """A snapshot is too stale or incomplete to act on; ``reasons`` says why."""

    def __init__(self, cluster: str, reasons: list[str]) -> None:
        super().__init__(f"snapshot of {cluster} refused: " + "; ".join(reasons))
        self.cluster = cluster
        self.reasons = reasons


def coverage_of(snapshot: ClusterSnapshot) -> Coverage | None:
    """The :class:`Coverage` a collector attached to ``snapshot`` (None for parsed files)."""
    cov = snapshot.extra.get("coverage") if isinstance(snapshot.extra, Mapping) else None
    return cov if isinstance(cov, Coverage) else None


def coverage_from_document(doc: Mapping[str, Any]) -> Coverage | None:
    """Rebuild a :class:`Coverage` from a snapshot file's optional ``coverage`` member."""
    raw = doc.get("coverage")
    if not isinstance(raw, Mapping):
        return None
    known = set(Coverage.__dataclass_fields__)
    kw = {k: v for k, v in raw.items() if k in known}
    try:
        if "metrics_failed" in kw and isinstance(kw["metrics_failed"], Mapping):
            kw["metrics_failed"] = {int(k): str(v) for k, v in kw["metrics_failed"].items()}
        if "offline_log_dirs" in kw and isinstance(kw["offline_log_dirs"], Mapping):
            kw["offline_log_dirs"] = {int(k): list(v) for k, v in kw["offline_log_dirs"].items()}
        return Coverage(**kw)
    except (TypeError, ValueError):
        return None


def refusal_reasons(snapshot: ClusterSnapshot, policy: UsabilityPolicy | None = None, now: float | None = None,
                    coverage: Coverage | None = None) -> list[str]:
    """Why ``snapshot`` must not be acted on (empty list: usable). Pure; O(1) plus the coverage lists.

    A snapshot without coverage information can only be checked for age; that is itself a reason
    unless the caller passes ``coverage`` (e.g. from :func:`coverage_from_document`).
    """
    pol = policy or UsabilityPolicy()
    now = time.time() if now is None else now
    reasons: list[str] = []
    taken = snapshot.taken_at.timestamp() if isinstance(snapshot.taken_at, datetime) else float(snapshot.taken_at)
    age = now - taken
    if age > pol.max_age_s:
        reasons.append(f"stale: taken {age:.0f} s ago (limit {pol.max_age_s:.0f} s)")
    cov = coverage or coverage_of(snapshot)
    if cov is None:
        reasons.append("no coverage information: completeness unknown")
        return reasons
    if cov.first_round and not pol.allow_first_round:
        reasons.append("first collection round: no rates yet")
    if cov.broker_fraction < pol.min_broker_fraction:
        missing = sorted(set(cov.brokers_alive) - set(cov.brokers_with_metrics))
        reasons.append(f"metrics of {len(missing)} alive broker(s) missing {missing[:10]} "
                       f"({cov.broker_fraction:.0%} < {pol.min_broker_fraction:.0%})")
    if cov.partition_fraction < pol.min_partition_fraction:
        reasons.append(f"fresh rates for {cov.partitions_with_rates}/{cov.partitions_total} partitions "
                       f"({cov.partition_fraction:.0%} < {pol.min_partition_fraction:.0%})")
    if cov.unknown_log_dirs > pol.max_unknown_log_dirs:
        reasons.append(f"{cov.unknown_log_dirs} replica(s) on a log dir no broker reported yet "
                       f"(limit {pol.max_unknown_log_dirs}): metadata is ahead of DescribeLogDirs")
    if not cov.brokers_alive:
        reasons.append("no alive broker in the metadata")
    if not pol.allow_kafka_errors and cov.kafka_errors:
        reasons.append(f"admin errors: {sorted(cov.kafka_errors)[:5]}")
    return reasons


def require_usable(snapshot: ClusterSnapshot, policy: UsabilityPolicy | None = None, now: float | None = None,
                   coverage: Coverage | None = None) -> None:
    """Raise :class:`SnapshotRefused` unless :func:`refusal_reasons` is empty."""
    reasons = refusal_reasons(snapshot, policy, now, coverage)
    if reasons:
        raise SnapshotRefused(snapshot.cluster, reasons)
