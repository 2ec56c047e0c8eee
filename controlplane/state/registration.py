"""What an operator registers for a cluster: checked once when written, read one way by every consumer.

Goal: a registered cluster carries what Guardian needs to govern a real deployment — bootstrap
servers, the Kafka client ``security`` settings (:class:`kafkaio.security.SecuritySettings`, secrets
by reference only), any number of metrics endpoints per broker (with CA and basic / bearer auth by
file), the rack→IDC rule, per-broker IDC overrides, the hardware profile and where consumer offsets
come from — and the observer, the executor, the throttle levers and the audit reader all connect and
read it the same way.

Method: the replicated record has the shape of one cluster of an endpoints document (the format
:mod:`kafkaio.endpoints` parses: ``bootstrap_servers``, ``security``, ``brokers: [{"id", "metrics":
[...]}]``, ``rack_to_idc``, ``hardware``) plus ``idc_overrides`` (broker id → IDC), the older
``metrics_urls`` map (broker id → URL, kept working), ``consumer_offsets`` (``"admin"`` or an
exporter URL) and ``control_url``. :func:`cluster_document` rebuilds the endpoints-document object
from a record, and :func:`endpoints_of` parses it with the one parser into
:class:`~kafkaio.endpoints.ClusterEndpoints`. :func:`check_registration` runs that same parse on what
is about to be written (plus what the parser does not check: glob syntax of the hardware rules) and
answers the first problem by the JSON path of the request body (``$.brokers[1].metrics[0].url``),
so a record that is stored always parses.

Guarantee: a record never holds a secret (the parser refuses literal ``password`` keys in the
security object and in metrics endpoints; only ``*_file`` / ``*_env`` references and user names are
stored), so the state, the action log and every API response that shows a record show references
only. A record :func:`check_registration` accepted parses in :func:`endpoints_of` on every node.
Cost: linear in the record (one regex compile for the rack rule).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from kafkaio.endpoints import ClusterEndpoints, EndpointsError, parse_endpoints

ADMIN_OFFSETS = "admin"
"""``consumer_offsets`` default: committed offsets through Kafka's admin API (no exporter needed)."""
TOPOLOGY_KEYS = ("rack_to_idc", "idc_overrides", "hardware")
"""The declared-topology part of a record, editable on its own (``cluster.topology``)."""


def cluster_document(record: Mapping[str, Any]) -> dict[str, Any]:
    """The endpoints-document cluster object of a registered record (brokers in the record's order first,
    then brokers known only from ``metrics_urls`` or ``idc_overrides``)."""
    entries = [dict(b) if isinstance(b, Mapping) else b for b in record.get("brokers") or []]
    by_id: dict[int, dict[str, Any]] = {}
    for e in entries:
        if isinstance(e, dict) and isinstance(e.get("id"), int) and not isinstance(e.get("id"), bool):
            by_id.setdefault(e["id"], e)

    def broker(bid: int) -> dict[str, Any]:
        if bid not in by_id:
            by_id[bid] = {"id": bid}
            entries.append(by_id[bid])
        return by_id[bid]

    unmapped: list[str] = []
    for key, url in (record.get("metrics_urls") or {}).items():
        if str(key).isdigit():
            broker(int(key)).setdefault("metrics_url", url)
        else:
            unmapped.append(url)
    for key, idc in (record.get("idc_overrides") or {}).items():
        if str(key).isdigit():
            broker(int(key))["idc"] = idc
    doc: dict[str, Any] = {"bootstrap_servers": record.get("bootstrap_servers"), "brokers": entries}
    for key in ("security", "rack_to_idc", "hardware"):
        if record.get(key) is not None:
            doc[key] = record[key]
    if unmapped:
        doc["metrics_urls"] = unmapped
    offsets = record.get("consumer_offsets") or ADMIN_OFFSETS
    if offsets != ADMIN_OFFSETS:
        doc["exporter_urls"] = [offsets]
    return doc


def endpoints_of(name: str, record: Mapping[str, Any]) -> ClusterEndpoints:
    """The cluster's :class:`ClusterEndpoints` (security, metrics endpoints, IDC rule and overrides, hardware)."""
    doc: dict[str, Any] = {"clusters": {name: cluster_document(record)}}
    if record.get("control_url"):
        doc["control_url"] = record["control_url"]
    return parse_endpoints(doc, name)


def _glob_problem(glob: str) -> str | None:
    """Why ``glob`` is not a usable log-dir glob (an unclosed ``[`` matches nothing sensible), or None."""
    i = 0
    while i < len(glob):
        if glob[i] == "[":
            end = glob.find("]", i + 2 if glob[i + 1:i + 2] in ("!", "]") else i + 1)
            if end < 0:
                return f"unclosed '[' at offset {i}"
            i = end
        i += 1
    return None


def _urls(record: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """``(JSON path, value)`` of every URL a record names."""
    for i, b in enumerate(record.get("brokers") or []):
        if not isinstance(b, Mapping):
            continue
        yield f"$.brokers[{i}].metrics_url", b.get("metrics_url")
        for j, m in enumerate(b.get("metrics") or []):
            yield f"$.brokers[{i}].metrics[{j}]", m.get("url") if isinstance(m, Mapping) else m
    for key, url in (record.get("metrics_urls") or {}).items():
        yield f"$.metrics_urls.{key}", url
    yield "$.consumer_offsets", record.get("consumer_offsets")
    yield "$.control_url", record.get("control_url")


def _has_password(url: str) -> bool:
    try:
        return urlsplit(url).password is not None
    except ValueError:  # not a URL at all: the parser says so
        return False


def check_registration(name: str, record: Mapping[str, Any]) -> ClusterEndpoints:
    """The endpoints of ``record`` if it is valid; :class:`EndpointsError` naming the first problem by its JSON
    path in ``record`` (``$.security: ...``, ``$.brokers[0].metrics[1].url: ...``, ``$.hardware.rules[0]...``)."""
    for at, url in _urls(record):
        if isinstance(url, str) and _has_password(url):
            raise EndpointsError(f"{at}: a password in the URL is not accepted; give username and password_file")
    prefix = f"$.clusters.{name}"
    try:
        endpoints = endpoints_of(name, record)
    except EndpointsError as exc:
        raise EndpointsError(str(exc).replace(prefix, "$")) from None
    hardware = record.get("hardware")
    rules, at = (hardware.get("rules") or [], "$.hardware.rules") if isinstance(hardware, Mapping) else \
        (hardware or [], "$.hardware")
    for i, rule in enumerate(rules):
        glob = rule.get("log_dirs", "*") if isinstance(rule, Mapping) else "*"
        why = _glob_problem(str(glob))
        if why is not None:
            raise EndpointsError(f"{at}[{i}].log_dirs: not a glob: {why}")
    offsets = record.get("consumer_offsets") or ADMIN_OFFSETS
    if offsets != ADMIN_OFFSETS and not str(offsets).startswith(("http://", "https://")):
        raise EndpointsError(f'$.consumer_offsets: "{ADMIN_OFFSETS}" or an http(s):// exporter URL')
    for key in (record.get("idc_overrides") or {}):
        if not str(key).isdigit():
            raise EndpointsError(f"$.idc_overrides.{key}: expected a broker id")
    return endpoints
