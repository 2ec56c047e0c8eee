"""Per-cluster isolation for a leader's loop: every cluster's work on its own, bounded in time and concurrency.

Goal: one cluster that is unreachable, slow or hangs (packets dropped) never delays another cluster's
work, never makes a loop look dead (the scheduler judges a loop by its passes ending, and hands leadership
over when they stop), and is reported as that cluster's status and error, not as the loop's.

Method: :meth:`ClusterFanout.run` gives each cluster's work its own thread; at most ``workers`` of them
run at once for the clusters in good standing, and at most ``suspect_workers`` for *suspect* clusters
(whose last task failed, or took longer than ``patience_s``, a quarter of the deadline by default: an
exporter that answers in 8 s), so suspects never take a healthy cluster's slot. A pass
waits for each healthy cluster's task until it ends or has run ``deadline_s`` (then it is *overdue*:
recorded as a ``timeout`` error, its slot freed, the cluster becomes suspect) and does not wait for suspects
at all: a cluster whose calls fail slowly (a closed port: kafka-python retries until its bootstrap timeout)
delays at most the one pass that found it failing.
An overdue task is not killed (Python threads cannot be): it ends when its own I/O timeout fires, and a
cluster never has two tasks of one loop in flight — a pass skips a cluster whose previous task still runs.
A suspect cluster whose task succeeds within ``patience_s`` is in good standing again. Every outcome goes to
:class:`~controlplane.service.cluster_status.ClusterStatus` (ok; error with its kind; overdue).

Guarantee: a pass returns within ``ceil(healthy / workers) x deadline_s`` plus the time to start threads,
whatever the suspect clusters do (usually within the slowest healthy cluster's time); a task's exception
never escapes (counted by kind; logged through :data:`controlplane.logs.CLIENT_ERRORS`: one line per
cluster and kind per minute, with a count; WARNING, but ERROR for ``auth``: :func:`level_of`).
Cost: one short-lived thread per cluster per pass (20 clusters x 5 loops at their intervals: a few thread
starts per second).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.config import IntervalsConf
from controlplane.logs import CLIENT_ERRORS, cluster_scope
from controlplane.service.cluster_status import ClusterStatus, error_kind

log = logging.getLogger(__name__)


def level_of(kind: str) -> int:
    """The log level of a cluster's failure of ``kind``: ERROR for ``auth`` (a refused login or certificate: the
    loop retries it every pass, but only an operator's change of credentials or trust ends it), WARNING for the
    rest (unreachable, timeout, error), which the loop retries and which heal by themselves."""
    return logging.ERROR if kind == "auth" else logging.WARNING


@dataclass(eq=False)
class _Task:
    cluster: str
    call: Callable[[], Any]
    suspect: bool
    started: float | None = None
    finished: float | None = None
    overdue: bool = False
    result: Any = None
    error: BaseException | None = None
    slot_held: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class ClusterFanout:
    """Runs one loop's per-cluster work (see the module docstring)."""

    def __init__(self, loop: str, status: ClusterStatus, *, deadline_s: float, workers: int = 8,
                 suspect_workers: int = 4, patience_s: float | None = None,
                 on_error: Callable[[str, str, BaseException], None] | None = None,
                 count_error: Callable[[], object] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.loop = loop
        self.status = status
        self.deadline_s = deadline_s
        self.patience_s = deadline_s / 4 if patience_s is None else patience_s
        """A task that took longer than this (but succeeded) leaves its cluster suspect: not waited for."""
        self.on_error = on_error
        """Called (cluster, kind, exception) when a task raises, instead of the summarised log line."""
        self.count_error = count_error
        """Called once per task that raised (e.g. the loop's ``guardian_loop_errors_total`` child's ``inc``)."""
        self._slots = threading.Semaphore(max(1, workers))
        self._suspect_slots = threading.Semaphore(max(1, suspect_workers))
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._inflight: dict[str, _Task] = {}
        self._suspect: set[str] = set()
        self._mono = monotonic

    # ------------------------------------------------------------------ views
    def suspects(self) -> set[str]:
        """Clusters whose last task failed or was slow (not waited for until one succeeds within ``patience_s``)."""
        with self._lock:
            return set(self._suspect)

    def in_flight(self) -> set[str]:
        """Clusters with a task of this loop still running."""
        with self._lock:
            return set(self._inflight)

    def forget(self, keep: set[str]) -> None:
        """Drop the standing of clusters not in ``keep`` (removed)."""
        with self._lock:
            self._suspect &= keep

    # ------------------------------------------------------------------ one pass
    def run(self, work: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run ``work[cluster]()`` for every cluster (see the module docstring); returns the results of the
        tasks that ended successfully before this pass returned."""
        waited: list[_Task] = []
        with self._lock:
            for cluster, call in sorted(work.items()):
                if cluster in self._inflight:
                    continue  # its previous task still runs: never two at once
                task = _Task(cluster, call, cluster in self._suspect)
                self._inflight[cluster] = task
                if not task.suspect:
                    waited.append(task)
                threading.Thread(target=self._run_task, args=(task,), name=f"{self.loop}-{cluster}",
                                 daemon=True).start()
        self._wait(waited)
        return {t.cluster: t.result for t in waited if t.done.is_set() and t.error is None}

    def _wait(self, tasks: list[_Task]) -> None:
        pending = list(tasks)
        with self._changed:
            while pending:
                now = self._mono()
                still: list[_Task] = []
                wake = now + 1.0
                for t in pending:
                    if t.done.is_set():
                        continue
                    if t.started is not None:
                        due = t.started + self.deadline_s
                        if now >= due:
                            self._make_overdue(t, now)
                            continue
                        wake = min(wake, due)
                    still.append(t)
                pending = still
                if pending:
                    self._changed.wait(max(0.0, wake - now))

    def _make_overdue(self, t: _Task, now: float) -> None:
        """Under the lock: stop waiting for ``t``, free its slot, mark its cluster suspect."""
        t.overdue = True
        self._suspect.add(t.cluster)
        if t.slot_held:
            t.slot_held = False
            (self._suspect_slots if t.suspect else self._slots).release()
        self.status.error(t.cluster, self.loop, "timeout",
                          f"{self.loop}: no answer within {self.deadline_s:.0f} s (still trying; other clusters "
                          "go on without it)", done=False)
        CLIENT_ERRORS.log(log, logging.WARNING, (t.cluster, "timeout"),
                          "%s of %s: still running after %.0f s; the loop goes on without it", self.loop, t.cluster,
                          now - (t.started or now))

    def _run_task(self, t: _Task) -> None:
        slots = self._suspect_slots if t.suspect else self._slots
        slots.acquire()
        with self._changed:
            t.slot_held = True
            t.started = self._mono()
            self._changed.notify_all()
        self.status.started(t.cluster, self.loop)
        try:
            with cluster_scope(t.cluster):
                t.result = t.call()
        except Exception as exc:  # one cluster's trouble never reaches another's
            t.error = exc
        finally:
            with self._changed:
                t.finished = self._mono()
                late = t.overdue or (t.started is not None and t.finished - t.started > self.patience_s)
                if t.slot_held:
                    t.slot_held = False
                    slots.release()
                if late or t.error is not None:
                    self._suspect.add(t.cluster)
                else:
                    self._suspect.discard(t.cluster)
                self._inflight.pop(t.cluster, None)
                t.done.set()
                self._changed.notify_all()
            self._record(t)

    def _record(self, t: _Task) -> None:
        if t.error is None:
            self.status.ok(t.cluster, self.loop)
            return
        kind = error_kind(t.error)
        self.status.error(t.cluster, self.loop, kind, f"{self.loop}: {t.error}")
        if self.count_error is not None:
            self.count_error()
        if self.on_error is not None:
            try:
                self.on_error(t.cluster, kind, t.error)
            except Exception:
                log.exception("%s: reporting the error of %s failed", self.loop, t.cluster)
        else:
            CLIENT_ERRORS.log(log, level_of(kind), (t.cluster, kind), "%s of %s failed (%s): %s", self.loop,
                              t.cluster, kind, t.error)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no task of this loop runs (tests, shutdown); False when some still do at ``timeout_s``."""
        end = self._mono() + timeout_s
        with self._changed:
            while self._inflight:
                left = end - self._mono()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True


def loop_fanout(loop: str, intervals: IntervalsConf, status: ClusterStatus,
                count_error: Callable[[], object] | None = None) -> ClusterFanout:
    """The fan-out of loop ``loop`` as ``[intervals]`` configures it (``cluster_deadline_s``, ``cluster_workers``;
    half as many slots again for suspect clusters); ``count_error`` is called per failed task."""
    return ClusterFanout(loop, status, deadline_s=intervals.cluster_deadline_s, workers=intervals.cluster_workers,
                         suspect_workers=max(1, intervals.cluster_workers // 2), count_error=count_error)
