"""Leased lines in kafkasim's tick: put the cross-IDC flows of a tick on their lines and follow the consequences.

Goal
    When the federation has a :class:`~kafkasim.physics.network.Network`, synthetic produce, consumer fetches, in-sync
    follower fetches and copies (reassignment, catch-up) that cross IDCs share their line's capacity as a
    real leased line shares it; what a line cannot carry slows the flow, and a follower whose line cannot
    keep up falls behind and finally out of the ISR.

Method
    :func:`share_network` builds one flow per (slot, direction) with its line, demand and traffic kind and
    lets :meth:`Network.share <kafkasim.physics.network.Network.share>` grant max-min fair rates; it returns the
    granted / requested factor of each produce, fetch and copy flow and records the line latencies the
    engine adds to produce (acks=all) and fetch latency.  :func:`replication_lag` carries what an in-sync
    follower's line did not grant to the next tick; a follower more than ``REPLICA_LAG_MAX_S`` seconds of
    ingress (and ``REPLICA_LAG_MIN_BYTES``) behind leaves the ISR and catches up like a revived follower.

Guarantee
    A flow never gets more than it asked for; the sum granted on a line never exceeds its capacity
    (the network's guarantee); flows inside one IDC are untouched.

Cost
    O(slots + in-sync followers + copies) numpy per tick, Python only over followers that are behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kafkasim.cluster.model import Cluster, Partition
from kafkasim.physics.copies import MAX_FETCHER_BPS
from kafkasim.physics.network import FETCH, MIGRATION, PRODUCE, REPLICATION

if TYPE_CHECKING:
    from kafkasim.physics.engine import F64, I64, Engine

REPLICA_LAG_MAX_S = 30.0  # replica.lag.time.max.ms: a follower further behind leaves the ISR
REPLICA_LAG_MIN_BYTES = 1e6


def idc_arrays(eng: Engine) -> tuple[I64, I64]:
    """IDC index (in the network) of every broker and every client (-1: unknown, e.g. a real wire client)."""
    net = eng.network
    assert net is not None
    b_idc = np.array([net.idc(b.idc) for b in eng.brokers], dtype=np.int64)
    c_idc = np.array([net.idc(c.idc) if c.idc else -1 for c in eng.clients], dtype=np.int64)
    return b_idc, c_idc


def share_network(eng: Engine, dt: float, n: int, demand: F64, in_rate: F64, fetch: F64, fl_req: list[float],
                   fl_ref: list[tuple[str, Cluster, Partition, int]]) -> tuple[F64, F64, F64]:
    """Put this tick's cross-IDC flows on their leased lines; returns the factor (granted / requested) of
    each slot's synthetic produce, of each slot's consumer fetches and of each planned copy. In-sync
    follower fetches ask for the leader's ingress plus what they are behind (:func:`replication_lag`)."""
    net = eng.network
    assert net is not None
    ii = eng.i
    b_idc, c_idc = idc_arrays(eng)
    lb = eng.leader_b[:n]
    lead_idc = np.where(lb >= 0, b_idc[np.maximum(lb, 0)] if len(b_idc) else -1, -1)
    p_line = net.lines_of(c_idc[ii["prod_client"][:n]], lead_idc)
    f_line = net.lines_of(lead_idc, c_idc[ii["cons_client"][:n]])
    fol = np.nonzero(~eng.r_leader)[0] if len(eng.r_slot) else np.zeros(0, dtype=np.int64)
    rs, rb = eng.r_slot[fol], eng.r_broker[fol]
    r_line = net.lines_of(lead_idc[rs], b_idc[rb])
    lag = np.zeros(len(fol))
    if eng.net_lag:
        for k, (s, b) in enumerate(zip(rs.tolist(), rb.tolist(), strict=True)):
            lag[k] = eng.net_lag.get((s, b), 0.0)
    r_dem = np.minimum(in_rate[rs] + lag / dt, MAX_FETCHER_BPS)
    c_line = np.array([net.line(cl.brokers[p.leader].idc, cl.brokers[b].idc) if kind != "future" and p.leader >= 0
                       else -1 for kind, cl, p, b in fl_ref], dtype=np.int64)
    c_kind = np.array([REPLICATION if kind == "catchup" else MIGRATION for kind, *_ in fl_ref], dtype=np.int64)
    lines = np.concatenate([p_line, f_line, r_line, c_line])
    dem = np.concatenate([demand, fetch, r_dem, np.array(fl_req, dtype=np.float64)])
    kinds = np.concatenate([np.full(n, PRODUCE), np.full(n, FETCH), np.full(len(fol), REPLICATION), c_kind])
    factor = net.share(lines, dem, kinds.astype(np.int64), dt)
    f_prod, f_fetch = factor[:n], factor[n:2 * n]
    f_rep, f_copy = factor[2 * n:2 * n + len(fol)], factor[2 * n + len(fol):]
    eng._net_rows = (rs, rb, r_dem * f_rep, lag)
    lat = net.flow_latency(r_line)
    worst_repl = np.zeros(n)
    if len(lat):
        np.maximum.at(worst_repl, rs, lat)
    eng.net_produce_lat = net.flow_latency(p_line) + worst_repl
    eng.net_fetch_lat = net.flow_latency(f_line)
    return f_prod, f_fetch, f_copy


def replication_lag(eng: Engine, dt: float, n: int, in_rate: F64) -> None:
    """In-sync followers whose line granted less than the leader's ingress fall behind; one more than
    ``replica.lag.time.max.ms`` of ingress behind leaves the ISR and catches up like a revived follower."""
    rs, rb, granted, lag = eng._net_rows
    new_lag = np.maximum(lag + (in_rate[rs] - granted) * dt, 0.0)
    eng.net_lag = {}
    behind = np.nonzero(new_lag > 1.0)[0]
    for k in behind.tolist():
        s, b = int(rs[k]), int(rb[k])
        bytes_behind = float(new_lag[k])
        if bytes_behind > max(float(in_rate[s]) * REPLICA_LAG_MAX_S, REPLICA_LAG_MIN_BYTES) and s in eng.slot_ref:
            _, p = eng.slot_ref[s]
            bid = eng.brokers[b].id
            if bid in p.isr and bid != p.leader:
                p.isr = [r for r in p.isr if r != bid]
                p.catchup[bid] = bytes_behind
                eng.mark_dirty()
            continue
        eng.net_lag[(s, b)] = bytes_behind
