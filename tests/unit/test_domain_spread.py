"""The replica-spread counting rules shared by the invariant checker and the planners' hard goals."""

from __future__ import annotations

from domain.spread import placement_deficit, rack_duplicates, racks_by_idc, unavoidable_rack_duplicates

# brokers 1-3 in idc-a (racks r1, r1, r2), 4-5 in idc-b (r1, r2); 9 is not in the map (unknown)
PLACE = {1: ("idc-a", "r1"), 2: ("idc-a", "r1"), 3: ("idc-a", "r2"), 4: ("idc-b", "r1"), 5: ("idc-b", "r2")}


def test_placement_deficit_counts_known_replicas_missing_from_the_required_idcs() -> None:
    assert placement_deficit((1, 3, 4), PLACE, {"idc-a": 2, "idc-b": 1}) == 0
    assert placement_deficit((1, 2, 3), PLACE, {"idc-a": 2, "idc-b": 1}) == 1
    assert placement_deficit((1, 9, 9), PLACE, {"idc-a": 2, "idc-b": 1}) == 2  # unknown brokers count nowhere
    assert placement_deficit((1, 2, 3), PLACE, {"idc-c": 1}) == 1
    assert placement_deficit((1, 2), PLACE, None) == placement_deficit((1, 2), PLACE, {}) == 0


def test_rack_duplicates_are_replicas_beyond_one_per_idc_and_rack() -> None:
    assert rack_duplicates((1, 3, 4), PLACE) == 0
    assert rack_duplicates((1, 2, 4), PLACE) == 1  # r1 of idc-a twice
    assert rack_duplicates((1, 4), PLACE) == 0  # the same rack name in two IDCs is two racks
    assert rack_duplicates((1, 2, 9, 9), PLACE) == 1  # unknown brokers are not counted
    assert rack_duplicates((), PLACE) == 0


def test_unavoidable_duplicates_come_from_idcs_with_fewer_racks_than_replicas() -> None:
    racks = racks_by_idc(PLACE[b] for b in (1, 2, 3, 4))  # broker 5 dead: idc-b has one alive rack
    assert racks == {"idc-a": {"r1", "r2"}, "idc-b": {"r1"}}
    assert unavoidable_rack_duplicates((1, 3, 4), PLACE, racks) == 0
    assert unavoidable_rack_duplicates((1, 2, 3), PLACE, racks) == 1  # three replicas, two racks in idc-a
    assert unavoidable_rack_duplicates((4, 5, 1), PLACE, racks) == 1  # two replicas in idc-b, one alive rack
    assert unavoidable_rack_duplicates((1, 2, 3), PLACE, {}) == 3  # no rack may take them at all
    assert unavoidable_rack_duplicates((9, 9), PLACE, racks) == 0
