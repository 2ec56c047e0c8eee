"""Where a cluster's data comes from and what the operator declared about it: the one endpoints parser.

Goal: one reading of an endpoints document (``kafkasim.endpoints/v1`` as ``guardian sim up`` and the
tests write it, or the same shape written by hand for a real cluster) for every consumer — the
collectors, the executor, the CLI — with the facts Kafka does not carry declared once per cluster:
how to connect (``bootstrap_servers``, ``security``), where each broker's metrics are (any number
of endpoints per broker), which IDC a rack is in, and what disks the brokers have.

Method: a hand-written walk over the JSON that names the JSON path of the first problem
(``$.clusters.c1.brokers[2].metrics[0].url: ...``). Per cluster::

    {"bootstrap_servers": "h:p,h:p" | ["h:p", ...],
     "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "guardian",
                  "password_file": "/etc/guardian/kafka.pw", "ca_file": "/etc/guardian/ca.pem"},
     "brokers": [{"id": 1, "host": "b1", "port": 9092, "rack": "idc-a-r1", "idc": "idc-a" (override),
                  "pool": "shared", "metrics_url": "http://b1:7071/metrics" (one, the older form),
                  "metrics": ["http://b1:7071/metrics" | {"url": "https://b1:9100/metrics", "kind"?: "node",
                              "ca_file"?, "username"?, "password_file"?, "bearer_token_file"?}, ...]}],
     "metrics_urls": [URL, ...]    (broker endpoints whose broker id the payload tells),
     "exporter_urls": [URL, ...]   (cluster-level exporters),
     "rack_to_idc": {"regex": "^(?P<idc>[^-]+-[^-]+)-r\\d+$"} | {"table": {"rack": "idc", ...}},
     "hardware": [{"brokers": "*" | [ids], "log_dirs": "glob", "kind": "hdd|ssd|nvme",
                   "max_bytes_per_s": N}, ...]
                 | {"rules": [...], "default": {"kind": ..., "max_bytes_per_s": N}}}

and ``control_url`` beside ``clusters`` (the simulator's control API). Broker keys not listed are
ignored (older files carry more); the new objects (``security``, metrics endpoints, ``rack_to_idc``,
``hardware``) refuse unknown keys, so a typo is an error instead of a silently open door. A metrics URL
declared by two brokers is refused (naming both ids) unless each declares it as its host's exporter
(``kind: "node"``, brokers sharing a host): :func:`check_shared_metrics_urls`, run however the endpoints are built.

Guarantee: a :class:`ClusterEndpoints` is immutable and holds no secret (metrics and Kafka
passwords are file / environment references, resolved by whoever connects). Old documents parse
to the same brokers, URLs and bootstrap servers as before. Only parsing and lookups live here; the
collectors decide how to use the declared IDC rule and hardware profile.
Cost: linear in the document; lookups are a dict hit (IDC) or a first-match scan of the rules (hardware).
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from domain import DiskKind
from kafkaio.security import PLAINTEXT, SecurityError, SecuritySettings, parse_security


class EndpointsError(ValueError):
    """An endpoints file or option is malformed; the message says where (a JSON path or an option)."""


# ---------------------------------------------------------------------- records
@dataclass(frozen=True)
class MetricsEndpoint:
    """One Prometheus endpoint of a broker: its URL, optional CA, basic auth or bearer token (by file), and
    an optional ``kind`` label saying what serves it (e.g. ``jmx``, ``node``) — a hint, never required."""

    url: str
    ca_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    bearer_token_file: str | None = None
    kind: str | None = None


@dataclass(frozen=True)
class BrokerInfo:
    """Static facts about a broker the metadata does not carry (declared IDC, pool) and its metrics endpoints.

    ``metrics_url`` is the older single-URL form, ``metrics`` the declared endpoint records;
    :attr:`metrics_endpoints` is what is scraped (both, the URL first, each URL once).
    ``idc`` is an explicit per-broker declaration; see :meth:`ClusterEndpoints.idc_of` for the rule.
    """

    id: int
    metrics_url: str | None = None
    host: str | None = None
    port: int | None = None
    idc: str | None = None
    rack: str | None = None
    pool: str | None = None
    metrics: tuple[MetricsEndpoint, ...] = ()

    @property
    def metrics_endpoints(self) -> tuple[MetricsEndpoint, ...]:
        """Every metrics endpoint of the broker: ``metrics_url`` (unless declared in detail) then ``metrics``."""
        if self.metrics_url and all(m.url != self.metrics_url for m in self.metrics):
            return (MetricsEndpoint(self.metrics_url), *self.metrics)
        return self.metrics

    @property
    def first_metrics_url(self) -> str | None:
        """The broker's first metrics URL (None without one)."""
        eps = self.metrics_endpoints
        return eps[0].url if eps else None


@dataclass(frozen=True)
class RackToIdc:
    """The rule that names a rack's IDC: a regex with a named group ``idc`` (first match), or a table."""

    regex: str | None = None
    table: tuple[tuple[str, str], ...] = ()

    def idc_of(self, rack: str | None) -> str | None:
        """The IDC of ``rack`` under this rule (None when the rack is unknown or does not match)."""
        if not rack:
            return None
        if self.regex is not None:
            m = re.search(self.regex, rack)
            return (m.group("idc") or None) if m else None
        return dict(self.table).get(rack)


@dataclass(frozen=True)
class DiskProfile:
    """What a disk is: its kind and its throughput ceiling (bytes/s, None when not declared)."""

    kind: DiskKind
    max_bytes_per_s: float | None = None


@dataclass(frozen=True)
class HardwareRule:
    """Disks of ``brokers`` (None = every broker) whose log dir matches the glob ``log_dirs``."""

    brokers: frozenset[int] | None
    log_dirs: str
    disk: DiskProfile

    def matches(self, broker: int, log_dir: str) -> bool:
        """True when this rule covers the log dir ``log_dir`` of ``broker``."""
        return (self.brokers is None or broker in self.brokers) and fnmatch.fnmatchcase(log_dir, self.log_dirs)


@dataclass(frozen=True)
class HardwareProfile:
    """A cluster's declared disks: the first matching rule wins, else the default (else nothing declared)."""

    rules: tuple[HardwareRule, ...] = ()
    default: DiskProfile | None = None

    def lookup(self, broker: int, log_dir: str) -> tuple[DiskProfile, str] | None:
        """``(profile, "declared" | "default")`` for a log dir, None when the profile says nothing."""
        for rule in self.rules:
            if rule.matches(broker, log_dir):
                return rule.disk, "declared"
        return (self.default, "default") if self.default is not None else None


@dataclass(frozen=True)
class ClusterEndpoints:
    """One cluster's sources and declarations: bootstrap servers, security, metrics endpoints, IDC rule, disks.

    ``unmapped_metrics_urls`` are broker endpoints whose broker id is learned from the payload
    (a ``broker_id`` label on a ``*_broker_info`` sample).  ``exporter_urls`` are cluster-level
    exporters (e.g. a kafka_exporter serving ``kafka_consumergroup_current_offset``).
    """

    cluster: str
    bootstrap_servers: str
    brokers: tuple[BrokerInfo, ...] = ()
    unmapped_metrics_urls: tuple[str, ...] = ()
    exporter_urls: tuple[str, ...] = ()
    control_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    security: SecuritySettings = PLAINTEXT
    rack_to_idc: RackToIdc | None = None
    hardware: HardwareProfile | None = None

    def __post_init__(self) -> None:
        check_shared_metrics_urls(self.brokers, f"cluster {self.cluster}")

    @property
    def metrics_urls(self) -> list[str]:
        """Every URL scraped in a round (every endpoint of every broker, unmapped ones, exporters)."""
        urls = [m.url for b in self.brokers for m in b.metrics_endpoints]
        return list(dict.fromkeys([*urls, *self.unmapped_metrics_urls, *self.exporter_urls]))

    @property
    def metrics_url_by_broker(self) -> dict[int, str]:
        """Broker id -> its first metrics URL (brokers without one are absent)."""
        return {b.id: url for b in self.brokers if (url := b.first_metrics_url)}

    def url_to_brokers(self) -> dict[str, tuple[int, ...]]:
        """Known metrics URL -> the brokers that declare it (every endpoint of every broker): one broker, or
        several for a host exporter (``kind: node``) shared by brokers on one host (see
        :func:`check_shared_metrics_urls`)."""
        out: dict[str, tuple[int, ...]] = {}
        for b in self.brokers:
            for m in b.metrics_endpoints:
                out[m.url] = (*out.get(m.url, ()), b.id)
        return out

    def metrics_endpoint_by_url(self) -> dict[str, MetricsEndpoint]:
        """Metrics URL -> its endpoint record (CA, credentials references) for every broker endpoint."""
        return {m.url: m for b in self.brokers for m in b.metrics_endpoints}

    def broker(self, broker_id: int) -> BrokerInfo | None:
        """The declared facts of a broker (None when the document does not list it)."""
        return next((b for b in self.brokers if b.id == broker_id), None)

    def idc_of(self, broker_id: int, rack: str | None = None) -> tuple[str | None, str]:
        """``(idc, how)``: the broker's own ``idc`` ("broker"), else the rack rule on ``rack`` (or the
        broker's declared rack) ("rack_to_idc"), else ``(None, "unknown")`` — never a guess."""
        info = self.broker(broker_id)
        if info is not None and info.idc:
            return info.idc, "broker"
        if self.rack_to_idc is not None:
            idc = self.rack_to_idc.idc_of(rack or (info.rack if info else None))
            if idc:
                return idc, "rack_to_idc"
        return None, "unknown"


HOST_EXPORTER_KIND = "node"
"""The endpoint kind several brokers may share: a host's exporter (node_exporter) serves every broker on it."""


def check_shared_metrics_urls(brokers: tuple[BrokerInfo, ...], at: str) -> None:
    """Refuse a metrics URL declared by two brokers unless both declare it as their host's exporter.

    A Kafka broker's own metrics (a JMX exporter, agent or HTTP server) are served per broker JVM, so one URL
    under two broker ids is a copy-paste mistake: the one payload would be taken for both brokers (or, scraped
    once per round, for one of them) and the other broker's traffic and disks would be silently wrong. A host
    exporter (``kind: "node"``, same record on each) shared by brokers co-located on one host is legitimate:
    it is scraped once per round and given to each of them (each reads its own log dirs' devices from it).
    Raises :class:`EndpointsError` naming the URL and both broker ids."""
    first: dict[str, tuple[int, MetricsEndpoint]] = {}
    for b in brokers:
        for m in b.metrics_endpoints:
            seen = first.get(m.url)
            if seen is None:
                first[m.url] = (b.id, m)
                continue
            other, prev = seen
            if other == b.id:
                continue
            if prev.kind == m.kind == HOST_EXPORTER_KIND and prev == m:
                continue
            why = ("declared differently by each (a shared host exporter needs the same record)"
                   if prev.kind == m.kind == HOST_EXPORTER_KIND else
                   "a broker's own metrics endpoint serves one broker JVM, so one of them would be given the "
                   "other's metrics; give each broker its own URL, or declare a host exporter shared by brokers "
                   f'on one host with kind "{HOST_EXPORTER_KIND}" on each')
            raise EndpointsError(f"{at}: metrics URL {m.url} is declared by brokers {other} and {b.id}: {why}")


# ---------------------------------------------------------------------- parsing
def _str(v: Any, at: str, required: bool = False) -> str | None:
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v:
        raise EndpointsError(f"{at}: {'required ' if required else ''}non-empty string")
    return v


def _obj(v: Any, at: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise EndpointsError(f"{at}: expected an object")
    unknown = sorted(set(v) - allowed)
    if unknown:
        raise EndpointsError(f"{at}.{unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})")
    return v


def _int_id(v: Any, at: str) -> int:
    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, str) and v.isdigit())):
        raise EndpointsError(f"{at}: required integer")
    return int(v)


def _url(v: Any, at: str) -> str:
    url = _str(v, at, required=True)
    assert url is not None
    if not url.startswith(("http://", "https://")):
        raise EndpointsError(f"{at}: expected an http:// or https:// URL")
    return url


_METRICS_KEYS = {"url", "ca_file", "username", "password_file", "bearer_token_file", "kind"}


def _metrics_endpoint(v: Any, at: str) -> MetricsEndpoint:
    if isinstance(v, str):
        return MetricsEndpoint(_url(v, at))
    if isinstance(v, dict) and "password" in v:
        raise EndpointsError(f"{at}.password: not accepted; give the password by reference (password_file)")
    o = _obj(v, at, _METRICS_KEYS)
    ep = MetricsEndpoint(_url(o.get("url"), f"{at}.url"), _str(o.get("ca_file"), f"{at}.ca_file"),
                         _str(o.get("username"), f"{at}.username"), _str(o.get("password_file"), f"{at}.password_file"),
                         _str(o.get("bearer_token_file"), f"{at}.bearer_token_file"), _str(o.get("kind"), f"{at}.kind"))
    if (ep.username is None) != (ep.password_file is None):
        raise EndpointsError(f"{at}: username and password_file go together (basic auth)")
    if ep.username is not None and ep.bearer_token_file is not None:
        raise EndpointsError(f"{at}: basic auth (username) and bearer_token_file exclude each other")
    if ep.ca_file is not None and not ep.url.startswith("https://"):
        raise EndpointsError(f"{at}.ca_file: only for an https:// URL")
    return ep


def _broker(b: Any, at: str) -> BrokerInfo:
    if not isinstance(b, dict):
        raise EndpointsError(f"{at}: expected an object")
    bid = _int_id(b.get("id"), f"{at}.id")
    port = b.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
        raise EndpointsError(f"{at}.port: expected an integer")
    metrics_url = b.get("metrics_url")
    if metrics_url is not None:
        metrics_url = _url(metrics_url, f"{at}.metrics_url")
    endpoints: list[MetricsEndpoint] = []
    raw = b.get("metrics")
    if raw is not None:
        if not isinstance(raw, list):
            raise EndpointsError(f"{at}.metrics: expected a list of metrics endpoints")
        for j, m in enumerate(raw):
            ep = _metrics_endpoint(m, f"{at}.metrics[{j}]")
            if any(e.url == ep.url for e in endpoints):
                raise EndpointsError(f"{at}.metrics[{j}].url: {ep.url} listed twice")
            endpoints.append(ep)
    return BrokerInfo(id=bid, metrics_url=metrics_url, host=_str(b.get("host"), f"{at}.host"), port=port,
                      idc=_str(b.get("idc"), f"{at}.idc"), rack=_str(b.get("rack"), f"{at}.rack"),
                      pool=_str(b.get("pool"), f"{at}.pool"), metrics=tuple(endpoints))


def _rack_to_idc(v: Any, at: str) -> RackToIdc | None:
    if v is None:
        return None
    o = _obj(v, at, {"regex", "table"})
    if ("regex" in o) == ("table" in o):
        raise EndpointsError(f"{at}: give exactly one of regex, table")
    if "regex" in o:
        pattern = _str(o["regex"], f"{at}.regex", required=True)
        assert pattern is not None
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise EndpointsError(f"{at}.regex: not a regular expression: {exc}") from None
        if "idc" not in compiled.groupindex:
            raise EndpointsError(f"{at}.regex: needs a named group (?P<idc>...)")
        return RackToIdc(regex=pattern)
    table = o["table"]
    if not isinstance(table, dict) or not table:
        raise EndpointsError(f"{at}.table: expected a non-empty object of rack -> idc")
    for rack, idc in table.items():
        _str(idc, f"{at}.table.{rack}", required=True)
    return RackToIdc(table=tuple(sorted(table.items())))


def _disk(o: dict[str, Any], at: str) -> DiskProfile:
    kind = o.get("kind")
    try:
        disk_kind = DiskKind(str(kind))
    except ValueError:
        raise EndpointsError(f"{at}.kind: one of {', '.join(k.value for k in DiskKind)}") from None
    bps = o.get("max_bytes_per_s")
    if bps is not None and (isinstance(bps, bool) or not isinstance(bps, (int, float)) or not bps > 0
                            or bps == float("inf")):
        raise EndpointsError(f"{at}.max_bytes_per_s: expected a positive number")
    return DiskProfile(disk_kind, float(bps) if bps is not None else None)


def _hardware(v: Any, at: str) -> HardwareProfile | None:
    if v is None:
        return None
    default: DiskProfile | None = None
    if isinstance(v, dict):
        o = _obj(v, at, {"rules", "default"})
        if o.get("default") is not None:
            default = _disk(_obj(o["default"], f"{at}.default", {"kind", "max_bytes_per_s"}), f"{at}.default")
        rules_at, raw = f"{at}.rules", o.get("rules") or []
    else:
        rules_at, raw = at, v
    if not isinstance(raw, list):
        raise EndpointsError(f"{rules_at}: expected a list of rules")
    rules = []
    for i, r in enumerate(raw):
        rat = f"{rules_at}[{i}]"
        o = _obj(r, rat, {"brokers", "log_dirs", "kind", "max_bytes_per_s"})
        sel = o.get("brokers", "*")
        if sel == "*":
            brokers = None
        elif isinstance(sel, list) and sel:
            brokers = frozenset(_int_id(x, f"{rat}.brokers[{j}]") for j, x in enumerate(sel))
        else:
            raise EndpointsError(f'{rat}.brokers: "*" or a non-empty list of broker ids')
        glob = _str(o.get("log_dirs", "*"), f"{rat}.log_dirs", required=True)
        assert glob is not None
        rules.append(HardwareRule(brokers, glob, _disk(o, rat)))
    return HardwareProfile(tuple(rules), default)


def _url_list(v: Any, at: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise EndpointsError(f"{at}: expected a list of URLs")
    return tuple(_url(u, f"{at}[{i}]") for i, u in enumerate(v))


def parse_endpoints(doc: Any, cluster: str) -> ClusterEndpoints:
    """Read one cluster out of an endpoints document (see the module docstring for the format)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("clusters"), dict):
        raise EndpointsError("$.clusters: expected an object of clusters")
    clusters = doc["clusters"]
    if cluster not in clusters:
        raise EndpointsError(f"$.clusters: no cluster {cluster!r} (known: {', '.join(sorted(clusters))})")
    c = clusters[cluster]
    at = f"$.clusters.{cluster}"
    if not isinstance(c, dict):
        raise EndpointsError(f"{at}: expected an object")
    boot = c.get("bootstrap_servers")
    if isinstance(boot, list) and all(isinstance(x, str) and x for x in boot):
        boot = ",".join(boot)
    if not isinstance(boot, str) or not boot:
        raise EndpointsError(f"{at}.bootstrap_servers: required string (or list of host:port)")
    raw_brokers = c.get("brokers") or []
    if not isinstance(raw_brokers, list):
        raise EndpointsError(f"{at}.brokers: expected a list")
    brokers = tuple(_broker(b, f"{at}.brokers[{i}]") for i, b in enumerate(raw_brokers))
    seen: set[int] = set()
    for i, b in enumerate(brokers):
        if b.id in seen:
            raise EndpointsError(f"{at}.brokers[{i}].id: broker {b.id} listed twice")
        seen.add(b.id)
    check_shared_metrics_urls(brokers, f"{at}.brokers")
    mapped = {m.url for b in brokers for m in b.metrics_endpoints}
    unmapped = tuple(u for u in _url_list(c.get("metrics_urls"), f"{at}.metrics_urls") if u not in mapped)
    exporters = _url_list(c.get("exporter_urls"), f"{at}.exporter_urls")
    try:
        security = parse_security(c.get("security"), f"{at}.security")
    except SecurityError as exc:
        raise EndpointsError(str(exc)) from None
    control = doc.get("control_url")
    return ClusterEndpoints(cluster=cluster, bootstrap_servers=boot, brokers=brokers,
                            unmapped_metrics_urls=unmapped, exporter_urls=exporters,
                            control_url=control if isinstance(control, str) else None, security=security,
                            rack_to_idc=_rack_to_idc(c.get("rack_to_idc"), f"{at}.rack_to_idc"),
                            hardware=_hardware(c.get("hardware"), f"{at}.hardware"))


def load_endpoints_file(path: Path, cluster: str) -> ClusterEndpoints:
    """Read ``path`` (JSON) and pick ``cluster``; :class:`EndpointsError` on any problem (prefixed by the path)."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise EndpointsError(f"cannot read endpoints file {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise EndpointsError(f"{path}: not valid JSON: {exc}") from None
    try:
        return parse_endpoints(doc, cluster)
    except EndpointsError as exc:
        raise EndpointsError(f"{path}: {exc}") from None


def endpoints_from_options(cluster: str, bootstrap_servers: str, metrics_urls: list[str],
                           exporter_urls: list[str] | None = None,
                           security: SecuritySettings | None = None) -> ClusterEndpoints:
    """Endpoints for a real cluster from CLI options; a metrics URL may be written ``ID=URL``
    (repeat ``ID=URL`` for several endpoints of one broker)."""
    by_broker: dict[int, list[MetricsEndpoint]] = {}
    unmapped: list[str] = []
    for item in metrics_urls:
        head, sep, tail = item.partition("=")
        if sep and head.strip().isdigit() and tail.strip().startswith(("http://", "https://")):
            by_broker.setdefault(int(head), []).append(MetricsEndpoint(tail.strip()))
        elif item.startswith(("http://", "https://")):
            unmapped.append(item)
        else:
            raise EndpointsError(f"--metrics-url {item!r}: expected http(s)://host:port/metrics or ID=URL")
    if not bootstrap_servers:
        raise EndpointsError("--bootstrap-servers is required")
    brokers = tuple(BrokerInfo(id=b, metrics_url=eps[0].url, metrics=tuple(eps[1:]))
                    for b, eps in sorted(by_broker.items()))
    return ClusterEndpoints(cluster=cluster, bootstrap_servers=bootstrap_servers, brokers=brokers,
                            unmapped_metrics_urls=tuple(unmapped), exporter_urls=tuple(exporter_urls or ()),
                            security=security or PLAINTEXT)

