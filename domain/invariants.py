"""The one shared plan invariant checker: every plan is checked by it in tests and before execution.

Hard constraints checked (each violation carries a stable ``code``):

``cluster-mismatch``          the plan names another cluster
``unknown-partition``         a move or leader change names a partition the snapshot lacks
``duplicate-entry``           a partition appears twice in the moves (or twice in the leaders)
``replication-factor``        a move changes the number of replicas
``duplicate-broker``          a target replica set names a broker twice
``unknown-broker``            a target broker does not exist
``target-not-alive``          a new replica or log dir lands on a dead / maintenance / draining broker
``unknown-log-dir``           a log dir does not belong to its broker
``pool-isolation``            replicas outside the topic's resource pool (and no fewer than before)
``idc-placement``             the IDC placement policy is missed (and not by less than before)
``rack-spread``               a rack gains a second (third, …) replica of the partition where the pool's racks
                              could avoid it (:func:`domain.spread.rack_spread_broken`)
``capacity-headroom``         a disk that gains bytes ends above ``1 - capacity_headroom`` of capacity
``leader-not-replica``        a leader change names a broker outside the final replica set
``leader-not-alive``          a leader change names a broker that is not alive
``plan-limit``                the plan moves more bytes or partitions than allowed
``topic-exists``              a new topic's assignment (:func:`check_new_topic`) names an existing topic

:func:`check_new_topic` checks the explicit assignment of a topic to be created (pre-allocation) with
the same codes, against absolute rather than "no worse than before" rules: every replica alive, in
the topic's pool and on a known log dir; the placement policy met; rack duplicates only where
unavoidable; no replica on a disk already above its capacity headroom.

"Not worse than before" lets a plan fix a broken partition step by step; a plan may never break one.

Restoring a recorded state: a plan of kind ``restore`` checked with ``recorded`` (the replica sets a drain
recorded before it moved them) may return a partition to exactly its recorded replica set even when that
set breaks a relative rule (pool-isolation, idc-placement, rack-spread) — the "before" of those rules is
then the recorded set, which the operator asked to get back. Every other rule still applies (targets
alive and known, capacity, RF, leaders, limits), and no other plan, or move, is judged differently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from domain.apply import PlanEffect, plan_effect
from domain.model import ClusterSnapshot, DiskId, Partition, Topic
from domain.plan import Plan
from domain.spread import (
    Place,
    placement_deficit,
    rack_duplicates,
    rack_spread_broken,
    racks_by_idc,
)

RESTORE = "restore"
"""Plan kind that may bring back a recorded state (see ``check_plan``'s ``recorded``)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken constraint."""

    code: str
    message: str
    topic: str | None = None
    partition: int | None = None

    def __str__(self) -> str:
        where = f" {self.topic}-{self.partition}" if self.topic is not None else ""
        return f"[{self.code}]{where}: {self.message}"


@dataclass(frozen=True, slots=True)
class CheckLimits:
    """Configurable bounds. ``capacity_headroom`` is the fraction of every disk that must stay free."""

    capacity_headroom: float = 0.10
    max_bytes_to_move: int | None = None
    max_partitions_to_move: int | None = None


def check_plan(snapshot: ClusterSnapshot, plan: Plan, limits: CheckLimits | None = None, *,
               recorded: Mapping[tuple[str, int], tuple[int, ...]] | None = None,
               effect: PlanEffect | None = None) -> list[Violation]:
    """Every violation of ``plan`` against ``snapshot``; an empty list means the plan is valid.

    ``recorded`` (only for a plan of kind ``restore``): partition -> the replica set recorded before a
    drain moved it; a move back to exactly that set is judged against it (see the module docstring).
    ``effect``: :func:`domain.apply.plan_effect` of this very plan when the caller already has it (the
    checks are the same; it is computed here otherwise). The final replica sets and disk usage are read
    from the effect, never from a rebuilt after-snapshot.
    Deterministic order (plan order, then disks in snapshot order). O(moves x RF + disks).
    """
    restoring = recorded if recorded is not None and plan.kind == RESTORE else {}
    limits = limits or CheckLimits()
    violations: list[Violation] = []
    if plan.cluster != snapshot.cluster:
        violations.append(Violation("cluster-mismatch",
                                    f"plan is for cluster {plan.cluster!r}, snapshot is {snapshot.cluster!r}"))
    index = snapshot.index
    seen: set[tuple[str, int]] = set()
    moved_bytes = moved_partitions = 0
    facts = _BrokerFacts(snapshot)
    by_id = index.partition_by_id
    for move in plan.moves:
        pid = move.id
        current = by_id.get(pid)
        if current is None:
            violations.append(Violation("unknown-partition", "no such partition in the snapshot", *pid))
            continue
        if pid in seen:
            violations.append(Violation("duplicate-entry", "partition appears more than once", *pid))
            continue
        seen.add(pid)
        old_pairs = set(zip(current.replicas, current.log_dirs, strict=True))
        if None in move.log_dirs:
            copies = 0
            for b, d in zip(move.replicas, move.log_dirs, strict=True):
                if b not in current.replicas or (d is not None and (b, d) not in old_pairs):
                    copies += 1
        else:  # every dir named: a copy is a pair the partition did not have (a new broker's pair is not either)
            copies = len(move.replicas) - sum(map(old_pairs.__contains__, zip(move.replicas, move.log_dirs,
                                                                               strict=True)))
        moved_bytes += copies * current.size_bytes
        moved_partitions += copies > 0
        back = restoring.get(pid)
        found = _move_violations(snapshot, facts, current, old_pairs, move.replicas, move.log_dirs,
                                 restoring=back is not None and tuple(back) == tuple(move.replicas))
        if found:
            violations += found

    effect = effect if effect is not None else plan_effect(snapshot, plan)
    leader_seen: set[tuple[str, int]] = set()
    for change in plan.leaders:
        final = effect.final(snapshot, change.id)
        if final is None:
            violations.append(Violation("unknown-partition", "no such partition in the snapshot", *change.id))
            continue
        if change.id in leader_seen:
            violations.append(Violation("duplicate-entry", "leader change appears more than once", *change.id))
        leader_seen.add(change.id)
        if change.leader not in final.replicas:
            violations.append(Violation("leader-not-replica",
                                        f"broker {change.leader} is not in the final replicas "
                                        f"{list(final.replicas)}", *change.id))
        else:
            broker = index.broker_by_id.get(change.leader)
            if broker is None or not broker.is_alive:
                state = broker.state.value if broker else "unknown"
                violations.append(Violation("leader-not-alive", f"broker {change.leader} is {state}", *change.id))

    violations += _capacity_violations(snapshot, effect.used_delta, limits.capacity_headroom)
    if limits.max_bytes_to_move is not None and moved_bytes > limits.max_bytes_to_move:
        violations.append(Violation("plan-limit", f"moves {moved_bytes} bytes, limit {limits.max_bytes_to_move}"))
    if limits.max_partitions_to_move is not None and moved_partitions > limits.max_partitions_to_move:
        violations.append(Violation("plan-limit",
                                    f"moves {moved_partitions} partitions, limit {limits.max_partitions_to_move}"))
    return violations


class _BrokerFacts:
    """Per-broker facts the move checks read, gathered once per :func:`check_plan` call. O(brokers)."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        brokers = snapshot.brokers
        self.broker = {b.id: b for b in brokers}
        self.pool = {b.id: b.pool for b in brokers}
        self.idc = {b.id: b.idc for b in brokers}
        self.place = {b.id: (b.idc, b.rack) for b in brokers}
        self.alive = {b.id: b.is_alive for b in brokers}
        self.disks = snapshot.index.disk_by_id
        self._racks: dict[str, dict[str, set[str]]] = {}

    def racks(self, pool: str) -> dict[str, set[str]]:
        """IDC -> the racks of ``pool``'s alive brokers (computed once per pool and call)."""
        got = self._racks.get(pool)
        if got is None:
            got = self._racks[pool] = racks_by_idc(
                (b.idc, b.rack) for b in self.broker.values() if b.pool == pool and b.is_alive)
        return got


def _move_violations(snapshot: ClusterSnapshot, facts: _BrokerFacts, current: Partition,
                     old_pairs: set[tuple[int, str]], replicas: tuple[int, ...], log_dirs: tuple[str | None, ...],
                     *, restoring: bool = False) -> list[Violation]:
    tp = current.id
    out: list[Violation] = []
    if len(replicas) != len(current.replicas):
        out.append(Violation("replication-factor",
                             f"{len(current.replicas)} replicas become {len(replicas)}", *tp))
    new_set = set(replicas)
    if len(new_set) != len(replicas):
        for broker_id, count in sorted(Counter(replicas).items()):
            if count > 1:
                out.append(Violation("duplicate-broker", f"broker {broker_id} appears {count} times", *tp))
    structural_ok = True
    alive, disks = facts.alive, facts.disks
    for broker_id, path in zip(replicas, log_dirs, strict=True):
        is_alive = alive.get(broker_id)
        if is_alive is None:
            out.append(Violation("unknown-broker", f"broker {broker_id} does not exist", *tp))
            structural_ok = False
            continue
        if path is not None and (broker_id, path) not in disks:
            out.append(Violation("unknown-log-dir", f"broker {broker_id} has no log dir {path!r}", *tp))
            structural_ok = False
        if not is_alive and (broker_id not in current.replicas
                             or (path is not None and (broker_id, path) not in old_pairs)):
            out.append(Violation("target-not-alive",
                                 f"broker {broker_id} is {facts.broker[broker_id].state.value}", *tp))
    if not structural_ok or restoring:  # a recorded state brought back is its own "before"
        return out

    topic = snapshot.index.topic_by_name[current.topic]
    pool_of = facts.pool
    outside_after = len(replicas) - list(map(pool_of.__getitem__, replicas)).count(topic.pool)
    if outside_after and tuple(replicas) != current.replicas \
            and outside_after >= sum(1 for b in current.replicas if pool_of.get(b) != topic.pool):
        out.append(Violation("pool-isolation", f"{outside_after} replica(s) outside pool {topic.pool!r}", *tp))
    if len(new_set) == len(replicas) == len(current.replicas) and new_set == set(current.replicas):
        return out  # the same brokers, each once: placement and rack spread are unchanged

    placement = snapshot.placement_of(topic)
    place = facts.place
    if placement:
        after = placement_deficit(replicas, place, placement)
        if after and after >= placement_deficit(current.replicas, place, placement):
            idcs = dict(sorted(Counter(facts.idc[b] for b in replicas).items()))
            out.append(Violation("idc-placement", f"policy {dict(placement)} not met by {idcs}", *tp))

    dups_after = rack_duplicates(replicas, place)
    if not dups_after:  # no replica shares a rack: never more than before (the usual case, one count)
        return out
    shared = rack_spread_broken(current.replicas, replicas, place, facts.racks(topic.pool), placement)
    if shared:
        out.append(Violation("rack-spread", f"{_shared_racks_text(shared, replicas, place)} ({dups_after} "
                                            f"replica(s) share a rack within an IDC, was "
                                            f"{rack_duplicates(current.replicas, place)}; the pool's racks "
                                            f"leave room to avoid it)", *tp))
    return out


def _capacity_violations(before: ClusterSnapshot, used_delta: Mapping[DiskId, int],
                         headroom: float) -> list[Violation]:
    """Disks that gain bytes and end above ``1 - headroom`` of capacity (usage after = max(0, before + delta),
    as :func:`domain.apply.apply_plan` sets it)."""
    out = []
    for b in before.brokers:
        for d in b.disks:
            delta = used_delta.get((b.id, d.path), 0)
            if not delta:
                continue
            used_after = max(0, d.used_bytes + delta)
            limit = d.capacity_bytes * (1.0 - headroom)
            if used_after > d.used_bytes and used_after > limit:
                out.append(Violation("capacity-headroom",
                                     f"disk {b.id}:{d.path} would hold {used_after} bytes, "
                                     f"limit {int(limit)} ({headroom:.0%} headroom)"))
    return out


def check_new_topic(snapshot: ClusterSnapshot, topic: Topic, limits: CheckLimits | None = None) -> list[Violation]:
    """Every violation of creating ``topic`` (with its partitions' explicit assignment) in ``snapshot``.

    Deterministic order (partition order). O(partitions x RF + brokers).
    """
    limits = limits or CheckLimits()
    index = snapshot.index
    out: list[Violation] = []
    if topic.name in index.topic_by_name:
        out.append(Violation("topic-exists", f"topic {topic.name!r} already exists", topic.name))
    placement = topic.placement if topic.placement is not None else snapshot.default_placement
    facts = _BrokerFacts(snapshot)
    rf = len(topic.partitions[0].replicas) if topic.partitions else 0
    for p in topic.partitions:
        tp = (p.topic, p.partition)
        if len(p.replicas) != rf or len(p.log_dirs) != len(p.replicas):
            out.append(Violation("replication-factor", f"{len(p.replicas)} replicas / {len(p.log_dirs)} log dirs, "
                                                       f"topic RF {rf}", *tp))
            continue
        for broker_id, count in sorted(Counter(p.replicas).items()):
            if count > 1:
                out.append(Violation("duplicate-broker", f"broker {broker_id} appears {count} times", *tp))
        known = True
        for broker_id, path in zip(p.replicas, p.log_dirs, strict=True):
            broker = index.broker_by_id.get(broker_id)
            if broker is None:
                out.append(Violation("unknown-broker", f"broker {broker_id} does not exist", *tp))
                known = False
                continue
            disk = index.disk_by_id.get((broker_id, path))
            if disk is None:
                out.append(Violation("unknown-log-dir", f"broker {broker_id} has no log dir {path!r}", *tp))
                known = False
                continue
            if not broker.is_alive:
                out.append(Violation("target-not-alive", f"broker {broker_id} is {broker.state.value}", *tp))
            if broker.pool != topic.pool:
                out.append(Violation("pool-isolation", f"broker {broker_id} is outside pool {topic.pool!r}", *tp))
            limit = disk.capacity_bytes * (1.0 - limits.capacity_headroom)
            if disk.used_bytes + p.size_bytes > limit:
                out.append(Violation("capacity-headroom", f"disk {broker_id}:{path} holds {disk.used_bytes} bytes, "
                                                          f"limit {int(limit)}", *tp))
        if not known:
            continue
        if placement and placement_deficit(p.replicas, facts.place, placement):
            idcs = dict(sorted(Counter(index.broker_by_id[b].idc for b in p.replicas).items()))
            out.append(Violation("idc-placement", f"policy {dict(placement)} not met by {idcs}", *tp))
        shared = rack_spread_broken((), p.replicas, facts.place, facts.racks(topic.pool), placement)
        if shared:  # the plans' rule, from no replicas at all
            out.append(Violation("rack-spread", f"{_shared_racks_text(shared, p.replicas, facts.place)} "
                                                f"({rack_duplicates(p.replicas, facts.place)} replica(s) "
                                                "share a rack within an IDC; the pool's racks leave room to avoid "
                                                "it)", *tp))
    return out


def _shared_racks_text(shared: list[Place], replicas: tuple[int, ...], place: Mapping[int, Place]) -> str:
    """'rack IDC/RACK would hold brokers B, B' for each rack of ``shared`` (a rack-spread violation's subject)."""
    return "; ".join(f"rack {idc}/{rack} would hold brokers "
                     f"{', '.join(str(b) for b in replicas if place.get(b) == (idc, rack))}" for idc, rack in shared)


def preallocated_topic(snapshot: ClusterSnapshot, plan: Plan) -> Topic | None:
    """The new topic a ``preallocate`` plan creates (its moves are the new partitions' assignment), or None when
    ``plan`` is not a pre-allocation of one topic absent from ``snapshot``. Its pool is its first replica's
    broker's pool; each partition's leader its first replica."""
    new = {m.topic for m in plan.moves} - set(snapshot.index.topic_by_name)
    if plan.kind != "preallocate" or len(new) != 1 or plan.leaders or len(new) != len({m.topic for m in plan.moves}):
        return None
    first = snapshot.index.broker_by_id.get(plan.moves[0].replicas[0]) if plan.moves[0].replicas else None
    parts = tuple(Partition(topic=m.topic, partition=m.partition, replicas=m.replicas,
                            leader=m.replicas[0] if m.replicas else None, isr=m.replicas,
                            log_dirs=tuple(d if d is not None else "" for d in m.log_dirs))
                  for m in plan.moves)
    return Topic(name=plan.moves[0].topic, partitions=parts, pool=first.pool if first else "shared")


def check_any_plan(snapshot: ClusterSnapshot, plan: Plan, limits: CheckLimits | None = None) -> list[Violation]:
    """:func:`check_new_topic` for a pre-allocation plan (:func:`preallocated_topic`), :func:`check_plan` else."""
    topic = preallocated_topic(snapshot, plan)
    return check_new_topic(snapshot, topic, limits) if topic is not None else check_plan(snapshot, plan, limits)
