"""The compiled shedding loop (planners/shed_kernel.py) plans exactly what the Python loop plans.

Each case plans twice, through the compiled loop (``_plan_rebalance(..., compiled=True)``: a case it does not port
raises here instead of falling back) and through Python, and compares the plan files byte for byte.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import pytest

from domain import ClusterSnapshot, dump_plan
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import disk_balance
from planners.disk_balance import BalanceOptions, _plan_rebalance
from planners.workspace import Bounds
from tests.unit.test_planners_blind_spots import large_replica_case

SPEC = GeneratorSpec(brokers=30, disks_per_broker=12, partitions=3000, skew="zipf", seed=1, idcs=("idc-a", "idc-b"),
                     nvme_fraction=0.25)


def _both(snap: ClusterSnapshot, options: BalanceOptions) -> tuple[str, str]:
    return (dump_plan(_plan_rebalance(snap, options, compiled=True)),
            dump_plan(_plan_rebalance(snap, options, compiled=False)))


@pytest.mark.parametrize("spec", [
    SPEC,
    replace(SPEC, seed=2, pools={"shared": 0.6, "pay": 0.4}),
    replace(SPEC, seed=3, dead_brokers=2),
    replace(SPEC, seed=4, brokers=24, racks_per_idc=2, replication_factor=3, skew="uniform"),
    replace(SPEC, seed=5, brokers=12, disks_per_broker=3, partitions=400, idcs=("idc-a", "idc-b", "idc-c")),
], ids=["zipf", "two-pools", "dead-brokers", "two-racks", "three-idcs"])
def test_the_compiled_loop_plans_byte_identically(spec: GeneratorSpec) -> None:
    snap = generate_snapshot(spec)
    compiled, python = _both(snap, BalanceOptions())
    assert compiled == python
    assert '"moves": []' not in compiled  # a plan that moves something


@pytest.mark.parametrize("options", [
    BalanceOptions(evacuate_dead=True),
    BalanceOptions(prefer_intra_broker=False, threshold=1.05),
    BalanceOptions(target=1.02, floor=0.0),
    BalanceOptions(bounds=Bounds(capacity_headroom=0.45)),
], ids=["evacuate-dead", "no-intra", "target-below-threshold", "little-room"])
def test_options_plan_byte_identically(options: BalanceOptions) -> None:
    snap = generate_snapshot(replace(SPEC, seed=6, dead_brokers=1))
    compiled, python = _both(snap, options)
    assert compiled == python


def test_placement_policies_plan_byte_identically() -> None:
    """Topics pinned to IDCs shed within their IDC (the per-IDC disk ranges and the placement deficit)."""
    snap = generate_snapshot(replace(SPEC, seed=7))
    pinned = [replace(t, placement={"idc-a": 2, "idc-b": 1}) if k % 3 == 0 else t
              for k, t in enumerate(snap.topics)]
    snap = replace(snap, topics=tuple(pinned))
    compiled, python = _both(snap, BalanceOptions())
    assert compiled == python


def test_exchanges_run_between_compiled_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large replicas only a swap places: the compiled loop hands the disk to Python's exchange and resumes."""
    snap = large_replica_case()
    calls = 0
    real = disk_balance._exchange

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(disk_balance, "_exchange", counted)
    compiled, python = _both(snap, BalanceOptions())
    assert calls > 0 and compiled == python


def test_bounds_and_a_missing_numba_plan_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Byte bounds are the Python loop's (the compiled one refuses them); without numba the plan is the same."""
    snap = generate_snapshot(replace(SPEC, brokers=12, partitions=600))
    bounded = BalanceOptions(bounds=Bounds(max_bytes=10**12))
    assert dump_plan(disk_balance.plan_rebalance(snap, bounded)) == \
        dump_plan(_plan_rebalance(snap, bounded, compiled=False))
    monkeypatch.setattr(disk_balance, "_compiled_available", lambda: False)
    assert dump_plan(disk_balance.plan_rebalance(snap)) == dump_plan(_plan_rebalance(snap, BalanceOptions(),
                                                                                     compiled=False))


def test_the_compiled_loops_constants_are_the_python_loops() -> None:
    """numba freezes module globals into its cached machine code, so shed_jit writes the Python loop's constants
    out rather than importing them; a change on one side alone would plan differently (and the cache would not
    notice)."""
    from planners import shed_jit, workspace

    assert (shed_jit.EPS, shed_jit.HEAP_MIN_DISKS, shed_jit.HEAP_WALK, shed_jit.HEAP_SLACK, shed_jit.MAX_HEAPS) == \
        (workspace.EPS, workspace.HEAP_MIN_DISKS, workspace.HEAP_WALK, workspace.HEAP_SLACK, workspace.MAX_HEAPS)
    assert (shed_jit.PROGRESS, shed_jit.COVER_ITEMS) == (disk_balance.PROGRESS, disk_balance.COVER_ITEMS)
    assert inspect.signature(workspace.Workspace.best_target).parameters["tries"].default == shed_jit.TRIES
