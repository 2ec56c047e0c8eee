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


def _deficit_by_counts(replicas: tuple[int, ...], place: dict[int, tuple[str, str]],
                       placement: dict[str, int] | None) -> int:
    if not placement:
        return 0
    counts: dict[str, int] = {}
    for b in replicas:
        if b in place:
            counts[place[b][0]] = counts.get(place[b][0], 0) + 1
    return sum(max(0, need - counts.get(idc, 0)) for idc, need in placement.items())


def _duplicates_by_set(replicas: tuple[int, ...], place: dict[int, tuple[str, str]]) -> int:
    known = [place[b] for b in replicas if b in place]
    return len(known) - len(set(known))


def _unavoidable_by_counts(replicas: tuple[int, ...], place: dict[int, tuple[str, str]],
                           racks: dict[str, set[str]]) -> int:
    by_idc: dict[str, int] = {}
    for b in replicas:
        if b in place:
            by_idc[place[b][0]] = by_idc.get(place[b][0], 0) + 1
    return sum(max(0, n - len(racks.get(idc, ()))) for idc, n in by_idc.items())


def test_counts_in_c_loops_equal_the_plain_definitions() -> None:
    """The map/filter/list.count forms (#20: they run for every move tried and checked) against the plain loops."""
    import random
    rng = random.Random(7)
    place = {b: (f"idc-{rng.randrange(3)}", f"r{rng.randrange(3)}") for b in range(12)}
    racks = racks_by_idc(place[b] for b in range(12) if b % 4)
    for _ in range(3000):
        replicas = tuple(rng.randrange(15) for _ in range(rng.randrange(6)))  # 12-14 unknown, duplicates too
        placement = rng.choice([None, {}, {"idc-0": 2}, {"idc-1": 1, "idc-2": 1}, {"idc-3": 1, "idc-0": 0}])
        assert placement_deficit(replicas, place, placement) == _deficit_by_counts(replicas, place, placement)
        assert rack_duplicates(replicas, place) == _duplicates_by_set(replicas, place)
        assert unavoidable_rack_duplicates(replicas, place, racks) == _unavoidable_by_counts(replicas, place, racks)
