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
    no rack duplicates; a placement of None or {} has no deficit.

Cost
    O(RF) per call (O(brokers) for :func:`racks_by_idc`, once per snapshot or check); the loops over a replica
    set run in C (``map``/``filter``/``list.count``) — these are called for every move a planner tries and
    every move the checker checks.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

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


def racks_by_idc(places: Iterable[Place]) -> dict[str, set[str]]:
    """IDC -> its racks, from the (IDC, rack) of the brokers that count (e.g. one pool's alive brokers)."""
    out: dict[str, set[str]] = {}
    for idc, rack in places:
        out.setdefault(idc, set()).add(rack)
    return out
