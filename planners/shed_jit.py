"""Goal: the compiled half of :mod:`planners.shed_kernel` — ``_Shedder.run`` and everything it calls per move.

Method: numba functions (``@njit(cache=True)``) over arrays in the workspace's disk order, each the port of one
piece of the Python loop: a (key, index) binary heap; the hard goals (``_set_ok``: ``Topology.replica_set_ok`` with
:mod:`domain.spread`'s counts, over dense broker indices); the target scans (``_search``, and the lazy heaps of
``_Heap`` walked inside ``run_segment``); ``_add_load``; the cheapest cover (``_cover``); candidate piles
(``_build_pile``, ``_drop``); and ``run_segment``, the loop itself with ``_shed_one`` and ``move_replica`` inline.
Its state lives in arrays the caller keeps, so a segment stops (an exchange to make in Python, a full move list) and
resumes where it stopped.

Guarantee: the same IEEE operations in the same order and the same tie-breaks as the Python loop (see
:mod:`planners.shed_kernel`). The constants mirror the Python loop's (numba freezes globals into its cached code,
so they are written here rather than imported; ``tests/unit/test_shed_kernel.py`` checks they agree). ``_set_ok``
is a second copy of the hard goals (compiled code cannot call the Python one): a change to
``Topology.replica_set_ok`` or :mod:`domain.spread`'s rules is made here too (the byte-identity tests catch a
drift). Cost: per move O(log disks) for the heaps plus the candidate pile of the source disk.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

TRIES = 64  # Workspace.best_target's tries
EPS = 1e-12  # workspace.EPS
PROGRESS = 1e-9  # disk_balance.PROGRESS
COVER_ITEMS = 128  # disk_balance.COVER_ITEMS
HEAP_MIN_DISKS = 1_000  # workspace.HEAP_MIN_DISKS
HEAP_WALK = 48  # workspace.HEAP_WALK
HEAP_SLACK = 3  # workspace.HEAP_SLACK
MAX_HEAPS = 8  # workspace.MAX_HEAPS
HELD_MAX = 256
NO_TARGET, MOVE_CAP = 1, 3
DONE, EXCHANGE, BAIL, FLUSH = 0, 1, 2, 3
INF = np.inf

# meta slots (int64): hot heap size, held disk (-1 none), steps left, arena fill, arrivals count, moves count,
# target heaps count, disk asking for an exchange, candidate-build stamp
M_HOT, M_HELD, M_STEPS, M_ARENA, M_ARR, M_MOVES, M_HEAPS, M_ASK, M_STAMP = range(9)


# ------------------------------------------------------------------------------------------------ heaps
@njit(cache=True)
def _less(ka: float, ia: int, kb: float, ib: int) -> bool:
    return ka < kb or (ka == kb and ia < ib)


@njit(cache=True)
def _sift_down(keys: np.ndarray, idx: np.ndarray, n: int, pos: int) -> None:
    k = keys[pos]
    i = idx[pos]
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        right = child + 1
        if right < n and _less(keys[right], idx[right], keys[child], idx[child]):
            child = right
        if _less(keys[child], idx[child], k, i):
            keys[pos] = keys[child]
            idx[pos] = idx[child]
            pos = child
        else:
            break
    keys[pos] = k
    idx[pos] = i


@njit(cache=True)
def _push(keys: np.ndarray, idx: np.ndarray, n: int, k: float, i: int) -> int:
    pos = n
    while pos > 0:
        parent = (pos - 1) >> 1
        if _less(k, i, keys[parent], idx[parent]):
            keys[pos] = keys[parent]
            idx[pos] = idx[parent]
            pos = parent
        else:
            break
    keys[pos] = k
    idx[pos] = i
    return n + 1


@njit(cache=True)
def _pop(keys: np.ndarray, idx: np.ndarray, n: int) -> int:
    n -= 1
    if n > 0:
        keys[0] = keys[n]
        idx[0] = idx[n]
        _sift_down(keys, idx, n, 0)
    return n


# ------------------------------------------------------------------------------------------------ hard goals
@njit(cache=True)
def _deficit(rs: np.ndarray, rf: int, b_idc: np.ndarray, row: np.ndarray) -> int:
    missing = 0
    for d in range(row.shape[0]):
        need = row[d]
        if need <= 0:
            continue
        have = 0
        for k in range(rf):
            if b_idc[rs[k]] == d:
                have += 1
        if have < need:
            missing += need - have
    return missing


@njit(cache=True)
def _outside(rs: np.ndarray, rf: int, b_pool: np.ndarray, pool: int) -> int:
    n = 0
    for k in range(rf):
        if b_pool[rs[k]] != pool:
            n += 1
    return n


@njit(cache=True)
def _set_ok(old: np.ndarray, new: np.ndarray, rf: int, pool: int, plc_row: int, plc: np.ndarray,
            b_open_pool: np.ndarray, b_pool: np.ndarray, b_idc: np.ndarray, b_place: np.ndarray,
            racks: np.ndarray) -> bool:
    """``Topology.replica_set_ok(old, new, pool, placement)`` over dense broker indices."""
    for k in range(rf):
        for m in range(k):
            if new[m] == new[k]:
                return False
    for k in range(rf):
        b = new[k]
        in_old = False
        for m in range(rf):
            if old[m] == b:
                in_old = True
                break
        if not in_old and b_open_pool[b] != pool:
            return False
    same_set = True
    for k in range(rf):
        found = False
        for m in range(rf):
            if new[m] == old[k]:
                found = True
                break
        if not found:
            same_set = False
            break
    out_old = _outside(old, rf, b_pool, pool)
    if same_set:
        same_order = True
        for k in range(rf):
            if new[k] != old[k]:
                same_order = False
        if same_order:
            return True
        out_after = _outside(new, rf, b_pool, pool)
        return not (out_after > 0 and out_after >= out_old)
    if out_old > 0:
        out_after = _outside(new, rf, b_pool, pool)
        if out_after > 0 and out_after >= out_old:
            return False
    n_idc = racks.shape[0]
    if plc_row >= 0:
        after = _deficit(new, rf, b_idc, plc[plc_row])
        if after > 0 and after >= _deficit(old, rf, b_idc, plc[plc_row]):
            return False
    distinct = 0
    for k in range(rf):
        seen = False
        for m in range(k):
            if b_place[new[m]] == b_place[new[k]]:
                seen = True
                break
        if not seen:
            distinct += 1
    dups = rf - distinct
    if dups == 0:
        return True
    shared = False  # rack_spread_broken: a rack holding more than one of new's and more than of old's ...
    for k in range(rf):
        place = b_place[new[k]]
        after_n = 0
        before_n = 0
        for m in range(rf):
            if b_place[new[m]] == place:
                after_n += 1
            if b_place[old[m]] == place:
                before_n += 1
        if after_n > 1 and after_n > before_n:
            shared = True
            break
    if not shared:
        return True
    forced_own = 0  # ... while more replicas share racks than unavoidable
    for k in range(rf):
        d = b_idc[new[k]]
        first = True
        for m in range(k):
            if b_idc[new[m]] == d:
                first = False
                break
        if first:
            count = 0
            for m in range(rf):
                if b_idc[new[m]] == d:
                    count += 1
            if count - racks[d] > 0:
                forced_own += count - racks[d]
    forced = 0
    need_total = 0
    spare = 0
    for d in range(n_idc):
        need = plc[plc_row, d] if plc_row >= 0 else 0
        if need > 0:
            need_total += need
            if need - racks[d] > 0:
                forced += need - racks[d]
        if racks[d] - need > 0:
            spare += racks[d] - need
    free = rf - need_total - spare
    fewest = forced + (free if free > 0 else 0)
    allowed = forced_own if forced_own < fewest else fewest
    return not (dups > allowed)


# ------------------------------------------------------------------------------------------------ the kernel
@njit(cache=True)
def _valid(p: int, pos: int, i: int, st: Any) -> bool:
    rb = st[0]
    ob = st[2]
    rf_a = st[4]
    t_pool = st[9]
    t_plc = st[10]
    plc = st[11]
    b_open_pool = st[12]
    b_pool = st[13]
    b_idc = st[14]
    b_place = st[15]
    pool_racks = st[16]
    disk_b = st[17]
    scratch = st[18]
    rf = rf_a[p]
    dst = disk_b[i]
    if dst != rb[p, pos]:
        for k in range(rf):
            if rb[p, k] == dst:
                return False
    for k in range(rf):
        scratch[k] = rb[p, k]
    scratch[pos] = dst
    pool = t_pool[p]
    return _set_ok(ob[p], scratch, rf, pool, t_plc[p], plc, b_open_pool, b_pool, b_idc, b_place, pool_racks[pool])


@njit(cache=True)
def _planned_leader(p: int, rb: np.ndarray, rd: np.ndarray, ob: np.ndarray, od: np.ndarray, rf: int,
                    leader: int, new_b: int, new_pos: int, new_d: int) -> int:
    """``_planned_leader`` of ``p``'s current replicas, with replica ``new_pos`` replaced (-1: none replaced)."""
    in_set = False
    same = True
    for k in range(rf):
        b = new_b if k == new_pos else rb[p, k]
        d = new_d if k == new_pos else rd[p, k]
        if b == leader:
            in_set = True
        if b != ob[p, k] or d != od[p, k]:
            same = False
    if leader >= 0 and in_set:
        return leader
    if same:
        return leader
    return new_b if new_pos == 0 else rb[p, 0]


@njit(cache=True)
def _search(p: int, pos: int, first: int, n: int, src: int, add: float, size: float, limit: float, cap: float,
            util: np.ndarray, inv: np.ndarray, room: np.ndarray, proj: np.ndarray, maxbps: np.ndarray,
            score: np.ndarray, st: Any) -> int:
    """The first valid disk of ``first .. first + n - 1`` in (projection, index) order among the passing ones,
    after at most TRIES validity checks (-1: none) — the answer of every scan of the Python path."""
    for k in range(n):
        i = first + k
        if i == src or inv[i] * add + util[i] > limit or room[i] < size or maxbps[i] > cap:
            score[k] = INF
        else:
            score[k] = proj[i]
    for _ in range(TRIES):
        best = -1
        for k in range(n):
            if score[k] < INF and (best < 0 or score[k] < score[best]):
                best = k
        if best < 0:
            return -1
        score[best] = INF
        if _valid(p, pos, first + best, st):
            return first + best
    return -1


@njit(cache=True)
def _heap_rebuild(h: int, th_keys: np.ndarray, th_idx: np.ndarray, th_n: np.ndarray, th_range: np.ndarray,
                  th_lim: np.ndarray, th_cur: np.ndarray, th_has: np.ndarray, least: float, util: np.ndarray,
                  inv: np.ndarray, proj: np.ndarray, maxbps: np.ndarray) -> None:
    first, n = th_range[h, 0], th_range[h, 1]
    limit, cap = th_lim[h, 0], th_lim[h, 1]
    m = 0
    for i in range(first, first + n):
        if inv[i] * least + util[i] > limit or maxbps[i] > cap:
            th_has[h, i] = False
        else:
            th_has[h, i] = True
            th_cur[h, i] = proj[i]
            th_keys[h, m] = proj[i]
            th_idx[h, m] = i
            m += 1
    for q in range(m // 2 - 1, -1, -1):
        _sift_down(th_keys[h], th_idx[h], m, q)
    th_n[h] = m


@njit(cache=True)
def _add_load(i: int, delta: float, load: np.ndarray, util: np.ndarray, proj: np.ndarray, base: np.ndarray,
              load0: np.ndarray, inv: np.ndarray, maxbps: np.ndarray, meta: np.ndarray, th_keys: np.ndarray,
              th_idx: np.ndarray, th_n: np.ndarray, th_range: np.ndarray, th_lim: np.ndarray, th_cur: np.ndarray,
              th_has: np.ndarray, least: float) -> None:
    """``Workspace.add_load``: the same double operations; the target heaps follow (``_Heap.push``)."""
    x = inv[i]
    value = load[i] + delta
    load[i] = value
    u = value * x
    util[i] = u
    pr = base[i] + (value - load0[i]) * x
    proj[i] = pr
    for h in range(meta[M_HEAPS]):
        first, n = th_range[h, 0], th_range[h, 1]
        if first <= i < first + n:
            if x * least + u > th_lim[h, 0] or maxbps[i] > th_lim[h, 1]:
                th_has[h, i] = False
                continue
            th_has[h, i] = True
            th_cur[h, i] = pr
            if th_n[h] >= th_keys.shape[1]:
                _heap_rebuild(h, th_keys, th_idx, th_n, th_range, th_lim, th_cur, th_has, least, util, inv, proj,
                              maxbps)
            else:
                th_n[h] = _push(th_keys[h], th_idx[h], th_n[h], pr, i)
                if th_n[h] > HEAP_SLACK * n:
                    _heap_rebuild(h, th_keys, th_idx, th_n, th_range, th_lim, th_cur, th_has, least, util, inv,
                                  proj, maxbps)


@njit(cache=True)
def _cover(a_load: np.ndarray, a_size: np.ndarray, start: int, length: int, excess: float, top: float,
           left: np.ndarray, paid: np.ndarray) -> int:
    """``_cheapest_cover``: the same numpy operations written out (cumulative sums, searchsorted, row minima)."""
    n = length if length < COVER_ITEMS else COVER_ITEMS
    if n <= 1 or excess <= 0:
        return 0
    if excess > top:
        return 0
    run = 0.0
    for k in range(n):
        x = a_load[start + k]
        run += x
        left[k] = excess - (run - x)
    lo, hi = 0, n  # np.searchsorted(-left, 0.0, side="right")
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if -left[mid] > 0.0:
            hi = mid
        else:
            lo = mid + 1
    rows = lo
    if rows == 0:
        return 0
    run = 0.0
    for k in range(n):
        x = a_size[start + k]
        run += x
        paid[k] = run - x
    best = INF
    best_k = 0
    first_cover = INF
    first_j = 0
    for k in range(rows):
        lk = left[k]
        cmin = INF
        cj = 0
        for j in range(k, n):
            if a_load[start + j] >= lk and a_size[start + j] < cmin:
                cmin = a_size[start + j]
                cj = j
        c = paid[k] + cmin
        if k == 0:
            first_cover = cmin
            first_j = cj
        if c < best:
            best = c
            best_k = k
    if rows < n and paid[rows] < best:
        return 0
    if best_k > 0 or not np.isfinite(best):
        return 0
    if first_cover == INF:
        return 0
    return first_j


@njit(cache=True)
def _build_pile(i: int, pool: int, st: Any, c_ptr: np.ndarray, c_p: np.ndarray, head: np.ndarray,
                arr_pid: np.ndarray, arr_next: np.ndarray, stamp: np.ndarray, meta: np.ndarray, disk_b: np.ndarray,
                rank: np.ndarray, a_p: np.ndarray, a_pos: np.ndarray, a_load: np.ndarray, a_size: np.ndarray,
                pile_start: np.ndarray, pile_len: np.ndarray, pile_top: np.ndarray, tmp_p: np.ndarray,
                tmp_pos: np.ndarray, tmp_key: np.ndarray, tmp_rank: np.ndarray, pile_has: np.ndarray) -> bool:
    """``_candidates``: movable replicas on disk ``i`` (the snapshot's, then its arrivals), best load per byte first."""
    rb = st[0]
    rd = st[1]
    rf_a = st[4]
    pw = st[5]
    pr = st[6]
    psz = st[7]
    p_leader = st[8]
    t_pool = st[9]
    meta[M_STAMP] += 1
    s = meta[M_STAMP]
    broker = disk_b[i]
    m = 0
    total = c_ptr[i + 1] - c_ptr[i]
    node = head[i]
    q = 0
    while True:
        if q < total:
            p = c_p[c_ptr[i] + q]
            q += 1
        elif node >= 0:
            p = arr_pid[node]
            node = arr_next[node]
        else:
            break
        if stamp[p] == s:
            continue
        stamp[p] = s
        leader = p_leader[p]
        if leader < 0 or t_pool[p] != pool:
            continue
        rf = rf_a[p]
        position = -1
        for k in range(rf):
            if rb[p, k] == broker:
                position = k
                break
        if position < 0:
            continue
        if rd[p, position] != i:
            position = -1
            for k in range(rf):
                if rb[p, k] == broker and rd[p, k] == i:
                    position = k
                    break
            if position < 0:
                continue
        load = pw[p] + pr[p] if broker == leader else pw[p]
        if load <= 0 or (broker == leader and position != 0):
            continue
        tmp_p[m] = p
        tmp_pos[m] = position
        tmp_key[m] = -(load / psz[p]) if psz[p] != 0 else -INF
        tmp_rank[m] = rank[p]
        m += 1
    order = np.argsort(tmp_rank[:m], kind="mergesort")
    order = order[np.argsort(tmp_key[:m][order], kind="mergesort")]
    fill = meta[M_ARENA]
    if fill + m > a_p.shape[0]:  # compact: the live piles to the front, in place (each moves left only)
        fill = 0
        n_disks = pile_has.shape[0]
        starts = np.empty(n_disks, dtype=np.int64)
        live = 0
        for d in range(n_disks):
            if pile_has[d] and d != i:
                starts[live] = d
                live += 1
        order_d = starts[:live][np.argsort(pile_start[starts[:live]], kind="mergesort")]
        for d in order_d:
            s0 = pile_start[d]
            for j in range(pile_len[d]):
                a_p[fill + j] = a_p[s0 + j]
                a_pos[fill + j] = a_pos[s0 + j]
                a_load[fill + j] = a_load[s0 + j]
                a_size[fill + j] = a_size[s0 + j]
            pile_start[d] = fill
            fill += pile_len[d]
        if fill + m > a_p.shape[0]:
            return False
    top = -INF
    for k in range(m):
        p = tmp_p[order[k]]
        position = tmp_pos[order[k]]
        a_p[fill + k] = p
        a_pos[fill + k] = position
        load = pw[p] + pr[p] if broker == p_leader[p] else pw[p]
        a_load[fill + k] = load
        a_size[fill + k] = psz[p]
        if load > top:
            top = load
    pile_start[i] = fill
    pile_len[i] = m
    pile_top[i] = top
    meta[M_ARENA] = fill + m
    return True


@njit(cache=True)
def _drop(i: int, k: int, a_p: np.ndarray, a_pos: np.ndarray, a_load: np.ndarray, a_size: np.ndarray,
          pile_start: np.ndarray, pile_len: np.ndarray, pile_top: np.ndarray) -> None:
    s = pile_start[i]
    n = pile_len[i]
    dropped = a_load[s + k]
    if k == 0:
        pile_start[i] = s + 1
    else:
        for j in range(s + k, s + n - 1):
            a_p[j] = a_p[j + 1]
            a_pos[j] = a_pos[j + 1]
            a_load[j] = a_load[j + 1]
            a_size[j] = a_size[j + 1]
    pile_len[i] = n - 1
    if dropped == pile_top[i]:  # the largest load, recomputed (the same value _Pile.top would give)
        top = -INF
        s = pile_start[i]
        for j in range(s, s + n - 1):
            if a_load[j] > top:
                top = a_load[j]
        pile_top[i] = top


@njit(cache=True)
def run_segment(disks: np.ndarray, hot: float, goal: float, intra: bool, pool: int, least: float, meta: np.ndarray,
                hot_keys: np.ndarray, hot_idx: np.ndarray, held_key: np.ndarray, live_has: np.ndarray,
                live_neg: np.ndarray, stuck: np.ndarray, start: bool,
                load: np.ndarray, util: np.ndarray, proj: np.ndarray, base: np.ndarray, load0: np.ndarray,
                inv: np.ndarray, maxbps: np.ndarray, room: np.ndarray, used: np.ndarray, own: np.ndarray,
                g_range: np.ndarray, gi_range: np.ndarray, g_speed: np.ndarray, gi_speed: np.ndarray,
                st: Any, c_ptr: np.ndarray, c_p: np.ndarray, head: np.ndarray, tail: np.ndarray,
                arr_pid: np.ndarray, arr_next: np.ndarray, stamp: np.ndarray, rank: np.ndarray,
                a_p: np.ndarray, a_pos: np.ndarray, a_load: np.ndarray, a_size: np.ndarray,
                pile_start: np.ndarray, pile_len: np.ndarray, pile_top: np.ndarray, pile_has: np.ndarray,
                tmp_p: np.ndarray, tmp_pos: np.ndarray, tmp_key: np.ndarray, tmp_rank: np.ndarray,
                mv: np.ndarray, th_keys: np.ndarray, th_idx: np.ndarray, th_n: np.ndarray, th_range: np.ndarray,
                th_lim: np.ndarray, th_cur: np.ndarray, th_has: np.ndarray, score: np.ndarray, left: np.ndarray,
                paid: np.ndarray, held: np.ndarray) -> int:
    """``_Shedder.run`` from where it stopped (``start``: a new run over ``disks``). Returns DONE, or EXCHANGE with
    the disk in ``meta[M_ASK]`` (the caller tries ``_exchange`` in Python and resumes)."""
    rb = st[0]
    rd = st[1]
    ob = st[2]
    od = st[3]
    rf_a = st[4]
    pw = st[5]
    pr = st[6]
    psz = st[7]
    p_leader = st[8]
    t_pool = st[9]
    t_plc = st[10]
    b_idc = st[14]
    disk_b = st[17]
    if start:
        n = 0
        for i in disks:
            if util[i] > hot:
                hot_keys[n] = -util[i]
                hot_idx[n] = i
                n += 1
        for q in range(n // 2 - 1, -1, -1):
            _sift_down(hot_keys, hot_idx, n, q)
        meta[M_HOT] = n
        for q in range(n):
            live_has[hot_idx[q]] = True
            live_neg[hot_idx[q]] = hot_keys[q]
        meta[M_HELD] = -1
    while meta[M_HOT] > 0 or meta[M_HELD] >= 0:
        if meta[M_MOVES] >= mv.shape[0] or meta[M_ARR] >= arr_pid.shape[0] or meta[M_HOT] + 4 >= hot_keys.shape[0]:
            return FLUSH  # the caller applies the moves / grows the arrivals and resumes (state is all in arrays)
        if meta[M_HELD] >= 0:
            hk, hi = held_key[0], meta[M_HELD]
            meta[M_HELD] = -1
            if meta[M_HOT] > 0 and _less(hot_keys[0], hot_idx[0], hk, hi):
                neg, i = hot_keys[0], hot_idx[0]
                hot_keys[0] = hk
                hot_idx[0] = hi
                _sift_down(hot_keys, hot_idx, meta[M_HOT], 0)
            else:
                neg, i = hk, hi
        else:
            neg, i = hot_keys[0], hot_idx[0]
            meta[M_HOT] = _pop(hot_keys, hot_idx, meta[M_HOT])
        if stuck[i] != 0 or not live_has[i] or live_neg[i] != neg:
            continue
        live_has[i] = False
        u = util[i]
        if abs(-neg - u) > 1e-12:
            if u > hot:
                live_has[i] = True
                live_neg[i] = -u
                meta[M_HOT] = _push(hot_keys, hot_idx, meta[M_HOT], -u, i)
            continue
        meta[M_STEPS] -= 1
        if meta[M_STEPS] < 0:
            stuck[i] = MOVE_CAP
            for j in range(live_has.shape[0]):
                if live_has[j]:
                    stuck[j] = MOVE_CAP
            break
        if not pile_has[i]:
            if not _build_pile(i, pool, st, c_ptr, c_p, head, arr_pid, arr_next, stamp, meta, disk_b, rank, a_p,
                               a_pos, a_load, a_size, pile_start, pile_len, pile_top, tmp_p, tmp_pos, tmp_key,
                               tmp_rank, pile_has):
                meta[M_ASK] = -1 - i  # (negative: no room for candidates)
                return BAIL
            pile_has[i] = True
        # ---- _shed_one
        target = -1
        moved_p = -1
        mb = maxbps[i]
        while pile_len[i] > 0:
            excess = load[i] - goal * mb
            s = pile_start[i]
            pick = _cover(a_load, a_size, s, pile_len[i], excess, pile_top[i], left, paid)
            p = a_p[s + pick]
            pos = a_pos[s + pick]
            c_load = a_load[s + pick]
            rf = rf_a[p]
            src = rd[p, pos]
            lead = _planned_leader(p, rb, rd, ob, od, rf, p_leader[p], -1, -1, -1)
            add = pw[p] + (pr[p] if lead == rb[p, pos] else 0.0)
            size = psz[p]
            target = -1
            if intra:
                target = _search(p, pos, own[i, 0], own[i, 1], src, add, size, goal + EPS, INF, util, inv, room,
                                 proj, maxbps, score, st)
            if target < 0:
                tp = t_pool[p]
                if t_plc[p] >= 0:
                    d = b_idc[rb[p, pos]]
                    first, n = gi_range[tp, d, 0], gi_range[tp, d, 1]
                    smin, smax = gi_speed[tp, d, 0], gi_speed[tp, d, 1]
                else:
                    first, n, smin, smax = g_range[tp, 0], g_range[tp, 1], g_speed[tp, 0], g_speed[tp, 1]
                if n > 0:
                    limit = goal + EPS
                    for attempt in range(2):
                        cap = mb if attempt == 0 else INF
                        if attempt == 0 and not (smax > mb and smin <= mb):
                            continue  # mixed_speeds: a disk no faster than the source first, when both kinds exist
                        h = -1
                        if n >= HEAP_MIN_DISKS and add >= least:
                            for q in range(meta[M_HEAPS]):
                                if th_range[q, 0] == first and th_range[q, 1] == n and th_lim[q, 0] == limit \
                                        and th_lim[q, 1] == cap:
                                    h = q
                                    break
                            if h < 0 and meta[M_HEAPS] < MAX_HEAPS:
                                h = meta[M_HEAPS]
                                meta[M_HEAPS] = h + 1
                                th_range[h, 0] = first
                                th_range[h, 1] = n
                                th_lim[h, 0] = limit
                                th_lim[h, 1] = cap
                                _heap_rebuild(h, th_keys, th_idx, th_n, th_range, th_lim, th_cur, th_has, least, util,
                                              inv, proj, maxbps)
                        done = False
                        if h >= 0:  # _scan_heap
                            keys, idx = th_keys[h], th_idx[h]
                            nh = th_n[h]
                            nheld = 0
                            tried = 0
                            last_k = np.nan
                            last_i = -1
                            done = True
                            while nh > 0:
                                ek, ei = keys[0], idx[0]
                                if not th_has[h, ei] or th_cur[h, ei] != ek or (ek == last_k and ei == last_i):
                                    nh = _pop(keys, idx, nh)
                                    continue
                                if ei == src or inv[ei] * add + util[ei] > limit or room[ei] < size:
                                    if nheld >= HEAP_WALK:
                                        done = False
                                        break
                                else:
                                    tried += 1
                                    if _valid(p, pos, ei, st):
                                        target = ei
                                        break
                                    if tried >= TRIES:
                                        break
                                last_k, last_i = ek, ei
                                nh = _pop(keys, idx, nh)
                                held[nheld, 0] = ek
                                held[nheld, 1] = ei
                                nheld += 1
                            for q in range(nheld):
                                nh = _push(keys, idx, nh, held[q, 0], int(held[q, 1]))
                            th_n[h] = nh
                        if not done:
                            target = _search(p, pos, first, n, src, add, size, limit, cap, util, inv, room, proj,
                                             maxbps, score, st)
                        if target >= 0:
                            break
                    if target < 0:  # no disk stays under the goal: one under the hot line, clearly under this disk
                        ceiling = (load[i] - c_load) * inv[i]
                        if not (ceiling > hot):
                            ceiling = hot
                        lvl = util[i]
                        under = lvl - (lvl if lvl > 1.0 else 1.0) * PROGRESS - 2e-12
                        if under < ceiling:
                            ceiling = under
                        target = _search(p, pos, first, n, src, add, size, ceiling + EPS, INF, util, inv, room,
                                         proj, maxbps, score, st)
            _drop(i, pick, a_p, a_pos, a_load, a_size, pile_start, pile_len, pile_top)
            if target >= 0:  # ---- move_replica, and assign's case (a staying replica gains or loses leadership)
                b = disk_b[target]
                old_b = rb[p, pos]
                after = _planned_leader(p, rb, rd, ob, od, rf, p_leader[p], b, pos, target)
                if after != lead:
                    for k in range(rf):
                        if k != pos and (rb[p, k] == lead or rb[p, k] == after):
                            stay = rb[p, k]
                            change = (0.0 - (pw[p] + (pr[p] if stay == lead else 0.0))) \
                                + (pw[p] + (pr[p] if stay == after else 0.0))
                            if change != 0.0:
                                _add_load(rd[p, k], change, load, util, proj, base, load0, inv, maxbps, meta, th_keys,
                                          th_idx, th_n, th_range, th_lim, th_cur, th_has, least)
                out_load = 0.0 - (pw[p] + (pr[p] if old_b == lead else 0.0))
                in_load = 0.0 + (pw[p] + (pr[p] if b == after else 0.0))
                if out_load != 0.0:
                    _add_load(src, out_load, load, util, proj, base, load0, inv, maxbps, meta, th_keys, th_idx, th_n,
                              th_range, th_lim, th_cur, th_has, least)
                if in_load != 0.0:
                    _add_load(target, in_load, load, util, proj, base, load0, inv, maxbps, meta, th_keys, th_idx,
                              th_n, th_range, th_lim, th_cur, th_has, least)
                if size != 0.0:
                    used[src] -= size
                    room[src] += size
                    used[target] += size
                    room[target] -= size
                rb[p, pos] = b
                rd[p, pos] = target
                m = meta[M_MOVES]
                mv[m, 0] = p
                mv[m, 1] = pos
                mv[m, 2] = target
                meta[M_MOVES] = m + 1
                moved_p = p
                break
        if target < 0:
            meta[M_ASK] = i
            return EXCHANGE
        a = meta[M_ARR]  # the arrival, appended to its disk's list
        arr_pid[a] = moved_p
        arr_next[a] = -1
        if head[target] < 0:
            head[target] = a
        else:
            arr_next[tail[target]] = a
        tail[target] = a
        meta[M_ARR] = a + 1
        pile_has[target] = False
        ut = util[target]
        if ut > hot:
            live_has[target] = True
            live_neg[target] = -ut
            meta[M_HOT] = _push(hot_keys, hot_idx, meta[M_HOT], -ut, target)
        u = util[i]
        if u > hot:
            live_has[i] = True
            live_neg[i] = -u
            held_key[0] = -u
            meta[M_HELD] = i
    return DONE
