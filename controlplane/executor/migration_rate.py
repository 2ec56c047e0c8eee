"""Migration throttle: per-broker KIP-73 / KIP-113 rates from live disk headroom and a time-of-day schedule.

Pure computation, recomputed every pass (a feedback controller on measured util). Inputs: the copy
*flows* in flight (source disk -> destination disk), the live load of every disk (util, bytes/s,
throughput ceiling), the migration bytes/s each disk carried over the last interval, and the rates
in force.

1. **Budgets** (:func:`disk_budgets`): a disk's own load is ``u0 = util - migration / bytes-per-util``
   (bytes-per-util measured); migration may add ``(threshold - headroom - u0) x bytes-per-util``.
   NIC directions are budgets too when the NIC capacity is given.
2. **Allocation** (:func:`fair_shares`): a broker rate is shared equally by the replicas it throttles,
   so the unknowns are per-broker *shares*; they rise together (max-min fair, exact water levels) and
   each stops when a disk it controls — the follower rate for what its broker's disks write, the leader
   rate for what they read — reaches its budget. A share is then lowered to what its copies can use.
3. **Finishing copies**: copies that end before the next pass leave their broker rate to fewer; the
   shares are chosen so that the copies left behind still fit (``after_finish`` resources) — counting a
   finishing copy among those left behind when another finishing copy shares one of its rates (they end
   one after another, and the later one runs at the bigger share meanwhile).
4. **Limits**: rises are applied by ``gain`` (falls at once), clamped to ``[floor, schedule ceiling]``,
   never below the catch-up floor (Σ ingress of a broker's copies x :data:`CATCH_UP_MARGIN`), and a rate
   one of whose copies touches a disk without live data rises no further (no data, no headroom).
5. **Replication first**: a self-healing execution's copies carry a heal floor (:func:`heal_floors`, their
   share of the allowed heal rate the loop recorded on the execution); it is added to the catch-up floor, so
   neither the schedule ceiling nor a protection's ceiling (disk or leased line) slows a heal below it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from collectors.disk_rates import DiskRate
from domain.throttles import ALTER_DIRS_RATE, FOLLOWER_RATE, LEADER_RATE

DiskKey = tuple[int, str]
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgG]?)(?:i?B)?(?:/s)?\s*$")


def parse_rate(text: str) -> float:
    """``"50MB"``, ``"1.5G"``, ``"800k"`` or plain bytes/s -> bytes/s (decimal units)."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"bad rate {text!r}: use bytes/s or a number with k/M/G")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()]


@dataclass(frozen=True)
class Window:
    """From ``start`` to ``end`` minute of the day (UTC), migrations may use at most ``rate`` bytes/s."""

    start: int
    end: int
    rate: float

    def contains(self, minute: int) -> bool:
        """True when ``minute`` of the day falls in the window (windows may wrap midnight)."""
        if self.start <= self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end


@dataclass(frozen=True)
class Schedule:
    """Time-of-day ceilings; outside every window the ``default`` ceiling applies."""

    windows: tuple[Window, ...] = ()
    default: float = math.inf

    @staticmethod
    def parse(text: str, default: float = math.inf) -> Schedule:
        """``"22:00-06:00=200MB,06:00-22:00=40MB"`` (UTC). Raises ValueError naming the bad part."""
        windows = []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            m = re.match(r"^(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})=(.+)$", part)
            if m is None:
                raise ValueError(f"bad schedule window {part!r}: expected HH:MM-HH:MM=RATE")
            h1, m1, h2, m2 = (int(x) for x in m.groups()[:4])
            if h1 > 24 or h2 > 24 or m1 > 59 or m2 > 59:
                raise ValueError(f"bad time in schedule window {part!r}")
            windows.append(Window(h1 * 60 + m1, h2 * 60 + m2, parse_rate(m.group(5))))
        return Schedule(tuple(windows), default)

    def ceiling(self, epoch_s: float) -> float:
        """The ceiling in force at ``epoch_s`` (first matching window wins)."""
        moment = datetime.fromtimestamp(epoch_s, UTC)
        minute = moment.hour * 60 + moment.minute
        for w in self.windows:
            if w.contains(minute):
                return w.rate
        return self.default


@dataclass(frozen=True)
class MigrationRatePolicy:
    """How rates are chosen: ``mode`` is ``adaptive`` or ``fixed`` (``fixed_rate`` everywhere)."""

    mode: str = "adaptive"
    util_threshold: float = 0.7
    floor: float = 1e6
    ceiling: float = 400e6
    initial: float = 20e6
    fixed_rate: float = 50e6
    gain: float = 1.0
    """Fraction of a computed rise applied per pass (falls are immediate): 1 trusts the budget model."""
    headroom: float = 0.03
    """Util kept free below the threshold for load no pass can foresee (a producer burst starting between
    passes is only seen by the next one): copies are planned up to ``util_threshold - headroom``."""
    schedule: Schedule = field(default_factory=Schedule)
    nic_bytes_per_s: float | None = None
    """Network capacity of each broker (each direction); ``None``: network headroom is not considered."""
    choice: str = "joint"
    """Adaptive only: ``joint`` (default) chooses per copy the KIP-73 side it is throttled on and the rates for
    makespan (:mod:`.migration_sides`, catch-up floors inside its util budget) — 1.14× the reads + writes floor
    vs 1.29× with ``fair`` on bench_executor's lock-step scenario (medians of 20 seeds), worst tick util 0.76 vs
    0.79, and no slower
    than ``fair`` on the rolling-release drain of tests/integration/test_executor_cli.py; ``fair`` throttles
    every copy on both sides, max-min fair (:func:`fair_shares`), the choice before 2026-11-28."""
    follower_reads: bool = False
    """Adaptive only: a copy whose leader's disk is the busier may read from a kept in-sync follower made leader
    for the move (:mod:`.read_source`): bench_executor -2.8 % sim-s over 20 seeds (-1.1 % with fixed 5 s passes;
    each leader change a reconciled reorder then election, three passes more per such copy), at the price of two
    leader changes clients see per such partition and two more reassignment entries (the reorders)."""

    def __post_init__(self) -> None:
        if self.mode not in ("adaptive", "fixed"):
            raise ValueError(f"throttle mode must be adaptive or fixed, got {self.mode!r}")
        if self.choice not in ("joint", "fair"):
            raise ValueError(f"throttle choice must be joint or fair, got {self.choice!r}")
        if not (0 < self.util_threshold <= 1.0):
            raise ValueError("util threshold must be in (0, 1]")
        if not (0 < self.floor <= self.ceiling) or not math.isfinite(self.floor):
            raise ValueError("need 0 < floor <= ceiling")
        if not (0 < self.gain <= 1):
            raise ValueError("gain must be in (0, 1]")
        if not (0 <= self.headroom < self.util_threshold):
            raise ValueError("headroom must be in [0, util threshold)")
        if self.follower_reads and self.mode != "adaptive":
            raise ValueError("follower reads need the adaptive throttle (a fixed rate would never use them)")

    @property
    def planning_target(self) -> float:
        """The util copies are planned up to: ``util_threshold - headroom`` (the rule written once)."""
        return self.util_threshold - self.headroom


@dataclass(frozen=True)
class CopyFlow:
    """One replica copy in flight: ``kind`` is ``move`` (inter-broker) or ``future`` (intra-broker)."""

    key: str
    kind: str
    src_broker: int
    dst_broker: int
    src_disk: DiskKey | None
    dst_disk: DiskKey | None
    observed_bytes_per_s: float = 0.0
    ingress_bytes_per_s: float = 0.0
    """What producers write to the partition: a throttled copy slower than this never catches up."""
    remaining_bytes: float | None = None
    """Bytes still to copy (``None``: unknown)."""
    tp: tuple[str, int] | None = None
    """The partition copied (its throttled-replica list entries name it)."""
    floor_bytes_per_s: float = 0.0
    """A rate this copy must never be throttled below, whatever protection or policy ceiling holds: the share
    of a self-healing execution's allowed heal rate (:func:`heal_floors`; replication first)."""


CATCH_UP_MARGIN = 1.2


def catch_up_floors(flows: Sequence[CopyFlow]) -> dict[tuple[int, str], float]:
    """Per ``(broker, config key)``: the rate below which its copies can never finish (KIP-73 throttles the
    follower's whole fetch, new writes included) — Σ ingress of its flows x :data:`CATCH_UP_MARGIN`."""
    out: dict[tuple[int, str], float] = {}
    for f in flows:
        keys = ([(f.dst_broker, FOLLOWER_RATE), (f.src_broker, LEADER_RATE)] if f.kind == "move"
                else [(f.dst_broker, ALTER_DIRS_RATE)])
        for key in keys:
            out[key] = out.get(key, 0.0) + f.ingress_bytes_per_s * CATCH_UP_MARGIN + f.floor_bytes_per_s
    return out


def heal_floors(flows: Sequence[CopyFlow], rate_bytes_per_s: float) -> list[CopyFlow]:
    """The copies of a self-healing execution with their floors: the allowed heal rate split evenly across the
    copies in flight (each copy restores a replica of at-risk data; together they never run below the rate
    that finishes the heal within its bound). ``rate_bytes_per_s`` <= 0: the flows unchanged."""
    if rate_bytes_per_s <= 0 or not flows:
        return list(flows)
    share = rate_bytes_per_s / len(flows)
    return [replace(f, floor_bytes_per_s=share) for f in flows]


Role = tuple[int, str]
"""``(broker, config key)``: one KIP-73 / KIP-113 rate, shared equally by the copies it throttles."""

DELIVERY_MAX = 1.3
"""Fixed mode: a broker rate is set at most this many times ``fixed_rate`` so that its copies run at
``fixed_rate``. Kafka's replication quota delivers less than its bound: a fetcher whose quota (a rate over 11
one-second samples) is exceeded pauses ``replica.fetch.backoff.ms`` (1 s) before it asks again, and the leader's
and the follower's quotas both hold the same bytes — 0.76-0.88x of a 4 MB/s KIP-73 or KIP-113 rate on
``guardian lab`` (Kafka 4.2, tests/e2e/test_lab_governing.py), so a rate set to exactly what was asked copies
~20 % slower than asked. kafkasim delivers its bound, and nothing changes there."""
DELIVERY_DEADBAND = 0.05
DELIVERY_GAIN = 0.5


def delivering_rate(role: Role, flows: Sequence[CopyFlow], previous: Mapping[Role, float], base: float) -> float:
    """Fixed mode: the rate to set for ``role`` so that its copies get ``base`` bytes/s between them.

    The copies' measured rate (Σ ``observed_bytes_per_s``) over the rate in force gives what Kafka delivers of a
    rate; the rate moves by :data:`DELIVERY_GAIN` of the way to ``base`` over that fraction, within
    ``[base, base x DELIVERY_MAX]``; within :data:`DELIVERY_DEADBAND` of ``base``, or with nothing measured yet
    (a copy's first pass), it stays. Never below ``base``: a copy slower for another reason (a busy disk, a
    finishing copy) costs at most the bounded rise."""
    prev = min(max(previous.get(role, base), base), base * DELIVERY_MAX)
    measured = sum(f.observed_bytes_per_s for f in flows if role in flow_roles(f))
    if measured <= 0 or not math.isfinite(measured) or abs(measured / base - 1) <= DELIVERY_DEADBAND:
        return prev
    want = prev * base / measured
    return min(max(prev + DELIVERY_GAIN * (want - prev), base), base * DELIVERY_MAX)


def flow_roles(f: CopyFlow) -> tuple[Role, ...]:
    """The rates that bound a flow: follower (destination) and leader (source), or alter-log-dirs."""
    if f.kind == "move":
        return (f.dst_broker, FOLLOWER_RATE), (f.src_broker, LEADER_RATE)
    return ((f.dst_broker, ALTER_DIRS_RATE),)


@dataclass(frozen=True)
class NetRate:
    """A broker's live network traffic (bytes/s): everything in / out, and the migration part of ``in``."""

    in_bytes_per_s: float
    out_bytes_per_s: float
    migration_in_bytes_per_s: float = 0.0


@dataclass(frozen=True)
class Resource:
    """Something copies share (a disk, a NIC direction): ``budget`` bytes/s are left for migration;
    ``members`` are ``(flow index, the role that controls this flow's use of it)``."""

    name: str
    budget: float
    members: tuple[tuple[int, Role], ...]
    after_finish: bool = False
    """The same resource once the copies that finish before the next pass are gone: the others of their
    broker rates then get a bigger equal share (``gain``), and must still fit."""
    disk: DiskKey | None = None
    """The disk this resource is (``None``: a NIC direction)."""


def bytes_per_util(rate: DiskRate) -> float:
    """Bytes/s that cost one unit of util on this disk, measured (bytes / util) when the disk is busy enough."""
    k = rate.bytes_per_s / rate.util if rate.util > 0.05 else rate.max_bytes_per_s
    return k if math.isfinite(k) and k > 0 else rate.max_bytes_per_s


def disk_budgets(disks: Mapping[DiskKey, DiskRate], migration: Mapping[DiskKey, float], threshold: float
                 ) -> dict[DiskKey, float]:
    """Bytes/s of migration each disk takes before its util reaches ``threshold``.

    The util that is *not* migration is ``u0 = util - migration bytes / bytes-per-util`` (measured over
    the same interval; the executor caps each copy's measured bytes at what its throttles allowed, so
    measurement noise errs on the safe side); the budget is ``(threshold - u0) x bytes-per-util``, never
    negative. Because the budget is re-derived from measured
    util every pass, the loop is a feedback controller: an estimate that was too generous shows up as
    util above threshold and shrinks the next budget.
    """
    out = {}
    for d, rate in disks.items():
        k = bytes_per_util(rate)
        u0 = max(rate.util - migration.get(d, 0.0) / k, 0.0)
        out[d] = max((threshold - u0) * k, 0.0)
    return out


PLACEMENT_MIN_BUDGET = 1e6
"""Bytes/s a disk's migration budget counts as at the least when the placement compares finish times (a disk at
its threshold still finishes, late)."""


@dataclass(frozen=True)
class PendingWork:
    """Bytes the tasks not started yet will read or write: per disk where the disk is known, and per destination
    broker for the new replicas whose disk the executor places when their task starts."""

    disks: Mapping[DiskKey, float] = field(default_factory=dict)
    brokers: Mapping[int, float] = field(default_factory=dict)

    def expected(self, work: Mapping[DiskKey, float], budgets: Mapping[DiskKey, float]) -> dict[DiskKey, float]:
        """``work`` plus this pending work, each broker's unplaced bytes put where the placement will put them:
        it sends each new replica to the broker's disk that finishes its work first, so together they fill the
        disks with a budget up to one common finish time (water-filling ``(work + x) / budget``). Spread evenly
        instead, a broker's least loaded disk — the one that gets them — looked quieter than it would be."""
        out = dict(work)
        for d, x in self.disks.items():
            out[d] = out.get(d, 0.0) + x
        for b, amount in sorted(self.brokers.items()):
            cap = {d: max(c, PLACEMENT_MIN_BUDGET) for d, c in budgets.items() if d[0] == b}
            for d, x in fill_to_level({d: out.get(d, 0.0) for d in cap}, cap, amount).items():
                out[d] = out.get(d, 0.0) + x
        return out


def fill_to_level(load: Mapping[DiskKey, float], cap: Mapping[DiskKey, float], amount: float) -> dict[DiskKey, float]:
    """``amount`` split over the disks so that ``(load + x) / cap`` is one level on every disk that gets a share
    and no lower on the others (``{}`` without disks). O(n²) for n disks (a broker's: a dozen)."""
    keys = sorted(cap, key=lambda d: (load[d] / cap[d], d))
    if not keys or amount <= 0:
        return {}
    for n in range(len(keys), 0, -1):  # the largest prefix (least loaded first) whose level covers them all
        active = keys[:n]
        level = (amount + sum(load[d] for d in active)) / sum(cap[d] for d in active)
        if level * cap[active[-1]] >= load[active[-1]]:
            return {d: level * cap[d] - load[d] for d in active}
    return {keys[0]: amount}  # not reached: the least loaded disk alone always covers itself


def flow_disk_migration(flows: Sequence[CopyFlow]) -> dict[DiskKey, float]:
    """Migration bytes/s per disk from the flows' observed rates (a copy reads its source, writes its destination)."""
    out: dict[DiskKey, float] = {}
    for f in flows:
        for d in {f.src_disk, f.dst_disk}:
            if d is not None:
                out[d] = out.get(d, 0.0) + f.observed_bytes_per_s
    return out


def resources(flows: Sequence[CopyFlow], disks: Mapping[DiskKey, DiskRate], threshold: float,
              migration: Mapping[DiskKey, float] | None = None, network: Mapping[int, NetRate] | None = None,
              nic_bytes_per_s: float | None = None) -> list[Resource]:
    """Every disk (and, with ``network``, NIC direction) the flows use, with the migration budget left on it.

    A copy reads its source disk (controlled by the source's leader rate) and writes its destination disk
    (the destination's follower rate); an intra-broker copy does both under the alter-log-dirs rate. A
    destination the broker has not placed yet may land on any of its disks: it counts on all of them.
    Disks without live data are left out (they bound nothing).
    """
    budgets = disk_budgets(disks, flow_disk_migration(flows) if migration is None else migration, threshold)
    by_broker: dict[int, list[DiskKey]] = {}
    for d in sorted(disks):
        by_broker.setdefault(d[0], []).append(d)
    members: dict[DiskKey, list[tuple[int, Role]]] = {}
    for i, f in enumerate(flows):
        roles = flow_roles(f)
        dst_role, src_role = roles[0], roles[-1]
        used: dict[DiskKey, Role] = {}
        if f.src_disk is not None:
            used[f.src_disk] = src_role
        for d in ([f.dst_disk] if f.dst_disk is not None else by_broker.get(f.dst_broker, [])):
            used[d] = dst_role
        for d, role in used.items():
            if d in budgets:
                members.setdefault(d, []).append((i, role))
    out = [Resource(f"disk {d[0]}:{d[1]}", budgets[d], tuple(m), disk=d) for d, m in sorted(members.items())]
    if nic_bytes_per_s and network:
        cap = threshold * nic_bytes_per_s
        mig_out: dict[int, float] = {}
        for f in flows:
            if f.kind == "move":
                mig_out[f.src_broker] = mig_out.get(f.src_broker, 0.0) + f.observed_bytes_per_s
        nic: dict[str, list[tuple[int, Role]]] = {}
        budget: dict[str, float] = {}
        for i, f in enumerate(flows):
            if f.kind != "move":
                continue  # intra-broker copies use no network
            dst, src = network.get(f.dst_broker), network.get(f.src_broker)
            if dst is not None:
                name = f"nic-in {f.dst_broker}"
                budget[name] = max(cap - max(dst.in_bytes_per_s - dst.migration_in_bytes_per_s, 0.0), 0.0)
                nic.setdefault(name, []).append((i, (f.dst_broker, FOLLOWER_RATE)))
            if src is not None:
                name = f"nic-out {f.src_broker}"
                budget[name] = max(cap - max(src.out_bytes_per_s - mig_out.get(f.src_broker, 0.0), 0.0), 0.0)
                nic.setdefault(name, []).append((i, (f.src_broker, LEADER_RATE)))
        out += [Resource(name, budget[name], tuple(m)) for name, m in sorted(nic.items())]
    return out


def _water_level(items: Sequence[tuple[float, float]], budget: float) -> float:
    """Largest ``x`` with ``sum(w * min(c, x) for w, c in items) <= budget``; ``inf`` when the capped sum fits."""
    acc = 0.0
    weight = sum(w for w, _ in items)
    for w, c in sorted(items, key=lambda item: item[1]):
        x = (budget - acc) / weight if weight > 0 else math.inf
        if x < c:
            return x
        acc += w * c
        weight -= w
    return math.inf


def fair_shares(flows: Sequence[CopyFlow], res: Sequence[Resource], role_cap: Mapping[Role, float],
                fixed: Mapping[Role, float] | None = None, gain: Mapping[Role, float] | None = None,
                finishing: frozenset[int] = frozenset()) -> dict[Role, float]:
    """Per-copy share of every role: max-min fair (progressive filling) under every resource's budget.

    A copy moves at ``min`` of its roles' shares. All free shares rise together; when a resource's
    budget is reached, the roles that control its still-growing members stop there (a disk is held
    back by the rate of *its own* broker: follower rate for what it writes, leader rate for what it
    reads), and the rest keep rising up to their cap. ``fixed`` shares do not move. In an
    ``after_finish`` resource the ``finishing`` copies are gone and each other copy moves at
    ``min(share x gain)`` of its roles. Finally each share is lowered to the fastest copy it actually
    carries (a share nothing can use is not handed out). Exact (piecewise-linear water levels):
    O(rounds x memberships x log).
    """
    roles_of = [flow_roles(f) for f in flows]
    share: dict[Role, float] = dict(fixed or {})
    active = {r for rs in roles_of for r in rs} - set(share)
    g = gain or {}

    def slope_cap(i: int, after: bool) -> tuple[float, float]:
        """CopyFlow ``i``'s rate is ``min(slope x level, cap)`` while free shares sit at ``level``."""
        slope, cap = math.inf, math.inf
        for r in roles_of[i]:
            k = g.get(r, 1.0) if after else 1.0
            if r in share:
                cap = min(cap, share[r] * k)
            else:
                slope, cap = min(slope, k), min(cap, role_cap[r] * k)
        return (0.0, cap) if slope == math.inf else (slope, cap)

    level = 0.0
    while active:
        terms = {(i, after): slope_cap(i, after) for i in range(len(flows)) for after in (False, True)}
        lam = min(role_cap[r] for r in active)
        tight: list[Resource] = []
        for r_ in res:
            items = [(w, c / w) for i, _ in r_.members
                     if not (r_.after_finish and i in finishing)
                     for w, c in [terms[(i, r_.after_finish)]] if w > 0]
            fixed_load = sum(c for i, _ in r_.members if not (r_.after_finish and i in finishing)
                             for w, c in [terms[(i, r_.after_finish)]] if w == 0)
            x = _water_level(items, r_.budget - fixed_load)
            if x < lam - 1e-9 * max(lam, 1.0):
                lam, tight = x, [r_]
            elif x <= lam + 1e-9 * max(lam, 1.0):
                tight.append(r_)
        lam = max(lam, level)
        level = lam
        frozen = {r for r in active if role_cap[r] <= lam}
        for r_ in tight:
            for i, ctrl in r_.members:
                w, c = terms[(i, r_.after_finish)]
                if w > 0 and c / w > lam and ctrl in active and not (r_.after_finish and i in finishing):
                    frozen.add(ctrl)  # still growing: its controlling rate stops here
        if not frozen:  # numerical corner: stop everything that feeds the tight resources
            frozen = {r for r_ in tight for i, _ in r_.members for r in roles_of[i] if r in active} or set(active)
        for r in frozen:
            share[r] = min(lam, role_cap[r])
        active -= frozen
    rates = [min(share[r] for r in rs) for rs in roles_of]
    used: dict[Role, float] = {}
    for rs, x in zip(roles_of, rates, strict=True):
        for r in rs:
            used[r] = max(used.get(r, 0.0), x)
    return {r: min(s, used.get(r, s)) for r, s in share.items()}


def broker_rates(flows: Sequence[CopyFlow], disks: Mapping[DiskKey, DiskRate], policy: MigrationRatePolicy,
                 previous: Mapping[Role, float], now_epoch_s: float,
                 network: Mapping[int, NetRate] | None = None,
                 migration: Mapping[DiskKey, float] | None = None,
                 horizon_s: float | None = None) -> dict[Role, float]:
    """``(broker, config key) -> bytes/s`` for every broker with a flow (nothing else).

    Adaptive: every disk's migration budget (:func:`disk_budgets`, from live util toward
    ``policy.util_threshold``; ``migration`` is the measured migration bytes/s per disk over the same
    interval, else the flows' observed rates; planned up to ``util_threshold - headroom``) is split
    max-min fairly among the copies that use it (:func:`fair_shares`), and a broker rate is its
    per-copy share x its number of copies (Kafka shares a broker rate equally among its throttled
    replicas). With ``policy.nic_bytes_per_s`` and live ``network`` rates, the NIC directions are
    budgets too. A rate with no live data behind it keeps its previous value (or ``initial``), and one
    of whose copies touches a disk without live data rises no higher than that. With
    ``horizon_s`` (time to the next pass), copies whose ``remaining_bytes`` end before it are expected
    to finish: the shares are chosen so that the copies left behind, which then split their broker
    rates among fewer, still fit every budget. Rises are smoothed by ``gain``, falls are immediate;
    the result is clamped to ``[floor, schedule ceiling]`` and never below the catch-up floor of its flows
    (:func:`catch_up_floors`): a copy throttled below what producers write to its partition never ends.
    """
    ceiling = min(policy.ceiling, policy.schedule.ceiling(now_epoch_s))
    ceiling = max(ceiling, policy.floor)
    count: dict[Role, int] = {}
    for f in flows:
        for r in flow_roles(f):
            count[r] = count.get(r, 0) + 1
    floors = catch_up_floors(flows)
    if policy.mode == "fixed":
        base = min(policy.fixed_rate, ceiling)
        return {k: max(delivering_rate(k, flows, previous, base), floors.get(k, 0.0)) for k in count}
    res = resources(flows, disks, policy.planning_target, migration,
                    network if policy.nic_bytes_per_s else None, policy.nic_bytes_per_s)
    known = {r for r_ in res for i, _ in r_.members for r in flow_roles(flows[i])}
    fixed = {r: min(previous.get(r, policy.initial), ceiling) / n for r, n in count.items() if r not in known}
    caps = {r: ceiling / n for r, n in count.items()}
    # a copy touching a disk without live data could load it without bound: its rates rise no further
    with_data = {d[0] for d in disks}
    for f in flows:
        if ((f.src_disk is not None and f.src_disk not in disks) or (f.dst_disk is not None and f.dst_disk not in disks)
                or (f.dst_disk is None and f.dst_broker not in with_data)):
            for r in flow_roles(f):
                caps[r] = min(caps[r], previous.get(r, policy.initial) / count[r])
    shares = fair_shares(flows, res, caps, fixed)
    if horizon_s is not None and horizon_s > 0:
        finishing = frozenset(i for i, f in enumerate(flows) if f.remaining_bytes is not None
                              and f.remaining_bytes <= horizon_s * min(shares[r] for r in flow_roles(f)))
        left: dict[Role, int] = {}
        for i in finishing:
            for r in flow_roles(flows[i]):
                left[r] = left.get(r, 0) + 1
        gain = {r: count[r] / max(count[r] - k, 1) for r, k in left.items()}
        # copies end one after another: one whose rate another finishing copy shares may outlive it and
        # run at the bigger share meanwhile, so only a copy that finishes alone on its rates is left out
        gone = frozenset(i for i in finishing if all(left[r] == 1 for r in flow_roles(flows[i])))
        after = [Resource(r_.name + " after", r_.budget, r_.members, True, r_.disk) for r_ in res
                 if any(i not in gone and any(gain.get(r, 1.0) > 1.0 for r in flow_roles(flows[i]))
                        for i, _ in r_.members)]
        if after:
            shares = fair_shares(flows, [*res, *after], caps, fixed, gain, gone)
    out: dict[Role, float] = {}
    for key, n in count.items():
        target = shares[key] * n
        prev = previous.get(key, policy.initial)
        if key in known and target > prev:
            target = prev + policy.gain * (target - prev)
        out[key] = float(max(min(max(target, policy.floor), ceiling), floors.get(key, 0.0)))
    return out
