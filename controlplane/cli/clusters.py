"""``guardian clusters register|list|show|topology show|topology set``: register real clusters with a running service.

Goal: an operator registers a cluster the way Kafka clients are configured — bootstrap servers and
``--security-protocol``/``--sasl-*``/``--ssl-*`` flags, or an endpoints file whose cluster carries a
``security`` object — plus where each broker's metrics are, the rack -> IDC rule, IDC overrides, the
hardware profile and the consumer-offsets source, and later edits the declared topology alone.
(``guardian cluster`` is the local HA launcher; this group talks to a running controller.)

Method: the connection is read by :class:`~controlplane.cli.connect_options.ConnectOptions` (the same
flags as ``snapshot take`` and ``exec run``) into :class:`~kafkaio.endpoints.ClusterEndpoints`, then
written back as the JSON body of ``POST /api/v1/clusters`` (:func:`registration_body`); the topology
flags override what the endpoints file declares. ``topology set`` reads the current topology, replaces
the parts given on the command line and ``PUT``s it. Every call uses ``--url`` (``$GUARDIAN_URL``) and a
bearer ``--token`` (``$GUARDIAN_TOKEN``; admin for writes), like ``guardian throttle``.

Guarantee: no secret is sent or printed — the body holds file / environment-variable references only
(a password is never a flag value). Exit codes: 0 done, 1 the service refused or is unreachable,
2 bad input (flags, files, or a 400 from the service naming the JSON path).
Cost: one or two HTTP calls.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table

from controlplane.cli.common import EXIT_INVALID_INPUT, EXIT_VIOLATIONS, err, out
from controlplane.cli.connect_options import ConnectOptions
from controlplane.cli.option_set import option_set
from kafkaio.endpoints import ClusterEndpoints, EndpointsError, HardwareProfile, MetricsEndpoint, RackToIdc

clusters_app = typer.Typer(help="Register clusters with a running service and edit their declared topology.",
                           no_args_is_help=True)
topology_app = typer.Typer(help="A registered cluster's declared topology (rack -> IDC, overrides, hardware).",
                           no_args_is_help=True)
clusters_app.add_typer(topology_app, name="topology")

UrlOpt = Annotated[str, typer.Option("--url", envvar="GUARDIAN_URL", help="Guardian API base URL")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="GUARDIAN_TOKEN", help="bearer token")]
NameArg = Annotated[str, typer.Argument(help="registered cluster name")]
RegexOpt = Annotated[str | None, typer.Option("--rack-to-idc", help="regex with a named group idc, e.g. "
                                                                    "'^(?P<idc>.+)-r\\d+$'")]
TableOpt = Annotated[list[str] | None, typer.Option("--rack-idc", help="RACK=IDC table entry (repeatable; "
                                                                       "instead of --rack-to-idc)")]
IdcOpt = Annotated[list[str] | None, typer.Option("--idc", help="BROKER=IDC override (repeatable)")]
HardwareOpt = Annotated[Path | None, typer.Option("--hardware-file", help="hardware profile JSON: a list of rules "
                                                  "{brokers, log_dirs, kind, max_bytes_per_s} or {rules, default}")]


def _die(message: str, code: int) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(code)


def _call(method: str, url: str, token: str | None, body: Any = None) -> Any:
    """One JSON call; an HTTP error prints the problem's detail and exits (400: 2, else 1)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "X-Guardian-Reason": f"guardian clusters {method.lower()}"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")
        with contextlib.suppress(ValueError, AttributeError):
            detail = json.loads(detail).get("detail", detail)
        _die(f"{method} {url}: HTTP {exc.code}: {detail}", EXIT_INVALID_INPUT if exc.code == 400 else EXIT_VIOLATIONS)
    except (urllib.error.URLError, OSError) as exc:
        _die(f"cannot reach {url}: {exc}", EXIT_VIOLATIONS)


# ---------------------------------------------------------------------- endpoints -> request body
def _endpoint(m: MetricsEndpoint) -> dict[str, Any] | str:
    doc = {k: v for k, v in (("url", m.url), ("ca_file", m.ca_file), ("username", m.username),
                             ("password_file", m.password_file), ("bearer_token_file", m.bearer_token_file),
                             ("kind", m.kind)) if v is not None}
    return doc if len(doc) > 1 else m.url


def _rack_rule(rule: RackToIdc | None) -> dict[str, Any] | None:
    if rule is None:
        return None
    return {"regex": rule.regex} if rule.regex is not None else {"table": dict(rule.table)}


def _hardware(profile: HardwareProfile | None) -> dict[str, Any] | None:
    if profile is None:
        return None
    rules = [{"brokers": "*" if r.brokers is None else sorted(r.brokers), "log_dirs": r.log_dirs,
              "kind": r.disk.kind.value,
              **({"max_bytes_per_s": r.disk.max_bytes_per_s} if r.disk.max_bytes_per_s is not None else {})}
             for r in profile.rules]
    out_: dict[str, Any] = {"rules": rules}
    if profile.default is not None:
        d = profile.default
        out_["default"] = {"kind": d.kind.value,
                           **({"max_bytes_per_s": d.max_bytes_per_s} if d.max_bytes_per_s is not None else {})}
    return out_


def registration_body(eps: ClusterEndpoints) -> dict[str, Any]:
    """``POST /api/v1/clusters`` body of a cluster's endpoints (references only: the records hold no secret)."""
    body: dict[str, Any] = {"name": eps.cluster, "bootstrap_servers": eps.bootstrap_servers.split(","),
                            "security": eps.security.model_dump(mode="json", exclude_none=True)}
    brokers = []
    for b in eps.brokers:
        entry: dict[str, Any] = {"id": b.id, "metrics": [_endpoint(m) for m in b.metrics_endpoints]}
        if b.idc:
            entry["idc"] = b.idc
        if b.rack:
            entry["rack"] = b.rack
        brokers.append(entry)
    body["brokers"] = brokers
    if eps.unmapped_metrics_urls:
        body["metrics_urls"] = {f"unmapped-{i}": u for i, u in enumerate(eps.unmapped_metrics_urls)}
    if eps.exporter_urls:
        body["consumer_offsets"] = eps.exporter_urls[0]
    if eps.control_url:
        body["control_url"] = eps.control_url
    for key, value in (("rack_to_idc", _rack_rule(eps.rack_to_idc)), ("hardware", _hardware(eps.hardware))):
        if value is not None:
            body[key] = value
    return body


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out_: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            _die(f"{what} {item!r}: expected KEY=VALUE", EXIT_INVALID_INPUT)
        out_[key.strip()] = value.strip()
    return out_


def _topology_flags(rack_to_idc: str | None, rack_idc: list[str] | None, idc: list[str] | None,
                    hardware_file: Path | None) -> dict[str, Any]:
    """The topology parts given on the command line (absent keys: not given)."""
    given: dict[str, Any] = {}
    table = _pairs(rack_idc, "--rack-idc")
    if rack_to_idc is not None and table:
        _die("give --rack-to-idc or --rack-idc, not both", EXIT_INVALID_INPUT)
    if rack_to_idc is not None:
        given["rack_to_idc"] = {"regex": rack_to_idc}
    elif table:
        given["rack_to_idc"] = {"table": table}
    if idc:
        given["idc_overrides"] = _pairs(idc, "--idc")
    if hardware_file is not None:
        try:
            given["hardware"] = json.loads(hardware_file.read_text())
        except OSError as exc:
            _die(f"cannot read {hardware_file}: {exc.strerror or exc}", EXIT_INVALID_INPUT)
        except json.JSONDecodeError as exc:
            _die(f"{hardware_file}: not valid JSON: {exc}", EXIT_INVALID_INPUT)
    return given


# ---------------------------------------------------------------------- commands
@clusters_app.command("register")
@option_set(ConnectOptions, ("cluster",))
def clusters_register(
    connect: ConnectOptions,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    rack_to_idc: RegexOpt = None,
    rack_idc: TableOpt = None,
    idc: IdcOpt = None,
    hardware_file: HardwareOpt = None,
    consumer_offsets: Annotated[str | None, typer.Option(
        help="where consumer offsets come from: admin (Kafka's admin API, the default) or an exporter URL")] = None,
    metrics_ca_file: Annotated[str | None, typer.Option(help="CA of the https metrics endpoints")] = None,
    metrics_username: Annotated[str | None, typer.Option(help="basic-auth user of the metrics endpoints")] = None,
    metrics_password_file: Annotated[str | None, typer.Option(
        help="file holding the metrics endpoints' basic-auth password")] = None,
    metrics_bearer_token_file: Annotated[str | None, typer.Option(
        help="file holding the metrics endpoints' bearer token")] = None,
    probe: Annotated[bool, typer.Option(
        help="the service connects once to the cluster and scrapes every metrics endpoint before accepting it "
             "(--no-probe: register a cluster that is not reachable yet)")] = True,
) -> None:
    """Register (or update) CLUSTER with the service: connection and security, metrics endpoints, topology.
    The service first connects once and scrapes every endpoint (``--no-probe`` skips it): a wrong password,
    closed port or failing endpoint is refused, naming it."""
    try:
        eps = connect.endpoints()
    except EndpointsError as exc:
        _die(str(exc), EXIT_INVALID_INPUT)
    body = registration_body(eps)
    auth = {k: v for k, v in (("ca_file", metrics_ca_file), ("username", metrics_username),
                              ("password_file", metrics_password_file),
                              ("bearer_token_file", metrics_bearer_token_file)) if v is not None}
    if auth:
        for b in body["brokers"]:
            b["metrics"] = [{**({"url": m} if isinstance(m, str) else m), **auth} for m in b["metrics"]]
    body.update(_topology_flags(rack_to_idc, rack_idc, idc, hardware_file))
    if consumer_offsets is not None:
        body["consumer_offsets"] = consumer_offsets
    result = _call("POST", url.rstrip("/") + "/api/v1/clusters" + ("" if probe else "?probe=false"), token, body)
    verb = "registered" if result.get("created") else "updated"
    how = result.get("security", "PLAINTEXT")
    if result.get("sasl_mechanism"):
        how += f"/{result['sasl_mechanism']} as user {result.get('username')!r}"
    out.print(f"cluster {eps.cluster} {verb} ({how}, {len(body['brokers'])} brokers with metrics endpoints)",
              markup=False)


@clusters_app.command("list")
def clusters_list(url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None,
                  as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Registered clusters: bootstrap servers, security, brokers with metrics endpoints."""
    rows = _call("GET", url.rstrip("/") + "/api/v1/clusters", token)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(rows)} cluster(s)")
    for col in ("cluster", "bootstrap servers", "security", "brokers", "consumer offsets"):
        table.add_column(col, overflow="fold")
    for c in rows:
        sec = c.get("security") or {}
        how = sec.get("protocol", "PLAINTEXT") + (f"/{sec['sasl_mechanism']}" if sec.get("sasl_mechanism") else "")
        table.add_row(c["name"], ",".join(c.get("bootstrap_servers") or []), how,
                      str(len(c.get("brokers") or []) or len(c.get("metrics_urls") or {})),
                      str(c.get("consumer_offsets") or "admin"))
    out.print(table)


@clusters_app.command("show")
def clusters_show(name: NameArg, url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None) -> None:
    """One registered cluster as JSON (security settings as references: file paths, variable names)."""
    print(json.dumps(_call("GET", url.rstrip("/") + f"/api/v1/clusters/{name}", token), indent=2))


@topology_app.command("show")
def topology_show(name: NameArg, url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None) -> None:
    """The cluster's declared topology as JSON: rack -> IDC rule, IDC overrides, hardware profile."""
    print(json.dumps(_call("GET", url.rstrip("/") + f"/api/v1/clusters/{name}/topology", token), indent=2))


@topology_app.command("set")
def topology_set(
    name: NameArg,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    rack_to_idc: RegexOpt = None,
    rack_idc: TableOpt = None,
    idc: IdcOpt = None,
    hardware_file: HardwareOpt = None,
    clear: Annotated[list[str] | None, typer.Option(
        help="clear a part: rack_to_idc, idc_overrides or hardware (repeatable)")] = None,
) -> None:
    """Replace the parts of NAME's declared topology given here; the other parts stay as they are."""
    given = _topology_flags(rack_to_idc, rack_idc, idc, hardware_file)
    parts = ("rack_to_idc", "idc_overrides", "hardware")
    unknown = sorted(set(clear or []) - set(parts))
    if unknown:
        _die(f"--clear {unknown[0]!r}: one of {', '.join(parts)}", EXIT_INVALID_INPUT)
    if not given and not clear:
        _die("nothing to set: give --rack-to-idc, --rack-idc, --idc, --hardware-file or --clear", EXIT_INVALID_INPUT)
    base = url.rstrip("/") + f"/api/v1/clusters/{name}/topology"
    current = _call("GET", base, token)
    body = {k: current.get(k) for k in parts}
    body.update(given)
    for part in clear or []:
        body[part] = {} if part == "idc_overrides" else None
    _call("PUT", base, token, {k: v for k, v in body.items() if v is not None})
    out.print(f"topology of {name} set: {', '.join(sorted({*given, *(clear or [])}))}", markup=False)
