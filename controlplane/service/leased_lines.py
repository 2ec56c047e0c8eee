"""Leased lines in the service: per-round accounting, protection decisions, and their figures.

Goal: every collection round, know what crosses each IDC pair (by kind) and, when a configured line is
hot, slow the traffic that can wait — through the same levers and action log as the disk protection.

Method: the throttle service (:mod:`controlplane.service.protection`) calls :meth:`LineService.evaluate`
with each new round's observation (snapshot, copies in flight, audit flows with client IDCs); this module
turns it into :func:`planners.line_accounting.account_round` (capacities from ``[leased_lines]``) and
:func:`planners.line_protection.plan_line_throttles` (its health state kept here per cluster; other
clusters' latest load on a line counts towards the line's health). The throttle service applies the
decisions (record first, then the lever; the executor owns the migration rate while it runs and takes the
recorded rate as a ceiling). The latest accounting per cluster feeds ``/metrics``
(:class:`LineCollector`: ``guardian_leased_line_bytes_per_second{cluster,src_idc,dst_idc,kind}``,
``guardian_leased_line_capacity_bytes_per_second``, ``guardian_leased_line_util``, ``guardian_leased_line_hot``),
the API (``GET /api/v1/clusters/{name}/leased-lines``) and the dashboard's overview.

Guarantee: thread-safe; a failing accounting never stops the disk protection (the caller logs it).
Cost: O(replicas + transfers + audit rows) per round.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from controlplane.config import LeasedLinesConf
from domain import ClusterSnapshot
from kafkaio.audit import PlacedKey, ShareKey
from planners.line_accounting import (
    LINE_KINDS,
    Accounting,
    AuditFlow,
    LineAccount,
    Pair,
    account_round,
    client_fetch_rates,
)
from planners.line_protection import (
    LineHealth,
    LineLimit,
    LinePlan,
    LineProtectionConfig,
    plan_line_throttles,
)
from planners.protection import ActiveThrottle, Transfer


def protection_config(conf: LeasedLinesConf) -> LineProtectionConfig:
    """The planner's configuration from ``[leased_lines]`` (both directions unless said otherwise)."""
    limits: dict[Pair, LineLimit] = {}
    for line in conf.lines:
        limit = LineLimit(line.capacity_bytes_per_s, line.high, line.low, line.target)
        limits[(line.src_idc, line.dst_idc)] = limit
        if line.both_directions:
            limits.setdefault((line.dst_idc, line.src_idc), limit)
    return LineProtectionConfig(limits=limits, enter_samples=conf.enter_samples, leave_samples=conf.leave_samples,
                                critical_topics=tuple(conf.critical_topics), fetch_priority=dict(conf.fetch_priority),
                                min_rate_bytes_per_s=conf.min_rate_bytes_per_s, catch_up_margin=conf.catch_up_margin,
                                relax_factor=conf.relax_factor)


def audit_flows_of(placed: Mapping[ShareKey, Mapping[PlacedKey, float]]) -> tuple[AuditFlow, ...]:
    """The audit topic's latest intervals as accounting input (rows without a client IDC are kept: they
    count as unplaced and never cross)."""
    out = []
    for (kind, topic, part), rows in sorted(placed.items()):
        if kind not in ("fetch", "produce"):
            continue
        for (client, idc, broker), rate in sorted(rows.items()):
            out.append(AuditFlow(kind, topic, part, client, idc, rate,  # type: ignore[arg-type]
                                 broker if broker >= 0 else None))
    return tuple(out)


@dataclass(frozen=True)
class LineRound:
    """The latest accounting (and plan) of one cluster."""

    at: str
    account: LineAccount
    plan: LinePlan


def heal_floors(state: Mapping[str, Any], cluster: str) -> dict[int, float]:
    """Destination broker -> bytes/s the running self-healing executions of ``cluster`` must keep copying into it:
    each execution's allowed heal rate (``options.heal``) split over the replicas its in-flight tasks add."""
    out: dict[int, float] = {}
    for ex in state.get("executions", {}).values():
        rate = float(((ex.get("options") or {}).get("heal") or {}).get("rate_bytes_per_s") or 0.0)
        if ex.get("cluster") != cluster or ex.get("status") != "running" or rate <= 0:
            continue
        adding = [int(b) for t in (ex.get("tasks") or {}).values() if t.get("state") == "IN_PROGRESS"
                  for b in set(t.get("target_replicas") or ()) - set(t.get("source_replicas") or ())]
        for b in adding:
            out[b] = out.get(b, 0.0) + rate / len(adding)
    return out


class LineService:
    """Accounting and protection of the leased lines for every cluster (see the module docstring)."""

    def __init__(self, conf: LeasedLinesConf | None = None) -> None:
        conf = conf or LeasedLinesConf()
        self.config = protection_config(conf)
        self.protect = conf.protect
        self.health: dict[str, dict[Pair, LineHealth]] = {}
        self.latest: dict[str, LineRound] = {}
        self._lock = threading.Lock()

    @property
    def capacities(self) -> dict[Pair, float]:
        """Configured capacity per line direction."""
        return {p: lim.capacity_bytes_per_s for p, lim in self.config.limits.items()}

    def evaluate(self, cluster: str, at: str, snapshot: ClusterSnapshot, transfers: tuple[Transfer, ...],
                 audit: tuple[AuditFlow, ...], active: tuple[ActiveThrottle, ...],
                 heal_floors: Mapping[int, float] | None = None) -> LinePlan:
        """Account one round of ``cluster`` and plan its line throttles (decisions empty when ``protect`` is off);
        ``heal_floors``: :func:`heal_floors` of the cluster (migration into a broker is not cut below it)."""
        account = account_round(snapshot, Accounting(transfers, audit, self.capacities))
        bytes_in = {p.id: p.bytes_in_per_s for p in snapshot.iter_partitions() if math.isfinite(p.bytes_in_per_s)}
        with self._lock:
            other: dict[Pair, float] = {}
            for name, held in self.latest.items():
                if name == cluster:
                    continue
                for u in held.account.lines:
                    other[(u.src_idc, u.dst_idc)] = other.get((u.src_idc, u.dst_idc), 0.0) + u.total
            plan = plan_line_throttles(account, active, self.health.get(cluster, {}), self.config, bytes_in,
                                       client_fetch_rates(snapshot, audit), other, heal_floors)
            self.health[cluster] = dict(plan.health)
            if not self.protect:
                plan = LinePlan(plan.health, (), plan.reports)
            self.latest[cluster] = LineRound(at, account, plan)
        return plan

    def forget(self, cluster: str) -> None:
        """Drop a removed cluster's state."""
        with self._lock:
            self.latest.pop(cluster, None)
            self.health.pop(cluster, None)

    def report(self, cluster: str) -> dict[str, Any]:
        """The latest accounting of ``cluster`` with each line's health (JSON; ``evaluated`` false before any)."""
        with self._lock:
            held = self.latest.get(cluster)
        if held is None:
            return {"cluster": cluster, "evaluated": False, "protect": self.protect, "lines": []}
        out = held.account.as_json()
        reports = {r.line: r for r in held.plan.reports}
        for line in out["lines"]:
            pair = (line["src_idc"], line["dst_idc"])
            limit = self.config.limits.get(pair)
            r = reports.get(pair)
            line["protected"] = limit is not None
            if limit is not None:
                line["marks"] = {"high": limit.high, "low": limit.low, "target": limit.target}
            if r is not None:
                line["hot"] = r.health.hot
                line["health"] = r.health.reason
                line["predicted_util"] = None if r.predicted_util is None else round(r.predicted_util, 4)
                line["throttling"] = list(r.queue)
        return {"cluster": cluster, "evaluated": True, "at": held.at, "protect": self.protect, **out}

    def summary(self, cluster: str) -> list[dict[str, Any]]:
        """Per line of ``cluster``: total bytes/s, util and hot (the dashboard's overview)."""
        rep = self.report(cluster)
        return [{k: line.get(k) for k in ("src_idc", "dst_idc", "total_bytes_per_s", "util", "hot",
                                          "capacity_bytes_per_s")} for line in rep["lines"]]


class LineCollector:
    """prometheus_client collector of the latest line accounting of every cluster."""

    def __init__(self, lines: LineService) -> None:
        self.lines = lines

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        rate = GaugeMetricFamily("guardian_leased_line_bytes_per_second",
                                 "Bytes/s a cluster puts on a leased line (one direction of an IDC pair), by kind",
                                 labels=["cluster", "src_idc", "dst_idc", "kind"])
        util = GaugeMetricFamily("guardian_leased_line_util", "A cluster's accounted bytes/s over the line's capacity",
                                 labels=["cluster", "src_idc", "dst_idc"])
        hot = GaugeMetricFamily("guardian_leased_line_hot", "1 while line protection holds the line hot",
                                labels=["cluster", "src_idc", "dst_idc"])
        cap = GaugeMetricFamily("guardian_leased_line_capacity_bytes_per_second",
                                "Configured capacity of a leased line direction", labels=["src_idc", "dst_idc"])
        with self.lines._lock:
            held = dict(self.lines.latest)
        for cluster, r in sorted(held.items()):
            health = r.plan.health
            for u in r.account.lines:
                for kind in LINE_KINDS:
                    rate.add_metric([cluster, u.src_idc, u.dst_idc, kind], float(u.bytes_per_s.get(kind, 0.0)))
                if u.util is not None:
                    util.add_metric([cluster, u.src_idc, u.dst_idc], float(u.util))
                h = health.get((u.src_idc, u.dst_idc))
                if h is not None:
                    hot.add_metric([cluster, u.src_idc, u.dst_idc], 1.0 if h.hot else 0.0)
        for (src, dst), c in sorted(self.lines.capacities.items()):
            cap.add_metric([src, dst], float(c))
        yield from (rate, util, hot, cap)
