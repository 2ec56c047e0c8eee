"""Properties of the throttle planner: hysteresis never flaps, bad samples never flip, queue ordering."""

from __future__ import annotations

import itertools
import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.throttles import CONSUMER_QUOTA
from planners.protection import (
    AssignedClient,
    DiskFlow,
    DiskHealth,
    HealthThresholds,
    Lineage,
    ProtectionConfig,
    ProtectionInput,
    abnormal_queue,
    plan_throttles,
    step_health,
)
from tests.support.throttle_support import MB, disk, part, snapshot

TH = HealthThresholds(util_high=0.85, util_low=0.70, await_high_ms=50, await_low_ms=20, enter_samples=3,
                      leave_samples=2)
bad = st.sampled_from([None, math.nan, math.inf, -math.inf, -0.5])
util = st.one_of(st.floats(0.0, 1.5, allow_nan=False), bad)
await_ = st.one_of(st.floats(0.0, 200.0, allow_nan=False), bad)


def ok(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and x >= 0 else None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(util, await_), max_size=60))
def test_every_flip_is_justified_by_k_consecutive_samples(samples: list[tuple[float | None, float | None]]) -> None:
    state = DiskHealth()
    hot_run = cool_run = 0
    for u, a in samples:
        prev = state
        state = step_health(state, u, a, TH)
        uu, aa = ok(u), ok(a)
        if uu is None and aa is None:
            assert state.unhealthy == prev.unhealthy  # missing samples never flip
            continue
        hot = (uu is not None and uu > TH.util_high) or (aa is not None and aa > TH.await_high_ms)
        cool = (uu is None or uu < TH.util_low) and (aa is None or aa < TH.await_low_ms)
        hot_run = hot_run + 1 if hot else 0
        cool_run = cool_run + 1 if cool else 0
        if state.unhealthy and not prev.unhealthy:
            assert hot_run >= TH.enter_samples
        if prev.unhealthy and not state.unhealthy:
            assert cool_run >= TH.leave_samples


@settings(max_examples=200, deadline=None)
@given(st.floats(0.71, 0.84), st.floats(0.0, 0.069), st.integers(0, 2**31 - 1), st.booleans())
def test_noise_inside_the_band_never_flaps(centre: float, amplitude: float, seed: int, start: bool) -> None:
    rng = random.Random(seed)
    state = DiskHealth(unhealthy=start)
    for _ in range(200):
        u = min(max(centre + rng.uniform(-amplitude, amplitude), 0.7001), 0.8499)
        state = step_health(state, u, 30.0, TH)
        assert state.unhealthy == start


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_noisy_overload_enters_once_and_stays(seed: int) -> None:
    """util around 0.9 ± 0.12 (dips into the band, never below the low mark) flips exactly once."""
    rng = random.Random(seed)
    state = DiskHealth()
    flips = 0
    for _ in range(300):
        before = state.unhealthy
        state = step_health(state, 0.9 + rng.uniform(-0.12, 0.12), 10.0 if rng.random() < 0.5 else math.nan, TH)
        flips += state.unhealthy != before
    assert flips <= 1


behaviours = st.sampled_from(["user_read", "user_write", "replication_write", "migration_read"])
flows = st.lists(st.tuples(behaviours, st.integers(0, 5), st.floats(0, 300 * MB, allow_nan=False)), max_size=25)


@settings(max_examples=200, deadline=None)
@given(flows, st.randoms(use_true_random=False))
def test_queue_is_sorted_largest_first_and_independent_of_input_order(rows: list, rnd: random.Random) -> None:
    fl = [DiskFlow((1, "/d1"), b, "t", p, r, 1) for b, p, r in rows]
    cfg = ProtectionConfig()
    expected = {("t", p): 1 * MB for p in range(6)}
    q1 = abnormal_queue(fl, expected, cfg)
    shuffled = list(fl)
    rnd.shuffle(shuffled)
    q2 = abnormal_queue(shuffled, expected, cfg)
    assert [e.sort_key for e in q1] == [e.sort_key for e in q2]
    assert all(a.flow.bytes_per_s >= b.flow.bytes_per_s for a, b in itertools.pairwise(q1))
    for e in q1:  # reads always, writes only above expectation x tolerance, replication never
        assert e.flow.behaviour != "replication_write"
        if e.flow.behaviour == "user_write":
            assert e.flow.bytes_per_s > 1 * MB * cfg.write_tolerance


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 150 * MB, allow_nan=False), min_size=1, max_size=6), st.floats(0.86, 1.0))
def test_throttling_reaches_the_target_when_reads_suffice(reads: list[float], u: float) -> None:
    """With enough abnormal reads, the predicted util lands under the target; rates stay above the floor."""
    cfg = ProtectionConfig()
    parts = [part("t", i, [1, 2], ["/d1", "/d1"], bytes_in=1 * MB, bytes_out=r + 2 * MB, disk_read=r)
             for i, r in enumerate(reads)]
    snap = snapshot({1: [disk("/d1", u, 10.0)], 2: [disk("/d1")]}, parts)
    plan = plan_throttles(snap, ProtectionInput(partition_throttle=True), {(1, "/d1"): DiskHealth(unhealthy=True)}, cfg)
    report = next(r for r in plan.reports if r.disk == (1, "/d1"))
    abnormal = sum(r for r in reads if r >= cfg.min_abnormal_bytes_per_s)
    for d in plan.decisions:
        assert d.rate_bytes_per_s >= cfg.min_rate_bytes_per_s
    if (u - cfg.target_util) * 200 * MB <= abnormal * 0.95 and report.predicted_util is not None:
        # enough read traffic exists: the walk stops once the prediction is under the target
        assert report.predicted_util < cfg.target_util + 0.01


members = st.lists(st.tuples(st.sampled_from(["g1", "g2", "g3"]), st.sampled_from(["c1", "c2", "c3", "c4"]),
                             st.booleans()), max_size=6)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100 * MB, allow_nan=False), members), min_size=1, max_size=4),
       st.floats(0.86, 1.0))
def test_on_stock_kafka_only_members_assigned_a_queued_partition_are_throttled(rows: list, u: float) -> None:
    """Without the partition throttle, every consumer quota names a member assigned a queued partition — of a
    group estimated to read it from disk whenever one is — and no quota goes below the floor."""
    cfg = ProtectionConfig()
    parts = [part("t", i, [1, 2], ["/d1", "/d1"], bytes_in=1 * MB, bytes_out=r + 2 * MB, disk_read=r)
             for i, (r, _) in enumerate(rows)]
    assignments = {("t", i): tuple(AssignedClient(g, c, d) for g, c, d in ms) for i, (_, ms) in enumerate(rows) if ms}
    snap = snapshot({1: [disk("/d1", u, 10.0)], 2: [disk("/d1")]}, parts)
    plan = plan_throttles(snap, ProtectionInput(lineage=Lineage(assignments=assignments), partition_throttle=False),
                          {(1, "/d1"): DiskHealth(unhealthy=True)}, cfg)
    allowed: set[str] = set()
    for r in plan.reports:
        for e in r.queue:
            rows_p = assignments.get((e.flow.topic, e.flow.partition), ())
            lagging = [a for a in rows_p if a.reads_disk]
            allowed |= {a.client_id for a in (lagging or rows_p)}
    for d in plan.decisions:
        assert d.kind == CONSUMER_QUOTA and d.action == "set"
        assert d.target["client_id"] in allowed
        assert d.rate_bytes_per_s >= cfg.min_rate_bytes_per_s
        assert "(consumer-group assignment)" in d.why and d.why.endswith("the cluster has no partition-level throttle")
