"""Migration throttle: per-broker KIP-73 / KIP-113 rates from live disk headroom and a time-of-day schedule.

Pure computation. Inputs: the copy *flows* in flight (source disk -> destination disk, observed
bytes/s), the live load of every disk (util, bytes/s, throughput ceiling) and the previous rates.
For each disk, the util that is *not* migration is ``u0 = util x (1 - migration bytes / all bytes)``;
the migration may use ``(threshold - u0) x bytes-per-util`` more, shared equally by the flows on
the disk. A broker's follower (destination) / leader (source) / alter-log-dirs rate is the
smallest per-flow allowance among its flows times its flow count (Kafka shares a broker rate equally
among its throttled replicas), smoothed upwards, immediate downwards, clamped to
``[floor, schedule ceiling]``. With no live data for a disk the previous rate (or ``initial``) stays.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from controlplane.adapters.kafka_admin import ALTER_DIRS_RATE, FOLLOWER_RATE, LEADER_RATE
from controlplane.adapters.prom_scrape import DiskRate

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
class ThrottlePolicy:
    """How rates are chosen: ``mode`` is ``adaptive`` or ``fixed`` (``fixed_rate`` everywhere)."""

    mode: str = "adaptive"
    util_threshold: float = 0.7
    floor: float = 1e6
    ceiling: float = 400e6
    initial: float = 20e6
    fixed_rate: float = 50e6
    gain: float = 0.5
    schedule: Schedule = field(default_factory=Schedule)
    nic_bytes_per_s: float | None = None
    """Network capacity of each broker (each direction); ``None``: network headroom is not considered."""

    def __post_init__(self) -> None:
        if self.mode not in ("adaptive", "fixed"):
            raise ValueError(f"throttle mode must be adaptive or fixed, got {self.mode!r}")
        if not (0 < self.util_threshold <= 1.0):
            raise ValueError("util threshold must be in (0, 1]")
        if not (0 < self.floor <= self.ceiling) or not math.isfinite(self.floor):
            raise ValueError("need 0 < floor <= ceiling")
        if not (0 < self.gain <= 1):
            raise ValueError("gain must be in (0, 1]")


@dataclass(frozen=True)
class Flow:
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


CATCH_UP_MARGIN = 1.2


def catch_up_floors(flows: Sequence[Flow]) -> dict[tuple[int, str], float]:
    """Per ``(broker, config key)``: the rate below which its copies can never finish (KIP-73 throttles the
    follower's whole fetch, new writes included) — Σ ingress of its flows x :data:`CATCH_UP_MARGIN`."""
    out: dict[tuple[int, str], float] = {}
    for f in flows:
        keys = ([(f.dst_broker, FOLLOWER_RATE), (f.src_broker, LEADER_RATE)] if f.kind == "move"
                else [(f.dst_broker, ALTER_DIRS_RATE)])
        for key in keys:
            out[key] = out.get(key, 0.0) + f.ingress_bytes_per_s * CATCH_UP_MARGIN
    return out


def broker_rates(flows: Sequence[Flow], disks: Mapping[DiskKey, DiskRate], policy: ThrottlePolicy,
                 previous: Mapping[tuple[int, str], float], now_epoch_s: float,
                 network: Mapping[int, NetRate] | None = None) -> dict[tuple[int, str], float]:
    """``(broker, config key) -> bytes/s`` for every broker with a flow (nothing else).

    Never below the catch-up floor of its flows (:func:`catch_up_floors`): a copy throttled below what
    producers write to its partition would run forever and hold its throttles.

    With ``policy.nic_bytes_per_s`` and live ``network`` rates, a flow is also bounded by the network
    headroom of its source (out) and destination (in) broker.
    """
    ceiling = min(policy.ceiling, policy.schedule.ceiling(now_epoch_s))
    ceiling = max(ceiling, policy.floor)
    roles: dict[tuple[int, str], list[Flow]] = {}
    for f in flows:
        if f.kind == "move":
            roles.setdefault((f.dst_broker, FOLLOWER_RATE), []).append(f)
            roles.setdefault((f.src_broker, LEADER_RATE), []).append(f)
        else:
            roles.setdefault((f.dst_broker, ALTER_DIRS_RATE), []).append(f)
    floors = catch_up_floors(flows)
    if policy.mode == "fixed":
        return {k: max(min(policy.fixed_rate, ceiling), floors.get(k, 0.0)) for k in roles}
    allowance = per_flow_allowance(flows, disks, policy.util_threshold)
    if policy.nic_bytes_per_s and network:
        for f, limit in network_allowance(flows, network, policy.nic_bytes_per_s, policy.util_threshold).items():
            allowance[f] = min(allowance.get(f, math.inf), limit)
    out: dict[tuple[int, str], float] = {}
    for key, fs in roles.items():
        prev = previous.get(key, policy.initial)
        known = [allowance[f] for f in fs if f in allowance]
        if not known:
            target = prev
        else:
            target = min(known) * len(fs)
            if target > prev:
                target = prev + policy.gain * (target - prev)
        out[key] = float(max(min(max(target, policy.floor), ceiling), floors.get(key, 0.0)))
    return out


@dataclass(frozen=True)
class NetRate:
    """A broker's live network traffic (bytes/s): everything in / out, and the migration part of ``in``."""

    in_bytes_per_s: float
    out_bytes_per_s: float
    migration_in_bytes_per_s: float = 0.0


def network_allowance(flows: Sequence[Flow], network: Mapping[int, NetRate], nic_bytes_per_s: float,
                      threshold: float) -> dict[Flow, float]:
    """Bytes/s each inter-broker flow may use so no NIC direction exceeds ``threshold`` of capacity.

    Migration in is what the broker reports (reassignment bytes in); migration out is the observed rate
    of the flows it serves. Intra-broker moves use no network and are not bounded here.
    """
    moves = [f for f in flows if f.kind == "move"]
    mig_out: dict[int, float] = {}
    n_in: dict[int, int] = {}
    n_out: dict[int, int] = {}
    for f in moves:
        mig_out[f.src_broker] = mig_out.get(f.src_broker, 0.0) + f.observed_bytes_per_s
        n_out[f.src_broker] = n_out.get(f.src_broker, 0) + 1
        n_in[f.dst_broker] = n_in.get(f.dst_broker, 0) + 1
    cap = threshold * nic_bytes_per_s
    out: dict[Flow, float] = {}
    for f in moves:
        limits = []
        dst, src = network.get(f.dst_broker), network.get(f.src_broker)
        if dst is not None:
            other_in = max(dst.in_bytes_per_s - dst.migration_in_bytes_per_s, 0.0)
            limits.append(max(cap - other_in, 0.0) / n_in[f.dst_broker])
        if src is not None:
            other_out = max(src.out_bytes_per_s - mig_out.get(f.src_broker, 0.0), 0.0)
            limits.append(max(cap - other_out, 0.0) / n_out[f.src_broker])
        if limits:
            out[f] = min(limits)
    return out


def per_flow_allowance(flows: Sequence[Flow], disks: Mapping[DiskKey, DiskRate], threshold: float
                       ) -> dict[Flow, float]:
    """Bytes/s each flow may use so that no disk it touches exceeds ``threshold`` util."""
    mig: dict[DiskKey, float] = {}
    count: dict[DiskKey, int] = {}
    for f in flows:
        for d in {f.src_disk, f.dst_disk}:
            if d is None:
                continue
            mig[d] = mig.get(d, 0.0) + f.observed_bytes_per_s
            count[d] = count.get(d, 0) + 1
    def headroom(d: DiskKey) -> float | None:
        rate = disks.get(d)
        if rate is None:
            return None
        share = min(mig.get(d, 0.0) / rate.bytes_per_s, 1.0) if rate.bytes_per_s > 0 else 0.0
        u0 = rate.util * (1.0 - share)
        bytes_per_util = rate.bytes_per_s / rate.util if rate.util > 0.05 else rate.max_bytes_per_s
        if not math.isfinite(bytes_per_util) or bytes_per_util <= 0:
            bytes_per_util = rate.max_bytes_per_s
        return max((threshold - u0) * bytes_per_util, 0.0)

    per_disk: dict[DiskKey, float] = {}
    for d, n in count.items():
        room = headroom(d)
        if room is not None:
            per_disk[d] = room / n
    by_broker: dict[int, list[DiskKey]] = {}
    for d in disks:
        by_broker.setdefault(d[0], []).append(d)
    out: dict[Flow, float] = {}
    for f in flows:
        known = [per_disk[d] for d in (f.src_disk, f.dst_disk) if d is not None and d in per_disk]
        if f.dst_disk is None:  # the broker has not placed the new replica yet: assume its busiest disk
            rooms = [r / (count.get(d, 0) + 1) for d in by_broker.get(f.dst_broker, [])
                     if (r := headroom(d)) is not None]
            if rooms:
                known.append(min(rooms))
        if known:
            out[f] = min(known)
    return out
