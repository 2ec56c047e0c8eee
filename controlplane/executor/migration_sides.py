"""Joint throttle choice: on which KIP-73 side each copy is throttled, and the broker rates, for makespan.

Goal: finish the copies in flight (and the ones still waiting) as early as the disks allow, every disk
within its migration budget. KIP-73 gives one leader and one follower rate per broker, each shared
equally by the replicas listed for it; throttling every copy on both sides (:func:`~.migration_rate.
fair_shares`) couples every copy to every other copy of both its brokers, so a copy through the busiest
disk is held back by a quiet disk's neighbours. Each copy only needs one side: listed on the leader side
it shares its *source* broker's leader rate, on the follower side its *destination* broker's follower
rate. Choosing the side per copy puts the copies that must run fast into groups of their own.

Method, per pass:

1. **Criticality**: every disk's remaining work (bytes its copies in flight and the tasks still pending
   must read or write, ``work``; a pending new replica whose disk the executor will choose counted where the
   placement will put it, :meth:`~.migration_rate.PendingWork.expected`) over its budget is the time it needs at the
   least, ``T_d``; the largest bounds the execution. A disk is weighted ``(T_d / T_max)^K`` (:data:`SHARPNESS`).
2. **Rates for a side choice** (an LP): every group ``(broker, rate)`` gives each of its ``n_g`` copies
   ``y_g`` bytes/s; a task runs at ``z_t``, at most ``y_g`` of every group its copies are listed in (it
   ends with its slowest copy, and Kafka reports its copies' progress only as a whole: weighing copies
   one by one starved one copy of a multi-replica task at the floor rate while its finished sibling kept
   the budget). Maximise ``Σ_d weight_d x load_d / budget_d``, each copy's load counted at its task's
   rate up to the rate that ends it within :data:`FINISH_SHARE` of the horizon (faster gains nothing
   before the next pass), + a small total-throughput term so nothing idles for nothing, subject to every
   resource (disk, NIC direction) within its budget and each rate within the ceiling. Every group's whole
   rate is at least its *floor* — the policy's floor and Σ ingress x :data:`~.migration_rate.CATCH_UP_MARGIN` of
   its copies (slower, a copy never catches up with its partition's own writes) — so the floors are spent
   inside each disk's budget (the LP shares out what they leave), not added on top of the LP's rates (that
   overshot the threshold and handed the bounding disk's budget to copies that were meant to wait). Solved by
   SciPy's HiGHS LP solver (:func:`maximize`): a few dozen variables and rows, all constraints ``<=`` with
   non-negative right-hand sides.
3. **Sides**: a task's copies start on the side of its most critical disk; then a local search flips one
   task at a time and keeps a flip that raises the objective (bounded by :data:`MAX_SOLVES`). A task's
   copies share one side (its leader entry lists all its copies at once). Copies touching a disk without
   live data, or whose destination broker carries a protection ceiling on its follower rate, keep
   their fixed sides (both, resp. follower) and are not searched.
4. **Finishing copies**: a copy expected to end before the next pass (``horizon_s``) leaves its group's
   rate to fewer; the rates are solved again so that the copies left behind, at their bigger share, fit
   too (as in :func:`~.migration_rate.broker_rates`) — on any resource, a group's survivors together carry at
   most its whole rate; a finishing copy still counts on a resource until it ends, i.e. unless it ends before
   every gain there (copies end one after another). Solved again until the copies counted as ending are the
   ones that end at the rates returned (a re-solve may speed a copy up enough to end it).

Guarantee: with the copies' rates as Kafka derives them — equal shares of every rate a copy is listed for,
the minimum over its sides (:func:`realized`) — no resource of the model exceeds its budget, before and
after the expected finishes (up to the fixed rates of copies without live data, which are kept as they
were, and to a disk whose copies' floors alone exceed its budget: those copies cannot go slower and still end;
everything else on it waits). Every copy is throttled on at least one side. The choice is deterministic.

Cost: O(MAX_SOLVES) LPs of (groups + 2 x tasks) x (resources + links) per pass; a pass of 12 copies on 12
disks takes ~10 ms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog

from controlplane.executor.migration_rate import CATCH_UP_MARGIN, CopyFlow, DiskKey, Resource, Role
from domain.throttles import ALTER_DIRS_RATE, FOLLOWER_RATE, LEADER_RATE

LEADER = "leader"
FOLLOWER = "follower"
BOTH = "both"
DIRS = "dirs"
"""The sides a copy can be throttled on: a move on its source's leader rate, its destination's follower
rate, or both; an intra-broker copy on the alter-log-dirs rate."""
SHARPNESS = 3.0
"""``K`` in a disk's weight ``(T_d / T_max)^K``: how strongly the disks that bound the execution come first (bench,
seeds 11-70 in three sets of 20: 3 takes 0.6 % less time in all than 4 and lowers each set's median over the floor;
2 is slower)."""
THROUGHPUT_WEIGHT = 1e-3
"""Weight of the total copy rate in the objective, against 1 for the most critical disk run at its budget."""
GROUP_COST = 1e-7
"""Cost of one byte/s (in MB/s) of a group's per-copy rate in the objective: no group runs faster than the
fastest task listed in it needs."""
FINISH_SHARE = 0.5
"""A task's rate counts (for criticality) up to what ends it within this share of the horizon to the next
pass: any faster and the budget is better spent on copies that would otherwise wait for the next pass."""
MAX_SOLVES = 48
"""LPs one choice may solve in its side search."""
BLOCKED_BPS = 2e6
"""A disk with less budget than this is blocked for now; it does not set the scale of criticality."""


@dataclass(frozen=True)
class Choice:
    """What the solver chose: per ``(broker, config)`` rate, per flow its side and planned rate."""

    rates: dict[Role, float]
    sides: dict[str, str]
    planned: dict[str, float]
    objective: float = 0.0
    solves: int = 0


def task_of(f: CopyFlow) -> str:
    """The task a flow belongs to (flow keys are ``task key>broker``)."""
    return f.key.rsplit(">", 1)[0]


def roles_on(f: CopyFlow, side: str) -> tuple[Role, ...]:
    """The rates a flow is listed for on ``side``."""
    if side == DIRS:
        return ((f.dst_broker, ALTER_DIRS_RATE),)
    if side == LEADER:
        return ((f.src_broker, LEADER_RATE),)
    if side == FOLLOWER:
        return ((f.dst_broker, FOLLOWER_RATE),)
    return (f.dst_broker, FOLLOWER_RATE), (f.src_broker, LEADER_RATE)


def realized(flows: Sequence[CopyFlow], sides: Mapping[str, str], rates: Mapping[Role, float]) -> dict[str, float]:
    """Each flow's rate as Kafka (and kafkasim) derive it: every rate a flow is listed for is shared equally by
    the flows listed for it; a flow moves at the least of its shares (``inf``: listed nowhere, unthrottled)."""
    count: dict[Role, int] = {}
    for f in flows:
        for r in roles_on(f, sides[f.key]):
            count[r] = count.get(r, 0) + 1
    return {f.key: min((rates.get(r, math.inf) / count[r] for r in roles_on(f, sides[f.key])), default=math.inf)
            for f in flows}


def maximize(c: npt.NDArray[np.float64], a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]
             ) -> npt.NDArray[np.float64]:
    """``argmax c.y`` subject to ``a y <= b``, ``y >= 0`` (``b >= 0``: the origin is feasible), by SciPy's
    HiGHS; the problem must be bounded (every variable in some row with a positive coefficient)."""
    res = linprog(-c, A_ub=a, b_ub=np.maximum(b, 0.0), bounds=(0, None), method="highs")
    if res.status != 0:
        raise ValueError(f"LP not solved: {res.message}")
    return np.maximum(np.asarray(res.x, dtype=np.float64), 0.0)


@dataclass
class _Model:
    """The fixed part of one choice: flows, resources, weights, caps."""

    flows: Sequence[CopyFlow]
    res: Sequence[Resource]
    weight: list[float]
    """Per resource: objective weight per byte/s of load (criticality / budget)."""
    ceiling: float
    cap: Mapping[Role, float]
    """Rates (whole, not per copy) some roles may not exceed: their previous or initial rate when a copy of
    theirs touches a disk without live data, a protection ceiling."""
    useful: Mapping[str, float]
    """Per task: the rate beyond which it gains nothing before the next pass (it is done well before)."""
    floor: float = 0.0
    """The least whole rate of any group (the policy's floor)."""


def _groups(flows: Sequence[CopyFlow], sides: Mapping[str, str]) -> tuple[list[Role], list[list[int]]]:
    """The groups a side choice makes (sorted) and, per flow, the indices of the groups it is listed in."""
    roles = sorted({r for f in flows for r in roles_on(f, sides[f.key])})
    index = {r: i for i, r in enumerate(roles)}
    return roles, [[index[r] for r in roles_on(f, sides[f.key])] for f in flows]


def _solve(model: _Model, sides: Mapping[str, str],
           after: tuple[frozenset[tuple[int, int]], Mapping[Role, float]] | None = None
           ) -> tuple[float, list[Role], npt.NDArray[np.float64]]:
    """The best per-copy rate of every group for one side choice: (objective, groups, rates in bytes/s).

    Variables: ``y_g`` per group (what Kafka lets each of its copies run at, bounded by the resources),
    ``z_t`` per task (what the task runs at: at most ``y_g`` of every group any of its copies is listed in)
    and ``u_t <= z_t`` (the part of it that counts: at most the task's useful rate). The criticality term
    counts every copy's load at its task's ``u_t`` — a task ends with its slowest copy, and Kafka reports
    one task's copies together (a copy's own progress is not known), so a copy run faster than its sibling
    only spends budget; a task done well before the next pass leaves the rest of it to the others (one
    copy after the other, the later ones would wait a pass) — the throughput term counts ``z_t``, and
    ``y_g`` carries a tiny cost so that no group gets more than its fastest task uses."""
    flows, res = model.flows, model.res
    roles, member = _groups(flows, sides)
    tasks = sorted({task_of(f) for f in flows})
    t_index = {t: j for j, t in enumerate(tasks)}
    of_task = [t_index[task_of(f)] for f in flows]
    n_y, n_t = len(roles), len(tasks)
    n = n_y + 2 * n_t
    z0, u0 = n_y, n_y + n_t
    count = np.zeros(n_y)
    for gs in member:
        for g in gs:
            count[g] += 1
    scale = 1e6
    rows: list[npt.NDArray[np.float64]] = []
    rhs: list[float] = []
    c = np.zeros(n)
    blocks = [(r_, False) for r_ in res] + ([(r_, True) for r_ in res] if after is not None else [])
    for k, (r_, post) in enumerate(blocks):
        row = np.zeros(n)
        for i, _ in r_.members:
            if post and after is not None and (k - len(res), i) in after[0]:
                continue
            g = member[i][0]  # a flow listed on both sides moves at most at its first share
            gain = after[1].get(roles[g], 1.0) if post and after is not None else 1.0
            row[g] += gain
            if not post:
                c[u0 + of_task[i]] += model.weight[k]
        if post:  # however its copies end, a group never carries more than its whole rate
            row[:n_y] = np.minimum(row[:n_y], count)
        if not row.any():
            continue
        rows.append(row)
        rhs.append(r_.budget / scale)
    n_res = len(rows)
    for i in range(len(flows)):
        c[z0 + of_task[i]] += THROUGHPUT_WEIGHT
    c[:n_y] -= GROUP_COST

    def bound(coefs: Mapping[int, float], limit: float) -> None:
        row = np.zeros(n)
        for j, v in coefs.items():
            row[j] = v
        rows.append(row)
        rhs.append(limit)

    lb = _group_floors(model, roles, member, count) / scale
    for g, role in enumerate(roles):
        bound({g: 1.0}, max(min(model.ceiling, model.cap.get(role, math.inf)) / max(count[g], 1.0) / scale - lb[g],
                            0.0))
    for t_, g in sorted({(of_task[i], g) for i, gs in enumerate(member) for g in gs}):
        bound({z0 + t_: 1.0, g: -1.0}, float(lb[g]))
    for j, t in enumerate(tasks):
        bound({u0 + j: 1.0, z0 + j: -1.0}, 0.0)
        if t in model.useful:
            bound({u0 + j: 1.0}, model.useful[t] / scale)
    a = np.array(rows)
    shift = np.zeros(n)
    shift[:n_y] = lb  # y_g = floor + what the LP adds: every row's room is what the floors leave
    b = np.maximum(np.array(rhs) - np.where(np.arange(len(rhs)) < n_res, a @ shift, 0.0), 0.0)
    v = maximize(c, a, b)
    v = _repair(a, b, v) + shift
    return float(c @ v), roles, v[:n_y] * scale


def _group_floors(model: _Model, roles: Sequence[Role], member: Sequence[Sequence[int]],
                  count: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Per group, the per-copy rate it runs at the least: its whole rate is never below the policy's floor nor
    below Σ ingress x :data:`~.migration_rate.CATCH_UP_MARGIN` of the copies listed in it (slower, they never catch up
    with their partitions' own writes)."""
    whole = np.zeros(len(roles))
    for i, gs in enumerate(member):
        for g in gs:
            whole[g] += model.flows[i].ingress_bytes_per_s * CATCH_UP_MARGIN
    return np.asarray(np.maximum(whole, model.floor) / np.maximum(count, 1.0), dtype=np.float64)


def _repair(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], y: npt.NDArray[np.float64]
            ) -> npt.NDArray[np.float64]:
    """Scale down the rates of any row the simplex left over its bound by rounding (guarantees feasibility)."""
    y = np.maximum(y, 0.0)
    for _ in range(len(b) + 1):
        load = a @ y
        over = np.nonzero(load > b * (1 + 1e-12) + 1e-15)[0]
        if over.size == 0:
            break
        for i in over:
            load_i = float(a[i] @ y)
            if load_i > b[i]:
                y = np.where(a[i] > 0, y * (max(b[i], 0.0) / load_i) * (1 - 1e-12), y)
    return y


def criticality(res: Sequence[Resource], flows: Sequence[CopyFlow], work: Mapping[DiskKey, float]) -> list[float]:
    """Per resource, the objective weight of one byte/s of load: ``(T_d / T_max)^K / budget_d`` for a disk with
    ``T_d`` = its work over its budget; 0 for the others (NIC directions only constrain)."""
    times: list[float | None] = []
    for r_ in res:
        if r_.disk is None:
            times.append(None)
            continue
        w = work.get(r_.disk)
        if w is None:  # only the flows in flight: what they still copy
            w = sum(flows[i].remaining_bytes or 0.0 for i, _ in r_.members)
        times.append(w / max(r_.budget, 1.0))
    top = max((t for t, r_ in zip(times, res, strict=True) if t is not None and r_.budget >= BLOCKED_BPS),
              default=0.0)
    out = []
    for t, r_ in zip(times, res, strict=True):
        if t is None or top <= 0:
            out.append(0.0)
            continue
        out.append(min(t / top, 1.0) ** SHARPNESS / max(r_.budget / 1e6, BLOCKED_BPS / 1e6))
    return out


def initial_sides(flows: Sequence[CopyFlow], res: Sequence[Resource], weight: Sequence[float],
                  forced: Mapping[str, str]) -> dict[str, str]:
    """Each task on the side of its most critical disk (ties: follower, which no leader change affects)."""
    src_w: dict[str, float] = {}
    dst_w: dict[str, float] = {}
    for r_, w in zip(res, weight, strict=True):
        if r_.disk is None:
            continue
        for i, _ in r_.members:
            f = flows[i]
            t = task_of(f)
            if f.src_disk == r_.disk:
                src_w[t] = max(src_w.get(t, 0.0), w * max(r_.budget, 1.0))
            else:
                dst_w[t] = max(dst_w.get(t, 0.0), w * max(r_.budget, 1.0))
    out = {}
    for f in flows:
        t = task_of(f)
        if f.key in forced:
            out[f.key] = forced[f.key]
        elif f.kind != "move":
            out[f.key] = DIRS
        else:
            out[f.key] = LEADER if src_w.get(t, 0.0) > dst_w.get(t, 0.0) else FOLLOWER
    return out


def choose(flows: Sequence[CopyFlow], res: Sequence[Resource], work: Mapping[DiskKey, float], ceiling: float,
           cap: Mapping[Role, float] | None = None, forced: Mapping[str, str] | None = None,
           horizon_s: float | None = None, max_solves: int = MAX_SOLVES, floor: float = 0.0) -> Choice:
    """The joint choice for ``flows`` (see the module docstring).

    ``res``: the resources with their migration budgets (:func:`~.migration_rate.resources`); ``work``: bytes each
    disk must still read or write for the execution (pending tasks included; a disk left out counts only its
    flows' ``remaining_bytes``); ``ceiling``: the largest rate of any broker; ``cap``: smaller ceilings of
    some roles (whole rates); ``forced``: flow key -> side for the flows not searched (a task's flows share
    one side: force all of them or none); ``floor``: the least whole rate of any group (the policy's floor; the
    catch-up floors of the copies are added per group).
    """
    if not flows:
        return Choice({}, {}, {})
    weight = criticality(res, flows, work)
    model = _Model(flows, res, weight, ceiling, dict(cap or {}), useful_rates(flows, horizon_s), floor)
    forced = dict(forced or {})
    sides = initial_sides(flows, res, weight, forced)
    best, roles, y = _solve(model, sides)
    solves = 1
    tasks: dict[str, list[CopyFlow]] = {}
    for f in flows:
        if f.kind == "move" and f.key not in forced:
            tasks.setdefault(task_of(f), []).append(f)
    order = sorted(tasks, key=lambda t: -max(_task_weight(tasks[t], res, weight, flows)))
    improved = True
    while improved and solves < max_solves:
        improved = False
        for t in order:
            if solves >= max_solves:
                break
            trial = dict(sides)
            flip = FOLLOWER if sides[tasks[t][0].key] == LEADER else LEADER
            for f in tasks[t]:
                trial[f.key] = flip
            value, r2, y2 = _solve(model, trial)
            solves += 1
            if value > best * (1 + 1e-9) + 1e-12:
                best, roles, y, sides, improved = value, r2, y2, trial, True
    per_copy = dict(zip(roles, y.tolist(), strict=True))
    if horizon_s is not None and horizon_s > 0:
        # the re-solved rates may end more copies before the next pass, or end them later: solve again with those
        # counted too, until the rates returned were solved for. The copies counted as ending only grow and those
        # left out of a row only shrink, so this ends (at most one round per copy and row)
        solved: tuple[frozenset[tuple[int, int]], dict[Role, float], frozenset[int]] | None = None
        while True:
            after = _after_finish(flows, res, sides, per_copy, horizon_s, solved[2] if solved else frozenset())
            if after is None:
                break
            if solved is not None:
                after = (after[0] & solved[0], after[1], after[2])
                if after[0] == solved[0] and after[2] == solved[2]:
                    break
            solved = after
            best, roles, y = _solve(model, sides, (after[0], after[1]))
            solves += 1
            per_copy = dict(zip(roles, y.tolist(), strict=True))
    count: dict[Role, int] = {}
    for f in flows:
        for r in roles_on(f, sides[f.key]):
            count[r] = count.get(r, 0) + 1
    rates = {r: per_copy[r] * count[r] for r in roles}
    planned = {f.key: min(per_copy[r] for r in roles_on(f, sides[f.key])) for f in flows}
    return Choice(rates, sides, planned, best, solves)


def useful_rates(flows: Sequence[CopyFlow], horizon_s: float | None) -> dict[str, float]:
    """Per task with known remaining bytes: the rate at which its slowest copy ends within
    :data:`FINISH_SHARE` of the horizon (``{}`` without a horizon)."""
    if horizon_s is None or horizon_s <= 0:
        return {}
    out: dict[str, float] = {}
    unknown = {task_of(f) for f in flows if f.remaining_bytes is None}
    for f in flows:
        t = task_of(f)
        if t not in unknown:
            out[t] = max(out.get(t, 0.0), float(f.remaining_bytes or 0.0) / (FINISH_SHARE * horizon_s))
    return out


def _task_weight(task: Iterable[CopyFlow], res: Sequence[Resource], weight: Sequence[float],
                 flows: Sequence[CopyFlow]) -> list[float]:
    keys = {f.key for f in task}
    return [weight[k] * max(r_.budget, 1.0) for k, r_ in enumerate(res)
            if any(flows[i].key in keys for i, _ in r_.members)] or [0.0]


def _after_finish(flows: Sequence[CopyFlow], res: Sequence[Resource], sides: Mapping[str, str],
                  per_copy: Mapping[Role, float], horizon_s: float, counted: frozenset[int] = frozenset()
                  ) -> tuple[frozenset[tuple[int, int]], dict[Role, float], frozenset[int]] | None:
    """The copies expected to end before the next pass, per resource the ones already gone when another copy on it
    takes a bigger share, and the gain of the groups' shares afterwards (``None`` when no share grows).

    A group's survivors gain once its first finishing copy ends; a finishing copy is left out of a resource's
    after-finish row only when it ends no later than every gain on that resource (copies end one after another:
    one that outlives a neighbour's gain still loads the disk meanwhile). ``counted``: copies to count as ending
    too (found ending at earlier rates: conservative, as they make their neighbours' shares grow). Also returns
    every copy counted as ending."""
    count: dict[Role, int] = {}
    for f in flows:
        for r in roles_on(f, sides[f.key]):
            count[r] = count.get(r, 0) + 1
    rate = [min(per_copy[r] for r in roles_on(f, sides[f.key])) for f in flows]
    ends = {i: float(f.remaining_bytes or 0.0) / max(rate[i], 1.0) for i, f in enumerate(flows)
            if i in counted or (f.remaining_bytes is not None and f.remaining_bytes <= horizon_s * rate[i])}
    left: dict[Role, int] = {}
    first: dict[Role, float] = {}
    for i, t in ends.items():
        for r in roles_on(flows[i], sides[flows[i].key]):
            left[r] = left.get(r, 0) + 1
            first[r] = min(first.get(r, math.inf), t)
    gain = {r: count[r] / max(count[r] - k, 1) for r, k in left.items()}
    if not any(g > 1.0 for g in gain.values()):
        return None
    gone: set[tuple[int, int]] = set()
    for k, r_ in enumerate(res):
        grows = min((first[r] for i, _ in r_.members for r in roles_on(flows[i], sides[flows[i].key])
                     if gain.get(r, 1.0) > 1.0 and first[r] < ends.get(i, math.inf)), default=math.inf)
        gone |= {(k, i) for i, _ in r_.members if i in ends and ends[i] <= grows}
    return frozenset(gone), gain, frozenset(ends)
