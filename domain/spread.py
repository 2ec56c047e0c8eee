"""How a replica set spreads over IDCs and racks: the counting rules behind ``idc-placement`` and ``rack-spread``.

Goal
    One definition of the three numbers the placement and rack rules compare — replicas missing from the
    IDCs a placement policy requires, replicas sharing a rack within an IDC, and how many of those an IDC
    with too few alive racks forces — read by the invariant checker (:mod:`domain.invariants`) and by the
    planners' hard goals (``planners.constraints``) alike, so a planner cannot count differently from the
    checker that validates it. The checker stays independent of the planners: both import this module.

Method
    Pure functions over plain maps: ``place`` is broker id -> (IDC, rack), ``racks`` is IDC -> the racks
    of the alive brokers that may take the replicas (the caller picks them: one pool's alive brokers; see
    :func:`racks_by_idc`). A broker id absent from ``place`` is not counted (an unknown broker has no IDC
    or rack; the checker reports it under its own code).

Guarantee
    Deterministic, no side effects; every count is >= 0; a replica set on distinct (IDC, rack) pairs has
    no rack duplicates and no new shared rack; a placement of None or {} has no deficit.

The rack rule (:func:`rack_spread_broken`, the checker's and the planners'): a change of replica set breaks
rack spread when it makes some rack hold more of the partition's replicas than before and more than one (a
*new* shared rack) while more replicas share racks than the pool's racks force. Counting only the number of
shared replicas ("no more than before") let a set that already had one shared pair carry it into an IDC with
a free rack — an IDC migration moved a pair from a-r1 to b-r1 while b-r3 stayed empty, and the count, 1
before and after, passed it.

Cost
    O(RF) per call (O(brokers) for :func:`racks_by_idc`, once per snapshot or check); the loops over a replica
    set run in C (``map``/``filter``/``list.count``) — these are called for every move a planner tries and
    every move the checker checks.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

Place = tuple[str, str]
"""(IDC, rack) of a broker."""


def placement_deficit(replicas: Iterable[int], place: Mapping[int, Place],
                      placement: Mapping[str, int] | None) -> int:
    """Replicas (of known brokers) missing from the IDCs ``placement`` requires (0: the policy is met)."""
    if not placement:
        return 0
    idcs = [where[0] for where in filter(None, map(place.get, replicas))]  # known replicas' IDCs
    missing = 0
    for idc, need in placement.items():
        have = idcs.count(idc)
        if have < need:
            missing += need - have
    return missing


def rack_duplicates(replicas: Iterable[int], place: Mapping[int, Place]) -> int:
    """Known replicas beyond one per (IDC, rack): the replicas minus their distinct (IDC, rack) pairs."""
    known = list(filter(None, map(place.get, replicas)))  # a (IDC, rack) pair is never falsy; None is
    return len(known) - len(set(known))


def unavoidable_rack_duplicates(replicas: Iterable[int], place: Mapping[int, Place],
                                racks: Mapping[str, Collection[str]]) -> int:
    """Rack duplicates forced by an IDC holding more of the (known) replicas than it has ``racks``."""
    idcs = [where[0] for where in filter(None, map(place.get, replicas))]
    forced = 0
    for idc in dict.fromkeys(idcs):
        extra = idcs.count(idc) - len(racks.get(idc, ()))
        if extra > 0:
            forced += extra
    return forced


def new_shared_racks(old: Iterable[int], new: Iterable[int], place: Mapping[int, Place]) -> list[Place]:
    """The (IDC, rack) pairs holding more than one of ``new``'s known replicas and more than of ``old``'s, sorted."""
    before: dict[Place, int] = {}
    for where in filter(None, map(place.get, old)):
        before[where] = before.get(where, 0) + 1
    after: dict[Place, int] = {}
    for where in filter(None, map(place.get, new)):
        after[where] = after.get(where, 0) + 1
    return sorted(where for where, n in after.items() if n > 1 and n > before.get(where, 0))


def fewest_rack_duplicates(rf: int, placement: Mapping[str, int] | None,
                           racks: Mapping[str, Collection[str]]) -> int:
    """The fewest rack duplicates any set of ``rf`` replicas meeting ``placement`` can have on ``racks``: each
    IDC's required replicas beyond its racks, plus the free replicas beyond the racks left over everywhere."""
    need = dict(placement or {})
    forced = sum(max(0, n - len(racks.get(idc, ()))) for idc, n in need.items())
    spare = sum(max(0, len(r) - need.get(idc, 0)) for idc, r in racks.items())
    return forced + max(0, rf - sum(need.values()) - spare)


def rack_spread_broken(old: Sequence[int], new: Sequence[int], place: Mapping[int, Place],
                       racks: Mapping[str, Collection[str]], placement: Mapping[str, int] | None) -> list[Place]:
    """The new shared racks of changing ``old`` into ``new`` when that breaks rack spread, else [].

    Broken: some rack holds more replicas than before and more than one (:func:`new_shared_racks`), and more
    replicas share racks than unavoidable — the fewer of what the set's own IDC counts force
    (:func:`unavoidable_rack_duplicates`) and what any set meeting the placement policy must have
    (:func:`fewest_rack_duplicates`): a duplicate either choice of IDCs avoids is a choice.
    """
    dups = rack_duplicates(new, place)
    if not dups:
        return []
    shared = new_shared_racks(old, new, place)
    if not shared:
        return []
    allowed = min(unavoidable_rack_duplicates(new, place, racks), fewest_rack_duplicates(len(new), placement, racks))
    return shared if dups > allowed else []


def racks_by_idc(places: Iterable[Place]) -> dict[str, set[str]]:
    """IDC -> its racks, from the (IDC, rack) of the brokers that count (e.g. one pool's alive brokers)."""
    out: dict[str, set[str]] = {}
    for idc, rack in places:
        out.setdefault(idc, set()).add(rack)
    return out
