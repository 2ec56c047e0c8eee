"""Goal: the rebalance's shedding loop (:class:`planners.disk_balance._Shedder`) compiled, with the same plans.

Method: an exact port of ``_Shedder.run``, ``_shed_one``, ``_cheapest_cover``, the workspace's target scans
(``_scan_small``, ``_scan_heap``, ``_scan``), its hard goals (``_valid``: ``Topology.replica_set_ok`` and
:mod:`domain.spread`'s counts) and ``move_replica``'s common case, over arrays in the workspace's disk order,
compiled by numba (``@njit(cache=True)``, in :mod:`planners.shed_jit`; this module builds its arrays and drives
it): the same IEEE operations in the same order and the same tie-breaks, so the same moves. The Python path
stays the reference and the fallback (plan bounds, pool-grow's receivers, leader overrides, unusual partitions,
brokers with more than ``SMALL_SCAN`` disks, non-finite figures). The exchange (``_exchange``: rare, large
replicas) runs in Python between kernel segments, the arrays synced around it.

* **Target search**: every scan of the Python path answers "the first valid disk in (projection, index) order
  among those that pass (not the source, ``util + add x inv <= limit``, room, speed cap), after at most ``tries``
  validity checks". Here the frequent searches (a run's goal, 1,000+ disks) walk a lazy binary heap per (disk
  range, limit, speed cap) of the disks that can take the ``HEAP_QUANTILE`` replica load, as ``_Heap`` does; the
  others, and a walk past ``HEAP_WALK`` ruled-out disks, take the passing disks by repeated minimum.
* **Moves** update the workspace's numpy arrays in place (load, util, projection, used, room) and the kernel's
  replica rows; :func:`run` gives each moved partition its final assignment and copies in the workspace's dicts
  (:meth:`Workspace.set_counted`) and refreshes its Python-float mirrors and heaps.

Guarantee: plans byte-identical to the Python path (tests compare both over many snapshots; the 1,000-broker
benchmark's plan hash). A case the port does not cover raises :class:`KernelBail` and the plan is made again in
Python. Cost: O(moves x (log disks + replicas of the source disk)) in machine code; compiling once per machine
(numba's on-disk cache), loading ~0.5 s per process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from planners.shed_jit import (
    BAIL,
    COVER_ITEMS,
    DONE,
    FLUSH,
    HEAP_SLACK,
    HELD_MAX,
    M_ARENA,
    M_ARR,
    M_ASK,
    M_HEAPS,
    M_HOT,
    M_MOVES,
    M_STEPS,
    MAX_HEAPS,
    MOVE_CAP,
    NO_TARGET,
    _push,
    run_segment,
)
from planners.workspace import HEAP_QUANTILE, KernelBail

if TYPE_CHECKING:
    from planners.workspace import Workspace


class ShedKernel:
    """The arrays of one workspace the kernel reads and writes (built once per workspace, O(replicas) numpy)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        index = ws.index
        parts = index.partitions
        self.parts = parts
        n_p = len(parts)
        d_n = len(ws.disk_ids)
        brokers = [b.id for b in ws.snapshot.brokers]
        self.bidx = {b: k for k, b in enumerate(brokers)}
        idcs: dict[str, int] = {}
        for b in ws.snapshot.brokers:
            idcs.setdefault(b.idc, len(idcs))
        topics = ws.snapshot.topics
        for t in topics:
            for idc in (ws.snapshot.placement_of(t) or {}):
                idcs.setdefault(idc, len(idcs))
        pools: dict[str, int] = {}
        for b in ws.snapshot.brokers:
            pools.setdefault(b.pool, len(pools))
        for t in topics:
            pools.setdefault(t.pool, len(pools))
        self.pools = pools
        self.broker_ids = brokers
        self.disk_dirs = [d for _, d in ws.disk_ids]
        places: dict[tuple[str, str], int] = {}
        b_idc = np.array([idcs[b.idc] for b in ws.snapshot.brokers], dtype=np.int64)
        b_place = np.array([places.setdefault((b.idc, b.rack), len(places)) for b in ws.snapshot.brokers],
                           dtype=np.int64)
        b_pool = np.array([pools[b.pool] for b in ws.snapshot.brokers], dtype=np.int64)
        b_open_pool = np.array([pools[b.pool] if b.is_alive else -1 for b in ws.snapshot.brokers], dtype=np.int64)
        pool_racks = np.zeros((len(pools), len(idcs)), dtype=np.int64)
        for pool, by_idc in ws.topo.racks_in.items():
            for idc, racks in by_idc.items():
                pool_racks[pools[pool], idcs[idc]] = len(racks)
        cols = index.replica_columns
        rf_a = np.diff(cols.start)
        rfmax = int(rf_a.max()) if n_p else 1
        # workspace disk index of each snapshot disk slot (the unknown slot -> -1), replica by replica
        to_ws = np.full(len(index.disk_ids) + 1, -1, dtype=np.int64)
        to_ws[:-1] = np.array([ws.pos[d] for d in index.disk_ids], dtype=np.int64)
        rep_disk = to_ws[cols.disk]
        if (rep_disk < 0).any():
            raise KernelBail("a replica on a log dir the snapshot does not list")
        disk_b = np.array([self.bidx[b] for b, _ in ws.disk_ids], dtype=np.int64)
        row_of = np.repeat(np.arange(n_p, dtype=np.int64), rf_a)
        col_of = np.arange(len(row_of), dtype=np.int64) - cols.start[row_of]
        od = np.full((n_p, rfmax), -1, dtype=np.int32)  # (int32: the 3,000-broker state in half the memory)
        od[row_of, col_of] = rep_disk
        ob = np.full((n_p, rfmax), -1, dtype=np.int32)
        ob[row_of, col_of] = disk_b[rep_disk]
        for a in range(rfmax):
            for c in range(a):
                both = (ob[:, a] >= 0) & (ob[:, a] == ob[:, c])
                if both.any():
                    raise KernelBail("a partition with two replicas on one broker")
        rb, rd = ob.copy(), od.copy()
        pw = np.fromiter((p.bytes_in_per_s for p in parts), dtype=np.float64, count=n_p)
        pr = np.fromiter((p.disk_read_bytes_per_s for p in parts), dtype=np.float64, count=n_p)
        psz = np.fromiter((p.size_bytes for p in parts), dtype=np.float64, count=n_p)
        if not (np.isfinite(pw).all() and np.isfinite(pr).all()) or (psz < 0).any() or (psz >= 2.0 ** 53).any():
            raise KernelBail("non-finite partition rates or sizes outside the exact double range")
        bidx = self.bidx
        p_leader = np.fromiter((bidx.get(p.leader, -2) if p.leader is not None else -1 for p in parts),
                               dtype=np.int64, count=n_p)
        if (p_leader == -2).any():
            raise KernelBail("a leader that is not a known broker")
        plc_rows: dict[tuple[tuple[str, int], ...], int] = {}
        t_plc_of: dict[str, int] = {}
        t_pool_of: dict[str, int] = {}
        for t in topics:
            placement = ws.snapshot.placement_of(t)
            t_pool_of[t.name] = pools[t.pool]
            t_plc_of[t.name] = plc_rows.setdefault(tuple(sorted(placement.items())), len(plc_rows)) \
                if placement else -1
        plc = np.zeros((max(1, len(plc_rows)), len(idcs)), dtype=np.int64)
        for items, row in plc_rows.items():
            for idc, need in items:
                plc[row, idcs[idc]] = need
        t_pool = np.fromiter((t_pool_of[p.topic] for p in parts), dtype=np.int64, count=n_p)
        t_plc = np.fromiter((t_plc_of[p.topic] for p in parts), dtype=np.int64, count=n_p)
        self.rows = cols.position
        self.st = (rb, rd, ob, od, rf_a, pw, pr, psz, p_leader, t_pool, t_plc, plc, b_open_pool, b_pool, b_idc,
                   b_place, pool_racks, disk_b, np.zeros(rfmax, dtype=np.int64))
        for pid in ws.current:  # moved before the kernel's first run (dead brokers evacuated)
            _sync_row(self, pid)
        own = np.zeros((d_n, 2), dtype=np.int64)
        for i, span in enumerate(ws._own_span):
            if span is None:
                raise KernelBail("a broker whose disks are not few and contiguous")
            own[i] = span
        self.own = own
        self.g_range = np.zeros((len(pools), 2), dtype=np.int64)
        self.gi_range = np.zeros((len(pools), len(idcs), 2), dtype=np.int64)
        self.g_speed = np.zeros((len(pools), 2), dtype=np.float64)
        self.gi_speed = np.zeros((len(pools), len(idcs), 2), dtype=np.float64)
        for pool, pi in pools.items():
            self._range(ws.group(pool), self.g_range[pi], self.g_speed[pi])
            for idc, di in idcs.items():
                self._range(ws.group(pool, idc), self.gi_range[pi, di], self.gi_speed[pi, di])
        # the snapshot's replicas per disk in partition order (replicas_on_disk), CSR in workspace disk order
        by_disk = np.argsort(rep_disk, kind="stable")
        self.c_p = row_of[by_disk].astype(np.int32)
        self.c_ptr = np.zeros(d_n + 1, dtype=np.int64)
        self.c_ptr[1:] = np.cumsum(np.bincount(rep_disk, minlength=d_n))
        order = sorted(range(n_p), key=lambda k: parts[k].id)
        self.rank = np.empty(n_p, dtype=np.int32)
        self.rank[np.array(order, dtype=np.int64)] = np.arange(n_p, dtype=np.int32)
        self.stamp = np.zeros(n_p, dtype=np.int64)
        self.d_n = d_n
        replicas_total = int(rf_a.sum())
        self.tmp_p = np.empty(replicas_total + 16, dtype=np.int32)
        self.tmp_pos = np.empty(replicas_total + 16, dtype=np.int32)
        self.tmp_key = np.empty(replicas_total + 16, dtype=np.float64)
        self.tmp_rank = np.empty(replicas_total + 16, dtype=np.int32)
        self.score = np.empty(d_n + 1, dtype=np.float64)
        self.left = np.empty(COVER_ITEMS, dtype=np.float64)
        self.paid = np.empty(COVER_ITEMS, dtype=np.float64)
        self.held = np.empty((HELD_MAX, 2), dtype=np.float64)
        self.th_keys = np.empty((MAX_HEAPS, (HEAP_SLACK + 1) * d_n + 8), dtype=np.float64)
        self.th_idx = np.empty((MAX_HEAPS, (HEAP_SLACK + 1) * d_n + 8), dtype=np.int64)
        self.th_n = np.zeros(MAX_HEAPS, dtype=np.int64)
        self.th_range = np.zeros((MAX_HEAPS, 2), dtype=np.int64)
        self.th_lim = np.zeros((MAX_HEAPS, 2), dtype=np.float64)
        self.th_cur = np.zeros((MAX_HEAPS, d_n), dtype=np.float64)
        self.th_has = np.zeros((MAX_HEAPS, d_n), dtype=np.bool_)
        loads = cols.load
        positive = loads[loads > 0]
        self.least = float(np.quantile(positive, HEAP_QUANTILE)) if len(positive) else 0.0
        self.replicas_total = replicas_total
        self.synced = ws.assignments

    def resync(self) -> None:
        """Rows again for every partition the workspace's own moves changed since the kernel's last look."""
        for pid in self.ws.current:
            _sync_row(self, pid)
        self.synced = self.ws.assignments

    def _range(self, group: np.ndarray, out: np.ndarray, speed: np.ndarray) -> None:
        """A disk group as (first, count) and its speeds as (slowest, fastest) max throughput."""
        if len(group) == 0:
            out[:] = (0, 0)
            speed[:] = (np.inf, -np.inf)
            return
        first = int(group[0])
        if int(group[-1]) - first + 1 != len(group):
            raise KernelBail("a disk group that is not contiguous")
        out[:] = (first, len(group))
        speeds = self.ws.max_bps[group]
        speed[:] = (float(speeds.min()), float(speeds.max()))


class ShedderState:
    """One shedder's kernel state that lasts across its runs: arrivals per disk."""

    def __init__(self, k: ShedKernel) -> None:
        d_n = k.d_n
        cap = k.replicas_total // 2 + 1024
        self.head = np.full(d_n, -1, dtype=np.int64)
        self.tail = np.full(d_n, -1, dtype=np.int64)
        self.arr_pid = np.empty(cap, dtype=np.int32)
        self.arr_next = np.empty(cap, dtype=np.int32)
        self.meta = np.zeros(9, dtype=np.int64)

    def grow(self) -> None:
        """Twice the room for arrivals."""
        self.arr_pid = np.concatenate([self.arr_pid, np.empty_like(self.arr_pid)])
        self.arr_next = np.concatenate([self.arr_next, np.empty_like(self.arr_next)])

    def arrive(self, disk: int, row: int) -> None:
        """Append ``row`` (a partition) to the arrivals of ``disk`` (Python's ``arrived[disk].append``)."""
        a = int(self.meta[M_ARR])
        self.arr_pid[a] = row
        self.arr_next[a] = -1
        if self.head[disk] < 0:
            self.head[disk] = a
        else:
            self.arr_next[self.tail[disk]] = a
        self.tail[disk] = a
        self.meta[M_ARR] = a + 1


def run(k: ShedKernel, state: ShedderState, disks: np.ndarray, hot: float, goal: float, intra: bool, pool: str,
        steps: int, exchange: Any) -> dict[int, str]:
    """One ``_Shedder.run`` over ``disks`` through the kernel (at most ``steps`` steps); ``exchange(i)`` is
    ``_exchange`` for disk ``i`` (returns its arrivals). Returns the stuck disks with their reasons."""
    ws = k.ws
    if ws.assignments != k.synced:
        k.resync()
    d_n = k.d_n
    meta = state.meta
    meta[M_STEPS] = steps
    meta[M_MOVES] = 0
    meta[M_HEAPS] = 0
    meta[M_ARENA] = 0
    hot_keys = np.empty(d_n + 16, dtype=np.float64)
    hot_idx = np.empty(d_n + 16, dtype=np.int64)
    held_key = np.zeros(1, dtype=np.float64)
    live_has = np.zeros(d_n, dtype=np.bool_)
    live_neg = np.zeros(d_n, dtype=np.float64)
    stuck = np.zeros(d_n, dtype=np.int8)
    arena = k.replicas_total + 1024
    a_p = np.empty(arena, dtype=np.int32)
    a_pos = np.empty(arena, dtype=np.int32)
    a_load = np.empty(arena, dtype=np.float64)
    a_size = np.empty(arena, dtype=np.float64)
    pile_start = np.zeros(d_n, dtype=np.int64)
    pile_len = np.zeros(d_n, dtype=np.int64)
    pile_top = np.zeros(d_n, dtype=np.float64)
    pile_has = np.zeros(d_n, dtype=np.bool_)
    mv = np.empty((1 << 16, 3), dtype=np.int64)
    start = True
    pool_id = k.pools[pool]
    while True:
        code = run_segment(disks, hot, goal, intra, pool_id, k.least, meta, hot_keys, hot_idx, held_key, live_has,
                           live_neg, stuck, start, ws.load, ws.util_arr, ws.proj, ws.base, ws.load0, ws.inv_max,
                           ws.max_bps, ws.room, ws.used, k.own, k.g_range, k.gi_range, k.g_speed, k.gi_speed, k.st,
                           k.c_ptr, k.c_p, state.head, state.tail, state.arr_pid, state.arr_next, k.stamp, k.rank,
                           a_p, a_pos, a_load, a_size, pile_start, pile_len, pile_top, pile_has, k.tmp_p, k.tmp_pos,
                           k.tmp_key, k.tmp_rank, mv, k.th_keys, k.th_idx, k.th_n, k.th_range, k.th_lim, k.th_cur,
                           k.th_has, k.score, k.left, k.paid, k.held)
        start = False
        _apply(k, mv, int(meta[M_MOVES]))
        meta[M_MOVES] = 0
        if code == DONE:
            break
        if code == BAIL:
            ask = int(meta[M_ASK])
            raise KernelBail(f"no room for the candidates of disk {-1 - ask}" if ask < 0 else
                             f"a move off disk {ask} where a staying replica gains or loses leadership")
        # room for what comes next: a step's arrival and pushes (FLUSH), or an exchange's (a few per disk)
        margin = 4 if code == FLUSH else 64
        if meta[M_ARR] + margin >= len(state.arr_pid):
            state.grow()
        if meta[M_HOT] + margin >= len(hot_keys):  # stale entries stay until they surface, as in Python's heap
            hot_keys = np.concatenate([hot_keys, np.empty_like(hot_keys)])
            hot_idx = np.concatenate([hot_idx, np.empty_like(hot_idx)])
        if code == FLUSH:
            continue
        i = int(meta[M_ASK])
        touched: set[tuple[str, int]] = set()
        ws.touched = touched
        try:
            arrivals = exchange(i)
        finally:
            ws.touched = None
        for pid in touched:
            _sync_row(k, pid)
        k.synced = ws.assignments
        meta[M_HEAPS] = 0  # the exchange moved loads the heaps do not know of
        if arrivals:
            pile_has[i] = False
            for j, pid in arrivals:
                state.arrive(j, k.rows[pid])
                pile_has[j] = False
                _push_hot(ws, j, hot, meta, hot_keys, hot_idx, live_has, live_neg)
            _push_hot(ws, i, hot, meta, hot_keys, hot_idx, live_has, live_neg)
        else:
            stuck[i] = NO_TARGET
    return {int(i): ("move-cap" if stuck[i] == MOVE_CAP else "no-target") for i in np.flatnonzero(stuck)}


def _push_hot(ws: Workspace, j: int, hot: float, meta: np.ndarray, keys: np.ndarray, idx: np.ndarray,
              live_has: np.ndarray, live_neg: np.ndarray) -> None:
    util = float(ws.util_arr[j])
    if util > hot:
        live_has[j] = True
        live_neg[j] = -util
        meta[M_HOT] = _push(keys, idx, int(meta[M_HOT]), -util, j)


def _apply(k: ShedKernel, mv: np.ndarray, n: int) -> None:
    """The kernel's moves into the workspace's dicts (loads are in its arrays already), then its mirrors: per
    partition its final replicas, copies (replicas not where the snapshot has them) and cost, as
    :meth:`Workspace.move_replica` counts them move by move."""
    if not n:
        return
    ws = k.ws
    rows = np.unique(mv[:n, 0])
    rb, rd, od, rf_a = k.st[0], k.st[1], k.st[3], k.st[4]
    cur_d = rd[rows]
    kept = (cur_d[:, :, None] == od[rows][:, None, :]).any(axis=2)  # (a known disk is one (broker, dir) pair)
    width = cur_d.shape[1]
    in_rf = np.arange(width)[None, :] < rf_a[rows][:, None]
    copies = ((~kept) & in_rf).sum(axis=1)
    broker_ids, disk_dirs, parts = k.broker_ids, k.disk_dirs, k.parts
    for row, c, bs, ds, rf in zip(rows.tolist(), copies.tolist(), rb[rows].tolist(), cur_d.tolist(),
                                  rf_a[rows].tolist(), strict=True):
        ws.set_counted(parts[row], tuple(broker_ids[b] for b in bs[:rf]), tuple(disk_dirs[d] for d in ds[:rf]), c)
    ws.refresh_mirrors()


def _sync_row(k: ShedKernel, pid: tuple[str, int]) -> None:
    """A partition the Python exchange moved: its kernel row again from the workspace."""
    ws = k.ws
    row = k.rows[pid]
    p = k.parts[row]
    replicas, dirs = ws.replicas(p)
    rb, rd = k.st[0], k.st[1]
    for m, (b, d) in enumerate(zip(replicas, dirs, strict=True)):
        rb[row, m] = k.bidx[b]
        rd[row, m] = ws.pos[(b, d)]


def usable(ws: Workspace) -> bool:
    """Whether ``ws`` may shed through the kernel now (no leader overrides, finite figures; plan bounds and
    pool-grow's receivers are ruled out by the caller, ``balance_pool``)."""
    return (not ws.leader_override
            and bool(np.isfinite(ws.load).all() and np.isfinite(ws.util_arr).all() and np.isfinite(ws.proj).all()
                     and (ws.proj < 1e17).all() and np.isfinite(ws.inv_max).all()))
