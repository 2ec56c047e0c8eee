"""Leased lines between IDCs: capacity, sharing, latency and byte counters (kafkasim's network model).

Goal: traffic that crosses IDCs — follower replication, reassignment copies and follower catch-up,
consumer fetches, producer writes — shares the leased line of its (source IDC, destination IDC) pair;
when a line saturates, everyone on it gets less and waits longer, as on a real WAN link.

Method (:meth:`Network.share`, called once per physics tick with every cross-IDC flow):

* a line is one *direction* of an IDC pair (leased lines are full duplex: ``between: [a, b]`` gives
  ``a→b`` and ``b→a`` the same capacity); pairs with no configured line get an unlimited one, so every
  cross-IDC byte is still counted;
* **max-min fair sharing** (as TCP flows share a bottleneck): a line's demand is the sum of the rates its
  flows request this tick; when it exceeds the capacity, flows asking less than an equal share get all
  they ask and the others split what is left equally (water-filling; flows in one IDC are never touched).
  So a bulk copy takes all the headroom and squeezes every flow bigger than the fair share; a flow that
  asks for less (a throttled migration) frees capacity for the others the same tick;
* **latency**: ``base_latency_ms / (1 − min(demand / capacity, 0.98))`` — the queueing delay rises
  steeply as the line fills (≤ 50 × base when saturated);
* **counters** per line: bytes carried in total and by kind (replication, migration, fetch, produce).

Exported like a Linux router's node_exporter: each IDC has a gateway host whose interface
``ll-<peer idc>`` carries the line to that peer — ``node_network_transmit_bytes_total`` (this IDC →
peer), ``node_network_receive_bytes_total`` (peer → this IDC), ``node_network_speed_bytes`` (capacity,
as the netclass collector reports a NIC's speed; 0 when unlimited) and ``node_network_up``
(:func:`render_gateway`).

Guarantee: granted rates are never above requested ones and a line's granted sum never exceeds its
capacity (up to float rounding); deterministic; pure numpy, no I/O.
Cost: O(flows) per tick (two ``bincount`` s); memory O(IDCs²).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

KINDS = ("replication", "migration", "fetch", "produce")
REPLICATION, MIGRATION, FETCH, PRODUCE = range(4)
DEFAULT_LATENCY_MS = 2.0
MAX_UTIL_FOR_LATENCY = 0.98


@dataclass
class LineSpec:
    """One configured direction of a leased line."""

    src: str
    dst: str
    capacity_bps: float
    base_latency_ms: float = DEFAULT_LATENCY_MS


class Network:
    """The leased lines of a federation (one network shared by every cluster of the engine)."""

    def __init__(self, lines: list[LineSpec] | None = None) -> None:
        self.idcs: list[str] = []
        self._idc_idx: dict[str, int] = {}
        self.specs: dict[tuple[str, str], LineSpec] = {}
        self.line_of = np.full((0, 0), -1, dtype=np.int64)
        self.pairs: list[tuple[str, str]] = []
        self.capacity = np.zeros(0)
        self.base_latency = np.zeros(0)
        self.bytes_total = np.zeros((0, len(KINDS)))
        self.demand = np.zeros(0)
        self.granted = np.zeros((0, len(KINDS)))
        self.latency_ms = np.zeros(0)
        for spec in lines or []:
            self.set_line(spec)

    # ------------------------------------------------------------------ topology
    def idc(self, name: str) -> int:
        """Index of IDC ``name`` (registered on first use; every new pair gets an unlimited line)."""
        i = self._idc_idx.get(name)
        if i is not None:
            return i
        i = len(self.idcs)
        self.idcs.append(name)
        self._idc_idx[name] = i
        n = len(self.idcs)
        grown = np.full((n, n), -1, dtype=np.int64)
        grown[: n - 1, : n - 1] = self.line_of
        self.line_of = grown
        for other in self.idcs[:-1]:
            self._add_pair(other, name)
            self._add_pair(name, other)
        return i

    def _add_pair(self, src: str, dst: str) -> None:
        k = len(self.pairs)
        self.pairs.append((src, dst))
        self.line_of[self._idc_idx[src], self._idc_idx[dst]] = k
        spec = self.specs.get((src, dst))
        self.capacity = np.append(self.capacity, spec.capacity_bps if spec else math.inf)
        self.base_latency = np.append(self.base_latency, spec.base_latency_ms if spec else DEFAULT_LATENCY_MS)
        self.bytes_total = np.vstack([self.bytes_total, np.zeros((1, len(KINDS)))])
        self.granted = np.vstack([self.granted, np.zeros((1, len(KINDS)))])
        self.demand = np.append(self.demand, 0.0)
        self.latency_ms = np.append(self.latency_ms, self.base_latency[-1])

    def set_line(self, spec: LineSpec) -> None:
        """Configure (or reconfigure) one direction; capacity must be positive (``inf`` = unlimited)."""
        if not (spec.capacity_bps > 0) or math.isnan(spec.capacity_bps):
            raise ValueError(f"line {spec.src}->{spec.dst}: capacity must be > 0, got {spec.capacity_bps}")
        if spec.src == spec.dst:
            raise ValueError(f"line {spec.src}->{spec.dst}: a line joins two different IDCs")
        if not (spec.base_latency_ms >= 0) or not math.isfinite(spec.base_latency_ms):
            raise ValueError(f"line {spec.src}->{spec.dst}: latency must be finite and >= 0")
        self.specs[(spec.src, spec.dst)] = spec
        self.idc(spec.src)
        self.idc(spec.dst)
        k = self.pairs.index((spec.src, spec.dst))
        self.capacity[k] = spec.capacity_bps
        self.base_latency[k] = spec.base_latency_ms

    def line(self, src: str, dst: str) -> int:
        """Line index of ``src → dst`` (-1 within one IDC)."""
        if src == dst:
            return -1
        return int(self.line_of[self.idc(src), self.idc(dst)])

    # ------------------------------------------------------------------ physics
    def lines_of(self, src: I64, dst: I64) -> I64:
        """Line index per flow from IDC indexes (-1: same IDC or unknown IDC)."""
        ok = (src >= 0) & (dst >= 0) & (src != dst)
        out = np.full(len(src), -1, dtype=np.int64)
        if ok.any():
            out[ok] = self.line_of[src[ok], dst[ok]]
        return out

    def share(self, line: I64, demand: F64, kind: I64, dt: float) -> F64:
        """Grant each flow its share of its line this tick (see the module docstring); returns the factor
        (granted / requested, 1 for flows on no line) per flow and counts the granted bytes."""
        n_lines = len(self.pairs)
        factor = np.ones(len(demand))
        self.demand = np.zeros(n_lines)
        self.granted = np.zeros((n_lines, len(KINDS)))
        m = (line >= 0) & (demand > 0)
        if n_lines and m.any():
            ln = line[m]
            dm = demand[m]
            load = np.bincount(ln, weights=dm, minlength=n_lines)
            granted = _max_min_fair(ln, dm, self.capacity, load > self.capacity, n_lines)
            factor[m] = granted / dm
            key = ln * len(KINDS) + kind[m]
            g = np.bincount(key, weights=granted, minlength=n_lines * len(KINDS)).reshape(n_lines, len(KINDS))
            self.demand = load.astype(np.float64)
            self.granted = g.astype(np.float64)
            self.bytes_total += g * dt
        util = np.where(np.isfinite(self.capacity), self.demand / np.maximum(self.capacity, 1e-9), 0.0)
        self.latency_ms = self.base_latency / (1.0 - np.minimum(util, MAX_UTIL_FOR_LATENCY))
        return factor

    def flow_latency(self, line: I64) -> F64:
        """Line latency (ms) per flow; 0 for flows on no line."""
        out = np.zeros(len(line))
        m = line >= 0
        if m.any():
            out[m] = self.latency_ms[line[m]]
        return out

    # ------------------------------------------------------------------ reporting
    def report(self) -> dict[str, Any]:
        """Every line: capacity, last tick's demand, granted bytes/s by kind, util, latency, totals (JSON)."""
        lines = []
        for k, (src, dst) in enumerate(self.pairs):
            cap = float(self.capacity[k])
            granted = {name: float(self.granted[k, j]) for j, name in enumerate(KINDS)}
            lines.append({"src_idc": src, "dst_idc": dst, "device": device(dst),
                          "capacity_bytes_per_s": cap if math.isfinite(cap) else None,
                          "demand_bytes_per_s": float(self.demand[k]), "bytes_per_s": granted,
                          "total_bytes_per_s": float(sum(granted.values())),
                          "util": float(self.demand[k] / cap) if math.isfinite(cap) else 0.0,
                          "latency_ms": float(self.latency_ms[k]),
                          "bytes_total": {name: float(self.bytes_total[k, j]) for j, name in enumerate(KINDS)}})
        return {"idcs": list(self.idcs), "lines": lines}


def _max_min_fair(line: I64, demand: F64, capacity: F64, saturated: npt.NDArray[np.bool_], n_lines: int) -> F64:
    """Water-filling per saturated line: flows asking less than an equal share get what they ask, the rest
    split what is left equally (TCP-like max-min fairness). O(flows x rounds), rounds <= distinct demands."""
    granted = demand.copy()
    active = saturated[line]
    left = np.where(saturated, capacity, 0.0)
    share = np.zeros(n_lines)
    while active.any():
        n_act = np.bincount(line[active], minlength=n_lines)
        share = left / np.maximum(n_act, 1)
        fits = active & (demand <= share[line])
        if not fits.any():
            break
        left = left - np.bincount(line[fits], weights=demand[fits], minlength=n_lines)
        active &= ~fits
    granted[active] = share[line[active]]
    return granted


def device(peer_idc: str) -> str:
    """The gateway interface name of the line to ``peer_idc`` (``ll-<peer>``, at most 15 characters as Linux
    allows)."""
    return ("ll-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in peer_idc))[:15]


def _num(v: float) -> str:
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


def render_gateway(net: Network, idc: str, t_seconds: float) -> str:
    """node_exporter text of ``idc``'s gateway host: one ``ll-<peer>`` interface per line to a peer IDC."""
    peers = [p for p in net.idcs if p != idc]
    out: list[str] = []
    rows: dict[str, list[str]] = {"transmit": [], "receive": [], "speed": [], "up": []}
    for peer in peers:
        tx = net.line(idc, peer)
        rx = net.line(peer, idc)
        dev = device(peer)
        rows["transmit"].append(f'node_network_transmit_bytes_total{{device="{dev}"}} '
                                f"{_num(int(net.bytes_total[tx].sum()))}")
        rows["receive"].append(f'node_network_receive_bytes_total{{device="{dev}"}} '
                               f"{_num(int(net.bytes_total[rx].sum()))}")
        cap = float(net.capacity[tx])
        speed = int(cap) if math.isfinite(cap) else 0
        rows["speed"].append(f'node_network_speed_bytes{{device="{dev}"}} {speed}')
        rows["up"].append(f'node_network_up{{device="{dev}"}} 1')
    for name, typ, help_, key in (
            ("node_network_transmit_bytes_total", "counter", "Network device statistic transmit_bytes.", "transmit"),
            ("node_network_receive_bytes_total", "counter", "Network device statistic receive_bytes.", "receive"),
            ("node_network_speed_bytes", "gauge", "Network device property: speed_bytes", "speed"),
            ("node_network_up", "gauge", "Value is 1 if operstate is 'up', 0 otherwise.", "up")):
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {typ}")
        out.extend(rows[key])
    out.append("# HELP node_time_seconds System time in seconds since epoch (1970).")
    out.append("# TYPE node_time_seconds gauge")
    out.append(f"node_time_seconds {_num(t_seconds)}")
    return "\n".join(out) + "\n"


def parse_lines(spec: Any, path: str = "$.network") -> list[LineSpec]:
    """Line specs from a scenario's ``network`` mapping::

        network:
          lines:
            - {between: [idc-a, idc-b], capacity_mb_s: 40, latency_ms: 2}   # both directions
            - {from: idc-a, to: idc-c, capacity_mb_s: 10}                   # one direction

    Raises ValueError naming the path of a bad entry."""
    if spec is None:
        return []
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: must be a mapping with `lines`")
    out: list[LineSpec] = []
    for i, ls in enumerate(spec.get("lines") or []):
        lp = f"{path}.lines[{i}]"
        if not isinstance(ls, dict):
            raise ValueError(f"{lp}: must be a mapping")
        try:
            cap = float(ls["capacity_mb_s"]) * 1e6 if "capacity_mb_s" in ls else float(ls["capacity_bytes_per_s"])
            lat = float(ls.get("latency_ms", DEFAULT_LATENCY_MS))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{lp}: needs a numeric capacity_mb_s (or capacity_bytes_per_s): {e}") from e
        if "between" in ls:
            pair = ls["between"]
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError(f"{lp}.between: two IDC names")
            dirs = [(str(pair[0]), str(pair[1])), (str(pair[1]), str(pair[0]))]
        elif "from" in ls and "to" in ls:
            dirs = [(str(ls["from"]), str(ls["to"]))]
        else:
            raise ValueError(f"{lp}: needs `between: [a, b]` or `from` + `to`")
        for src, dst in dirs:
            if src == dst:
                raise ValueError(f"{lp}: a line joins two different IDCs, got {src!r} twice")
            if not cap > 0 or not math.isfinite(cap) or not math.isfinite(lat) or lat < 0:
                raise ValueError(f"{lp}: capacity must be finite and > 0, latency finite and >= 0")
            out.append(LineSpec(src, dst, cap, lat))
    return out


def parse_cli_line(text: str) -> list[LineSpec]:
    """``idc-a:idc-b=40`` (MB/s, both directions) or ``idc-a>idc-b=40`` (one direction) from the command line."""
    pair, sep, mb = text.partition("=")
    if not sep:
        raise ValueError(f"--line {text!r}: expected IDC:IDC=MB_PER_S or IDC>IDC=MB_PER_S")
    one_way = ">" in pair
    a, _, b = pair.partition(">" if one_way else ":")
    entry: dict[str, Any] = {"capacity_mb_s": mb}
    entry.update({"from": a, "to": b} if one_way else {"between": [a, b]})
    return parse_lines({"lines": [entry]}, f"--line {text}")
