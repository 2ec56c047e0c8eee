"""Goal: ``sim up --realistic`` — kafkasim as an operator meets a production deployment.

Method: :func:`prepare` generates what such a deployment is set up with before it starts: a CA
and certificates (:mod:`kafkasim.broker.tls`), a Kafka user whose SCRAM credentials the brokers store
(listeners speak SASL_SSL; SCRAM-SHA-512 is what clients are told to use, PLAIN and SCRAM-SHA-256
are enabled too) and a basic-auth user for the https metrics endpoints (a JMX exporter and a
node_exporter per broker, stock names only, see :mod:`kafkasim.observe.exporters`).  Secrets are written to
files (mode 0600) next to the endpoints file.  :func:`operator_endpoints` turns the server's
endpoints into the document an operator would register per cluster::

    {"bootstrap_servers": "h:p,...",
     "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": ...,
                  "password_file": ..., "ca_file": ...},
     "brokers": [{"id": 1, "metrics": [{"url": "https://...", "ca_file": ..., "username": ...,
                                        "password_file": ...}, ...]}, ...],
     "rack_to_idc": {"regex": "^(?P<idc>.+?)(?:-r\\d+)?$"}   (or {"table": {rack: idc}}),
     "hardware": [{"brokers": "*" | [ids], "log_dirs": "glob", "kind": "hdd|ssd|nvme",
                   "max_bytes_per_s": N}, ...]}

The rack→IDC rule is a regex when one maps every broker's ``broker.rack`` to its IDC, else an
explicit table; the hardware profile has one entry per log-dir path and (kind, ceiling), listing
the brokers that have it (``"*"`` for all).  Nothing else: IDC, pool and disk facts are not in the
document (pools are Guardian's own assignments; ``guardian sim truth`` shows them).

Guarantee: the document holds no secret — only paths to files readable by the owner alone; the
rule and the profile reproduce every broker's IDC and every disk's kind and nominal ceiling.

Cost: key generation and three PBKDF2 derivations at start (tens of milliseconds); O(disks) for
the document.
"""

from __future__ import annotations

import fnmatch
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkasim.broker.httpd import BasicAuth
from kafkasim.broker.security import SecurityConfig
from kafkasim.broker.tls import TlsFiles, TlsMaterial
from kafkasim.observe.exporters import MetricsConfig
from kafkasim.scenarios.scenario import Federation

KAFKA_USER = "guardian"
METRICS_USER = "prometheus"
MECHANISM = "SCRAM-SHA-512"
RACK_REGEX = r"^(?P<idc>.+?)(?:-r\d+)?$"


@dataclass(frozen=True)
class Realistic:
    """The security and metrics settings of a realistic federation, and where its secrets are."""

    security: SecurityConfig
    metrics: MetricsConfig
    tls_files: TlsFiles
    kafka_password_file: Path
    metrics_password_file: Path


def _secret(path: Path) -> str:
    value = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    os.chmod(path, 0o600)
    return value


def prepare(directory: Path, prefix: str = "kafkasim", protocol: str = "SASL_SSL",
            sim_series: bool = False) -> Realistic:
    """Generate certificates and credentials into ``directory`` (files named ``<prefix>-...``)."""
    directory.mkdir(parents=True, exist_ok=True)
    tls = TlsMaterial()
    files = tls.write(directory / f"{prefix}-tls")
    kafka_file = directory / f"{prefix}-kafka.password"
    metrics_file = directory / f"{prefix}-metrics.password"
    security = SecurityConfig(protocol=protocol, tls=tls)
    security.users.add(KAFKA_USER, _secret(kafka_file))
    metrics = MetricsConfig(realistic=True, sim_series=sim_series, tls=tls,
                            auth=BasicAuth({METRICS_USER: _secret(metrics_file)}))
    return Realistic(security, metrics, files, kafka_file, metrics_file)


def rack_to_idc(fed: Federation, cluster: str) -> dict[str, Any]:
    """``{"regex": ...}`` when :data:`RACK_REGEX` maps every broker's rack to its IDC, else ``{"table": ...}``."""
    brokers = fed.cluster(cluster).brokers.values()
    rx = re.compile(RACK_REGEX)
    if all((m := rx.match(b.rack)) is not None and m.group("idc") == b.idc for b in brokers):
        return {"regex": RACK_REGEX}
    return {"table": {b.rack: b.idc for b in sorted(brokers, key=lambda x: x.rack)}}


def hardware_profile(fed: Federation, cluster: str) -> list[dict[str, Any]]:
    """Disjoint entries (brokers, log-dir glob) → (kind, nominal ceiling) covering every disk of ``cluster``.

    Disks are grouped by (path, kind, ceiling) with the brokers having them; groups with the same
    brokers, kind and ceiling share one entry when a glob (``/data*`` or ``/data[123]``) matches
    their paths and no other log-dir path of the cluster."""
    cl = fed.cluster(cluster)
    by_path: dict[tuple[str, str, float], list[int]] = {}
    for b in sorted(cl.brokers.values(), key=lambda x: x.id):
        for d in b.disks:
            by_path.setdefault((d.path, d.kind, float(d.max_bytes_per_s)), []).append(b.id)
    every = sorted(cl.brokers)
    all_paths = {p for p, _, _ in by_path}
    merged: dict[tuple[tuple[int, ...], str, float], list[str]] = {}
    for (path, kind, ceiling), ids in sorted(by_path.items()):
        merged.setdefault((tuple(ids), kind, ceiling), []).append(path)
    out: list[dict[str, Any]] = []
    for (group, kind, ceiling), paths in merged.items():
        value = int(ceiling) if ceiling == int(ceiling) else ceiling
        for glob in _globs(paths, all_paths):
            out.append({"brokers": "*" if list(group) == every else list(group), "log_dirs": glob, "kind": kind,
                        "max_bytes_per_s": value})
    return sorted(out, key=lambda e: (e["log_dirs"], str(e["brokers"])))


def _globs(paths: list[str], all_paths: set[str]) -> list[str]:
    """One glob matching exactly ``paths`` within ``all_paths`` when there is a simple one, else the paths."""
    if len(paths) == 1:
        return paths
    prefix = paths[0]
    for p in paths[1:]:
        while not p.startswith(prefix):
            prefix = prefix[:-1]
    rests = [p[len(prefix):] for p in paths]
    candidates = [prefix + "*"]
    if all(len(r) == 1 and r.isalnum() for r in rests):
        candidates.append(prefix + "[" + "".join(sorted(rests)) + "]")
    for glob in candidates:
        if {p for p in all_paths if fnmatch.fnmatchcase(p, glob)} == set(paths):
            return [glob]
    return sorted(paths)


def operator_endpoints(doc: dict[str, Any], fed: Federation, r: Realistic) -> dict[str, Any]:
    """The server's realistic endpoints document rewritten as an operator's registration per cluster."""
    ca = str(r.tls_files.ca_file)
    sec = r.security
    out: dict[str, Any] = {k: v for k, v in doc.items() if k != "clusters"}
    out["clusters"] = {}
    for name, c in doc["clusters"].items():
        security: dict[str, Any] = {"protocol": sec.protocol}
        if sec.uses_sasl:
            security.update(sasl_mechanism=MECHANISM, username=KAFKA_USER, password_file=str(r.kafka_password_file))
        if sec.uses_tls:
            security["ca_file"] = ca
        metric = {"ca_file": ca} if r.metrics.tls is not None else {}
        if r.metrics.auth is not None:
            metric.update(username=METRICS_USER, password_file=str(r.metrics_password_file))
        out["clusters"][name] = {
            "bootstrap_servers": c["bootstrap_servers"],
            "security": security,
            "brokers": [{"id": b["id"], "metrics": [{"url": m["url"], **metric} for m in b["metrics"]]}
                        for b in c["brokers"]],
            "rack_to_idc": rack_to_idc(fed, name),
            "hardware": hardware_profile(fed, name),
        }
    return out
