"""What the load model remembers between rounds, as small records each stage is handed explicitly.

Goal: split the model's long-lived state by concern so a stage's signature shows what it may change:
:class:`Holds` (last good scalar figures), :class:`PartHold` (last good per-partition figures, in
arrays over a stable partition registry), :class:`BrokerBook` (who each endpoint is, broker facts
kept for dead brokers), :class:`DiskBook` (log-dir facts, replica -> log dir, the replica layout
cache), :class:`GroupBook` (consumer groups' offset rates between reads). Method: dicts and numpy
arrays; every "hold" returns a value at most ``hold_s`` old.
Guarantee: no I/O; a held value is returned only while younger than ``hold_s``. Cost: O(1) per
scalar hold, O(partitions) vectorised per partition hold; arrays grow by doubling.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.build.records import DiskFacts, Held, ReplicaLayout
from kafkaio.endpoints import BrokerInfo, ClusterEndpoints


class Holds:
    """Last good scalar figures (keyed by anything hashable) with the time each was measured."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.held: dict[Hashable, Held] = {}

    def hold(self, key: Hashable, value: float | None, now: float) -> tuple[float | None, bool]:
        """Store a fresh value, or fall back to the last one if younger than ``hold_s``."""
        if value is not None:
            self.held[key] = Held(value, now)
            return value, True
        h = self.held.get(key)
        if h is not None and now - h.at <= self.hold_s:
            return h.value, False
        return None, False

    def put(self, key: Hashable, value: float, now: float) -> None:
        """Store a fresh value."""
        self.held[key] = Held(value, now)

    def tagged(self, tag: str) -> set[Any]:
        """``x`` of every held key ``(tag, x)``."""
        return {k[1] for k in self.held if isinstance(k, tuple) and k and k[0] == tag}

    def young(self, key: Hashable, now: float) -> float | None:
        """The held value of ``key`` when younger than ``hold_s``, else None."""
        h = self.held.get(key)
        if h is not None and now - h.at <= self.hold_s:
            return h.value
        return None


class PartHold:
    """Last good value and its time per partition and figure (arrays indexed by a stable registry)."""

    def __init__(self) -> None:
        self.registry: dict[tuple[str, int], int] = {}
        self.cap = 0
        self.vals: dict[str, npt.NDArray[np.float64]] = {}
        self.at: dict[str, npt.NDArray[np.float64]] = {}

    def ids(self, keys: list[tuple[str, int]]) -> npt.NDArray[np.int64]:
        """Registry ids of ``keys`` (registering new ones; the hold arrays grow to the registry)."""
        reg = self.registry
        for k in keys:
            if k not in reg:
                reg[k] = len(reg)
        if len(reg) > self.cap:
            new_cap = max(len(reg), 2 * self.cap, 1024)
            for d in (self.vals, self.at):
                for name, arr in list(d.items()):
                    grown = np.full(new_cap, np.nan)
                    grown[: len(arr)] = arr
                    d[name] = grown
            self.cap = new_cap
        return np.fromiter((reg[k] for k in keys), dtype=np.int64, count=len(keys))

    def id_of(self, key: tuple[str, int]) -> int:
        """The registry id of a partition (registering it, arrays grown on the next :meth:`ids`)."""
        r = self.registry.get(key)
        if r is None:
            r = self.registry[key] = len(self.registry)
        return r

    def hold(self, name: str, g: npt.NDArray[np.int64], fresh: npt.NDArray[np.float64], now: float,
             hold_s: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """Store fresh values; return (fresh or held-if-young values, fresh mask). NaN = none."""
        if name not in self.vals:
            self.vals[name] = np.full(self.cap, np.nan)
            self.at[name] = np.full(self.cap, np.nan)
        hv, ha = self.vals[name], self.at[name]
        ok = ~np.isnan(fresh)
        hv[g[ok]] = fresh[ok]
        ha[g[ok]] = now
        out = hv[g].copy()
        young = (now - ha[g]) <= hold_s
        out[~ok & ~young] = np.nan
        return out, ok

    def round_index(self, g: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """registry id -> index in this round's partition list ``g`` (-1 for partitions not in it)."""
        out = np.full(max(len(self.registry), 1), -1, dtype=np.int64)
        out[g] = np.arange(len(g), dtype=np.int64)
        return out


class BrokerBook:
    """Which broker each metrics endpoint is, and broker facts kept across rounds (a dead broker
    is still described by what was last known of it)."""

    def __init__(self, endpoints: ClusterEndpoints) -> None:
        self.brokers: dict[int, BrokerInfo] = {b.id: b for b in endpoints.brokers}
        self.meta: dict[int, tuple[str, int, str | None]] = {}
        """broker -> (host, port, rack) as the cluster metadata last gave them."""
        self.url_brokers: dict[str, tuple[int, ...]] = endpoints.url_to_brokers()
        """Metrics URL -> the brokers it serves (several only for a shared host exporter)."""



@dataclass
class GroupBook:
    """The committed-offset rates of the last fresh read of consumer groups (reads come every few rounds;
    in between the carried-over offsets are positions and these rates stand, for at most ``hold_s``)."""

    rates: dict[tuple[str, str, int], float] = field(default_factory=dict)
    """(group, topic, partition) -> committed offsets per second."""
    at: float = 0.0
    """When (wall, seconds) they were measured."""
    clock: float | None = None
    """The sample clock of that read (positions in between are extrapolated from it)."""


@dataclass
class DiskBook:
    """Log-dir facts per broker, the log dir of every replica, and the replica layout they imply."""

    facts: dict[int, dict[str, DiskFacts]] = field(default_factory=dict)
    dirs: dict[tuple[int, str, int], str] = field(default_factory=dict)
    """(broker, topic, partition) -> log dir, from the listings (futures excluded)."""
    version: int = 0
    """Bumped whenever :attr:`dirs` or a placeholder dir changes (invalidates the layout cache)."""
    unknown_dirs_last_round: int = 0
    unknown_dir_brokers: set[int] = field(default_factory=set)
    """Brokers with replicas in no listing yet (the collector re-reads their log dirs next round)."""
    device_maps: dict[int, tuple[Any, dict[str, str], dict[str, str]]] = field(default_factory=dict)
    """broker -> (label lists the map was made from, log dir -> node_disk device, log dir -> filesystem device)."""
    layout_cache: tuple[Any, ReplicaLayout] | None = None
    topic_pool_cache: tuple[Any, dict[str, str]] | None = None
