"""Self-healing re-plans a fail-slow disk after a fix's execution ended only from a round whose log-dir listing
of that broker was read after the end (listings are re-read in rotation: an older one still shows the replicas
the execution moved away, and planning from it would move them twice); a plan the executor refuses backs off
on the same anomaly and says why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collectors.builder import Collected
from collectors.completeness import Coverage
from controlplane.config import Settings
from controlplane.service.context import ServiceContext
from controlplane.service.notify import Notifier
from controlplane.service.observation import RoundBoard
from controlplane.service.self_healing import SelfHealingJob, backoff_left
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain import ClusterSnapshot, Disk
from tests.support.service_ports import StoreExecutor
from tests.support.throttle_support import MB, disk, part, snapshot

SLOW = (1, "/d1")


def cluster(taken_at: datetime) -> ClusterSnapshot:
    """Four brokers x two disks at 20 MB/s each; broker 1's /d1 answers in 200 ms (its peers in 5 ms) and
    holds four replicas, two of them leaders."""
    def d(path: str, slow: bool = False) -> Disk:
        return replace(disk(path, util=0.9 if slow else 0.3, await_ms=200.0 if slow else 5.0),
                       read_bytes_per_s=10 * MB, write_bytes_per_s=10 * MB)
    disks: dict[int, Sequence[Disk]] = {b: [d("/d1", (b, "/d1") == SLOW), d("/d2")] for b in (1, 2, 3, 4)}
    parts = [part("t", 0, [1, 2], ["/d1", "/d1"]), part("t", 1, [1, 3], ["/d1", "/d2"]),
             part("t", 2, [2, 1], ["/d2", "/d1"]), part("t", 3, [3, 1], ["/d1", "/d1"]),
             part("t", 4, [4, 2], ["/d1", "/d2"]), part("t", 5, [3, 4], ["/d2", "/d2"])]
    return snapshot(disks, parts, taken_at=taken_at)


class Harness:
    """The job over a real local state store, a round board the test publishes to, and an executor that only
    records executions (the test ends them)."""

    def __init__(self, tmp_path: Path) -> None:
        self.ctx = ServiceContext(settings=Settings(data_dir=tmp_path), store=LocalStateStore())
        self.executor = StoreExecutor(self.ctx.store)
        self.ctx.executor = self.executor
        self.board = RoundBoard()
        self.job = SelfHealingJob(self.board, notifier=Notifier([]))
        self.clock = 0.0
        self.ctx.store.propose({"type": "cluster.register", "meta": meta("t"), "name": "c1",
                                "bootstrap_servers": ["127.0.0.1:9"]})
        self.ctx.store.propose({"type": "cluster.self_healing", "meta": meta("t"), "name": "c1", "enabled": True,
                                "grace_s": 0.0, "evacuate_slow_after_s": 0.0})

    def round(self, listed_at: float | None, taken_at: datetime | None = None) -> dict[str, Any]:
        """Publish a round (10 s later on the round clock) whose listing of broker 1 was read at ``listed_at``
        (None: not listed this round; the job then takes when the round's collection began), run the job."""
        self.clock += 10.0
        snap = cluster(taken_at or datetime.now(UTC))
        collected = Collected(snapshot=snap, coverage=Coverage("c1", snap.taken_at.timestamp()), behaviours={},
                              partitions={}, throttles={}, quotas=[], round_seconds={"total": 2.0},
                              sample_clock=self.clock,
                              log_dirs_read_at={} if listed_at is None else {1: listed_at})
        self.board.publish(collected, snap, datetime.now(UTC))
        (out,) = self.job(self.ctx)
        return out

    def anomaly(self) -> dict[str, Any]:
        (a,) = self.ctx.store.read(lambda s: [dict(a) for a in s["anomalies"].values()
                                              if a["kind"] == "disk-fail-slow"])
        return a

    def plan(self, plan_id: int) -> dict[str, Any]:
        return dict(self.ctx.store.read(lambda s: dict(s["plans"][str(plan_id)])))

    def execution_of(self, plan_id: int) -> int:
        return int(self.plan(plan_id)["execution_id"])


def moved_off_slow_disk(plan: dict[str, Any]) -> list[str]:
    """The partitions a plan document reassigns to targets without a replica on broker 1's /d1."""
    return sorted(f"{m['topic']}-{m['partition']}" for m in plan["plan"]["reassignment"]["partitions"]
                  if SLOW not in zip(m["replicas"], m["log_dirs"], strict=True))


@pytest.fixture
def healing(tmp_path: Path) -> Harness:
    """The slow disk confirmed (three slow rounds) and its leadership moved off: the first fix runs."""
    h = Harness(tmp_path)
    now = datetime.now(UTC).timestamp()
    for _ in range(3):
        h.round(now)
    assert len(h.executor.started) == 1, h.job.last
    assert h.anomaly()["status"] == "fixing"
    assert h.plan(h.executor.started[0])["plan"]["leaders"], "the first fix moves leadership only"
    return h


def test_a_listing_read_before_the_end_of_the_fix_does_not_plan_again(healing: Harness) -> None:
    h = healing
    ended = h.executor.finish(h.execution_of(h.executor.started[0]))
    h.round(ended - 5.0)  # read while the execution ran: it may still show replicas already moved
    h.round(None, taken_at=datetime.fromtimestamp(ended + 1.0, UTC))  # not listed; collection began at end-1 s
    assert len(h.executor.started) == 1
    assert h.anomaly()["status"] == "fixing" and h.anomaly()["plan_id"] == h.executor.started[0]


def test_after_each_fix_only_a_fresh_listing_that_still_shows_the_disk_loaded_plans_an_evacuation(
        healing: Harness) -> None:
    h = healing
    ended = h.executor.finish(h.execution_of(h.executor.started[0]))
    h.round(ended - 5.0)
    assert len(h.executor.started) == 1
    h.round(ended + 5.0)  # listed after the end, still slow and holding replicas: evacuate it
    assert len(h.executor.started) == 2
    evacuation = h.plan(h.executor.started[1])
    assert moved_off_slow_disk(evacuation) == ["t-0", "t-1", "t-2", "t-3"], evacuation
    assert h.anomaly()["plan_id"] == h.executor.started[1]

    ended = h.executor.finish(h.execution_of(h.executor.started[1]))
    h.round(ended - 1.0)  # the evacuation's own moves are not in this listing: no second evacuation
    h.round(None, taken_at=datetime.fromtimestamp(ended, UTC) + timedelta(seconds=1))
    assert len(h.executor.started) == 2
    h.round(ended + 1.0)  # a listing after the end still shows the disk slow and loaded: plan again
    assert len(h.executor.started) == 3
    assert moved_off_slow_disk(h.plan(h.executor.started[2])) == ["t-0", "t-1", "t-2", "t-3"]


class RefusingExecutor(StoreExecutor):
    """The executor port refusing every plan (e.g. metadata naming a log dir its broker no longer lists)."""

    def start_approved(self, plan_id: int, caps: Mapping[str, int] | None = None, why: str = "",
                       by: str | None = None, options: Mapping[str, Any] | None = None) -> int:
        self.started.append(plan_id)
        raise RuntimeError("[unknown-log-dir] t-0: broker 3 has no log dir '/data1'")


def test_a_refused_plan_backs_off_on_one_anomaly_and_says_why(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.executor = RefusingExecutor(h.ctx.store)
    h.ctx.executor = h.executor
    now = datetime.now(UTC).timestamp()
    for _ in range(3):
        h.round(now)
    assert len(h.executor.started) == 1, h.job.last
    a = h.anomaly()
    assert a["status"] == "confirmed" and a["reason"].startswith("retry: executor refused plan"), a["reason"]
    assert "has no log dir" in a["reason"] and "next try in 10 s" in a["reason"]
    for _ in range(5):  # inside the backoff: no new plan, the decision says why
        out = h.round(now)
    assert len(h.executor.started) == 1 and out["action"] == "wait" and "backs off" in out["why"], out
    assert h.plan(h.executor.started[0])["status"] == "failed"  # the refused plan expired, not left approved
    assert backoff_left(a, now=datetime.now(UTC).timestamp() + 10.5) == 0.0
    twice = {**a, "history": [*a["history"], {**a["history"][-1]}]}
    assert 10.0 < backoff_left(twice) <= 20.0, "the second retry waits twice as long"
    assert len(h.ctx.store.read(lambda s: list(s["anomalies"]))) == 1, "one anomaly for the fault, no reopen loop"
