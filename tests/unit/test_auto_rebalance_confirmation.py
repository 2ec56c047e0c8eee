"""Auto-rebalance acts only on an imbalance that two successive snapshots show (not on one noisy reading)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from controlplane.config import Settings
from controlplane.service.auto_rebalance import run_auto_rebalance
from controlplane.service.context import ServiceContext
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain import ClusterSnapshot
from tests.support.service_ports import RecordingExecutor
from tests.support.throttle_support import MB, disk, part, snapshot

T0 = datetime.now(UTC)


def cluster(skewed: bool, seconds: float) -> ClusterSnapshot:
    """4 brokers x 1 disk, 8 partitions of 10 MB/s: all on brokers 1-2 (peak/mean 2.0) or spread (1.0)."""
    brokers = [[1, 2], [2, 1]] if skewed else [[1, 2], [3, 4]]
    parts = [part("t", i, brokers[i % 2], ["/d1", "/d1"], bytes_in=10 * MB) for i in range(8)]
    return snapshot({b: [disk("/d1")] for b in (1, 2, 3, 4)}, parts, taken_at=T0 + timedelta(seconds=seconds))


def context(tmp_path: Path) -> ServiceContext:
    ctx = ServiceContext(settings=Settings(data_dir=tmp_path), store=LocalStateStore())
    ctx.executor = RecordingExecutor()
    ctx.store.propose({"type": "cluster.register", "meta": meta("t"), "name": "c1",
                       "bootstrap_servers": ["127.0.0.1:9"]})
    ctx.store.propose({"type": "cluster.auto_rebalance", "meta": meta("t"), "name": "c1", "enabled": True,
                       "window_cron": "* * * * *", "window_minutes": 1440, "threshold": 1.3})
    return ctx


def started(ctx: ServiceContext) -> list[int]:
    """The plans auto-rebalance started through the context's recording executor."""
    assert isinstance(ctx.executor, RecordingExecutor)
    return ctx.executor.started


def decide(ctx: ServiceContext, snap: ClusterSnapshot | None = None) -> dict[str, object]:
    if snap is not None:
        ctx.snapshots.put(snap)
    (d,) = run_auto_rebalance(ctx, now=T0 + timedelta(seconds=60))
    return d


def test_one_skewed_snapshot_does_not_start_a_round_and_a_calm_one_in_between_resets(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    assert "in one snapshot" in str(decide(ctx, cluster(True, 0))["why"])
    assert "in one snapshot" in str(decide(ctx)["why"])  # the same snapshot again confirms nothing
    assert "within threshold" in str(decide(ctx, cluster(False, 10))["why"])
    assert "in one snapshot" in str(decide(ctx, cluster(True, 20))["why"])  # counting starts again
    assert started(ctx) == []


def test_two_successive_skewed_snapshots_start_a_round(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    decide(ctx, cluster(True, 0))
    d = decide(ctx, cluster(True, 10))
    assert d["action"] == "execute" and "two successive snapshots" in str(d["why"]), d
    assert started(ctx) == [d["plan_id"]]
    assert ctx.imbalance_seen == {}  # the next round needs its own two snapshots
