"""Counter rates bounded by physics (:class:`collectors.rates.PhysicalLimits`) and fetches below the log
start (:func:`collectors.pagecache.position_disk_reads`): units and properties (issue 16, item 10)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from collectors.pagecache import fetch_offset, position_disk_reads
from collectors.rates import (
    DEFAULT_NIC_BYTES_PER_S,
    REASONS,
    CounterTracker,
    DropReason,
    PhysicalLimits,
    VectorCounterTracker,
    counter_rate,
)

EXCEEDS = REASONS.index(DropReason.EXCEEDS_HARDWARE)


def test_counter_rate_refuses_a_rate_above_its_ceiling() -> None:
    assert counter_rate(0, 0, 10, 1e15, ceiling=DEFAULT_NIC_BYTES_PER_S).reason is DropReason.EXCEEDS_HARDWARE
    assert counter_rate(0, 0, 10, 1e9, ceiling=DEFAULT_NIC_BYTES_PER_S).value == 1e8
    assert DEFAULT_NIC_BYTES_PER_S == 1.25e9  # 10 Gbit/s


def test_limits_per_broker_and_kind() -> None:
    limits = PhysicalLimits(nic_by_broker={7: 12.5e9})
    assert limits.ceilings("nic", [1, 7]) == [1.25e9, 12.5e9]
    assert limits.ceiling("disk", 7) == 16e9 and limits.ceiling("nic", None) == 1.25e9
    with pytest.raises(ValueError):
        PhysicalLimits(nic_bytes_per_s=0)


def test_a_jump_is_refused_once_and_becomes_the_base() -> None:
    tracker = VectorCounterTracker()
    keys = ["p0", "p1"]
    caps = [1.25e9]  # one ceiling per segment (this broker's NIC)
    tracker.update_segments("in", [("b1", keys, 0.0, [0.0, 0.0])], caps)
    rates, codes, _, _ = tracker.update_segments("in", [("b1", keys, 10.0, [1e6 + 1e15, 2e6])], caps)
    assert codes.tolist() == [EXCEEDS, 0] and math.isnan(rates[0]) and rates[1] == 2e5
    rates, codes, _, _ = tracker.update_segments("in", [("b1", keys, 20.0, [2e6 + 1e15, 4e6])], caps)
    assert codes.tolist() == [0, 0] and rates.tolist() == [1e5, 2e5]


samples = st.lists(st.tuples(st.floats(0.5, 30), st.floats(0, 1e10), st.booleans()), min_size=2, max_size=12)


@settings(max_examples=150, deadline=None)
@given(samples, st.floats(1e6, 1e10))
@example([(0.99999, 0.0, False), (0.5, 0.0, True)], 1e6)  # 1.49999 - 0.99999 < 0.5 in floats: a tiny gap
def test_vector_and_scalar_trackers_agree_and_never_exceed_the_ceiling(steps, ceiling) -> None:
    """Each step: (elapsed, increment, glitch); a glitch adds 1e15 to the counter (a one-off jump)."""
    vec, sca = VectorCounterTracker(), CounterTracker()
    t, v = 0.0, 0.0
    vec.update("k", ["s"], t, [v], ceiling)
    sca.update("s", t, v, ceiling)
    for elapsed, inc, glitch in steps:
        t += elapsed
        v += inc + (1e15 if glitch else 0.0)
        rates, codes = vec.update("k", ["s"], t, [v], ceiling)
        r = sca.update("s", t, v, ceiling)
        assert REASONS[int(codes[0])] is r.reason
        if r.value is None:
            assert math.isnan(rates[0])
        else:
            assert rates[0] == pytest.approx(r.value) and 0 <= r.value <= ceiling
        if glitch and r.elapsed_s is not None and r.elapsed_s >= 0.5:  # the measured gap, not the float step
            assert r.reason is DropReason.EXCEEDS_HARDWARE


def test_fetch_offset_below_the_log_start_reads_at_the_log_start() -> None:
    assert fetch_offset(10.0, 500.0) == (500.0, True)
    assert fetch_offset(500.0, 500.0) == (500.0, True)
    assert fetch_offset(600.0, 500.0) == (600.0, False)
    assert fetch_offset(10.0, None) == (10.0, False)
    assert fetch_offset(10.0, float("nan")) == (10.0, False)


def test_a_reset_consumer_gets_what_bytes_out_leaves_after_the_tailing_groups() -> None:
    # log 1,000,000 .. 2,000,000, 100 msg/s, T = 100 s: only the last 10,000 messages are cached
    est = position_disk_reads(2e6, 1e6, 100.0, 100.0, 1000.0, 50.1e6, {"lagger": 0.0, "tail": 2e6},
                              {"lagger": 0.0, "tail": 100.0})
    assert est.disk == ["lagger"] and est.cached == ["tail"] and est.reset == ["lagger"]
    assert est.bytes_per_s == pytest.approx(50.1e6 - 100.0 * 1000.0)
    # the whole retained log inside the cache window: reading from the log start is a cache hit
    short = position_disk_reads(2e6, 1.995e6, 100.0, 100.0, 1000.0, 50e6, {"lagger": 0.0}, {"lagger": 0.0})
    assert short.disk == [] and short.bytes_per_s == 0
    # without a known log start, behaviour is the plain position rule (its stuck position reads nothing)
    old = position_disk_reads(2e6, None, 100.0, 100.0, 1000.0, 50e6, {"lagger": 0.0}, {"lagger": 0.0})
    assert old.disk == ["lagger"] and old.bytes_per_s == 0


@settings(max_examples=200, deadline=None)
@given(st.floats(1e3, 1e9), st.floats(0, 1), st.floats(0, 1e4), st.floats(0, 1e5), st.floats(1, 1e4),
       st.floats(0, 1e9), st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.floats(0, 1), min_size=1),
       st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.floats(0, 1e5)))
def test_position_estimate_bounds(leo, start_frac, msgs, residence, bpm, bytes_out, fracs, rates) -> None:
    log_start = leo * start_frac
    positions = {g: leo * f for g, f in fracs.items()}
    est = position_disk_reads(leo, log_start, msgs, residence, bpm, bytes_out, positions, rates)
    assert sorted(est.disk + est.cached) == sorted(positions)
    assert est.bytes_per_s >= 0 and np.isfinite(est.bytes_per_s)
    assert set(est.reset) == {g for g, off in positions.items() if off <= log_start}
    # reset readers share at most bytes-out between them
    reset_disk = [g for g in est.disk if g in est.reset]
    others = position_disk_reads(leo, log_start, msgs, residence, bpm, bytes_out,
                                 {g: o for g, o in positions.items() if g not in est.reset}, rates)
    assert est.bytes_per_s - others.bytes_per_s <= bytes_out + 1e-6 * max(bytes_out, 1) or not reset_disk
    # a reset reader reads where the log starts: it is a disk read exactly when the log start is
    for g in est.reset:
        assert (g in est.disk) == (leo - msgs * residence > log_start)
