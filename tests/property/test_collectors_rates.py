"""Properties of the rate math: a produced rate is always finite, >= 0 and never from a bad interval."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.rates import CounterTracker, DropReason, counter_rate

anyfloat = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none())


@given(anyfloat, anyfloat, anyfloat, anyfloat, st.floats(0, 10), st.floats(1, 1e12))
@settings(max_examples=500, deadline=None)
def test_rate_is_none_or_finite_nonnegative_bounded(t0, v0, t1, v1, min_elapsed, max_rate) -> None:
    r = counter_rate(t0, v0, t1, v1, min_elapsed, max_rate)
    if r.value is None:
        assert r.reason is not None
    else:
        assert r.reason is None
        assert math.isfinite(r.value) and 0 <= r.value <= max_rate
        assert t0 is not None and t1 is not None and t1 - t0 >= min_elapsed and t1 - t0 > 0


@given(st.floats(0, 1e15), st.floats(0, 1e15), st.floats(0.6, 1e5), st.floats(0, 1e9))
def test_increase_over_elapsed(v0, inc, elapsed, t0) -> None:
    r = counter_rate(t0, v0, t0 + elapsed, v0 + inc)
    assert r.value is not None
    assert math.isclose(r.value, ((v0 + inc) - v0) / ((t0 + elapsed) - t0), rel_tol=1e-9, abs_tol=1e-9)


@given(st.floats(1, 1e15), st.floats(0.001, 0.999), st.floats(0.5, 1e4))
def test_decrease_is_a_reset(v0, frac, elapsed) -> None:
    r = counter_rate(0.0, v0, elapsed, v0 * frac)
    assert r.value is None and r.reason is DropReason.COUNTER_RESET


@given(st.floats(0, 1e12), st.floats(1, 1e12), st.floats(0, 0.4999))
def test_tiny_elapsed_never_gives_a_rate(v0, inc, elapsed) -> None:
    r = counter_rate(100.0, v0, 100.0 + elapsed, v0 + inc, min_elapsed_s=0.5)
    assert r.value is None
    assert r.reason in (DropReason.TINY_ELAPSED, DropReason.CLOCK_BACKWARDS)


@given(st.lists(st.tuples(st.floats(0.0, 20.0), st.one_of(st.floats(0, 1e6), st.just(math.nan),
                                                          st.just(-1.0), st.just(math.inf))),
                min_size=1, max_size=40))
def test_tracker_rates_are_always_sane(steps) -> None:
    tr = CounterTracker(min_elapsed_s=0.5)
    t = 0.0
    v = 0.0
    for dt, inc in steps:
        t += dt
        sample = inc if not math.isfinite(inc) or inc < 0 else v + inc
        if math.isfinite(sample) and sample >= 0:
            v = sample
        r = tr.update("k", t, sample)
        assert r.value is None or (math.isfinite(r.value) and r.value >= 0)
        tr.end_round()


@given(st.lists(st.tuples(st.floats(-1.0, 20.0),
                          st.lists(st.one_of(st.none(), st.floats(0, 1e6), st.just(math.nan), st.just(-5.0),
                                             st.just(math.inf), st.floats(-1e3, 0)), min_size=4, max_size=4)),
                min_size=1, max_size=25))
@settings(max_examples=300, deadline=None)
def test_vector_tracker_agrees_with_scalar_tracker(rounds) -> None:
    """The numpy tracker gives exactly the scalar tracker's rates and reasons, series by series."""
    from collectors.rates import REASONS, VectorCounterTracker

    scalar = CounterTracker(min_elapsed_s=0.5, forget_after=3)
    vector = VectorCounterTracker(min_elapsed_s=0.5, forget_after=3)
    t = 100.0
    for dt, vals in rounds:
        t += dt
        keys = [k for k, v in enumerate(vals) if v is not None]  # missing samples: series absent
        got, codes = vector.update("b", keys, t, [vals[k] for k in keys])
        for j, k in enumerate(keys):
            exp = scalar.update(k, t, vals[k])
            assert REASONS[codes[j]] == (None if exp.reason is None else exp.reason), (k, t, vals[k])
            if exp.value is None:
                assert math.isnan(got[j])
            else:
                assert math.isclose(got[j], exp.value, rel_tol=1e-12, abs_tol=1e-12)
        scalar.end_round()
        vector.end_round()


@given(st.lists(st.tuples(st.lists(st.floats(-1.0, 20.0), min_size=3, max_size=3),
                          st.lists(st.lists(st.one_of(st.none(), st.floats(0, 1e6), st.just(math.nan),
                                                      st.just(-5.0), st.just(math.inf)), min_size=3, max_size=3),
                                   min_size=3, max_size=3)),
                min_size=1, max_size=15))
@settings(max_examples=200, deadline=None)
def test_segmented_update_agrees_with_one_update_per_segment(rounds) -> None:
    """update_segments (one vectorised pass, one clock per segment, cached rows) gives exactly the
    rates and reasons of one update() per segment, including across compaction of stale series."""
    from collectors.rates import VectorCounterTracker

    one = VectorCounterTracker(min_elapsed_s=0.5, forget_after=2)
    many = VectorCounterTracker(min_elapsed_s=0.5, forget_after=2)
    clocks = [100.0, 100.0, 100.0]
    for dts, segvals in rounds:
        segs = []
        for s, (dt, vals) in enumerate(zip(dts, segvals, strict=True)):
            clocks[s] += dt
            keys = [k for k, v in enumerate(vals) if v is not None]
            segs.append((s, keys, clocks[s], [vals[k] for k in keys]))
        rates, codes, _, offs = many.update_segments("fam", segs)
        for s, keys, clock, vals in segs:
            exp_r, exp_c = one.update(("seg", s), keys, clock, vals)
            lo, hi = int(offs[s]), int(offs[s + 1])
            assert list(codes[lo:hi]) == list(exp_c)
            for got, exp in zip(rates[lo:hi], exp_r, strict=True):
                assert (math.isnan(got) and math.isnan(exp)) or math.isclose(got, exp, rel_tol=1e-12)
        one.end_round()
        many.end_round()
