"""The executor's live disk load: the :class:`DiskLoad` port, its reading of a collection round, and a
minimal Prometheus text scrape of broker hosts (disk util, bytes, produce latency).

:func:`round_disk_rates` / :func:`round_network` read a :class:`~collectors.builder.Collected` round (the
observer's, in the service; a collector run once per pass, in the CLI) into what the executor weighs.
:class:`DiskScraper` is the standalone scraper kept for the executor's lock-step benchmark: one GET per
broker per round. Rates come from two samples of counters with *measured* elapsed
time (the host's own clock when it exports one — ``kafkasim_sim_time_seconds`` — else the
scraper's monotonic clock); a counter that went backwards, a non-finite value or a zero interval
yields no rate instead of a wrong one. This is deliberately small: the full collector lives in
``collectors``; the executor only needs live disk headroom.
"""

from __future__ import annotations

import math
import re
import time
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from collectors.builder import PLACEHOLDER_DIR, Collected
from domain import BrokerState, DiskId

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class HostSample:
    """Counters of one broker host at one instant, keyed by log dir."""

    at: float
    io_time: Mapping[str, float]
    read_bytes: Mapping[str, float]
    written_bytes: Mapping[str, float]
    max_bytes_per_s: Mapping[str, float]
    produce_p99_ms: float | None = None
    under_replicated: float | None = None
    net: Mapping[str, float] | None = None


@dataclass(frozen=True)
class DiskRate:
    """Live load of one disk over the last interval."""

    util: float
    bytes_per_s: float
    max_bytes_per_s: float


class DiskLoad(Protocol):
    """Port: live load of a cluster's disks, as the executor reads it once per pass."""

    @property
    def clock(self) -> float | None:
        """The time base of the latest rates (a simulator's clock when it exports one); None before any."""
        ...

    @property
    def network(self) -> Mapping[int, tuple[float, float, float]]:
        """broker -> (bytes in/s, bytes out/s, reassignment bytes in/s), all Kafka traffic of the broker."""
        ...

    def scrape(self, brokers: set[int] | None = None) -> Mapping[tuple[int, str], DiskRate]:
        """The latest ``(broker, log_dir) -> DiskRate`` of every (or the given) broker."""
        ...


def round_disk_rates(collected: Collected, brokers: set[int] | None = None) -> dict[DiskId, DiskRate]:
    """Per-disk measured load of a collection round: only disks of alive brokers whose metrics were scraped
    this round, none from a first round (no rates yet), none on the placeholder dir."""
    cov = collected.coverage
    if cov.first_round:
        return {}
    scraped = set(cov.brokers_with_metrics) - set(cov.metrics_failed)
    out: dict[DiskId, DiskRate] = {}
    for b in collected.snapshot.brokers:
        if b.state == BrokerState.DEAD or b.id not in scraped or (brokers is not None and b.id not in brokers):
            continue
        for d in b.disks:
            if d.path == PLACEHOLDER_DIR or not (math.isfinite(d.util) and d.max_bytes_per_s > 0):
                continue
            out[(b.id, d.path)] = DiskRate(min(max(d.util, 0.0), 1.0), d.read_bytes_per_s + d.write_bytes_per_s,
                                           d.max_bytes_per_s)
    return out


def round_network(collected: Collected) -> dict[int, tuple[float, float, float]]:
    """Per broker (bytes in/s, bytes out/s, reassignment bytes in/s) from a round's partition rates: a
    replica takes in its partition's produce rate (leader) or replication (follower), a leader sends its
    fetch rate plus one replication stream per follower; copies in flight add to their destination."""
    ins: dict[int, float] = {}
    outs: dict[int, float] = {}
    moving: dict[int, float] = {}
    for p in collected.snapshot.iter_partitions():
        for r in p.replicas:
            ins[r] = ins.get(r, 0.0) + p.bytes_in_per_s
        if p.leader is not None:
            followers = len(p.replicas) - 1 if p.leader in p.replicas else len(p.replicas)
            outs[p.leader] = outs.get(p.leader, 0.0) + p.bytes_out_per_s + followers * p.bytes_in_per_s
    for c in collected.copies:
        if c.kind == "reassign":
            moving[c.dest[0]] = moving.get(c.dest[0], 0.0) + c.bytes_per_s
    return {b: (ins.get(b, 0.0) + moving.get(b, 0.0), outs.get(b, 0.0), moving.get(b, 0.0))
            for b in sorted(set(ins) | set(outs) | set(moving))}


@dataclass
class DiskScraper:
    """Scrapes ``metrics_urls`` (broker id -> URL) and keeps the previous sample per broker."""

    metrics_urls: Mapping[int, str]
    timeout_s: float = 3.0
    _last: dict[int, HostSample] = field(default_factory=dict)
    rates: dict[tuple[int, str], DiskRate] = field(default_factory=dict)
    produce_p99_ms: dict[int, float] = field(default_factory=dict)
    network: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    """broker -> (bytes in/s, bytes out/s, reassignment bytes in/s), all Kafka traffic of the broker."""
    clock: float | None = None
    errors: dict[int, str] = field(default_factory=dict)

    def scrape(self, brokers: set[int] | None = None) -> dict[tuple[int, str], DiskRate]:
        """Scrape every (or the given) broker once; update and return ``(broker, log_dir) -> DiskRate``."""
        ids = [b for b in sorted(self.metrics_urls) if brokers is None or b in brokers]
        if not ids:
            return self.rates
        with ThreadPoolExecutor(max_workers=min(8, len(ids))) as pool:
            results = list(pool.map(self._fetch, ids))
        self.errors = {}
        clocks = []
        for bid, res in zip(ids, results, strict=True):
            if isinstance(res, str):
                self.errors[bid] = res
                continue
            prev = self._last.get(bid)
            self._last[bid] = res
            clocks.append(res.at)
            if res.produce_p99_ms is not None:
                self.produce_p99_ms[bid] = res.produce_p99_ms
            if prev is None:
                continue
            dt = res.at - prev.at
            if not (dt > 0 and math.isfinite(dt)):
                continue
            if res.net and prev.net:
                delta = {k: res.net.get(k, 0.0) - prev.net.get(k, 0.0) for k in res.net}
                if all(v >= 0 and math.isfinite(v) for v in delta.values()):
                    self.network[bid] = ((delta.get("in", 0.0)) / dt, delta.get("out", 0.0) / dt,
                                         delta.get("reassign_in", 0.0) / dt)
            for d, busy in res.io_time.items():
                if d not in res.max_bytes_per_s:
                    continue  # a disk of unknown speed has no load to weigh (no assumed default)
                d_busy = busy - prev.io_time.get(d, math.nan)
                d_bytes = (res.read_bytes.get(d, 0.0) + res.written_bytes.get(d, 0.0)
                           - prev.read_bytes.get(d, 0.0) - prev.written_bytes.get(d, 0.0))
                if not (math.isfinite(d_busy) and d_busy >= 0 and d_bytes >= 0):
                    continue  # counter reset or garbage: no rate this round
                self.rates[(bid, d)] = DiskRate(min(d_busy / dt, 1.0), d_bytes / dt, res.max_bytes_per_s[d])
        if clocks:
            self.clock = max(clocks)
        return self.rates

    def _fetch(self, broker: int) -> HostSample | str:
        try:
            with urllib.request.urlopen(self.metrics_urls[broker], timeout=self.timeout_s) as resp:
                text = resp.read().decode("utf-8", "replace")
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return parse_host(text, time.monotonic())


def parse_host(text: str, now: float) -> HostSample:
    """Parse node_exporter / kafkasim text into a :class:`HostSample` (devices mapped to log dirs)."""
    dev_dir: dict[str, str] = {}
    series: dict[str, dict[str, float]] = {"io": {}, "rd": {}, "wr": {}, "max": {}}
    mounts: dict[str, str] = {}
    sim_time: float | None = None
    p99: float | None = None
    urp: float | None = None
    net: dict[str, float] = {}
    net_names = {"kafka_server_brokertopicmetrics_bytesin_total": "in",
                 "kafka_server_brokertopicmetrics_replicationbytesin_total": "in",
                 "kafka_server_brokertopicmetrics_reassignmentbytesin_total": "reassign_in",
                 "kafka_server_brokertopicmetrics_bytesout_total": "out",
                 "kafka_server_brokertopicmetrics_replicationbytesout_total": "out"}
    names = {"node_disk_io_time_seconds_total": "io", "node_disk_read_bytes_total": "rd",
             "node_disk_written_bytes_total": "wr", "kafkasim_disk_max_bytes_per_second": "max"}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, labels_s, raw = m.group(1), m.group(3) or "", m.group(4)
        try:
            value = float(raw)
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        if name in net_names and not labels_s:
            key = net_names[name]
            net[key] = net.get(key, 0.0) + value
            if key == "reassign_in":
                net["in"] = net.get("in", 0.0) + value
            continue
        labels = dict(_LABEL.findall(labels_s))
        if name in names and "device" in labels:
            series[names[name]][labels["device"]] = value
        elif name == "kafkasim_log_dir_info":
            dev_dir[labels.get("device", "")] = labels.get("log_dir", "")
        elif name == "node_filesystem_size_bytes" and "mountpoint" in labels:
            mounts[labels.get("device", "").removeprefix("/dev/")] = labels["mountpoint"]
        elif name == "kafkasim_sim_time_seconds":
            sim_time = value
        elif name == "kafka_network_requestmetrics_totaltimems" and labels.get("request") == "Produce" \
                and labels.get("quantile") == "0.99":
            p99 = value
        elif name == "kafka_server_replicamanager_underreplicatedpartitions":
            urp = value
    for dev, mount in mounts.items():
        dev_dir.setdefault(dev, mount)

    def by_dir(kind: str) -> dict[str, float]:
        return {dev_dir.get(dev, dev): v for dev, v in series[kind].items()}

    return HostSample(sim_time if sim_time is not None else now, by_dir("io"), by_dir("rd"), by_dir("wr"),
                      by_dir("max"), p99, urp, net or None)
