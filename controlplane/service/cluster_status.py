"""Per-cluster status of the leader's loops: the last outcome of each loop's work on each cluster, the last
error named, and error counts by kind.

Goal: an unreachable, slow or misconfigured cluster is a per-cluster status and an alert — named in the
API (``GET /api/v1/clusters/{name}``: ``status``, ``last_error``), ``guardian clusters show``, the UI's
overview and ``/metrics`` (``guardian_cluster_errors_total{cluster,kind}``, every registered cluster with
every kind, zeros included) — never a loop-wide failure.

Method: :class:`ClusterStatus` is a thread-safe table ``(cluster, loop) -> LoopStatus`` written by
:class:`~controlplane.service.fanout.ClusterFanout` (each cluster's task: ok, error, overdue) and by the
jobs that learn of an error without an exception (the collection job's refused metrics endpoints).
:func:`error_kind` names an exception's kind from the fixed vocabulary :data:`ERROR_KINDS`: ``auth``
(Kafka refused the login or TLS trust), ``metrics_auth`` (an exporter answered 401/403), ``unreachable``
(connection refused, no broker answered), ``timeout`` (a call or a cluster's deadline ran out),
``metrics`` (an exporter failed otherwise), ``error`` (anything else). It also keeps, per cluster, since
when this node has been expected to observe it (:meth:`ClusterStatus.awaited_since`), so a cluster that
never produced a snapshot still has an ageing ``guardian_snapshot_age_seconds``.

Guarantee: messages are stored as the exception renders them (this project's errors never name a
secret) and cut to :data:`MESSAGE_CHARS`; a removed cluster's rows go with :meth:`ClusterStatus.retain`.
Cost: O(1) per record; a report is O(loops) per cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkaio.failures import failure_kind

ERROR_KINDS = ("auth", "metrics_auth", "unreachable", "timeout", "metrics", "error")
"""Every kind a cluster's error is counted by (``guardian_cluster_errors_total{kind}``)."""
MESSAGE_CHARS = 500


class ClusterDeadline(TimeoutError):
    """A cluster's task ran past its loop's per-cluster deadline (it keeps running; the loop moved on)."""


def error_kind(exc: BaseException) -> str:
    """The kind of ``exc`` (one of :data:`ERROR_KINDS`; :func:`kafkaio.failures.failure_kind` names it)."""
    return failure_kind(exc)


def metrics_error(failed: Mapping[str, str]) -> tuple[str, str] | None:
    """The kind and message of a round's failed metrics endpoints (url -> why), None when none failed:
    ``metrics_auth`` when an exporter refused Guardian's credentials (HTTP 401/403), else ``metrics``."""
    if not failed:
        return None
    refused = sorted(url for url, why in failed.items() if "HTTP 401" in why or "HTTP 403" in why)
    if refused:
        why = failed[refused[0]]
        return "metrics_auth", (f"{len(refused)} metrics endpoint(s) refused Guardian's credentials, e.g. "
                                f"{refused[0]}: {why}")
    first = sorted(failed)[0]
    return "metrics", f"{len(failed)} metrics endpoint(s) failed, e.g. {first}: {failed[first]}"


@dataclass(slots=True)
class LoopStatus:
    """One loop's work on one cluster: when it last succeeded, its last error, how many failed in a row."""

    last_ok_unix: float | None = None
    last_error: dict[str, Any] | None = None
    consecutive_errors: int = 0
    running_since_unix: float | None = None
    overdue: bool = False
    """The current task ran past its deadline (the loop no longer waits for this cluster)."""

    def report(self, now: float) -> dict[str, Any]:
        return {"last_ok_unix": self.last_ok_unix, "last_error": self.last_error,
                "consecutive_errors": self.consecutive_errors, "overdue": self.overdue,
                "running_for_s": None if self.running_since_unix is None
                else round(now - self.running_since_unix, 1)}


@dataclass
class ClusterStatus:
    """Thread-safe ``(cluster, loop) -> LoopStatus`` plus error counts by kind (see the module docstring)."""

    clock: Any = time.time
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loops: dict[str, dict[str, LoopStatus]] = field(default_factory=dict)
    _errors: dict[str, dict[str, int]] = field(default_factory=dict)
    _awaited: dict[str, float] = field(default_factory=dict)

    def _row(self, cluster: str, loop: str) -> LoopStatus:
        return self._loops.setdefault(cluster, {}).setdefault(loop, LoopStatus())

    def started(self, cluster: str, loop: str) -> None:
        """``loop`` began work on ``cluster``."""
        with self._lock:
            row = self._row(cluster, loop)
            row.running_since_unix = self.clock()
            row.overdue = False

    def ok(self, cluster: str, loop: str) -> None:
        """``loop``'s work on ``cluster`` succeeded (its error streak ends; the last error stays on record)."""
        with self._lock:
            row = self._row(cluster, loop)
            row.last_ok_unix = self.clock()
            row.consecutive_errors = 0
            row.running_since_unix = None
            row.overdue = False

    def error(self, cluster: str, loop: str, kind: str, message: str, *, done: bool = True) -> None:
        """``loop``'s work on ``cluster`` failed with an error of ``kind`` (counted); ``done=False``: the task
        still runs (a deadline passed) and its own end is recorded later."""
        if kind not in ERROR_KINDS:
            kind = "error"
        with self._lock:
            row = self._row(cluster, loop)
            row.last_error = {"loop": loop, "kind": kind, "message": message[:MESSAGE_CHARS], "at_unix": self.clock()}
            row.consecutive_errors += 1
            if done:
                row.running_since_unix = None
                row.overdue = False
            else:
                row.overdue = True
            counts = self._errors.setdefault(cluster, dict.fromkeys(ERROR_KINDS, 0))
            counts[kind] += 1

    def awaited_since(self, clusters: Iterable[str], now: float | None = None) -> dict[str, float]:
        """Per cluster of ``clusters``: since when this node has been expected to observe it (the first call
        that named it; a cluster no longer named is forgotten)."""
        at = self.clock() if now is None else now
        with self._lock:
            names = set(clusters)
            for gone in set(self._awaited) - names:
                del self._awaited[gone]
            for name in names:
                self._awaited.setdefault(name, at)
            return dict(self._awaited)

    def expected(self) -> dict[str, float]:
        """The clusters :meth:`awaited_since` last named, with since when (empty on a node that does not lead)."""
        with self._lock:
            return dict(self._awaited)

    def stop_awaiting(self) -> None:
        """This node no longer observes any cluster (it lost leadership)."""
        with self._lock:
            self._awaited.clear()

    def retain(self, clusters: Iterable[str]) -> None:
        """Forget every cluster not in ``clusters`` (removed)."""
        keep = set(clusters)
        with self._lock:
            for table in (self._loops, self._errors):
                for gone in set(table) - keep:
                    del table[gone]

    def error_counts(self, clusters: Iterable[str]) -> dict[str, dict[str, int]]:
        """Errors per kind of each of ``clusters`` (every kind, zeros included)."""
        with self._lock:
            return {c: dict(self._errors.get(c) or dict.fromkeys(ERROR_KINDS, 0)) for c in clusters}

    def last_error(self, cluster: str) -> dict[str, Any] | None:
        """The most recent error of any loop on ``cluster`` whose loop has not succeeded since (None: none)."""
        with self._lock:
            rows = self._loops.get(cluster) or {}
            current = [r.last_error for r in rows.values() if r.last_error is not None
                       and (r.consecutive_errors > 0 or r.overdue)]
        return max(current, key=lambda e: e["at_unix"], default=None)

    def report(self, cluster: str) -> dict[str, Any]:
        """Per loop: last success, last error, errors in a row, whether its task is overdue; and the current
        last error (``last_error``) and error counts by kind (``errors``)."""
        now = self.clock()
        with self._lock:
            loops = {name: row.report(now) for name, row in sorted((self._loops.get(cluster) or {}).items())}
            errors = dict(self._errors.get(cluster) or dict.fromkeys(ERROR_KINDS, 0))
        return {"loops": loops, "last_error": self.last_error(cluster), "errors": errors}
