"""The federation's figures for ``/metrics`` and the dashboard: cached per cluster, rendered per scrape.

Goal: a ``/metrics`` worth a Grafana board (per cluster and pool estimated peak/mean and max util, per
disk estimated and measured util and await, brokers by state, partitions with rates, a snapshot age that
really ages, executions' bytes/ETA/tasks by state, throttles in force by kind and rate) that stays cheap
at 100 clusters, and one set of per-cluster figures the dashboard's overview reads too.

Method: per cluster, :func:`cluster_figures` computes the figures of a snapshot once — when the
collection job publishes it (:meth:`FederationFigures.observe`) or, for an imported snapshot, on the first
scrape that finds the cache holding a snapshot object it has not seen — and keeps them twice: a small
summary dict (the dashboard's overview) and the exposition lines already formatted, grouped by metric
family. The replicated state's figures (executions, throttles) are recomputed only when the state's
``log_seq`` (one per applied command) moved, from the active executions' progress records and the
throttle records — no copy of the state. A scrape joins the cached lines family by family and adds
the lines that depend on the clock (snapshot age, computed now from when the snapshot was observed —
the same age the API refuses stale snapshots by).

Guarantee: the figures of a cluster are those of the snapshot the API serves; a removed cluster's series
disappear at the next scrape; label values are escaped per the text exposition format. Cost: a new
snapshot costs O(disks + partitions) once, off the scrape path; a scrape costs O(series) string joins
(100 clusters x 12 brokers x 4 disks: ~15,000 series, see ``tests/unit/test_metrics_figures.py`` for
the measured time) plus one state read of O(active executions + throttles) when the state changed.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from domain import ClusterSnapshot, balance_disks, pool_stats, util_stats
from domain.execution import ACTIVE_STATUSES

FAMILIES: dict[str, tuple[str, str]] = {
    "guardian_snapshot_age_seconds": ("gauge", "Seconds since this node observed the cluster's latest snapshot"),
    "guardian_cluster_errors_total": ("counter", "Errors of the leader's loops on the cluster by kind (auth, "
                                      "metrics_auth, unreachable, timeout, metrics, error)"),
    "guardian_snapshot_taken_timestamp_seconds": ("gauge", "When the latest snapshot was taken (Unix time)"),
    "guardian_brokers": ("gauge", "Brokers of the latest snapshot by state"),
    "guardian_dead_brokers": ("gauge", "Brokers the latest snapshot shows dead"),
    "guardian_partitions": ("gauge", "Partitions of the latest snapshot"),
    "guardian_partitions_with_rates": ("gauge", "Partitions with measured byte rates in the latest snapshot"),
    "guardian_disks_with_metrics": ("gauge", "Disks with measured metrics in the latest snapshot"),
    "guardian_disks": ("gauge", "Disks (log dirs) of the latest snapshot"),
    "guardian_cluster_bytes_in_per_second": ("gauge", "Producers' bytes/s into the cluster"),
    "guardian_cluster_bytes_out_per_second": ("gauge", "Consumers' bytes/s out of the cluster"),
    "guardian_cluster_max_util": ("gauge", "Highest estimated disk util over the alive brokers' disks"),
    "guardian_cluster_mean_util": ("gauge", "Mean estimated disk util (plain average over alive disks)"),
    "guardian_cluster_peak_to_mean": ("gauge", "Estimated max util / mean util (1 is perfect balance)"),
    "guardian_pool_max_util": ("gauge", "Highest estimated disk util in the pool"),
    "guardian_pool_mean_util": ("gauge", "Mean estimated disk util in the pool (plain average over its alive disks)"),
    "guardian_pool_peak_to_mean": ("gauge", "Estimated max util / mean util in the pool"),
    "guardian_pool_max_measured_util": ("gauge", "Highest measured disk util in the pool"),
    "guardian_disk_estimated_util": ("gauge", "Estimated disk util (modelled load / max throughput)"),
    "guardian_disk_util": ("gauge", "Measured disk util (busy fraction)"),
    "guardian_disk_await_seconds": ("gauge", "Measured disk await"),
    "guardian_execution_running": ("gauge", "1 for each running or stopping execution"),
    "guardian_execution_bytes_done": ("gauge", "Bytes an active execution has copied"),
    "guardian_execution_bytes_total": ("gauge", "Bytes an active execution has to copy"),
    "guardian_execution_rate_bytes_per_second": ("gauge", "Copy rate of an active execution"),
    "guardian_execution_eta_seconds": ("gauge", "Estimated seconds left of an active execution"),
    "guardian_execution_tasks": ("gauge", "Tasks of an active execution by state"),
    "guardian_throttles": ("gauge", "Throttles in force by kind"),
    "guardian_throttle_rate_bytes_per_second": ("gauge", "Rate of each throttle in force"),
}
"""Every family this module renders: name -> (type, help)."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def sample(name: str, labels: Mapping[str, object], value: float) -> str:
    """One exposition line ``name{k="v",...} value``."""
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {_number(value)}"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass(frozen=True)
class ClusterFigures:
    """The figures of one cluster's snapshot: a summary for the dashboard and pre-formatted samples."""

    snapshot: ClusterSnapshot
    observed_at: float
    """Unix time this node observed the snapshot (the age the API judges by)."""
    summary: dict[str, Any]
    lines: dict[str, list[str]] = field(repr=False)


def cluster_figures(snapshot: ClusterSnapshot, observed_at: datetime) -> ClusterFigures:
    """The figures of ``snapshot`` (see the module docstring). O(disks + partitions)."""
    name = snapshot.cluster
    index = snapshot.index
    lines: dict[str, list[str]] = {}

    def add(family: str, labels: Mapping[str, object], value: float) -> None:
        lines.setdefault(family, []).append(sample(family, {"cluster": name, **labels}, value))

    states: dict[str, int] = {}
    for b in snapshot.brokers:
        states[b.state.value] = states.get(b.state.value, 0) + 1
    for state, count in sorted(states.items()):
        add("guardian_brokers", {"state": state}, count)
    dead = states.get("dead", 0)
    add("guardian_dead_brokers", {}, dead)
    partitions = index.partitions
    with_rates = sum(1 for p in partitions if p.bytes_in_per_s > 0 or p.bytes_out_per_s > 0)
    coverage = snapshot.extra.get("coverage")
    covered = getattr(coverage, "partitions_with_rates", None)
    if isinstance(covered, int) and getattr(coverage, "partitions_total", None):
        with_rates = covered
    add("guardian_partitions", {}, len(partitions))
    add("guardian_partitions_with_rates", {}, with_rates)
    bytes_in = sum(p.bytes_in_per_s for p in partitions)
    bytes_out = sum(p.bytes_out_per_s for p in partitions)
    add("guardian_cluster_bytes_in_per_second", {}, bytes_in)
    add("guardian_cluster_bytes_out_per_second", {}, bytes_out)
    overall = util_stats(snapshot, balance_disks(snapshot))
    add("guardian_cluster_max_util", {}, overall.max_util)
    add("guardian_cluster_mean_util", {}, overall.mean_util)
    add("guardian_cluster_peak_to_mean", {}, overall.peak_to_mean)
    measured_max: dict[str, float] = {}
    disks = measured = 0
    for b in snapshot.brokers:
        for d in b.disks:
            disks += 1
            labels = {"broker": b.id, "disk": d.path, "kind": d.kind.value, "pool": b.pool}
            add("guardian_disk_estimated_util", labels, index.disk_util_estimate((b.id, d.path)))
            if d.util > 0 or d.await_ms > 0:
                measured += 1
                add("guardian_disk_util", labels, d.util)
                add("guardian_disk_await_seconds", labels, d.await_ms / 1000.0)
            if b.is_alive:
                measured_max[b.pool] = max(measured_max.get(b.pool, 0.0), d.util)
    covered = getattr(coverage, "disks_with_metrics", None)
    if isinstance(covered, int) and getattr(coverage, "disks_total", None):
        measured = covered
    add("guardian_disks", {}, disks)
    add("guardian_disks_with_metrics", {}, measured)
    pools: dict[str, dict[str, float]] = {}
    for pool, stats in pool_stats(snapshot).items():
        pools[pool] = {"max_util": stats.max_util, "mean_util": stats.mean_util,
                       "peak_to_mean": stats.peak_to_mean, "max_measured_util": measured_max.get(pool, 0.0),
                       "disks": stats.disks}
        add("guardian_pool_max_util", {"pool": pool}, stats.max_util)
        add("guardian_pool_mean_util", {"pool": pool}, stats.mean_util)
        add("guardian_pool_peak_to_mean", {"pool": pool}, stats.peak_to_mean)
        add("guardian_pool_max_measured_util", {"pool": pool}, measured_max.get(pool, 0.0))
    summary = {
        "cluster": name, "taken_at": snapshot.taken_at.isoformat(), "observed_at": observed_at.isoformat(),
        "brokers": len(snapshot.brokers), "brokers_by_state": states, "dead_brokers": dead,
        "partitions": len(partitions), "partitions_with_rates": with_rates, "disks": disks,
        "disks_with_metrics": measured, "bytes_in_per_s": bytes_in, "bytes_out_per_s": bytes_out,
        "max_util": overall.max_util, "mean_util": overall.mean_util, "peak_to_mean": overall.peak_to_mean,
        "pools": pools,
    }
    return ClusterFigures(snapshot, observed_at.timestamp(), summary, lines)


def state_lines(state: Mapping[str, Any]) -> dict[str, list[str]]:
    """Execution and throttle samples of the replicated state. O(active executions + throttles)."""
    lines: dict[str, list[str]] = {}

    def add(family: str, labels: Mapping[str, object], value: float) -> None:
        lines.setdefault(family, []).append(sample(family, labels, value))

    active = {s.value for s in ACTIVE_STATUSES}
    for key, e in state["executions"].items():
        if e["status"] not in active:
            continue
        labels = {"cluster": e["cluster"], "execution": key}
        prog = e.get("progress") or {}
        add("guardian_execution_running", labels, 1)
        add("guardian_execution_bytes_done", labels, float(prog.get("bytes_done") or 0))
        add("guardian_execution_bytes_total", labels, float(prog.get("bytes_total") or 0))
        add("guardian_execution_rate_bytes_per_second", labels, float(prog.get("rate_bytes_per_s") or 0))
        if prog.get("eta_s") is not None:
            add("guardian_execution_eta_seconds", labels, float(prog["eta_s"]))
        counts: dict[str, int] = {}
        for t in e["tasks"].values():
            counts[t["state"]] = counts.get(t["state"], 0) + 1
        for task_state, n in sorted(counts.items()):
            add("guardian_execution_tasks", {**labels, "state": task_state}, n)
    for cluster, items in sorted(state["throttles"].items()):
        kinds: dict[str, int] = {}
        for key, t in sorted(items.items()):
            kinds[t["kind"]] = kinds.get(t["kind"], 0) + 1
            add("guardian_throttle_rate_bytes_per_second", {"cluster": cluster, "kind": t["kind"], "key": key},
                float(t.get("rate_bytes_per_s") or 0))
        for kind, n in sorted(kinds.items()):
            add("guardian_throttles", {"cluster": cluster, "kind": kind}, n)
    return lines


Snapshots = Callable[[], Iterable[tuple[ClusterSnapshot, datetime]]]
"""The snapshot cache's entries: each cluster's latest snapshot and when this node observed it."""
StateRead = Callable[[Callable[[Mapping[str, Any]], Any]], Any]
"""The state store's ``read``."""


class FederationFigures:
    """Thread-safe per-cluster figures plus the state's, rendered as exposition text (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clusters: dict[str, ClusterFigures] = {}
        self._state_seq: int | None = None
        self._state_lines: dict[str, list[str]] = {}

    def observe(self, snapshot: ClusterSnapshot, observed_at: datetime) -> ClusterFigures:
        """Compute and keep the figures of ``snapshot`` (the collection job calls this as it publishes)."""
        figures = cluster_figures(snapshot, observed_at)
        with self._lock:
            self._clusters[snapshot.cluster] = figures
        return figures

    def clusters(self, snapshots: Snapshots) -> dict[str, ClusterFigures]:
        """The figures of every cluster the cache holds, computing those of snapshots not seen yet."""
        out: dict[str, ClusterFigures] = {}
        for snapshot, observed_at in snapshots():
            with self._lock:
                held = self._clusters.get(snapshot.cluster)
            if held is None or held.snapshot is not snapshot:
                held = self.observe(snapshot, observed_at)
            out[snapshot.cluster] = held
        with self._lock:
            for gone in set(self._clusters) - set(out):
                del self._clusters[gone]
        return out

    def state(self, read: StateRead) -> dict[str, list[str]]:
        """The state's samples, recomputed only when its ``log_seq`` moved."""
        seq = read(lambda s: s["log_seq"])
        with self._lock:
            if seq == self._state_seq:
                return self._state_lines
        lines: dict[str, list[str]] = read(state_lines)
        with self._lock:
            self._state_seq, self._state_lines = seq, lines
        return lines

    def exposition(self, snapshots: Snapshots, read: StateRead, now: float | None = None,
                   awaited: Mapping[str, float] | None = None,
                   errors: Callable[[list[str]], Mapping[str, Mapping[str, int]]] | None = None) -> str:
        """The text exposition of every family of :data:`FAMILIES` (families without samples omitted).

        ``awaited``: cluster -> since when (Unix time) this node has been expected to observe it (the leader's
        collection job); a registered cluster among them with no snapshot yet is exported with that age, so
        the stale-snapshot alert fires for a cluster that never produced data. ``errors``: registered
        clusters -> errors by kind, exported for every registered cluster (zeros included)."""
        at = time.time() if now is None else now
        clusters = self.clusters(snapshots)
        registered: list[str] = sorted(read(lambda s: list(s["clusters"]))) if (awaited or errors) else []
        clock: dict[str, list[str]] = {"guardian_snapshot_age_seconds": [],
                                       "guardian_snapshot_taken_timestamp_seconds": [],
                                       "guardian_cluster_errors_total": []}
        ages = {name: at - figures.observed_at for name, figures in clusters.items()}
        for name in registered:
            if name not in ages and awaited is not None and name in awaited:
                ages[name] = at - awaited[name]
        for name, age in sorted(ages.items()):
            clock["guardian_snapshot_age_seconds"].append(
                sample("guardian_snapshot_age_seconds", {"cluster": name}, max(0.0, age)))
        if errors is not None:
            for name, kinds in sorted(errors(registered).items()):
                clock["guardian_cluster_errors_total"] += [
                    sample("guardian_cluster_errors_total", {"cluster": name, "kind": kind}, n)
                    for kind, n in kinds.items()]
        for name, figures in sorted(clusters.items()):
            clock["guardian_snapshot_taken_timestamp_seconds"].append(
                sample("guardian_snapshot_taken_timestamp_seconds", {"cluster": name},
                       figures.snapshot.taken_at.timestamp()))
        sources = [clock, *(clusters[n].lines for n in sorted(clusters)), self.state(read)]
        out: list[str] = []
        for family, (kind, help_text) in FAMILIES.items():
            samples = [line for src in sources for line in src.get(family, ())]
            if samples:
                out.append(f"# HELP {family} {help_text}\n# TYPE {family} {kind}\n")
                out.append("\n".join(samples))
                out.append("\n")
        return "".join(out)
