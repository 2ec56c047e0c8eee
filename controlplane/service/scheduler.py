"""Leader-only periodic jobs: collection, throttle evaluation, executor ticks, auto-rebalance, analytics.

Goal
    Every loop keeps running whatever happens to the process — a pass that raises, a stall (GC pause,
    SIGSTOP, swapping) longer than the interval, leadership lost and regained — and a leader whose loops
    do not run says so and gives up leadership instead of leading with its protection dead.

Method
    One daemon thread per job runs a fixed-*delay* loop: wait ``interval_s`` (an ``Event.wait`` on the
    monotonic clock, so a stall only makes the next pass late, never skipped), run one pass, record its
    outcome, repeat — re-armed by the loop itself on every outcome (``ok``, ``error``, ``follower`` when
    this node does not lead).  There is no one-shot re-arming and no misfire window to fall out of (the
    APScheduler date jobs this replaces dropped a run more than 1 s late and never re-armed).  Each pass
    records its start, end and outcome (:class:`LoopState`), exported as
    ``guardian_loop_last_run_timestamp_seconds{loop}`` and ``guardian_loop_runs_total{loop,outcome}``.
    A pass that raises (past the per-cluster isolation: a bug to report) is logged at ERROR with its
    traceback, once per job and exception type per minute, the next line counting those held back.
    A watchdog thread checks the loops every second: on a leader, a loop whose last pass ended more than
    ``max(STALE_INTERVALS * interval, MIN_STALE_S)`` ago (or whose current pass has run that long) is
    *stale*; :meth:`LeaderScheduler.stale_loops` names them for ``/readyz`` (503) and the watchdog logs one
    line and asks the store to step down (a Raft leadership transfer to a caught-up follower).

Guarantee
    A loop thread never exits before :meth:`LeaderScheduler.shutdown`; after any stall its next pass
    starts at most one interval after the process resumes.  A leader with a stale loop is not ready.

Cost
    One thread per job plus the watchdog (6 threads, idle in ``Event.wait``); bookkeeping per pass is a
    few dict updates.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from controlplane.logs import Summariser
from controlplane.service.context import ServiceContext

log = logging.getLogger(__name__)

#: A leader's loop is stale after this many intervals without a finished pass ...
STALE_INTERVALS = 3.0
#: ... but never sooner than this (a slow collection over many clusters is not a dead loop).
MIN_STALE_S = 30.0
WATCHDOG_PERIOD_S = 1.0
OUTCOMES = ("ok", "error", "follower")


@dataclass(frozen=True, slots=True)
class Job:
    """A named periodic job: ``run(ctx)`` every ``interval_s`` seconds (fixed delay)."""

    name: str
    interval_s: float
    run: Callable[[ServiceContext], object]


@dataclass(slots=True)
class LoopState:
    """What a loop did last (wall-clock times for reports, monotonic ones for staleness)."""

    interval_s: float
    stale_after_s: float
    created_mono: float = field(default_factory=time.monotonic)
    last_end_mono: float | None = None
    last_end_wall: float | None = None
    last_outcome: str | None = None
    running_since_mono: float | None = None
    runs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))

    def silent_for(self, now: float) -> float:
        """Seconds since this loop last showed life (a finished pass, or its creation)."""
        return now - (self.last_end_mono if self.last_end_mono is not None else self.created_mono)

    def report(self, now: float) -> dict[str, object]:
        return {"interval_s": self.interval_s, "last_outcome": self.last_outcome,
                "last_run_unix": self.last_end_wall, "seconds_since_last_run": round(self.silent_for(now), 3),
                "running_for_s": None if self.running_since_mono is None else round(now - self.running_since_mono, 3),
                "runs": dict(self.runs)}


class LeaderScheduler:
    """Runs :class:`Job` s while ``ctx.store.is_leader``; see the module docstring."""

    def __init__(self, ctx: ServiceContext, jobs: list[Job], *, stale_intervals: float = STALE_INTERVALS,
                 min_stale_s: float = MIN_STALE_S, watchdog_period_s: float = WATCHDOG_PERIOD_S) -> None:
        self.ctx = ctx
        self.jobs = {job.name: job for job in jobs}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._failures = Summariser()  # a job failing every pass: one ERROR line per job and kind per minute
        self._watchdog_period_s = watchdog_period_s
        self.loops: dict[str, LoopState] = {
            job.name: LoopState(job.interval_s, max(stale_intervals * job.interval_s, min_stale_s))
            for job in jobs}
        self._stepped_down_for: str | None = None
        self._leading = False
        ctx.loops = self

    @property
    def runs(self) -> dict[str, int]:
        """Successful passes per job (a pass as leader that did not raise)."""
        return {name: state.runs["ok"] for name, state in self.loops.items()}

    def start(self) -> None:
        """Start every job's loop (first pass after one interval) and the watchdog."""
        for job in self.jobs.values():
            thread = threading.Thread(target=self._loop, args=(job,), name=f"loop-{job.name}", daemon=True)
            self._threads.append(thread)
        self._threads.append(threading.Thread(target=self._watchdog, name="loop-watchdog", daemon=True))
        for thread in self._threads:
            thread.start()

    def run_now(self, name: str) -> None:
        """Run job ``name`` once, now, on the caller's thread (still leader-only)."""
        self._pass(self.jobs[name])

    def _loop(self, job: Job) -> None:
        while not self._stopping.wait(job.interval_s):
            try:
                self._pass(job)
            except BaseException:  # the loop outlives anything a pass does (even SystemExit)
                log.exception("loop %s: pass failed outside the job", job.name)

    def _pass(self, job: Job) -> None:
        state = self.loops[job.name]
        metrics = self.ctx.metrics
        start = time.perf_counter()
        with self._lock:
            state.running_since_mono = time.monotonic()
        outcome = "follower"
        try:
            if self.ctx.store.is_leader:
                try:
                    job.run(self.ctx)
                    outcome = "ok"
                except Exception as exc:
                    outcome = "error"
                    metrics.loop_errors.labels(job.name).inc()
                    held = self._failures.admit((job.name, type(exc).__name__))
                    if held is not None:  # one line per job and exception type per minute, the first with its trace
                        log.exception("job %s failed%s", job.name, f" ({held} more like it in the last "
                                      f"{self._failures.window_s:.0f} s)" if held else "")
                finally:
                    metrics.loop_seconds.labels(job.name).observe(time.perf_counter() - start)
        finally:
            now_wall = time.time()
            with self._lock:
                state.running_since_mono = None
                state.last_end_mono = time.monotonic()
                state.last_end_wall = now_wall
                state.last_outcome = outcome
                state.runs[outcome] += 1
            metrics.loop_runs.labels(job.name, outcome).inc()
            metrics.loop_last_run.labels(job.name).set(now_wall)

    def stale_loops(self) -> dict[str, float]:
        """Loops that have not finished a pass within their stale limit: name -> seconds silent.

        Meaningful on a leader (a follower's loops only record ``follower`` passes but still tick).
        """
        now = time.monotonic()
        out: dict[str, float] = {}
        with self._lock:
            for name, state in self.loops.items():
                running = state.running_since_mono
                silent = now - running if running is not None else state.silent_for(now)
                if silent > state.stale_after_s:
                    out[name] = round(silent, 1)
        return out

    def report(self) -> dict[str, dict[str, object]]:
        """Per loop: interval, last outcome and run time, seconds since, pass counts (for /readyz)."""
        now = time.monotonic()
        with self._lock:
            return {name: state.report(now) for name, state in self.loops.items()}

    def _watchdog(self) -> None:
        while not self._stopping.wait(self._watchdog_period_s):
            try:
                self._check()
            except Exception:
                log.exception("loop watchdog step failed")

    def _check(self) -> None:
        leading = bool(self.ctx.store.is_leader)
        if leading != self._leading:
            self._leading = leading
            log.info("this node %s: leader-only loops (%s) %s", "leads" if leading else "no longer leads",
                     ", ".join(self.jobs), "act" if leading else "stand by")
        if not leading:
            self._stepped_down_for = None
            self.ctx.cluster_status.stop_awaiting()  # a follower observes nothing: no snapshot age to export
            return
        stale = self.stale_loops()
        if not stale:
            self._stepped_down_for = None
            return
        names = ",".join(sorted(stale))
        if self._stepped_down_for == names:
            return  # asked already; the transfer may be in flight or denied
        self._stepped_down_for = names
        step_down = getattr(self.ctx.store, "step_down", None)
        done = bool(step_down(f"loops not running: {names}")) if callable(step_down) else False
        log.error("leader's loops are not running (%s); not ready, %s", ", ".join(
            f"{name} silent {secs:.0f}s" for name, secs in sorted(stale.items())),
            "leadership transfer requested" if done else "no caught-up follower to hand leadership to")

    def shutdown(self) -> None:
        """Stop the loops; a running pass finishes."""
        self._stopping.set()
