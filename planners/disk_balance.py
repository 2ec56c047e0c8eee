"""Goal: disk-load balance across and within brokers (JBOD) on estimated utilisation, moving what the target needs.

The target is the figure Guardian reports: per pool, peak / mean estimated utilisation (disk load / max
throughput — so heterogeneous HDD/NVMe disks compare fairly), the mean being the plain average of the pool's alive
disks' utilisations (:func:`domain.util_stats`: one mean, used everywhere). A plan stops once every pool meets
``threshold`` (default 1.10; ``--target``); an operator who wants more asks for a lower one. Nothing moves while
a pool's hottest disk is at or under ``floor`` (default 0.30): peak/mean of idle disks is noise.

Method, per pool, in rounds (at most :data:`ROUNDS`):

* the line: :func:`target_line` draws the highest utilisation ``X`` such that shedding every disk above ``X`` down
  to it, slowest receivers first, meets the target in a fluid model — load moved from a slow disk to a fast one
  lowers the plain mean, so ``X`` is usually below threshold x today's mean (it meets the necessary ceiling
  L / (C - n c_max (t - 1) / t) of any plan at the target; drawn :data:`LINE_MARGIN` under it);
* which replica: per hot disk, the cheapest cover of its excess over ``X`` — the best of "the first ``k`` by load
  per byte, then the smallest single replica covering the rest" over every ``k`` (:func:`_cheapest_cover`);
* where: among valid targets — every hard goal of :mod:`planners.constraints`, capacity headroom, the plan's
  bounds, the target staying ≤ ``X`` — a disk of the same broker first (KIP-113 AlterReplicaLogDirs: no network
  bytes, ``prefer_intra_broker``), then a disk no faster than the source (keeps the mean), then any, each the
  one with the lowest *median historical* load (projected with what the plan already added);
* where no single move helps (each would leave its receiver above the source — large replicas), an *exchange*
  (swap, 2-for-1): the disk's heaviest replica goes to a cool disk that then sheds smaller replicas (back to the
  source or anywhere) under the goal; undone unless it lowers the source and leaves every disk it touched at or
  under the hot line. Topics with an IDC placement policy move within their IDC, so a second pass balances each
  IDC against its own mean where the policies keep an IDC above the pool's.

Replicas on dead brokers: with ``evacuate_dead`` each is first moved (before balancing) to the valid
disk of its pool (its IDC under a placement policy) with the lowest projected utilisation, preferring
disks that stay ≤ the goal; without it the plan leaves them where they are and says so in its
notes (they wait for the broker's return or Kafka's own recovery — "self-healing").

Never worse, and it ends: every balancing move lowers a hot disk and leaves the receiving disk strictly under
that disk's old level (:func:`below`), so no pool's peak rises and the sorted disk levels fall at every move —
no sequence of moves repeats (the move cap, :data:`MOVES_PER_REPLICA`, stays as a guard). Deterministic: ties
break on (IDC, snapshot order) and partition id. Hot spots no move fixes (one huge replica, constraints, bounds)
are explained in the plan's notes instead of churning.

Cost: O(moves x (log disks of the group + replicas of the source disk)) for most moves: from 1k disks a
shedding run's target search walks a lazily kept heap of the disks that can take a replica (with a speed cap for
the slower-first search; see planners.workspace), one broker's disks are scanned in plain Python; the cheapest
cover is an O(k²) numpy pass only while some replica covers a disk's excess alone. The shedding runs go through
the compiled port of this loop (:mod:`planners.shed_kernel`, numba: byte-identical plans) unless the plan has byte
or partition bounds, numba is missing, or the port meets a case it does not cover (then the whole plan is made in
Python; ``COMPILED = False`` forces that). On the benchmark's 1,000 x 12 x 100k snapshot: 63,721 partitions,
106,815 replica moves; the planner 13.5 CPU-s in Python, 4.3 compiled (loading numba's cached code included).
"""

from __future__ import annotations

import heapq
import logging
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from domain import ClusterSnapshot, Partition, Plan
from planners.workspace import Bounds, KernelBail, Workspace, gc_paused

_log = logging.getLogger(__name__)
KIND = "rebalance"
MAX_NOTES = 12
_KEY = operator.itemgetter(0)
EXCHANGE_TRIES = 4  # heaviest replicas of a stuck disk, and coolest receivers each, an exchange tries


@dataclass(frozen=True, slots=True)
class BalanceOptions:
    """``threshold``: the target — every pool ends at peak/mean ≤ this (a disk above it x the pool's mean is hot,
    and sheds to it: the plan stops there); ``target``: what hot disks shed to, x mean (None: ``threshold`` — a
    lower figure balances past the target and moves more bytes); ``floor``: no disk sheds while the pool's hottest
    disk is at or under this utilisation (peak/mean of idle disks is noise); ``prefer_intra_broker``: a replica
    goes to another disk of its own broker (no network bytes) whenever one stays ≤ the goal."""

    bounds: Bounds = field(default_factory=Bounds)
    threshold: float = 1.10
    target: float | None = None
    evacuate_dead: bool = False
    prefer_intra_broker: bool = True
    floor: float = 0.30

    @property
    def goal(self) -> float:
        """What hot disks shed to, x mean."""
        return self.threshold if self.target is None else min(self.target, self.threshold)


@dataclass(slots=True)
class _Candidate:
    pid: tuple[str, int]
    position: int
    load: float
    size: int
    partition: Partition


class _Pile(list[_Candidate]):
    """One disk's candidates, best first, with their loads and sizes as arrays (``loads``, ``sizes``; None: to
    build) and their largest load (``top``; None: to recompute), so shedding a disk of many replicas does not
    rescan them all for every move."""

    top: float | None = None
    loads: np.ndarray | None = None
    sizes: np.ndarray | None = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(loads, sizes) of the candidates, in order."""
        if self.loads is None or self.sizes is None:
            n = len(self)
            self.loads = np.fromiter((c.load for c in self), dtype=np.float64, count=n)
            self.sizes = np.fromiter((c.size for c in self), dtype=np.float64, count=n)
        return self.loads, self.sizes

    def drop(self, k: int) -> None:
        """Remove candidate ``k`` (the cached largest load is forgotten when it was that one's)."""
        if self[k].load == self.top:
            self.top = None
        del self[k]
        if self.loads is not None and self.sizes is not None:
            if k == 0:  # the usual pick: a view past it, no copy
                self.loads, self.sizes = self.loads[1:], self.sizes[1:]
            else:
                self.loads = np.delete(self.loads, k)
                self.sizes = np.delete(self.sizes, k)


COMPILED = True
"""Shed through the compiled loop (:mod:`planners.shed_kernel`, the same plans) where it applies."""


def _compiled_available() -> bool:
    try:
        import planners.shed_kernel  # noqa: F401 - numba, loaded on the first plan only
    except ImportError:
        return False
    return True


def plan_rebalance(snapshot: ClusterSnapshot, options: BalanceOptions | None = None) -> Plan:
    """A disk-load rebalance plan for every pool of ``snapshot`` (checked by :func:`check_plan`)."""
    options = options or BalanceOptions()
    if COMPILED and _compiled_available():
        try:
            return _plan_rebalance(snapshot, options, compiled=True)
        except KernelBail as exc:  # a case the compiled loop does not port: the whole plan again in Python
            _log.debug("rebalance planned in Python: %s", exc)
    return _plan_rebalance(snapshot, options, compiled=False)


def _plan_rebalance(snapshot: ClusterSnapshot, options: BalanceOptions, *, compiled: bool) -> Plan:
    with gc_paused():
        ws = Workspace(snapshot, options.bounds)
        notes = evacuate_dead(ws, options) if options.evacuate_dead else dead_replica_notes(ws)
        before = pool_peak_to_mean(ws)
        for pool in sorted({b.pool for b in snapshot.brokers}):
            notes += balance_pool(ws, pool, options, compiled=compiled)
        ws.kernel = None  # the compiled loop's arrays (~60 MB at 3,000 brokers) freed before the plan is checked
        plan = ws.to_plan(KIND, notes)
        if ws.moved_bytes and plan.summary is not None:  # the summary has counted the intra-broker bytes already
            plan = replace(plan, notes=(movement_note(ws, before, plan.summary.intra_broker_bytes), *plan.notes))
        del ws  # freed while the collector is off: its re-enabling then walks the plan's objects only
    return plan


def total_replica_bytes(snapshot: ClusterSnapshot) -> int:
    """Bytes of every replica in the cluster (partition size x replication factor)."""
    return sum(p.size_bytes * len(p.replicas) for p in snapshot.index.partitions)


def pool_peak_to_mean(ws: Workspace) -> float:
    """The worst pool's peak / mean estimated utilisation under the plan so far."""
    worst = 0.0
    for pool in sorted({b.pool for b in ws.snapshot.brokers}):
        disks = ws.group(pool)
        mean = _mean(ws, disks) if len(disks) else 0.0
        if mean > 0:
            worst = max(worst, float(ws.util_arr[disks].max()) / mean)
    return worst


def movement_note(ws: Workspace, before: float, intra: int | None = None) -> str:
    """Bytes copied as a share of all replica bytes, and the balance reached (with the budget, if any).

    ``intra``: the bytes of those copies between log dirs of one broker when the caller has them (the plan
    summary's ``intra_broker_bytes``); counted from the workspace otherwise."""
    total = total_replica_bytes(ws.snapshot)
    share = ws.moved_bytes / total if total else 0.0
    budget = (f" within a budget of {ws.bounds.max_bytes:,} bytes ({ws.bounds.max_bytes / total:.1%})"
              if ws.bounds.max_bytes is not None and total else "")
    intra = ws.intra_broker_bytes() if intra is None else intra  # (the plan summary's figure: the same count)
    split = f" ({ws.moved_bytes - intra:,} over the network, {intra:,} between log dirs of one broker)"
    return (f"moves {ws.moved_bytes:,} bytes{split} = {share:.1%} of all replica bytes ({total:,}){budget}; worst pool "
            f"peak/mean {before:.3f} -> {pool_peak_to_mean(ws):.3f} (`plan budget-curve`: what other budgets reach)")


def _on_dead(ws: Workspace) -> list[tuple[Partition, int]]:
    """(partition, position) of every replica on a dead broker, in partition order."""
    dead = {b.id for b in ws.snapshot.brokers if not b.is_alive}
    if not dead:
        return []
    return [(p, k) for p in ws.index.partitions for k, b in enumerate(ws.replicas(p)[0]) if b in dead]


def dead_replica_notes(ws: Workspace) -> list[str]:
    """The loud note of a plan that leaves replicas on dead brokers alone (empty when there are none)."""
    found = _on_dead(ws)
    if not found:
        return []
    brokers = sorted({ws.replicas(p)[0][k] for p, k in found})
    return [f"WARNING: {len(found)} replica(s) of {len({p.id for p, _ in found})} partition(s) sit on dead "
            f"broker(s) {brokers}; this plan does not move them and leaves them to self-healing (the broker's "
            f"return); plan with evacuate_dead (--evacuate-dead) to move them onto alive brokers"]


def evacuate_dead(ws: Workspace, options: BalanceOptions) -> list[str]:
    """Move every replica on a dead broker to the coolest valid alive disk of its pool; notes on the rest."""
    left: list[str] = []
    moved = 0
    for p, k in _on_dead(ws):
        topic = ws.index.topic_by_name[p.topic]
        disks = ws.group(topic.pool)
        mean = _mean(ws, disks) if len(disks) else 0.0
        targets = _alive_targets(ws, p, k)
        target = ws.best_target(p, k, targets, max_util=options.goal * mean) if mean > 0 else None
        if target is None:
            target = ws.best_target(p, k, targets)
        if target is None:
            left.append(f"{p.topic}-{p.partition}")
            continue
        ws.move_replica(p, k, target)
        moved += 1
    notes = [f"{moved} replica(s) moved off dead brokers"] if moved else []
    if left:
        notes.append(f"WARNING: {len(left)} replica(s) on dead brokers have no valid alive target (capacity, "
                     f"hard constraints or bounds) and stay: {', '.join(left[:MAX_NOTES])}")
    return notes


def _alive_targets(ws: Workspace, p: Partition, position: int) -> np.ndarray:
    """Alive disks a replica on a dead broker may go to: its pool, within the IDC its policy needs."""
    topic = ws.index.topic_by_name[p.topic]
    placement = ws.snapshot.placement_of(topic)
    if not placement:
        return ws.group(topic.pool)
    dead_idc = ws.topo.idc[ws.replicas(p)[0][position]]
    return ws.group(topic.pool, dead_idc) if dead_idc in placement else ws.group(topic.pool)


ROUNDS = 4
LINE_MARGIN = 0.004  # the line is drawn for this much under the target: whole replicas end a disk off the fluid model
"""Shedding runs per pool at most: each recomputes the mean, which moves as load changes disk kind."""


def balance_pool(ws: Workspace, pool: str, options: BalanceOptions, *, compiled: bool = False) -> list[str]:
    """Shed every hot disk of ``pool`` in ``ws``; returns notes on what could not be fixed.

    Nothing moves while the pool's hottest disk is at or under ``options.floor`` (idle disks: peak/mean is
    noise). Pass 1 balances the pool against its mean, in rounds: the mean is the plain average of utilisations,
    so load moved from a slow disk to a fast one lowers it, and a run that met the target against the mean it
    started with may end a little above it against the mean after; the next round sheds that rest. IDC placement
    policies pin replicas to their IDC, so an IDC may carry more than the pool's mean; pass 2 then balances each
    IDC against its own mean, which is the best any placement-respecting plan can do there.
    """
    disks = ws.group(pool)
    if len(disks) == 0:
        return []
    peak = float(ws.util_arr[disks].max())
    if peak <= options.floor:
        mean = _mean(ws, disks)
        if mean > 0 and peak > options.threshold * mean:
            return [f"pool {pool}: hottest disk at {peak:.3f} util, at or under the floor {options.floor:.2f}: "
                    f"not rebalanced (peak/mean {peak / mean:.2f} of idle disks is noise; --floor lowers it)"]
        return []
    shedder = _Shedder(ws, pool, compiled=compiled and options.bounds.max_bytes is None
                       and options.bounds.max_partitions is None)
    stuck: dict[int, str] = {}
    for _ in range(ROUNDS):
        mean = _mean(ws, disks)
        if mean <= 0 or float(ws.util_arr[disks].max()) <= options.threshold * mean + 1e-12:
            break
        line = target_line(ws.util_arr[disks], ws.max_bps[disks], options.goal * (1 - LINE_MARGIN))
        moved = ws.moved_bytes
        stuck = shedder.run(disks, mean, options, line=line)
        if ws.moved_bytes == moved:
            break
    mean = _mean(ws, disks)
    idc_means: dict[str, float] = {}
    for idc in sorted({ws.topo.idc[int(ws.disk_broker[i])] for i in disks}):
        group = ws.group(pool, idc)
        idc_means[idc] = _mean(ws, group)
        if idc_means[idc] > mean and any(ws.util(int(i)) > options.threshold * mean for i in group):
            stuck.update(shedder.run(group, idc_means[idc], options))
    return _notes(ws, pool, stuck, _mean(ws, disks), options, idc_means)


def target_line(util: np.ndarray, max_bps: np.ndarray, ratio: float) -> float:
    """The highest utilisation ``X`` such that shedding every disk above ``X`` down to it, and filling the disks
    below it up to it, slowest disks first, leaves peak ≤ ``ratio`` x the plain mean of utilisations.

    A fluid model (loads split finely) of the pool: load moved from a slow disk to a fast one lowers the plain
    mean, so the line is lower than ``ratio`` x today's mean where slow disks carry most of the load; filling
    slow disks first keeps that loss to what the excess above ``X`` needs. Bisection, O(disks log disks) per step.
    Any plan meeting the target ends with every disk ≤ L / (C - n c_max (ratio - 1) / ratio) (L: total load,
    C: sum of ceilings, n disks, c_max the fastest); this line is within the model's granularity of that bound.
    """
    if len(util) == 0:
        return 0.0
    load = util * max_bps
    order_speed = np.argsort(max_bps, kind="stable")

    def fits(x: float) -> bool:
        final = np.minimum(util, x)
        excess = float((load - final * max_bps).sum())
        if excess > 0:
            order = order_speed[np.argsort(final[order_speed], kind="stable")]
            order = order[np.argsort(max_bps[order], kind="stable")]
            room = (x - final[order]) * max_bps[order]
            cum = np.cumsum(room)
            k = int(np.searchsorted(cum, excess))
            final[order[:k]] = x
            if k < len(order):
                final[order[k]] += (excess - (float(cum[k - 1]) if k else 0.0)) / float(max_bps[order[k]])
        return float(final.max()) <= ratio * float(final.mean()) + 1e-12

    lo, hi = 0.0, float(util.max())
    if fits(hi):
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def fill_receivers(ws: Workspace, pool: str, receivers: np.ndarray, options: BalanceOptions) -> list[str]:
    """Fill ``receivers`` (new, empty disks of ``pool``) from the pool's disks above its mean, hottest first.

    Only replicas of ``pool``'s topics move and only onto ``receivers`` (what growing the pool requires);
    each source sheds to ``options.target`` x mean, each receiver fills to at most that. Returns notes on
    disks that stay above ``options.threshold`` x mean (a ``rebalance`` of the pool can take those on).
    """
    disks = ws.group(pool)
    mean = _mean(ws, disks) if len(disks) else 0.0
    if mean <= 0 or len(receivers) == 0:
        return []
    sources = np.setdiff1d(disks, receivers)
    for _ in range(ROUNDS):  # load moved onto faster new disks lowers the plain mean: fill again to the new one
        moved = ws.moved_bytes
        _fill_by_value(ws, pool, sources, receivers, mean)
        mean = _mean(ws, disks)
        if ws.moved_bytes == moved or float(ws.util_arr[receivers].min()) >= (1 - LINE_MARGIN) * mean:
            break
    return _notes(ws, pool, {}, mean, options, {})


def _fill_by_value(ws: Workspace, pool: str, sources: np.ndarray, receivers: np.ndarray, mean: float) -> None:
    """Move replicas of ``sources`` above ``mean`` onto ``receivers`` (each staying ≤ ``mean``), the pool's best
    load per byte first across all sources — the fewest bytes for the load the receivers take (hottest source
    first, each shed to the mean, moved 2.5x the fractional minimum on the benchmark's pool-grow; this 2.0x) — as
    long as the source stays above the mean once the replica is gone (no source is emptied below it)."""
    keyed: list[tuple[float, tuple[str, int], int, _Candidate]] = []
    for i in sources:
        i = int(i)
        if ws.util(i) <= mean:
            continue
        for c in _candidates(ws, i, pool, ()):
            keyed.append((-(c.load / c.size) if c.size else float("-inf"), c.pid, i, c))
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    for _, _, i, c in keyed:
        if float(ws.util_arr[receivers].min()) >= (1 - LINE_MARGIN) * mean:
            return
        if ws.util(i) <= mean or (ws.load[i] - c.load) * ws.inv_max[i] < mean * (1 - LINE_MARGIN) - 1e-12:
            continue  # the source is at the mean already, or this replica would take it clearly below
        p = ws.partition(c.pid)
        replicas, dirs = ws.replicas(p)
        if c.position >= len(replicas) or (replicas[c.position], dirs[c.position]) != ws.disk_ids[i]:
            continue  # moved since (another replica of the partition went first)
        if ws.bounds.max_bytes is not None and ws.moved_bytes + c.size > ws.bounds.max_bytes:
            continue
        targets = np.intersect1d(_targets(ws, p, c.position), receivers, assume_unique=True)
        target = ws.best_target(p, c.position, targets, max_util=mean)
        if target is not None:
            ws.move_replica(p, c.position, target)


def _mean(ws: Workspace, disks: np.ndarray) -> float:
    """The pool's mean utilisation: the plain average of its disks' estimated utilisation — the one mean Guardian
    reports (:func:`domain.util_stats`) and balances to."""
    return float(ws.util_arr[disks].mean()) if len(disks) else 0.0


MOVES_PER_REPLICA = 4
"""A shedding run stops after this many steps per replica of the cluster (disks marked ``move-cap``): a bound that
guarantees the run ends; no run that converges comes near it."""


class _Shedder:
    """Sheds hot disks one replica at a time, hottest first; remembers replicas moved onto each disk."""

    def __init__(self, ws: Workspace, pool: str, receivers: np.ndarray | None = None, *,
                 compiled: bool = False) -> None:
        self.ws = ws
        self.pool = pool
        self.receivers = receivers  # when given, the only disks that may receive a replica
        self.arrived: dict[int, list[tuple[str, int]]] = {}
        self.compiled = compiled and receivers is None  # through planners.shed_kernel (raises KernelBail if not)
        self._state: object | None = None  # the compiled loop's lasting state (its arrivals)

    def run(self, disks: np.ndarray, mean: float, options: BalanceOptions, line: float | None = None) -> dict[int, str]:
        """Shed every disk of ``disks`` above ``threshold`` x ``mean`` to ``target`` x ``mean``; returns stuck disks.

        The queue holds one live entry per hot disk (``live``: the key it was pushed with); an older entry of a
        disk that was pushed again is dropped when it comes up, not pushed back — re-queueing every outdated
        duplicate made the queue grow by one entry per move and each entry come back at every later move
        (quadratic: a 12-disk run took 1,255 pops for 221 moves and reached the move cap).
        """
        ws = self.ws
        hot, goal = (options.threshold * mean, options.goal * mean) if line is None else (line, line)
        # every step moves one replica; each move takes the sorted disk levels strictly down (see below()), so a
        # run ends by itself — the cap is a guard that it ends even on a case that argument misses
        steps_left = MOVES_PER_REPLICA * len(ws.index.replica_columns.load) + 100
        if self.compiled:
            return self._run_compiled(disks, hot, goal, options.prefer_intra_broker, steps_left)
        heap = [(-ws.util(int(i)), int(i)) for i in disks if ws.util(int(i)) > hot]
        heapq.heapify(heap)
        live = {i: neg for neg, i in heap}
        cands: dict[int, _Pile] = {}
        stuck: dict[int, str] = {}
        held: tuple[float, int] | None = None  # an entry due on the heap: pushed and popped in one step below

        def push(j: int) -> None:
            util = ws.util(j)
            if util > hot:
                live[j] = -util
                heapq.heappush(heap, (-util, j))

        while heap or held is not None:
            if held is not None:  # the same entry push-then-pop gives (entries are distinct tuples, no NaN)
                neg, i = heapq.heappushpop(heap, held)
                held = None
            else:
                neg, i = heapq.heappop(heap)
            if i in stuck or live.get(i) != neg:
                continue  # an older entry of a disk queued again since (or given up on)
            del live[i]
            util = ws.util(i)
            if abs(-neg - util) > 1e-12:  # its level changed without a push (a leadership change): re-queue
                push(i)
                continue
            steps_left -= 1
            if steps_left < 0:
                stuck[i] = "move-cap"
                for j in live:
                    stuck[j] = "move-cap"
                break
            if cands.get(i) is None:
                cands[i] = _Pile(_candidates(ws, i, self.pool, self.arrived.get(i, ())))
            target, why, moved = _shed_one(ws, i, cands[i], goal, hot, self.receivers,
                                           intra=options.prefer_intra_broker and self.receivers is None)
            if target is None and self.receivers is None:
                exchanged = _exchange(ws, i, self.pool, goal, hot)
                if exchanged:
                    cands.pop(i, None)
                    for j, pid in exchanged:
                        self.arrived.setdefault(j, []).append(pid)
                        cands.pop(j, None)
                        push(j)
                    push(i)
                    continue
            if target is None:
                stuck[i] = why
                continue
            self.arrived.setdefault(target, []).append(moved)
            cands.pop(target, None)  # rebuilt with the arrival if it ever sheds
            push(target)
            util = ws.util(i)
            if util > hot:  # the source, most often still the hottest: back without a sift
                live[i] = -util
                held = (-util, i)
        return stuck


    def _run_compiled(self, disks: np.ndarray, hot: float, goal: float, intra: bool, steps: int) -> dict[int, str]:
        """:meth:`run` through :mod:`planners.shed_kernel` (the same moves; KernelBail where it does not apply)."""
        from planners import shed_kernel

        ws = self.ws
        if not shed_kernel.usable(ws):
            raise KernelBail("leader overrides or non-finite figures")
        if ws.kernel is None:
            ws.kernel = shed_kernel.ShedKernel(ws)
        kernel = ws.kernel
        assert isinstance(kernel, shed_kernel.ShedKernel)
        if self._state is None:
            self._state = shed_kernel.ShedderState(kernel)
        assert isinstance(self._state, shed_kernel.ShedderState)
        return shed_kernel.run(kernel, self._state, np.asarray(disks, dtype=np.int64), hot, goal, intra, self.pool,
                               steps, lambda i: _exchange(ws, i, self.pool, goal, hot))


def _candidates(ws: Workspace, i: int, pool: str, arrived: Iterable[tuple[str, int]]) -> list[_Candidate]:
    """Movable replicas on disk ``i`` (there from the start or moved in), best load-per-byte first."""
    here = ws.disk_ids[i]
    broker = here[0]
    keyed: list[tuple[tuple[float, tuple[str, int]], _Candidate]] = []
    by_id, topics, current = ws.index.partition_by_id, ws.index.topic_by_name, ws.current
    for pid in dict.fromkeys((*ws.index.replicas_on_disk[here], *arrived)):
        p = by_id[pid]
        leader = p.leader
        if leader is None or topics[p.topic].pool != pool:
            continue
        replicas, dirs = current.get(pid) or (p.replicas, p.log_dirs)
        if broker not in replicas:
            continue
        position = replicas.index(broker)  # its first replica on the broker: the one here, unless a duplicate
        if dirs[position] != here[1]:
            position = next((k for k, pair in enumerate(zip(replicas, dirs, strict=True)) if pair == here), -1)
            if position < 0:
                continue
        load = p.bytes_in_per_s + p.disk_read_bytes_per_s if broker == leader else p.bytes_in_per_s  # replica_load
        if load <= 0 or (broker == leader and position != 0):
            continue  # moving a non-preferred leader would hand leadership to a third disk
        size = p.size_bytes
        keyed.append(((-(load / size) if size else float("-inf"), pid), _Candidate(pid, position, load, size, p)))
    keyed.sort(key=_KEY)
    return [c for _, c in keyed]


COVER_ITEMS = 128  # the best load-per-byte candidates of a disk that the cheapest-cover choice weighs


def _cheapest_cover(cands: _Pile, excess: float) -> int:
    """Which candidate to move next so that the disk's excess is covered with the fewest bytes.

    The candidates are in load-per-byte order. Plans weighed: the first ``k`` of them, then the smallest single
    one after them whose load covers what is left (or nothing, when the ``k`` cover it) — the best of these for
    every ``k``. (Always the next by load per byte, or the smallest one covering alone, as before, moved 1.20x the
    fractional-knapsack bound on the 1,000-broker benchmark; this choice 1.10x.) Returns 0 — the best by load per
    byte — when the best plan starts with it, else the index of the single covering replica. O(k²) numpy.
    """
    n = min(len(cands), COVER_ITEMS)
    if n <= 1 or excess <= 0:
        return 0
    if cands.top is None:
        cands.top = max(c.load for c in cands)
    if excess > cands.top:  # no replica covers it alone: every plan weighed starts with the first (k >= 1)
        return 0
    all_loads, all_sizes = cands.arrays()
    loads = all_loads[:n]
    left = excess - (np.cumsum(loads) - loads)  # excess left before taking item k (after items 0..k-1)
    rows = int(np.searchsorted(-left, 0.0, side="right"))  # plans k = 0 .. rows - 1 still need a cover (left > 0)
    if rows == 0:
        return 0
    sizes = all_sizes[:n]
    paid = np.cumsum(sizes) - sizes
    covers = (loads[None, :] >= left[:rows, None]) & np.triu(np.ones((rows, n), dtype=bool))
    cover = np.where(covers, sizes[None, :], np.inf)
    cost = paid[:rows] + cover.min(axis=1)
    best = float(cost.min())
    if rows < n and paid[rows] < best:  # the first ``rows`` items alone cover it, for less
        return 0
    k = int(np.argmin(cost))
    if k > 0 or not np.isfinite(best):
        return 0
    return int(np.argmin(cover[0]))


def _shed_one(ws: Workspace, i: int, cands: _Pile, goal: float, hot: float,
              receivers: np.ndarray | None = None, *, intra: bool = False) -> tuple[int | None, str, tuple[str, int]]:
    """Move one replica off disk ``i``. Returns (the disk it went to, or None and the reason; the partition).

    ``intra``: first try the other disks of ``i``'s broker (an intra-broker log-dir move copies no bytes
    over the network) under the goal; the whole group only when none of them qualifies.
    """
    why = "no-target"
    max_bps = float(ws.max_bps[i])  # (the same double: the product and difference below are numpy's)
    while cands:
        excess = ws.load[i] - goal * max_bps
        pick = _cheapest_cover(cands, float(excess))
        c = cands[pick]
        p = c.partition
        if ws.bounds.max_bytes is not None and ws.moved_bytes + c.size > ws.bounds.max_bytes:
            cands.drop(pick)  # over the byte budget wherever it goes: no scan needed
            why = "bounds"
            continue
        added = ws.added_load(p, c.position)  # the same for every scan below
        target = ws.best_own_target(i, p, c.position, max_util=goal, added=added) if intra else None
        if target is None:
            targets = _targets(ws, p, c.position)
            if receivers is not None:
                targets = np.intersect1d(targets, receivers, assume_unique=True)
            elif ws.mixed_speeds(targets, max_bps):
                # a disk no faster than the source first: the load keeps its share of the pool's mean (load moved
                # onto a faster disk lowers the plain mean of utilisations, and so the target line)
                target = ws.best_target(p, c.position, targets, max_util=goal, added=added, frequent=True,
                                        speed_cap=max_bps)
            if target is None:
                target = ws.best_target(p, c.position, targets, max_util=goal, added=added,
                                        frequent=receivers is None)
            if target is None:  # no disk stays under the goal: accept one that stays under the hot line
                ceiling = max(hot, float((ws.load[i] - c.load) * ws.inv_max[i]))  # or under this disk after the move
                # and always clearly under this disk's level now: a receiver that ended at the source's old level
                # would be the next hot disk and hand the replica straight back (two disks swapping one replica
                # for ever when the source sat a rounding error above the hot line)
                ceiling = min(ceiling, below(ws.util(i)))
                target = ws.best_target(p, c.position, targets, max_util=ceiling, added=added)
        cands.drop(pick)
        if target is not None:
            ws.move_replica(p, c.position, target)
            return target, "", p.id
        if ws.bounds.max_bytes is not None or ws.bounds.max_partitions is not None:
            replicas, dirs = ws.replicas(p)
            probe = (*replicas[:c.position], -1, *replicas[c.position + 1:])
            if not ws.within_bounds(p, probe, dirs):
                why = "bounds"
    return None, why, ("", -1)


def _exchange(ws: Workspace, i: int, pool: str, goal: float, hot: float,
              tries: int = EXCHANGE_TRIES) -> list[tuple[int, tuple[str, int]]]:
    """A swap where no single move helps: the heaviest replica of hot disk ``i`` goes to a cool disk ``j``
    that then sheds smaller replicas (to ``i`` or any disk) back under ``goal`` x mean.

    Committed only when ``j`` ends ≤ ``hot``, every other receiver ≤ ``goal`` and ``i`` ends lower — so no
    pool's peak rises; otherwise every step is undone. Returns the (disk, partition) arrivals, [] if none.
    """
    for c in sorted(_candidates(ws, i, pool, ()), key=lambda c: (-c.load, c.pid))[:tries]:
        if ws.bounds.max_bytes is not None and ws.moved_bytes + c.size > ws.bounds.max_bytes:
            continue
        p = ws.partition(c.pid)
        targets = _targets(ws, p, c.position)
        tried: list[int] = []
        for _ in range(tries):
            j = ws.best_target(p, c.position, targets, exclude=tried)
            if j is None:
                break
            tried.append(int(ws.disk_broker[j]))
            before = ws.util(i)
            undo = [(p, *ws.replicas(p))]
            ws.move_replica(p, c.position, j)
            arrivals = [(j, p.id)]
            for d in _candidates(ws, j, pool, (p.id,)):
                if ws.util(j) <= goal:
                    break
                if d.pid == p.id or d.load >= c.load:
                    continue
                q = ws.partition(d.pid)
                k = ws.best_target(q, d.position, _targets(ws, q, d.position), max_util=goal)
                if k is None:
                    continue
                undo.append((q, *ws.replicas(q)))
                ws.move_replica(q, d.position, k)
                arrivals.append((k, q.id))
            if ws.util(j) <= min(hot, below(before)) and ws.util(i) < before - 1e-12:
                return arrivals
            for q, replicas, dirs in reversed(undo):
                ws.assign(q, replicas, dirs)
    return []


PROGRESS = 1e-9
"""A move's receiver ends at least this share below the source's level before the move (see :func:`below`)."""


def below(level: float) -> float:
    """The highest utilisation a receiver may end at when a disk at ``level`` sheds to it.

    Every balancing move takes the pair (source, receiver) from (``level``, r) to two levels both under
    ``level`` - ``level`` x :data:`PROGRESS` (the best-target scans allow a further 1e-12). The sorted vector
    of disk levels then falls lexicographically at every move, so no sequence of moves can revisit a state:
    shedding ends without the move cap. (Ending *at* ``level``, as the hot-line fallback allowed, let two
    disks a rounding error above the hot line hand one replica back and forth for ever.)
    """
    return level - max(level, 1.0) * PROGRESS - 2e-12


def _targets(ws: Workspace, p: Partition, position: int) -> np.ndarray:
    topic = ws.index.topic_by_name[p.topic]
    if ws.snapshot.placement_of(topic):
        return ws.group(topic.pool, ws.topo.idc[ws.replicas(p)[0][position]])
    return ws.group(topic.pool)


def replica_floor(ws: Workspace, pool: str) -> float:
    """Lowest peak utilisation the heaviest single replica of ``pool`` allows (its load / fastest disk)."""
    disks = ws.group(pool)
    if len(disks) == 0:
        return 0.0
    fastest = float(ws.max_bps[disks].max())
    heaviest = 0.0
    for t in ws.snapshot.topics:
        if t.pool == pool:
            for p in t.partitions:
                heaviest = max(heaviest, p.bytes_in_per_s + p.disk_read_bytes_per_s)
    return heaviest / fastest


def _notes(ws: Workspace, pool: str, stuck: dict[int, str], mean: float, options: BalanceOptions,
           idc_means: dict[str, float]) -> list[str]:
    notes = []
    goal = options.goal * mean
    floor = replica_floor(ws, pool)
    if floor > goal:
        notes.append(f"pool {pool}: the heaviest replica alone loads even the fastest disk to {floor:.3f} "
                     f"(pool mean {mean:.3f}); add partitions to its topic rather than move it")
    hot = sorted((int(i) for i in ws.group(pool) if ws.util(int(i)) > options.threshold * mean),
                 key=lambda i: (-ws.util(i), i))
    for i in hot[:MAX_NOTES]:
        broker, path = ws.disk_ids[i]
        idc = ws.topo.idc[broker]
        heaviest = max((ws.partition(pid).replica_load(broker)
                        for pid in (*ws.index.replicas_on_disk[(broker, path)], *_arrivals(ws, i))
                        if (broker, path) in zip(*ws.replicas(ws.partition(pid)), strict=True)), default=0.0)
        p_group = ws.group(pool)
        alone = heaviest / float(ws.max_bps[p_group].max()) if len(p_group) else 0.0
        why = stuck.get(i, "")
        if alone > goal:
            reason = (f"one replica alone would load even the pool's fastest disk to {alone:.3f}: a hot spot "
                      f"no move fixes (add partitions or use a faster disk)")
        elif why == "bounds":
            reason = "the plan's byte/partition bound is reached; run again after this plan"
        elif why == "move-cap":
            reason = (f"the planner stopped after {MOVES_PER_REPLICA} moves per replica (disks were handing "
                      "replicas round); the plan is valid, not balanced further")
        elif ws.util(i) <= options.threshold * idc_means.get(idc, 0.0) + 1e-12:
            reason = (f"balanced within {idc}, whose mean is {idc_means[idc]:.3f}: placement policies keep "
                      f"replicas in that IDC")
        else:
            reason = "no valid target has room (hard constraints, capacity or replicas already there)"
        notes.append(f"pool {pool}: disk {broker}:{path} stays at {ws.util(i):.3f} (mean {mean:.3f}): {reason}")
    if len(hot) > MAX_NOTES:
        notes.append(f"pool {pool}: {len(hot) - MAX_NOTES} more disk(s) stay above {options.threshold:.2f} x mean")
    return notes


def _arrivals(ws: Workspace, i: int) -> list[tuple[str, int]]:
    broker, path = ws.disk_ids[i]
    return [pid for pid, (replicas, dirs) in ws.current.items() if (broker, path) in zip(replicas, dirs, strict=True)]
