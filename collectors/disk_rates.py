"""Live disk headroom for the executor: the :class:`DiskLoad` port, its reading of a collection round, and
the standalone scrape of broker hosts -> per-disk util and bytes/s.

:func:`round_disk_rates` / :func:`round_network` read a :class:`~collectors.builder.Collected` round (the
observer's, in the service; a collector run once per pass, in the CLI) into what the executor weighs.
:class:`DiskScraper` below is kept for the executor's lock-step benchmark.

Goal: the executor's throttle needs, per (broker, log dir), how busy the disk was over the last
interval (util, bytes per second, its max throughput), each broker's Kafka network traffic and
produce p99 — nothing of the full load model (:mod:`collectors.builder`).

Method: one round of the collectors' :class:`~collectors.scrape.Scraper` per :meth:`DiskScraper.scrape`
over every endpoint of the brokers asked for (kept-alive connections, per-endpoint deadline, CA and
credential references, 64 MiB cap — the collector's HTTP client, not a second one); each endpoint's text
is parsed as it arrives by the collectors' parser (:func:`collectors.promtext.parse_fast`, keeping only
the families named here) and a broker's endpoints are joined (:func:`collectors.promtext.merge_payloads`:
a family from the first endpoint that has it) into a :class:`HostSample` keyed by filesystem mountpoint (a
device's ``node_filesystem_*{device,mountpoint}``, device-mapper volumes resolved through
``node_disk_device_mapper_info`` as the collector does); a disk's ceiling is the cluster's declared
hardware profile's. Rates come from the collectors' rate guard
(:class:`collectors.rates.CounterTracker`) over *measured* time — the samples' own timestamps when
they carry them (a simulator's clock), else the time the body was received (monotonic clock). util = rate of
``node_disk_io_time_seconds_total`` (at most 1); bytes = rate of read + rate of written bytes.

Guarantee: a counter that went backwards (the new value becomes the base), a non-finite or
negative value, a clock that did not move or moved less than ``min_elapsed_s`` (the older base is
kept) yields no new rate; the disk keeps its last good :class:`DiskRate` instead of a wrong one. A
broker any of whose endpoints is dead, stalled, refuses TLS or credentials, or serves an empty or mostly
garbage body gets no sample that round: :attr:`DiskScraper.errors` names the endpoint and why (never a
secret), its last rates stay, the other brokers are not delayed beyond the timeout.
Cost: one request per endpoint per scrape on a kept connection (a handshake only when it was lost), one
parse of the wanted families; O(disks) per scrape.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from collectors.build.disks import map_devices
from collectors.build.names import M_DM_INFO, M_FS_SIZE, M_IO_TIME, M_READ_B, M_WRITE_B
from collectors.builder import PLACEHOLDER_DIR, Collected
from collectors.promtext import Payload, check_payload, merge_payloads, parse_fast
from collectors.rates import CounterTracker
from collectors.scrape import Scraper, Target
from domain import BrokerState, DiskId
from kafkaio.endpoints import HardwareProfile, MetricsEndpoint

M_REQUEST_TIME = "kafka_network_requestmetrics_totaltimems"
M_URP = "kafka_server_replicamanager_underreplicatedpartitions"
_NET_NAMES = {"kafka_server_brokertopicmetrics_bytesin_total": "in",
              "kafka_server_brokertopicmetrics_replicationbytesin_total": "in",
              "kafka_server_brokertopicmetrics_reassignmentbytesin_total": "reassign_in",
              "kafka_server_brokertopicmetrics_bytesout_total": "out",
              "kafka_server_brokertopicmetrics_replicationbytesout_total": "out"}
_DISK_SERIES = {M_IO_TIME: "io", M_READ_B: "rd", M_WRITE_B: "wr"}
HOST_METRICS = frozenset({*_DISK_SERIES, *_NET_NAMES, M_DM_INFO, M_FS_SIZE, M_REQUEST_TIME, M_URP})
"""The families :func:`parse_host` reads (the parser keeps only these)."""


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


def _parse_host_text(text: str) -> Payload:
    return parse_fast(text, HOST_METRICS)


def _check_host_payload(p: Payload) -> None:
    # an endpoint serving none of the wanted families (a JMX exporter of another service) is no error;
    # an empty or mostly garbage body is
    check_payload(p, need_samples=False)


@dataclass
class DiskScraper:
    """Scrapes ``metrics_urls`` (broker id -> its endpoint or endpoints: URLs, or records with their CA and
    credential references) and keeps each counter's last good sample; disk ceilings come from ``hardware``
    (a disk of undeclared speed gets no rate). :meth:`close` releases the kept connections."""

    metrics_urls: Mapping[int, Target | Sequence[Target]]
    hardware: HardwareProfile | None = None
    timeout_s: float = 3.0
    min_elapsed_s: float = 0.5
    """Rates over a shorter measured interval are not taken (the older base is kept)."""
    concurrency: int = 64
    """Requests in flight at once (and idle connections kept)."""
    rates: dict[tuple[int, str], DiskRate] = field(default_factory=dict)
    produce_p99_ms: dict[int, float] = field(default_factory=dict)
    network: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    """broker -> (bytes in/s, bytes out/s, reassignment bytes in/s), all Kafka traffic of the broker."""
    clock: float | None = None
    errors: dict[int, str] = field(default_factory=dict)
    """broker -> why its last scrape gave no sample (the first failing endpoint's URL and error); a broker
    left out of a scrape keeps its entry, one scraped successfully loses it."""
    _counters: CounterTracker = field(init=False, repr=False)
    _scraper: Scraper = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # no end_round(): a broker left out of a scrape keeps its base (series = brokers x disks)
        self._counters = CounterTracker(self.min_elapsed_s)
        self._scraper = Scraper(self.concurrency, _parse_host_text, _check_host_payload)

    def scrape(self, brokers: set[int] | None = None) -> dict[tuple[int, str], DiskRate]:
        """Scrape every (or the given) broker once; update and return ``(broker, log_dir) -> DiskRate``."""
        ids = [b for b in sorted(self.metrics_urls) if brokers is None or b in brokers]
        if not ids:
            return self.rates
        results = self._fetch(ids)
        clocks = []
        for bid, res in zip(ids, results, strict=True):
            self.errors.pop(bid, None)  # the brokers not scraped this round keep their last error
            if isinstance(res, str):
                self.errors[bid] = res
                continue
            clocks.append(res.at)
            if res.produce_p99_ms is not None:
                self.produce_p99_ms[bid] = res.produce_p99_ms
            self._update(bid, res)
        if clocks:
            self.clock = max(clocks)
        return self.rates

    def _update(self, bid: int, s: HostSample) -> None:
        """Feed one host sample to the rate guard; store the rates it yields."""
        rate = self._counters.update
        if s.net:
            net = [rate((bid, "net", k), s.at, s.net.get(k, 0.0)).value for k in ("in", "out", "reassign_in")]
            if None not in net:
                self.network[bid] = (net[0] or 0.0, net[1] or 0.0, net[2] or 0.0)
        for d, busy in s.io_time.items():
            # every counter is fed each round (a missing byte counter counts as 0, as exposed by hosts
            # without it) so that each series keeps its own base
            util = rate((bid, "io", d), s.at, busy).value
            rd = rate((bid, "rd", d), s.at, s.read_bytes.get(d, 0.0)).value
            wr = rate((bid, "wr", d), s.at, s.written_bytes.get(d, 0.0)).value
            if util is None or rd is None or wr is None:
                continue  # first sample, counter reset, garbage or no measurable interval: keep the last rate
            if d not in s.max_bytes_per_s:
                continue  # a disk of unknown speed has no load to weigh (no assumed default)
            self.rates[(bid, d)] = DiskRate(min(util, 1.0), rd + wr, s.max_bytes_per_s[d])

    def _fetch(self, ids: Sequence[int]) -> list[HostSample | str]:
        """One scrape round over every endpoint of ``ids``: per broker its :class:`HostSample`, or the first
        failing endpoint's URL and error."""
        targets = {bid: _targets(self.metrics_urls[bid]) for bid in ids}
        got = self._scraper.scrape([t for ts in targets.values() for t in ts], self.timeout_s).results
        out: list[HostSample | str] = []
        for bid in ids:
            parts: list[tuple[Payload, float, str]] = []
            for t in targets[bid]:
                res = got[_url(t)]
                if res.payload is None or res.error is not None:
                    out.append(f"{res.url}: {res.error or 'no payload'}")
                    break
                parts.append((res.payload, res.received, "recv"))
            else:
                if not parts:
                    out.append("no metrics endpoint")
                    continue
                merged, received, _ = merge_payloads(parts)
                out.append(host_sample(merged, received, self.hardware, bid))
        return out

    def close(self) -> None:
        """Close the kept connections (a later :meth:`scrape` opens new ones)."""
        self._scraper.close()

    def __enter__(self) -> DiskScraper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _targets(value: Target | Sequence[Target]) -> list[Target]:
    return [value] if isinstance(value, (str, MetricsEndpoint)) else list(value)


def _url(t: Target) -> str:
    return t if isinstance(t, str) else t.url


def parse_host(text: str, now: float, hardware: HardwareProfile | None = None, broker: int = -1) -> HostSample:
    """Parse a host's node_exporter (and JMX exporter) text into a :class:`HostSample` keyed by mountpoint
    (:func:`host_sample` of the text's wanted families)."""
    return host_sample(parse_fast(text, HOST_METRICS), now, hardware, broker)


def host_sample(p: Payload, now: float, hardware: HardwareProfile | None = None, broker: int = -1) -> HostSample:
    """A host's parsed payload (node_exporter and JMX exporter families) as a :class:`HostSample` keyed by
    mountpoint.

    Non-finite values and malformed lines are skipped; ``now`` is the sample's time unless the
    samples carry timestamps (the newest is taken). Ceilings: ``hardware``'s for ``broker``'s mountpoints.
    """
    fams = p.raw

    def finite(name: str) -> list[tuple[dict[str, str], float]]:
        return [(lab, v) for lab, v in p.get(name) if math.isfinite(v)] if name in fams else []

    series: dict[str, dict[str, float]] = {"io": {}, "rd": {}, "wr": {}}
    for name, kind in _DISK_SERIES.items():
        for labels, v in finite(name):
            if "device" in labels:
                series[kind][labels["device"]] = v
    mounts = sorted({lab["mountpoint"] for lab, _ in finite(M_FS_SIZE) if lab.get("mountpoint", "/") != "/"})
    dir_dev, _ = map_devices(p, mounts)
    dev_dir = {dev: path for path, dev in sorted(dir_dev.items())}
    ceilings: dict[str, float] = {}
    for path in dir_dev:
        got = hardware.lookup(broker, path) if hardware is not None else None
        if got is not None and got[0].max_bytes_per_s is not None:
            ceilings[path] = got[0].max_bytes_per_s
    p99: float | None = None
    for labels, v in finite(M_REQUEST_TIME):
        if labels.get("request") == "Produce" and labels.get("quantile") == "0.99":
            p99 = v
    urp: float | None = None
    for _, v in finite(M_URP):
        urp = v
    net: dict[str, float] = {}
    for name, key in _NET_NAMES.items():
        fam = fams.get(name)
        if fam is None:
            continue
        for body, v in zip(fam[0], fam[1], strict=True):
            if body or not math.isfinite(v):
                continue  # per-topic samples: the unlabelled one is the broker's total
            net[key] = net.get(key, 0.0) + v
            if key == "reassign_in":
                net["in"] = net.get("in", 0.0) + v

    def by_dir(kind: str) -> dict[str, float]:
        return {dev_dir[dev]: v for dev, v in series[kind].items() if dev in dev_dir}

    at = p.newest_ms / 1000.0 if p.newest_ms is not None else now
    return HostSample(at, by_dir("io"), by_dir("rd"), by_dir("wr"), ceilings, p99, urp, net or None)
