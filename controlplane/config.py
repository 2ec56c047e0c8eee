"""Service configuration: one TOML file (``guardian serve --config F``), validated by pydantic.

Example::

    data_dir = "var/node1"
    [raft]
    self_addr = "127.0.0.1:7001"
    peers = ["127.0.0.1:7002", "127.0.0.1:7003"]
    key_file = "/etc/guardian/raft.key"      # same secret on every node (required with peers)
    election_timeout_ms = [200, 500]         # both Raft groups; across IDCs or on pausing VMs e.g. [1000, 2000]
    heartbeat_ms = 50                        # with heartbeat_ms = 100
    [http]
    host = "127.0.0.1"
    port = 8080
    tls_cert_file = "/etc/guardian/api.pem"  # optional: HTTPS only (with tls_key_file); a non-loopback host
    tls_key_file = "/etc/guardian/api-key.pem"  # without TLS starts with a loud warning
    tls_client_ca_file = "/etc/guardian/clients-ca.pem"  # optional: require client certificates
    [[tokens]]
    name = "alice"
    role = "admin"
    sha256 = "<hex sha256 of the token>"     # `guardian token hash` prints it
    [intervals]
    collect_s = 10
    [analytics]                              # scheduled audit ingest + models (off by default)
    enabled = true
    interval_s = 3600
    [logging]
    level = "INFO"                           # DEBUG, INFO, WARNING, ERROR (guardian serve --log-level)
    format = "text"                          # or "json": one object per line
    [tiered]                                 # remote-storage metadata service (off by default)
    enabled = true
    port = 7090                              # gRPC; a token from [[tokens]] in `authorization: Bearer`
    raft_addr = "127.0.0.1:7101"             # its own Raft group
    raft_peers = ["127.0.0.1:7102", "127.0.0.1:7103"]
    tls_cert_file = "/etc/guardian/tiered.pem"   # TLS on the gRPC port (required off loopback unless
    tls_key_file = "/etc/guardian/tiered-key.pem"  # allow_plaintext = true); tls_client_ca_file: mutual TLS

Tokens are stored hashed; a token's role is viewer (read), operator (act) or admin (configure).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from domain.errors import ContractError, Problem, json_path
from raft.node import RaftSettings

Role = Literal["viewer", "operator", "admin"]
ROLE_RANK: dict[str, int] = {"viewer": 0, "operator": 1, "admin": 2}


class _Conf(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)


class TokenConf(_Conf):
    name: Annotated[str, Field(min_length=1)]
    """Who the token is: recorded as the actor of every command it sends."""
    role: Role
    """viewer (reads), operator (plans, executions, throttles, maintenance) or admin (clusters, policies, pools)."""
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """Hex SHA-256 of the bearer token (`guardian token-hash TOKEN` prints it)."""


class RaftConf(_Conf):
    """``[raft]``: this node's address, its peers and the group's shared transport key.

    ``key_file`` (or ``key_env``, the name of an environment variable holding the key) is required
    when ``peers`` is not empty; a single node without one generates ``data_dir/raft/raft.key``."""

    self_addr: str = "127.0.0.1:7001"
    """This node's Raft address host:port (`--peers`/`--node-id` override it)."""
    peers: list[str] = Field(default_factory=list)
    """The other nodes' Raft addresses."""
    key_file: Path | None = None
    """File holding the group's shared Raft transport key (e.g. `openssl rand -base64 32`)."""
    key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    heartbeat_ms: Annotated[int, Field(ge=10, le=10_000)] = 50
    """How often the leader sends appends/heartbeats (both Raft groups of the node: state and tiered)."""
    election_timeout_ms: Annotated[list[Annotated[int, Field(ge=50, le=60_000)]], Field(min_length=2, max_length=2)] = [
        200, 500]
    """[min, max] ms a follower waits without hearing the leader before it stands for election (a random value in
    the range). The defaults fail over in ~0.6 s on one LAN; a group spanning IDCs, or nodes that pause (GC, a
    loaded VM), needs more — e.g. [1000, 2000] with heartbeat_ms = 100 — or a pause of ~0.2 s starts an
    election."""

    @model_validator(mode="after")
    def _one_key_source(self) -> RaftConf:
        if self.key_file is not None and self.key_env is not None:
            raise ValueError("set raft.key_file or raft.key_env, not both")
        low, high = self.election_timeout_ms
        if not 3 * self.heartbeat_ms < low < high:
            raise ValueError(f"raft.election_timeout_ms = [{low}, {high}] with raft.heartbeat_ms = "
                             f"{self.heartbeat_ms}: need 3 x heartbeat_ms < min < max (a leader must be heard several "
                             "times per timeout)")
        return self

    def timing(self, **overrides: Any) -> RaftSettings:
        """The Raft settings these timeouts give (the connection timeout at least the longest election timeout)."""
        low, high = (v / 1000.0 for v in self.election_timeout_ms)
        return RaftSettings(heartbeat_period=self.heartbeat_ms / 1000.0, election_timeout_min=low,
                            election_timeout_max=high, connection_timeout=max(RaftSettings.connection_timeout, high),
                            **overrides)


class HttpConf(_Conf):
    """``[http]``: bind address and port; with ``tls_cert_file`` + ``tls_key_file`` the API speaks HTTPS only,
    and with ``tls_client_ca_file`` too it requires a client certificate signed by that CA (mutual TLS)."""

    host: str = "127.0.0.1"
    """HTTP bind address (`--host` overrides)."""
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    """HTTP port (`--port` overrides)."""
    tls_cert_file: Path | None = None
    """Server certificate (PEM); with `tls_key_file` the API speaks HTTPS only."""
    tls_key_file: Path | None = None
    """Private key of `tls_cert_file` (PEM)."""
    tls_client_ca_file: Path | None = None
    """CA whose client certificates the API requires (mutual TLS); needs the two above."""

    @model_validator(mode="after")
    def _tls_pair(self) -> HttpConf:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("set http.tls_cert_file and http.tls_key_file together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("http.tls_client_ca_file needs http.tls_cert_file and http.tls_key_file (client "
                             "certificates are checked only over TLS)")
        return self

    @property
    def tls(self) -> bool:
        """True when the API is served over HTTPS."""
        return self.tls_cert_file is not None

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``."""
        return "https" if self.tls else "http"


class LoggingConf(_Conf):
    """``[logging]``: the node's log level and line format (``text`` or one JSON object per line)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    """Log level of `guardian serve` (`--log-level` overrides)."""
    format: Literal["text", "json"] = "text"
    """One line per record: `text`, or one JSON object per line."""


class ApprovalConf(_Conf):
    """``[approval]``: who may approve a plan."""

    four_eyes: bool = False
    """Refuse (409, naming both) a plan's approval by the token that proposed it."""


class IntervalsConf(_Conf):
    collect_s: Annotated[float, Field(gt=0)] = 10.0
    """Collection round period (one observer per cluster); the self-healing loop runs at the same period."""
    throttle_s: Annotated[float, Field(gt=0)] = 5.0  # evaluates each published round once, at most 5 s after it
    """Throttle protection period (it evaluates each published round once)."""
    executor_s: Annotated[float, Field(gt=0)] = 5.0
    """Executor reconcile pass period: the longest between passes (a pass comes sooner, never under 1 s, when a copy
    is expected to end, so its slots and disk budget go to the next copy at once)."""
    auto_rebalance_check_s: Annotated[float, Field(gt=0)] = 60.0
    """How often auto-rebalance checks its clusters (window, threshold, running executions)."""
    cluster_deadline_s: Annotated[float, Field(gt=0, le=60)] = 10.0
    """How long a loop waits for one cluster's work before it goes on without it (the cluster is then reported
    ``timeout`` and not waited for again until its work ends in time; other clusters are never delayed by it)."""
    cluster_workers: Annotated[int, Field(ge=1, le=256)] = 8
    """Clusters one loop works on at once (plus up to half as many that ran past their deadline)."""


class DiskThresholdConf(_Conf):
    """High/low marks of one disk kind for throttle protection (enter after k samples above high)."""

    util_high: Annotated[float, Field(gt=0, le=1)] = 0.85
    """Measured util above which a disk counts as hot."""
    util_low: Annotated[float, Field(gt=0, le=1)] = 0.70
    await_high_ms: Annotated[float, Field(gt=0)] = 60.0
    await_low_ms: Annotated[float, Field(gt=0)] = 25.0
    enter_samples: Annotated[int, Field(ge=1, le=100)] = 2
    leave_samples: Annotated[int, Field(ge=1, le=100)] = 2

    @model_validator(mode="after")
    def _ordered(self) -> DiskThresholdConf:
        if not (self.util_low < self.util_high and self.await_low_ms < self.await_high_ms):
            raise ValueError("low marks must be below high marks (util_low < util_high, await_low_ms < await_high_ms)")
        return self


class ProtectionConf(_Conf):
    """``[throttle]``: per-kind thresholds (``[throttle.thresholds.hdd]`` ...) and the protection's knobs;
    kinds not configured keep the built-in defaults."""

    thresholds: dict[Literal["hdd", "ssd", "nvme"], DiskThresholdConf] = Field(default_factory=dict)
    target_util: Annotated[float, Field(gt=0, le=1)] = 0.65
    """Disk util a protection throttle aims for."""
    write_tolerance: Annotated[float, Field(ge=1)] = 1.5
    min_rate_bytes_per_s: Annotated[float, Field(gt=0)] = 512 * 1024
    isr_floor_bytes_per_s: Annotated[float, Field(gt=0)] = 1024 * 1024
    relax_factor: Annotated[float, Field(gt=1, le=10)] = 2.0


class LeasedLineConf(_Conf):
    """One protected leased line (``[[leased_lines.lines]]``): an IDC pair, its capacity and marks (fractions of
    the capacity). With ``both_directions`` (default) the same figures apply to ``dst_idc -> src_idc`` too."""

    src_idc: Annotated[str, Field(min_length=1)]
    dst_idc: Annotated[str, Field(min_length=1)]
    capacity_bytes_per_s: Annotated[float, Field(gt=0)]
    """What the line carries per direction (bytes/s)."""
    both_directions: bool = True
    high: Annotated[float, Field(gt=0, le=1.5)] = 0.85
    """Util above which the line counts as hot (after `enter_samples` rounds)."""
    low: Annotated[float, Field(gt=0, le=1.5)] = 0.70
    """Util below which it counts as calm again (after `leave_samples` rounds): throttles relax then."""
    target: Annotated[float, Field(gt=0, le=1.5)] = 0.75
    """Util the protection's throttles aim for on a hot line."""

    @model_validator(mode="after")
    def _ordered(self) -> LeasedLineConf:
        if self.src_idc == self.dst_idc:
            raise ValueError("a leased line joins two different IDCs")
        if not (self.low <= self.target < self.high):
            raise ValueError("need low <= target < high")
        return self


class LeasedLinesConf(_Conf):
    """``[leased_lines]``: cross-IDC traffic accounting (always on) and line protection: capacities and marks
    per IDC pair (``[[leased_lines.lines]]``); on a hot line Guardian slows migration first, then catching-up
    replication of topics not in ``critical_topics`` (never below their ingress), then cross-IDC consumer
    fetches by ``fetch_priority`` (client quotas), and relaxes with hysteresis."""

    protect: bool = True
    """Throttle when a configured line is hot (false: account and report only)."""
    lines: list[LeasedLineConf] = Field(default_factory=list)
    enter_samples: Annotated[int, Field(ge=1, le=100)] = 2
    leave_samples: Annotated[int, Field(ge=1, le=100)] = 2
    critical_topics: list[str] = Field(default_factory=list)
    """Topic globs whose replication is never slowed for a line."""
    fetch_priority: dict[str, int] = Field(default_factory=dict)
    """Client-id glob -> tenant priority (higher is throttled later; unmatched clients: 5)."""
    min_rate_bytes_per_s: Annotated[float, Field(gt=0)] = 512 * 1024
    catch_up_margin: Annotated[float, Field(ge=0, le=10)] = 0.2
    relax_factor: Annotated[float, Field(gt=1, le=10)] = 2.0


class ClickHouseConf(_Conf):
    """Where metric rollups and audit analytics live: embedded chdb under ``data_dir/chdb`` (default),
    a server by ``url``, or ``off``. chdb allows one data path per process."""

    mode: Literal["chdb", "url", "off"] = "chdb"
    """chdb: embedded under data_dir/chdb (or `path`); url: a ClickHouse server; off: no rollups, no analytics."""
    url: str | None = None
    """ClickHouse HTTP URL with `mode = "url"`, e.g. `http://user:password@clickhouse:8123`."""
    path: Path | None = None
    """chdb data directory (default data_dir/chdb)."""
    database: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = "guardian"
    """Database of the rollup and analytics tables."""


AnalyticsJobName = Literal["traffic", "lineage", "cost", "idle", "cross_idc", "all"]


def _all_jobs() -> list[AnalyticsJobName]:
    return ["all"]


class AnalyticsConf(_Conf):
    """``[analytics]``: the leader's scheduled audit analytics — ingest every registered cluster's audit
    topic into ClickHouse, then run the models (traffic, lineage, cost, idle, cross-IDC) and record the
    run. Off by default; ``engine = "sql"`` computes the models inside ClickHouse (no JVM in the service),
    ``"spark"`` keeps a local Spark session in the service process (heavy: see the README)."""

    enabled: bool = False
    interval_s: Annotated[float, Field(gt=0)] = 3600.0
    engine: Literal["sql", "spark"] = "sql"
    """sql: models computed inside ClickHouse; spark: PySpark jobs (needs the `analytics` extra)."""
    jobs: Annotated[list[AnalyticsJobName], Field(min_length=1)] = Field(default_factory=_all_jobs)
    days: Annotated[int, Field(ge=1, le=366)] = 14
    idle_days: Annotated[int, Field(ge=1, le=366)] = 7
    top_k: Annotated[int, Field(ge=1, le=1000)] = 10
    keep_runs: Annotated[int, Field(ge=1, le=100)] = 3
    ingest: bool = True
    audit_topic: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")] = "__guardian_audit"
    ingest_max_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    spark_master: str = "local[2]"
    """Spark master with `engine = "spark"`: `local[N]` or a standalone cluster `spark://host:7077`."""
    tenant_pattern: str = r"^(?P<tenant>[A-Za-z0-9]+)[-._]"
    """Regex with a named group `tenant` taken from a topic's name for the topic inventory (cost per tenant);
    topics it does not match are tenant `unknown`."""

    @field_validator("tenant_pattern")
    @classmethod
    def _tenant_rule(cls, value: str) -> str:
        try:
            groups = re.compile(value).groupindex
        except re.error as exc:
            raise ValueError(f"not a regex: {exc}") from None
        if "tenant" not in groups:
            raise ValueError("needs a named group (?P<tenant>...)")
        return value


class NotificationConf(_Conf):
    """One outbound webhook (``[[notifications]]``) for anomalies and self-healing actions."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    """Where to POST each notification."""
    format: Literal["json", "slack"] = "json"
    kinds: list[str] = Field(default_factory=list)
    """Anomaly kinds to send (empty: all)."""
    retries: Annotated[int, Field(ge=0, le=10)] = 3
    timeout_s: Annotated[float, Field(gt=0, le=60)] = 5.0


class TieredConf(_Conf):
    """``[tiered]``: the remote-storage metadata service (a second Raft group + its gRPC port).

    ``raft_addr``/``raft_peers`` are that group's Raft addresses (the transport key is ``[raft]``'s);
    ``grpc_of`` maps each node's tiered Raft address to its gRPC host:port (followers name the leader
    with it). Calls need an API token in ``authorization: Bearer`` (viewer reads, operator writes).
    With ``tls_cert_file`` + ``tls_key_file`` the gRPC port speaks TLS only, with ``tls_client_ca_file``
    too it requires client certificates (mutual TLS); without TLS a non-loopback ``host`` is refused
    unless ``allow_plaintext`` (then the node logs a loud warning)."""

    enabled: bool = False
    """Run the tiered-metadata service on this node."""
    host: str = "127.0.0.1"
    """gRPC bind address; off loopback it needs TLS (or `allow_plaintext`)."""
    port: Annotated[int, Field(ge=0, le=65535)] = 7090
    """gRPC port."""
    raft_addr: str = "127.0.0.1:7101"
    """This node's address in the tiered Raft group."""
    raft_peers: list[str] = Field(default_factory=list)
    """The other nodes' tiered Raft addresses."""
    grpc_of: dict[str, str] = Field(default_factory=dict)
    """Tiered Raft address -> gRPC host:port of every node (followers name the leader with it)."""
    tls_cert_file: Path | None = None
    """Server certificate (PEM) of the gRPC port; with `tls_key_file` it speaks TLS only."""
    tls_key_file: Path | None = None
    """Private key of `tls_cert_file` (PEM)."""
    tls_client_ca_file: Path | None = None
    """CA whose client certificates the gRPC port requires (mutual TLS); needs the two above."""
    allow_plaintext: bool = False
    """Serve plaintext gRPC on a non-loopback `host` (bearer tokens in clear: only behind a TLS proxy)."""

    @model_validator(mode="after")
    def _tls(self) -> TieredConf:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("set tiered.tls_cert_file and tiered.tls_key_file together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("tiered.tls_client_ca_file needs tiered.tls_cert_file and tiered.tls_key_file "
                             "(client certificates are checked only over TLS)")
        if self.enabled and self.tls_cert_file is None and not self.allow_plaintext and not _loopback(self.host):
            raise ValueError(f"tiered.host = {self.host!r} is not loopback and the gRPC port has no TLS: bearer "
                             "tokens would cross the network in clear. Set tiered.tls_cert_file and "
                             "tiered.tls_key_file, or tiered.allow_plaintext = true behind a TLS proxy")
        return self

    @property
    def tls(self) -> bool:
        """True when the gRPC port speaks TLS."""
        return self.tls_cert_file is not None


def _loopback(host: str) -> bool:
    host = host.strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


class Settings(_Conf):
    data_dir: Path = Path("var/guardian")
    """Raft journal and snapshot, access log, generated admin token, embedded chdb (``--data-dir`` overrides)."""
    raft: RaftConf = Field(default_factory=RaftConf)
    http: HttpConf = Field(default_factory=HttpConf)
    tokens: list[TokenConf] = Field(default_factory=list)
    tokens_file: Path | None = None
    """A TOML file of more ``[[tokens]]`` (a Kubernetes Secret, a systemd credential), kept out of the config;
    :func:`load_settings` appends its tokens to ``tokens``."""
    intervals: IntervalsConf = Field(default_factory=IntervalsConf)
    max_snapshot_age_s: Annotated[float, Field(gt=0)] = 120.0
    """Nothing plans or acts on a cluster whose latest snapshot is older than this."""
    clickhouse: ClickHouseConf = Field(default_factory=ClickHouseConf)
    throttle: ProtectionConf = Field(default_factory=ProtectionConf)
    leased_lines: LeasedLinesConf = Field(default_factory=LeasedLinesConf)
    analytics: AnalyticsConf = Field(default_factory=AnalyticsConf)
    notifications: list[NotificationConf] = Field(default_factory=list)
    logging: LoggingConf = Field(default_factory=LoggingConf)
    approval: ApprovalConf = Field(default_factory=ApprovalConf)
    tiered: TieredConf = Field(default_factory=TieredConf)


def hash_token(token: str) -> str:
    """Hex SHA-256 of a bearer token, as stored in the configuration."""
    return hashlib.sha256(token.encode()).hexdigest()


def load_settings(path: Path | None) -> Settings:
    """Settings from a TOML file (defaults when ``path`` is None); :class:`ContractError` names bad keys."""
    if path is None:
        return Settings()
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ContractError(f"config {path}", [Problem("$", f"cannot read: {exc.strerror or exc}")]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"config {path}", [Problem("$", f"not valid TOML: {exc}")]) from None
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        raise ContractError(f"config {path}", [Problem(json_path(e["loc"]), e["msg"])
                                              for e in exc.errors(include_url=False)]) from None
    if settings.tokens_file is None:
        return settings
    return settings.model_copy(update={"tokens": [*settings.tokens, *_load_tokens(settings.tokens_file)]})


class _TokensFile(_Conf):
    tokens: list[TokenConf]


def _load_tokens(path: Path) -> list[TokenConf]:
    """The ``[[tokens]]`` of ``tokens_file``; :class:`ContractError` names the file and the bad key."""
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ContractError(f"tokens_file {path}", [Problem("$", f"cannot read: {exc.strerror or exc}")]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"tokens_file {path}", [Problem("$", f"not valid TOML: {exc}")]) from None
    try:
        return _TokensFile.model_validate(raw).tokens
    except ValidationError as exc:
        raise ContractError(f"tokens_file {path}", [Problem(json_path(e["loc"]), e["msg"])
                                                   for e in exc.errors(include_url=False)]) from None
