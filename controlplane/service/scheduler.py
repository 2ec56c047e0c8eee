"""Leader-only periodic jobs on APScheduler: collection, throttle evaluation, executor ticks,
auto-rebalance, analytics.

Every job runs on a fixed *delay* (the next run is scheduled from the end of the previous one, never
piling up after a pause) and only while this node leads: a job checks leadership when it starts,
and a node that loses leadership stops starting jobs at once. A failing pass is logged and counted
(``guardian_loop_errors_total``); it never stops the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from apscheduler.schedulers.background import BackgroundScheduler

from controlplane.service.context import ServiceContext

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Job:
    """A named periodic job: ``run(ctx)`` every ``interval_s`` seconds (fixed delay)."""

    name: str
    interval_s: float
    run: Callable[[ServiceContext], object]


class LeaderScheduler:
    """Runs :class:`Job` s while ``ctx.store.is_leader``."""

    def __init__(self, ctx: ServiceContext, jobs: list[Job]) -> None:
        self.ctx = ctx
        self.jobs = {job.name: job for job in jobs}
        self._scheduler = BackgroundScheduler(timezone="UTC", job_defaults={"coalesce": True, "max_instances": 1})
        self._stopping = threading.Event()
        self.runs: dict[str, int] = dict.fromkeys(self.jobs, 0)

    def start(self) -> None:
        """Start every job (first run after one interval)."""
        for job in self.jobs.values():
            self._schedule(job, job.interval_s)
        self._scheduler.start()

    def _schedule(self, job: Job, delay_s: float) -> None:
        from datetime import UTC, datetime, timedelta

        if self._stopping.is_set():
            return
        self._scheduler.add_job(self._run, "date", run_date=datetime.now(UTC) + timedelta(seconds=delay_s),
                                args=[job.name], id=job.name, replace_existing=True)

    def run_now(self, name: str) -> None:
        """Run job ``name`` once, now, on the caller's thread (still leader-only)."""
        self._run(name, reschedule=False)

    def _run(self, name: str, reschedule: bool = True) -> None:
        job = self.jobs[name]
        try:
            if self.ctx.store.is_leader:
                start = time.perf_counter()
                try:
                    job.run(self.ctx)
                    self.runs[name] += 1
                except Exception:
                    self.ctx.metrics.loop_errors.labels(name).inc()
                    log.exception("job %s failed", name)
                finally:
                    self.ctx.metrics.loop_seconds.labels(name).observe(time.perf_counter() - start)
        finally:
            if reschedule:
                self._schedule(job, job.interval_s)

    def shutdown(self) -> None:
        """Stop scheduling; running jobs finish their pass."""
        self._stopping.set()
        self._scheduler.shutdown(wait=False)
