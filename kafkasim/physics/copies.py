"""Replica copies in kafkasim's tick: reassignment (KIP-455), follower catch-up and intra-broker moves (KIP-113).

Goal
    Copies move bytes as a broker's replica fetchers and log-dir movers do: an adding replica of a
    reassignment copies the partition's ``size`` from the leader's disk, a revived follower fetches what it
    missed (from the leader's page cache when recent enough), a future replica copies between two log dirs
    of one broker; when every adding replica has the whole log, the reassignment completes.

Method
    :func:`plan_copies` lists this tick's copy flows with their requested rate: at most one fetcher's
    ``MAX_FETCHER_BPS``, cut by the KIP-73 throttles (``leader/follower.replication.throttled.rate`` shared
    equally among the throttled replicas a broker leads or follows, where the topic's
    ``*.replication.throttled.replicas`` lists them) and, for future replicas, by
    ``replica.alter.log.dirs.io.max.bytes.per.second`` shared among the broker's future replicas; with the
    disk each reads and writes.  The engine scales the flows to what disks (and leased lines) allow and
    :func:`apply_copies` books the bytes moved, ends catch-ups and future replicas that are done and
    completes finished reassignments.

Guarantee
    A copy never records more than the partition's size; a reassignment completes only when every adding
    replica copied the whole log and is alive.

Cost
    O(copies in flight) Python per tick (a few hundred at most in practice).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kafkasim.cluster.configs import parse_throttled_replicas
from kafkasim.cluster.model import Cluster, Partition

if TYPE_CHECKING:
    from kafkasim.physics.engine import F64, Engine

MAX_FETCHER_BPS = 400e6  # one replica fetcher's ceiling


def plan_copies(eng: Engine, dt: float, fl_req: list[float], fl_rd: list[int], fl_wr: list[int],
                 fl_ref: list[tuple[str, Cluster, Partition, int]], residence: F64) -> None:
    """Requested rates of reassignment, catch-up and intra-broker copies, throttles applied."""
    size = eng.f["size"]
    in_rate = eng.f["in_rate"]
    flows: list[tuple[str, Cluster, Partition, int, float, bool, bool]] = []
    n_fol: dict[tuple[str, int], int] = {}
    n_lead: dict[tuple[str, int], int] = {}
    work: list[tuple[str, Cluster, Partition, int, float]] = []
    for cl, p in eng.moves:
        ra = p.reassignment
        if ra is None:
            continue
        work += [("move", cl, p, b, size[p.slot] - ra.copied.get(b, 0.0)) for b in ra.adding]
    for cl, p in eng.catchups:
        work += [("catchup", cl, p, b, rem) for b, rem in p.catchup.items()]
    for kind, cl, p, b, remaining in work:
        if p.leader < 0 or not cl.brokers[p.leader].alive or not cl.brokers[b].alive:
            continue
        fthr = parse_throttled_replicas(cl.topic_config(p.topic, "follower.replication.throttled.replicas"))
        lthr = parse_throttled_replicas(cl.topic_config(p.topic, "leader.replication.throttled.replicas"))
        f_t = fthr is None or (p.index, b) in fthr
        l_t = lthr is None or (p.index, p.leader) in lthr
        f_t = f_t and math.isfinite(cl.broker_rate(b, "follower.replication.throttled.rate"))
        l_t = l_t and math.isfinite(cl.broker_rate(p.leader, "leader.replication.throttled.rate"))
        if f_t:
            n_fol[(cl.name, b)] = n_fol.get((cl.name, b), 0) + 1
        if l_t:
            n_lead[(cl.name, p.leader)] = n_lead.get((cl.name, p.leader), 0) + 1
        flows.append((kind, cl, p, b, max(remaining, 0.0), f_t, l_t))
    for kind, cl, p, b, remaining, f_t, l_t in flows:
        rate = min(MAX_FETCHER_BPS, remaining / dt + float(in_rate[p.slot]) + 1.0)
        if f_t:
            rate = min(rate, cl.broker_rate(b, "follower.replication.throttled.rate") / n_fol[(cl.name, b)])
        if l_t:
            rate = min(rate, cl.broker_rate(p.leader, "leader.replication.throttled.rate")
                       / n_lead[(cl.name, p.leader)])
        fl_req.append(rate)
        lead_b = cl.brokers[p.leader].gidx
        cached = kind == "catchup" and remaining / max(float(in_rate[p.slot]), 1.0) < residence[lead_b]
        fl_rd.append(-1 if cached else p.log_dirs.get(p.leader, -1))
        if kind == "move":
            assert p.reassignment is not None
            fl_wr.append(p.reassignment.dest_disk[b])
        else:
            fl_wr.append(p.log_dirs[b])
        fl_ref.append((kind, cl, p, b))
    n_fut: dict[tuple[str, int], int] = {}
    for cl, p in eng.futures:
        for b in p.futures:
            if cl.brokers[b].alive:
                n_fut[(cl.name, b)] = n_fut.get((cl.name, b), 0) + 1
    for cl, p in eng.futures:
        for b, fut in p.futures.items():
            if not cl.brokers[b].alive:
                continue
            remaining = max(size[p.slot] - fut.copied, 0.0)
            rate = min(MAX_FETCHER_BPS, remaining / dt + 1.0,
                       cl.broker_rate(b, "replica.alter.log.dirs.io.max.bytes.per.second")
                       / n_fut[(cl.name, b)])
            fl_req.append(rate)
            fl_rd.append(p.log_dirs[b])
            fl_wr.append(fut.dest_disk)
            fl_ref.append(("future", cl, p, b))


def apply_copies(eng: Engine, dt: float, act: F64, refs: list[tuple[str, Cluster, Partition, int]]) -> None:
    size = eng.f["size"]
    done_moves: list[tuple[Cluster, Partition]] = []
    for k, (kind, cl, p, b) in enumerate(refs):
        moved = float(act[k]) * dt
        if kind == "move":
            ra = p.reassignment
            if ra is None:
                continue
            ra.copied[b] = min(ra.copied.get(b, 0.0) + moved, size[p.slot])
            eng.b_reassign_in_total[cl.brokers[b].gidx] += moved
        elif kind == "catchup":
            if b not in p.catchup:
                continue
            p.catchup[b] += float(eng.f["in_rate"][p.slot]) * dt - moved
            eng.b_repl_in_total[cl.brokers[b].gidx] += moved
            if p.catchup[b] <= 1.0:
                del p.catchup[b]
                p.isr = [r for r in p.replicas if r in p.isr or r == b]
                eng.mark_dirty()
        else:
            fut = p.futures.get(b)
            if fut is None:
                continue
            fut.copied = min(fut.copied + moved, size[p.slot])
            if fut.copied >= size[p.slot] - 1.0:
                p.log_dirs[b] = fut.dest_disk
                del p.futures[b]
                eng.mark_dirty()
    for cl, p in eng.moves:
        ra = p.reassignment
        if ra is None:
            continue
        if all(ra.copied.get(b, 0.0) >= size[p.slot] - 1.0 for b in ra.adding) and all(
                cl.brokers[b].alive for b in ra.adding):
            done_moves.append((cl, p))
    for cl, p in done_moves:
        cl.complete_reassignment(p)
