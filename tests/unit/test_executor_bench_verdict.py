"""The executor bench's verdict: adaptive against the fastest fixed rate that keeps util under the threshold."""

from __future__ import annotations

from typing import Any

from benchmarks import bench_executor as bench


def row(mode: str, done: float, p95: float) -> dict[str, Any]:
    return {"mode": mode, "completion_sim_s": done, "p95_disk_util": p95}


def test_compare_picks_the_fastest_fixed_rate_under_the_threshold_and_the_one_as_fast() -> None:
    times = {20: 2000.0, 30: 860.0, 40: 550.0, 50: 390.0, 60: 330.0, 300: 160.0}
    utils = {20: 0.62, 30: 0.67, 40: 0.76, 50: 0.83, 60: 0.9, 300: 1.0}
    assert tuple(times) == bench.FIXED_RATES_MB
    rows = [row(f"fixed {r}", times[r], utils[r]) for r in bench.FIXED_RATES_MB]
    rows += [row("adaptive", 320.0, 0.745), row("adaptive 0.9", 210.0, 0.91)]
    v = bench.compare(rows)
    assert v["fastest_fixed_under_threshold"] == "fixed 30"  # 40 MB/s is already over 0.75
    assert v["adaptive_vs_fastest_fixed_under_threshold"] == round(320 / 860, 2)
    assert (v["fixed_as_fast"], v["fixed_as_fast_p95_util"]) == ("fixed 60", 0.9)
    assert v["adaptive_vs_high_time"] == 2.0
    assert v["adaptive_p95_under_threshold"] is True


def test_compare_without_any_fixed_rate_under_the_threshold() -> None:
    rows = [row(f"fixed {r}", 100.0, 0.99) for r in bench.FIXED_RATES_MB] + [row("adaptive", 300.0, 0.8),
                                                                               row("adaptive 0.9", 200.0, 0.9)]
    v = bench.compare(rows)
    assert v["fastest_fixed_under_threshold"] is None and v["adaptive_vs_fastest_fixed_under_threshold"] is None
    assert v["adaptive_p95_under_threshold"] is False


def test_traffic_floor_spends_each_ticks_headroom_and_extrapolates_past_the_twin() -> None:
    # 100 B/s disks: at level 0.75 a disk at util 0.25 may add 50 B/s, one at 0.5 only 25
    twin = {"1:/a": [0.25] * 10, "2:/b": [0.5] * 4 + [0.25] * 6, "3:/c": [0.5] * 3}
    assert bench.traffic_floor({"1:/a": 200.0}, twin, 0.75, 100.0) == 4.0
    assert bench.traffic_floor({"2:/b": 200.0}, twin, 0.75, 100.0) == 6.0  # 4 x 25, then 2 x 50
    assert bench.traffic_floor({"3:/c": 150.0}, twin, 0.75, 100.0) == 6.0  # 3 x 25, then at its mean 3 more
    both = {"1:/a": 200.0, "2:/b": 200.0, "9:/gone": 1e9}  # the slowest disk bounds; a disk the twin lacks is skipped
    assert bench.traffic_floor(both, twin, 0.75, 100.0) == 6.0
    assert bench.traffic_floor({"1:/a": 200.0}, twin, 0.65, 100.0) == 5.0  # a lower level: a longer floor


def test_decompose_factors_multiply_to_completion_over_the_floor(monkeypatch: Any) -> None:
    # 200 MB/s disks (the bench's): the twin sits at 0.45 and 0.40, the run's own base util at 0.42 (moves ended)
    twin = {"1:/a": [0.45] * 400, "2:/b": [0.40] * 400}
    monkeypatch.setattr(bench, "traffic_twin", lambda _seed, _horizon: twin)
    run = {"seed": 11, "completion_sim_s": 300.0, "disk_bound_sim_s": 200.0, "copy_window_sim_s": 280.0,
           "disk_work_bytes": {"1:/a": 12e9, "2:/b": 6e9}, "_base_util": {"1:/a": [0.42] * 400, "2:/b": [0.4] * 400}}
    parts = bench.decompose([run], headroom=0.03)
    row = parts["per_seed"][0]
    assert row["target_floor_sim_s"] > row["traffic_floor_sim_s"]  # the target leaves less headroom
    assert row["base_shift"] < 1.0  # the bound disk lost writes to the moves: its own floor is shorter
    assert row["passes"] == round(300 / 280, 3)
    product = 1.0
    for k in ("traffic", "guard_band", "base_shift", "passes", "coupling"):
        product *= row[k]
    assert abs(product - 300.0 / 200.0) < 0.01
    assert parts["median"]["coupling"] == row["coupling"]
