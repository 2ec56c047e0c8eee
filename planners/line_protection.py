"""Leased-line protection: line accounting + limits -> throttle decisions (pure, deterministic).

Goal: keep each protected leased line under its threshold by slowing the traffic that can wait, in
the operator's order, and give the bandwidth back once the line is calm.

Method, per configured line (one direction of an IDC pair), once per collection round:

1. **Health with hysteresis** (:func:`step_line`): util = accounted bytes/s / capacity. The line turns
   *hot* after ``enter_samples`` consecutive rounds above ``high`` and *calm* again after
   ``leave_samples`` rounds below ``low``; rounds between the marks change nothing.
2. **Priority queue** on a hot line, cut from the top until the predicted util is at ``target``:

   a. **migration** — reassignment copies crossing the line, per destination broker in proportion to its
      share: the broker's migration rate (the executor's ceiling while it runs), never below ``min_rate``
      nor below the broker's heal floor (self-healing copies restoring replicas: replication first);
   b. **replication of topics not marked critical** — *catching-up* followers across the line (KIP-73
      slows only out-of-sync replicas; in-sync replication is never throttled): the follower throttle
      never goes below ``bytes_in × (1 + catch_up_margin)``, so the replica still gains on its leader;
   c. **consumer fetches across the line**, lowest tenant priority first (``fetch_priority``: client-id
      glob -> priority, higher = kept longer; ties: largest first): the client's ``consumer_byte_rate``
      (enforced per broker by Kafka). The quota never goes below what the client reads from any broker
      whose traffic does not cross this line, so its traffic inside an IDC (and on other lines) is untouched.

   Producers are never throttled for a line (a producer slowed loses data or blocks a service).
3. **Relaxation** on a calm line: each of its throttles (``set_by == WHO`` and ``evidence.line`` = the
   line) is released when its flow has gone, else raised by ``relax_factor`` per round while the predicted
   util stays under ``low``, and released when back at its original rate. On a hot line, a throttle whose
   traffic has left the line (a finished migration) is released too. Within ``target + deadband`` a hot
   line is left alone (no churn of tiny changes).

Each decision (a :class:`~planners.protection.ThrottleDecision`, the disk protection's record, with the line
as what it protects) says why: the line, its util against the marks, the kind and flow it slows, the rate.
Guarantee: deterministic for equal inputs; a lever in force is only tightened by a set; levers of the
disk protection (other ``set_by``) are never relaxed or released here, only tightened when the line
needs more. Cost: O(flows log flows) per hot line.
"""

from __future__ import annotations

import fnmatch
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.throttles import CONSUMER_QUOTA, FOLLOWER, MIGRATION
from planners.line_accounting import LineAccount, LineFlow, Pair
from planners.protection import ActiveThrottle, ThrottleDecision

WHO = "line-protection"
DEFAULT_FETCH_PRIORITY = 5
EPSILON = 0.005
"""Fraction of a line's capacity below which a remaining excess is rounding, not a reason to act."""
RELEASE_UNBOUND_RATIO = 0.8
"""A consumer quota is released once the client's busiest broker carries less than this fraction of it."""


@dataclass(frozen=True, slots=True)
class LineLimit:
    """Capacity and marks (fractions of capacity) of one protected line."""

    capacity_bytes_per_s: float
    high: float = 0.85
    low: float = 0.70
    target: float = 0.75

    def __post_init__(self) -> None:
        if not (self.capacity_bytes_per_s > 0 and math.isfinite(self.capacity_bytes_per_s)):
            raise ValueError("a line's capacity must be finite and > 0")
        if not (0 < self.low < self.high <= 1.5 and self.low <= self.target < self.high):
            raise ValueError("need 0 < low <= target < high for a line")


@dataclass(frozen=True, slots=True)
class LineProtectionConfig:
    """Knobs of the protection (rates in bytes/s)."""

    limits: Mapping[Pair, LineLimit] = field(default_factory=dict)
    enter_samples: int = 2
    leave_samples: int = 2
    critical_topics: tuple[str, ...] = ()
    """Topic globs whose replication is never slowed for a line."""
    fetch_priority: Mapping[str, int] = field(default_factory=dict)
    """Client-id glob -> priority (higher is throttled later); unmatched clients get ``DEFAULT_FETCH_PRIORITY``."""
    min_rate_bytes_per_s: float = 512 * 1024
    catch_up_margin: float = 0.2
    relax_factor: float = 2.0
    deadband: float = 0.02
    """A hot line within ``target + deadband`` is left as it is, and a lever in force is only tightened by more
    than this fraction (no churn of tiny config changes)."""

    def critical(self, topic: str) -> bool:
        """Whether ``topic`` is marked critical."""
        return any(fnmatch.fnmatchcase(topic, g) for g in self.critical_topics)

    def priority(self, client_id: str) -> int:
        """The tenant priority of a client (first matching glob in sorted order)."""
        for glob, prio in sorted(self.fetch_priority.items()):
            if fnmatch.fnmatchcase(client_id, glob):
                return prio
        return DEFAULT_FETCH_PRIORITY


@dataclass(frozen=True, slots=True)
class LineHealth:
    """Hysteresis state of one line."""

    hot: bool = False
    above: int = 0
    below: int = 0
    last_util: float | None = None
    reason: str = ""


def step_line(state: LineHealth, util: float | None, limit: LineLimit, enter: int, leave: int) -> LineHealth:
    """Advance the hysteresis by one round (a missing util changes nothing)."""
    if util is None or not math.isfinite(util):
        return state
    above = state.above + 1 if util > limit.high else 0
    below = state.below + 1 if util < limit.low else 0
    hot, reason = state.hot, state.reason
    if not hot and above >= enter:
        hot, reason = True, f"util {util:.2f} > {limit.high:.2f} for {above} round(s)"
    elif hot and below >= leave:
        hot, reason = False, f"util {util:.2f} < {limit.low:.2f} for {below} round(s)"
    return LineHealth(hot, above, below, util, reason)


@dataclass(frozen=True, slots=True)
class LineReport:
    """What the planner saw and did for one line."""

    line: Pair
    health: LineHealth
    util: float | None
    predicted_util: float | None
    bytes_per_s: Mapping[str, float]
    queue: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LinePlan:
    """One evaluation: new health per line, decisions, a report per protected line."""

    health: Mapping[Pair, LineHealth]
    decisions: tuple[ThrottleDecision, ...]
    reports: tuple[LineReport, ...]


@dataclass
class _Cut:
    key: str
    kind: str
    target: dict[str, Any]
    rate: float
    original: float
    relieved: float
    what: str
    flows: list[LineFlow]


def _line_of(a: ActiveThrottle) -> Pair | None:
    line = a.evidence.get("line") if isinstance(a.evidence, Mapping) else None
    if isinstance(line, (list, tuple)) and len(line) == 2:
        return (str(line[0]), str(line[1]))
    return None


def _migration_cuts(flows: Sequence[LineFlow], all_flows: Sequence[LineFlow], need: float,
                    config: LineProtectionConfig, floors: Mapping[int, float] | None = None) -> list[_Cut]:
    """Per destination broker, each cut in proportion to its share of the line's migration (a broker's rate
    governs all its copies, so the cut is taken off its whole copy rate), never below the broker's heal floor
    (``floors``: self-healing copies restoring replicas; what the cut cannot take falls to the next tiers)."""
    floors = floors or {}
    on_line: dict[int, list[LineFlow]] = defaultdict(list)
    for f in flows:
        if f.kind == "migration":
            on_line[f.broker].append(f)
    total_to: dict[int, float] = defaultdict(float)
    for f in all_flows:
        if f.kind == "migration":
            total_to[f.broker] += f.bytes_per_s
    line_total = sum(f.bytes_per_s for fl in on_line.values() for f in fl)
    if need <= 0 or line_total <= 0:
        return []
    cuts = []
    for broker, fl in sorted(on_line.items()):
        line_part = sum(f.bytes_per_s for f in fl)
        total = max(total_to[broker], line_part)
        want = need * line_part / line_total
        rate = max(config.min_rate_bytes_per_s, floors.get(broker, 0.0), total - want)
        relieved = min(max(total - rate, 0.0), line_part)
        if relieved <= 0:
            continue
        cuts.append(_Cut(f"migration:broker:{broker}", MIGRATION, {"broker": broker, "source_broker": None},
                         rate, total, relieved, f"migration to broker {broker}", fl))
    return cuts


def _replication_cuts(flows: Sequence[LineFlow], parts_in: Mapping[tuple[str, int], float], need: float,
                      config: LineProtectionConfig) -> list[_Cut]:
    cuts = []
    catching = [f for f in flows if f.kind == "replication" and f.transfer == "catch_up"
                and not config.critical(f.topic)]
    for f in sorted(catching, key=lambda f: (-f.bytes_per_s, f.topic, f.partition, f.broker)):
        if need <= 0:
            break
        ingress = parts_in.get((f.topic, f.partition), 0.0)
        floor = max(config.min_rate_bytes_per_s, ingress * (1 + config.catch_up_margin))
        rate = max(floor, f.bytes_per_s - need)
        relieved = max(f.bytes_per_s - rate, 0.0)
        if relieved <= 0:
            continue
        cuts.append(_Cut(f"follower:{f.topic}:{f.partition}:{f.broker}", FOLLOWER,
                         {"topic": f.topic, "partition": f.partition, "broker": f.broker}, rate, f.bytes_per_s,
                         relieved, f"catch-up replication of {f.topic}-{f.partition} to broker {f.broker}", [f]))
        need -= relieved
    return cuts


def _quota_for(line_rates: Mapping[int, float], keep: float, other_max: float, floor: float) -> float:
    """The per-broker quota q with Σ min(r_b, q) over the line's brokers == keep (bisection), at least
    ``max(other_max, floor)``."""
    lo = max(other_max, floor)
    hi = max(line_rates.values(), default=0.0)
    if hi <= lo:
        return lo
    if sum(min(r, lo) for r in line_rates.values()) >= keep:
        return lo
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(min(r, mid) for r in line_rates.values()) > keep:
            hi = mid
        else:
            lo = mid
    return lo


def _fetch_cuts(flows: Sequence[LineFlow], line: Pair, need: float,
                client_rates: Mapping[str, Mapping[int, float]], config: LineProtectionConfig) -> list[_Cut]:
    by_client: dict[str, list[LineFlow]] = defaultdict(list)
    for f in flows:
        if f.kind == "client_fetch" and f.client_id:
            by_client[f.client_id].append(f)
    cuts = []
    order = sorted(by_client.items(), key=lambda kv: (config.priority(kv[0]), -sum(f.bytes_per_s for f in kv[1]),
                                                       kv[0]))
    for client, fl in order:
        if need <= 0:
            break
        line_rates: dict[int, float] = defaultdict(float)
        for f in fl:
            line_rates[f.broker] += f.bytes_per_s
        per_broker = client_rates.get(client, {})
        others = [r for b, r in per_broker.items() if b not in line_rates]
        # brokers this client reads across the line also serve its other traffic: keep the busiest whole
        other_max = max(others, default=0.0)
        current = max(per_broker.get(b, r) for b, r in line_rates.items())
        line_total = sum(line_rates.values())
        keep = max(line_total - need, 0.0)
        q = _quota_for(line_rates, keep, other_max, config.min_rate_bytes_per_s)
        kept = sum(min(r, q) for r in line_rates.values())
        relieved = max(line_total - kept, 0.0)
        if relieved <= 0:
            continue
        cuts.append(_Cut(f"consumer-quota:{client}", CONSUMER_QUOTA,
                         {"client_id": client, "quota": "consumer_byte_rate", "lineage": "audit (client IDC)"},
                         q, current, relieved,
                         f"fetches of {client} (priority {config.priority(client)}) across {line[0]}->{line[1]}", fl))
        need -= relieved
    return cuts


def plan_line_throttles(account: LineAccount, active: Sequence[ActiveThrottle], health: Mapping[Pair, LineHealth],
                        config: LineProtectionConfig,
                        bytes_in: Mapping[tuple[str, int], float] | None = None,
                        client_rates: Mapping[str, Mapping[int, float]] | None = None,
                        other_bytes: Mapping[Pair, float] | None = None,
                        migration_floors: Mapping[int, float] | None = None) -> LinePlan:
    """One evaluation over every configured line (see the module docstring).

    ``other_bytes``: what other clusters put on each line (their latest accounting): the line's health
    is judged on the whole line, and this cluster cuts its share of the excess (proportional to its
    share of the line), so clusters crossing one line do not each cut the whole excess.

    ``bytes_in``: each partition's live ingress (the catch-up floor); ``client_rates``: per client, the
    bytes/s it fetches from each broker (all of its traffic, inside IDCs too) — what a consumer quota
    would also slow. ``migration_floors``: destination broker -> the heal floor of the self-healing copies into
    it (replication first: migration is cut no lower, so the excess falls to catch-up replication and consumer
    fetches)."""
    bytes_in = bytes_in or {}
    client_rates = client_rates or {}
    other_bytes = other_bytes or {}
    by_key = {a.key: a for a in active}
    new_health: dict[Pair, LineHealth] = dict(health)
    decisions: dict[str, ThrottleDecision] = {}
    reports = []
    for pair, limit in sorted(config.limits.items()):
        usage = account.usage(pair)
        mine = usage.total if usage is not None else 0.0
        others = max(float(other_bytes.get(pair, 0.0)), 0.0) if math.isfinite(other_bytes.get(pair, 0.0)) else 0.0
        total = mine + others
        util = total / limit.capacity_bytes_per_s
        state = step_line(health.get(pair, LineHealth()), util, limit, config.enter_samples, config.leave_samples)
        new_health[pair] = state
        flows = [f for f in account.flows if f.pair == pair]
        predicted = util
        queue: list[str] = []
        if state.hot:
            _release_gone(pair, flows, by_key, decisions, config)
        if state.hot and util > limit.target + config.deadband:
            need = (total - limit.target * limit.capacity_bytes_per_s) * (mine / total if total > 0 else 0.0)
            eps = limit.capacity_bytes_per_s * EPSILON  # a rounding remainder is no reason for the next tier
            cuts = _migration_cuts(flows, account.flows, need, config, migration_floors)
            need -= sum(c.relieved for c in cuts)
            if need > eps:
                rep = _replication_cuts(flows, bytes_in, need, config)
                cuts += rep
                need -= sum(c.relieved for c in rep)
            if need > eps:
                cuts += _fetch_cuts(flows, pair, need, client_rates, config)
            predicted = (total - sum(c.relieved for c in cuts)) / limit.capacity_bytes_per_s
            queue = [c.what for c in cuts]
            for c in cuts:
                _set(c, pair, limit, state, util, predicted, by_key, decisions, config.deadband)
        elif not state.hot:
            _relax(pair, limit, util, flows, by_key, decisions, config, client_rates)
        reports.append(LineReport(pair, state, util, predicted,
                                  dict(usage.bytes_per_s) if usage is not None else {}, tuple(queue)))
    ordered = tuple(sorted(decisions.values(), key=lambda d: (d.protects, d.action, d.key)))
    return LinePlan(new_health, ordered, tuple(reports))


def _set(c: _Cut, pair: Pair, limit: LineLimit, state: LineHealth, util: float, predicted: float,
         active: Mapping[str, ActiveThrottle], decisions: dict[str, ThrottleDecision], deadband: float) -> None:
    current = active.get(c.key)
    if current is not None and current.rate_bytes_per_s <= c.rate * (1 + deadband):
        return  # already (about) this tight
    original = c.original
    if current is not None:
        original = float(current.evidence.get("original_rate_bytes_per_s", original) or original)
    prev = decisions.get(c.key)
    if prev is not None and prev.rate_bytes_per_s <= c.rate:
        return
    why = (f"leased line {pair[0]}->{pair[1]} hot ({state.reason}); slow {c.what} "
           f"({sum(f.bytes_per_s for f in c.flows) / 1e6:.1f} MB/s on the line): limit {c.kind} to "
           f"{c.rate / 1e6:.2f} MB/s")
    evidence = {"line": list(pair), "util": round(util, 4), "capacity_bytes_per_s": limit.capacity_bytes_per_s,
                "marks": {"high": limit.high, "low": limit.low, "target": limit.target},
                "health": state.reason, "predicted_util": round(predicted, 4),
                "flows": [{"kind": f.kind, "topic": f.topic, "partition": f.partition, "broker": f.broker,
                           "client_id": f.client_id, "bytes_per_s": round(f.bytes_per_s, 1)} for f in c.flows[:10]],
                "original_rate_bytes_per_s": original, "relax_step": 0}
    decisions[c.key] = ThrottleDecision("set", c.key, c.kind, dict(c.target), c.rate, pair, why, evidence)


def _line_load(a: ActiveThrottle, flows: Sequence[LineFlow]) -> float:
    """Bytes/s the throttled behaviour still puts on the line."""
    t = a.target
    if a.kind == MIGRATION:
        return sum(f.bytes_per_s for f in flows if f.kind == "migration" and f.broker == t.get("broker"))
    if a.kind == FOLLOWER:
        return sum(f.bytes_per_s for f in flows if f.kind == "replication" and f.transfer == "catch_up"
                   and (f.topic, f.partition, f.broker) == (t.get("topic"), t.get("partition"), t.get("broker")))
    if a.kind == CONSUMER_QUOTA:
        return sum(f.bytes_per_s for f in flows if f.kind == "client_fetch" and f.client_id == t.get("client_id"))
    return 0.0


def _release_gone(pair: Pair, flows: Sequence[LineFlow], active: Mapping[str, ActiveThrottle],
                  decisions: dict[str, ThrottleDecision], config: LineProtectionConfig) -> None:
    """On a hot line, release this line's throttles whose traffic has left it (a finished migration)."""
    for a in sorted(active.values(), key=lambda x: x.key):
        if a.set_by != WHO or _line_of(a) != pair or a.key in decisions:
            continue
        load = _line_load(a, flows)
        if load < config.min_rate_bytes_per_s * 0.1:
            decisions[a.key] = ThrottleDecision("release", a.key, a.kind, a.target, a.rate_bytes_per_s, pair,
                                            f"the throttled traffic left leased line {pair[0]}->{pair[1]} "
                                            f"({load / 1e6:.2f} MB/s): released",
                                            {**dict(a.evidence), "line": list(pair), "line_bytes_per_s": load})


def _relax(pair: Pair, limit: LineLimit, util: float, flows: Sequence[LineFlow], active: Mapping[str, ActiveThrottle],
           decisions: dict[str, ThrottleDecision], config: LineProtectionConfig,
           client_rates: Mapping[str, Mapping[int, float]]) -> None:
    mine = [a for a in active.values() if a.set_by == WHO and _line_of(a) == pair and a.key not in decisions]
    budget = util
    for a in sorted(mine, key=lambda x: x.key):
        load = _line_load(a, flows)
        original = float(a.evidence.get("original_rate_bytes_per_s", 0.0) or 0.0)
        step = int(a.evidence.get("relax_step", 0) or 0)
        base = {**dict(a.evidence), "line": list(pair), "util": round(util, 4)}
        if load < config.min_rate_bytes_per_s * 0.1:
            decisions[a.key] = ThrottleDecision("release", a.key, a.kind, a.target, a.rate_bytes_per_s, pair,
                                            f"leased line {pair[0]}->{pair[1]} calm and the throttled traffic left "
                                            f"it ({load / 1e6:.2f} MB/s): released", {**base, "line_bytes_per_s": load})
            continue
        per_broker = client_rates.get(str(a.target.get("client_id")), {}) if a.kind == CONSUMER_QUOTA else {}
        busiest = max(per_broker.values(), default=None)
        if busiest is not None and busiest < RELEASE_UNBOUND_RATIO * a.rate_bytes_per_s:
            decisions[a.key] = ThrottleDecision("release", a.key, a.kind, a.target, a.rate_bytes_per_s, pair,
                                            f"leased line {pair[0]}->{pair[1]} calm and the quota no longer binds "
                                            f"(busiest broker {busiest / 1e6:.2f} of {a.rate_bytes_per_s / 1e6:.2f} "
                                            f"MB/s): released", {**base, "carried_bytes_per_s": busiest})
            continue
        new_rate = a.rate_bytes_per_s * config.relax_factor
        if per_broker:  # a quota adds traffic only where it binds now: on the line's brokers read at the quota
            client = a.target.get("client_id")
            line_brokers = {f.broker for f in flows if f.kind == "client_fetch" and f.client_id == client}
            binding = sum(1 for b, r in per_broker.items() if b in line_brokers and r >= 0.95 * a.rate_bytes_per_s)
            extra = binding * (new_rate - a.rate_bytes_per_s) / limit.capacity_bytes_per_s
        else:
            extra = min(new_rate - a.rate_bytes_per_s, load) / limit.capacity_bytes_per_s
        if budget + extra >= limit.low:
            continue  # hold: more now would push the line back over its low mark
        budget += extra
        if original and new_rate >= original:
            decisions[a.key] = ThrottleDecision("release", a.key, a.kind, a.target, a.rate_bytes_per_s, pair,
                                            f"leased line {pair[0]}->{pair[1]} calm (util {util:.2f}); back at the "
                                            f"original rate {original / 1e6:.2f} MB/s: released",
                                            {**base, "predicted_util": round(budget, 4)})
        else:
            decisions[a.key] = ThrottleDecision("relax", a.key, a.kind, a.target, new_rate, pair,
                                            f"leased line {pair[0]}->{pair[1]} calm (util {util:.2f}); relax step "
                                            f"{step + 1}: {a.rate_bytes_per_s / 1e6:.2f} -> {new_rate / 1e6:.2f} MB/s",
                                            {**base, "relax_step": step + 1, "predicted_util": round(budget, 4)})
