"""The leader's loops with a fake store: re-armed on every outcome, stale loops named, step-down asked."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from controlplane.config import Settings
from controlplane.service.context import ServiceContext
from controlplane.service.scheduler import Job, LeaderScheduler


class FakeStore:
    def __init__(self) -> None:
        self.is_leader = True
        self.step_downs: list[str] = []

    def step_down(self, reason: str) -> bool:
        self.step_downs.append(reason)
        return True

    def status(self) -> dict[str, Any]:
        return {"ready": True, "is_leader": self.is_leader}


def wait_for(pred: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return bool(pred())


def context(store: FakeStore) -> ServiceContext:
    return ServiceContext(settings=Settings(), store=store)  # type: ignore[arg-type]


def runs_total(ctx: ServiceContext, loop: str, outcome: str) -> float:
    value = ctx.metrics.registry.get_sample_value("guardian_loop_runs_total", {"loop": loop, "outcome": outcome})
    return value or 0.0


def test_loops_keep_running_through_errors_and_leadership_flaps() -> None:
    store = FakeStore()
    ctx = context(store)
    calls = {"boom": 0, "fine": 0}

    def boom(_: ServiceContext) -> None:
        calls["boom"] += 1
        raise RuntimeError("broken pass")

    def fine(_: ServiceContext) -> None:
        calls["fine"] += 1

    sched = LeaderScheduler(ctx, [Job("boom", 0.02, boom), Job("fine", 0.02, fine)])
    sched.start()
    try:
        assert wait_for(lambda: calls["boom"] >= 3 and calls["fine"] >= 3)
        store.is_leader = False
        followed = runs_total(ctx, "fine", "follower")
        assert wait_for(lambda: runs_total(ctx, "fine", "follower") >= followed + 3)
        before = calls["fine"]
        store.is_leader = True
        assert wait_for(lambda: calls["fine"] >= before + 3), "the loop runs again after leadership returns"
        assert runs_total(ctx, "boom", "error") >= 3 and runs_total(ctx, "boom", "ok") == 0
        last = ctx.metrics.registry.get_sample_value("guardian_loop_last_run_timestamp_seconds", {"loop": "fine"})
        assert last is not None and last > time.time() - 5
        report = sched.report()
        assert report["boom"]["last_outcome"] == "error" and report["fine"]["runs"]["ok"] >= 6  # type: ignore[index]
        assert sched.stale_loops() == {}
    finally:
        sched.shutdown()


def test_a_pass_that_hangs_makes_the_loop_stale_and_the_leader_steps_down() -> None:
    store = FakeStore()
    ctx = context(store)
    release = threading.Event()
    sched = LeaderScheduler(ctx, [Job("hung", 0.02, lambda _: release.wait(10)), Job("fine", 0.02, lambda _: None)],
                            stale_intervals=3, min_stale_s=0.2, watchdog_period_s=0.05)
    sched.start()
    try:
        assert wait_for(lambda: "hung" in sched.stale_loops(), 3)
        assert "fine" not in sched.stale_loops()
        assert wait_for(lambda: store.step_downs != [], 3)
        assert "hung" in store.step_downs[0]
        assert len(store.step_downs) == 1, "asked once per episode, not every watchdog tick"
        release.set()
        assert wait_for(lambda: sched.stale_loops() == {}, 3), "the loop recovers once the pass returns"
    finally:
        release.set()
        sched.shutdown()


def test_a_stall_longer_than_the_interval_delays_the_next_pass_but_never_drops_it() -> None:
    store = FakeStore()
    ctx = context(store)
    stall = threading.Event()
    seen: list[float] = []

    def job(_: ServiceContext) -> None:
        seen.append(time.monotonic())
        if len(seen) == 2:
            stall.wait(0.5)  # the whole pass overruns 25 intervals (what a SIGSTOP does to a one-shot re-arm)

    sched = LeaderScheduler(ctx, [Job("j", 0.02, job)])
    sched.start()
    try:
        assert wait_for(lambda: len(seen) >= 6, 5), "the loop continues after the overrun"
    finally:
        sched.shutdown()


def test_a_job_failing_every_pass_logs_one_error_per_kind_per_minute(caplog: pytest.LogCaptureFixture) -> None:
    """A pass that raises is a bug to report (ERROR, with its traceback), but not once per pass: one line per job
    and exception type per minute."""
    ctx = context(FakeStore())
    kinds = iter([RuntimeError, RuntimeError, KeyError, RuntimeError, KeyError])

    def boom(_: ServiceContext) -> None:
        raise next(kinds)("broken pass")

    sched = LeaderScheduler(ctx, [Job("boom", 60.0, boom)])
    with caplog.at_level(logging.ERROR, logger="controlplane.service.scheduler"):
        for _ in range(5):
            sched.run_now("boom")
    assert [(r.getMessage(), r.exc_info[0] if r.exc_info else None) for r in caplog.records] == [
        ("job boom failed", RuntimeError), ("job boom failed", KeyError)]
    assert runs_total(ctx, "boom", "error") == 5
