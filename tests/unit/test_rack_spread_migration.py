"""Rack spread across an IDC migration: migrate-idc never puts two replicas of a partition in one rack where the
destination has a free one, and the one checker (so ``plan validate``) rejects a plan that does, naming the
partition and the rack (issue 34)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain import PartitionMove, Plan, apply_plan, check_plan, dump_plan, dump_snapshot
from planners import plan_idc_migration
from planners.idc_migration import with_placement
from tests.support.planner_cases import MB, broker, disk, partition, snapshot_of, topic


def _racks_with_a_shared_pair():
    """idc-a: brokers 1 and 2 share rack a-r1, 3 is in a-r2; the partition [1, 3, 2] already has two replicas in
    a-r1. idc-b has three racks; b-r1's two brokers (4, 5) are the coolest, so a placement that only counts
    rack duplicates ("no more than before") carries the shared pair into b-r1 while b-r3 stays free."""
    cool, warm = [disk("/data1", util=0.05)], [disk("/data1", util=0.30)]
    brokers = [broker(1, "idc-a", "a-r1", disks=[disk("/data1")]), broker(2, "idc-a", "a-r1", disks=[disk("/data1")]),
               broker(3, "idc-a", "a-r2", disks=[disk("/data1")]),
               broker(4, "idc-b", "b-r1", disks=cool), broker(5, "idc-b", "b-r1", disks=cool),
               broker(6, "idc-b", "b-r2", disks=warm), broker(7, "idc-b", "b-r3", disks=warm)]
    return snapshot_of(brokers, [topic("orders", [partition(0, [1, 3, 2], ["/data1"] * 3, bytes_in=MB)],
                                       placement={"idc-a": 2})])


def _racks(snap, replicas):
    rack = {b.id: (b.idc, b.rack) for b in snap.brokers}
    return Counter(rack[b] for b in replicas)


@pytest.mark.parametrize("min_insync", [1, 2])
def test_migrate_idc_never_carries_a_shared_rack_into_the_destination(min_insync: int) -> None:
    from planners import MigrationOptions

    snap = _racks_with_a_shared_pair()
    policy = {"idc-b": 3}
    current = with_placement(snap, ["orders"], policy)
    for step in plan_idc_migration(snap, policy, ["orders"], options=MigrationOptions(min_insync=min_insync)):
        assert check_plan(current, step) == []
        current = apply_plan(current, step)
        for move in step.moves:  # no rack of the destination ever holds two replicas of the partition
            assert all(n == 1 for (idc, _), n in _racks(current, move.replicas).items() if idc == "idc-b")
    final = current.index.partition_by_id[("orders", 0)].replicas
    assert sorted(_racks(current, final)) == [("idc-b", "b-r1"), ("idc-b", "b-r2"), ("idc-b", "b-r3")]


def _hand_edited(snap):
    """The last step of a migration as a careless hand edit would write it: 4 and 5 share rack b-r1, b-r3 is free."""
    staged = with_placement(snap, ["orders"], {"idc-b": 3})
    staged = apply_plan(staged, Plan(cluster="t", kind="migrate-idc",
                                     moves=(PartitionMove("orders", 0, (1, 4, 2), ("/data1",) * 3),)))
    return staged, Plan(cluster="t", kind="migrate-idc",
                        moves=(PartitionMove("orders", 0, (6, 4, 5), ("/data1",) * 3),))


def test_checker_names_the_partition_and_the_rack_of_a_carried_shared_pair() -> None:
    staged, plan = _hand_edited(_racks_with_a_shared_pair())
    violations = check_plan(staged, plan)
    assert [(v.code, v.topic, v.partition) for v in violations] == [("rack-spread", "orders", 0)]
    assert "idc-b/b-r1" in violations[0].message and "brokers 4, 5" in violations[0].message
    # the same count of shared replicas (one pair) as before, but the pair is new: b-r3 was free
    fixed = Plan(cluster="t", kind="migrate-idc", moves=(PartitionMove("orders", 0, (6, 4, 7), ("/data1",) * 3),))
    assert check_plan(staged, fixed) == []


def test_plan_validate_rejects_a_hand_edited_plan_that_breaks_rack_spread(tmp_path: Path) -> None:
    staged, plan = _hand_edited(_racks_with_a_shared_pair())
    (tmp_path / "snap.json").write_text(dump_snapshot(staged))
    (tmp_path / "plan.json").write_text(dump_plan(plan))
    result = subprocess.run([sys.executable, "-m", "controlplane.cli", "plan", "validate", "--snapshot",
                             str(tmp_path / "snap.json"), "--plan", str(tmp_path / "plan.json")],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    assert result.returncode == 1, result.stdout + result.stderr
    text = " ".join(result.stdout.split())
    assert "rack-spread" in text and "orders" in text and "idc-b/b-r1" in text and "brokers 4, 5" in text


def test_an_unavoidable_shared_rack_stays_allowed() -> None:
    """idc-b with two racks and a policy of three replicas there: one shared rack is forced, not a violation."""
    brokers = [broker(b, "idc-a", f"a-r{b}", disks=[disk("/data1")]) for b in (1, 2, 3)]
    brokers += [broker(4, "idc-b", "b-r1", disks=[disk("/data1")]), broker(5, "idc-b", "b-r1", disks=[disk("/data1")]),
                broker(6, "idc-b", "b-r2", disks=[disk("/data1")])]
    snap = snapshot_of(brokers, [topic("orders", [partition(0, [1, 2, 3], ["/data1"] * 3)], placement={"idc-a": 3})])
    policy = {"idc-b": 3}
    current = with_placement(snap, ["orders"], policy)
    for step in plan_idc_migration(snap, policy, ["orders"]):
        assert check_plan(current, step) == []
        current = apply_plan(current, step)
    final = current.index.partition_by_id[("orders", 0)].replicas
    assert sorted(final) == [4, 5, 6]


def test_json_of_the_hand_edited_plan_round_trips() -> None:
    _, plan = _hand_edited(_racks_with_a_shared_pair())
    assert json.loads(dump_plan(plan))["reassignment"]["partitions"][0]["replicas"] == [6, 4, 5]


@st.composite
def _cases(draw: st.DrawFn):
    """A small pool over two IDCs with random racks (some shared), a partition's old set and a hand-edited new one."""
    n = draw(st.integers(4, 8))
    places = [(idc, draw(st.sampled_from(["r1", "r2", "r3"])))
              for idc in ["idc-a", "idc-b", *(draw(st.sampled_from(["idc-a", "idc-b"])) for _ in range(n - 2))]]
    old = draw(st.lists(st.integers(1, n), min_size=3, max_size=3, unique=True))
    new = draw(st.lists(st.integers(1, n), min_size=3, max_size=3, unique=True))
    placement = draw(st.sampled_from([None, {"idc-a": 1}, {"idc-b": 2}, {"idc-a": 2, "idc-b": 1}]))
    return places, old, new, placement


@given(_cases())
@settings(max_examples=150, deadline=None)
def test_an_accepted_plan_adds_a_shared_rack_only_where_every_compliant_set_has_one(case) -> None:
    """Whatever a plan does, when the checker accepts it and a rack gained a second replica, no set of the pool's
    brokers that meets the placement policy has fewer replicas sharing racks (brute force over every set)."""
    from itertools import combinations

    from domain.spread import new_shared_racks, placement_deficit, rack_duplicates

    places, old, new, placement = case
    brokers = [broker(b, idc, rack, disks=[disk("/data1")]) for b, (idc, rack) in enumerate(places, start=1)]
    snap = snapshot_of(brokers, [topic("t", [partition(0, old, ["/data1"] * 3)], placement=placement)])
    plan = Plan(cluster="t", kind="rebalance", moves=(PartitionMove("t", 0, tuple(new), ("/data1",) * 3),))
    place = {b: p for b, p in enumerate(places, start=1)}
    accepted = not any(v.code == "rack-spread" for v in check_plan(snap, plan))
    if accepted and new_shared_racks(old, new, place):
        compliant = [rack_duplicates(s, place) for s in combinations(place, 3)
                     if not placement_deficit(s, place, placement)]
        assert rack_duplicates(new, place) <= min(compliant, default=3)
