"""A registration is checked against what it names: one connection to the cluster, one scrape of each endpoint.

Goal: a cluster registered with a wrong Kafka password, a wrong metrics password, a closed port or a typo in
an address is refused at once (HTTP 400 naming the failure and the JSON path it comes from) instead of being
accepted and failing quietly every round.

Method: :func:`probe_registration` reads the record with the one endpoints parser, then, side by side: opens
the cluster's Kafka client once with its security settings (bootstrap, SASL handshake, Metadata:
:class:`~kafkaio.connection.KafkaConnection`, closed after) and scrapes every declared metrics endpoint once
with its CA and credentials (:func:`collectors.scrape.scrape_all`). A refused login names ``$.security``; an
unreachable bootstrap ``$.bootstrap_servers``; a failed endpoint the path of its declaration
(``$.brokers[2].metrics[0]``, ``$.metrics_urls.<id>``). ``POST /api/v1/clusters?probe=false`` skips it (a
cluster registered before it is reachable).

Guarantee: returns within about ``timeout_s`` (both probes run at once, each bounded); never raises for a
cluster that cannot be reached (that is a problem in the list); no message names a secret (the Kafka edge's
and the scraper's errors never do). Cost: one Kafka bootstrap plus one GET per metrics endpoint.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from collectors.scrape import scrape_all
from controlplane.state.registration import endpoints_of
from kafkaio.connection import KafkaConnection
from kafkaio.endpoints import ClusterEndpoints, MetricsEndpoint
from kafkaio.errors import KafkaAuthError, KafkaUnreachable

Problem = dict[str, str]
PROBE_CLIENT_ID = f"guardian-probe-{socket.gethostname()}-{os.getpid()}"


def probe_registration(name: str, record: Mapping[str, Any], timeout_s: float = 5.0) -> list[Problem]:
    """Problems found connecting to ``record``'s cluster and scraping its metrics endpoints (empty: all
    answered); each ``{"path": JSON path, "message": what failed}``."""
    endpoints = endpoints_of(name, record)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="probe") as pool:
        kafka = pool.submit(probe_kafka, endpoints, timeout_s)
        metrics = pool.submit(probe_metrics, record, endpoints, timeout_s)
        return kafka.result() + metrics.result()


def probe_kafka(endpoints: ClusterEndpoints, timeout_s: float) -> list[Problem]:
    """Connect once (bootstrap, login, Metadata) with the cluster's security settings."""
    ms = int(timeout_s * 1000)
    conn = KafkaConnection.for_endpoints(endpoints, client_id=PROBE_CLIENT_ID, request_timeout_ms=ms,
                                         bootstrap_timeout_ms=ms)
    try:
        conn.client()
    except KafkaAuthError as exc:
        return [{"path": "$.security", "message": f"Kafka refused the login: {exc}"}]
    except KafkaUnreachable as exc:
        return [{"path": "$.bootstrap_servers", "message": str(exc)}]
    except Exception as exc:
        return [{"path": "$.bootstrap_servers",
                 "message": f"cannot connect to {endpoints.bootstrap_servers}: {type(exc).__name__}: {exc}"}]
    finally:
        conn.close()
    return []


def declared_paths(record: Mapping[str, Any]) -> dict[str, str]:
    """Metrics URL -> the JSON path of its (first) declaration in the registration record."""
    out: dict[str, str] = {}
    for i, broker in enumerate(record.get("brokers") or []):
        if broker.get("metrics_url"):
            out.setdefault(str(broker["metrics_url"]), f"$.brokers[{i}].metrics_url")
        for j, m in enumerate(broker.get("metrics") or []):
            url = m if isinstance(m, str) else m.get("url")
            if url:
                out.setdefault(str(url), f"$.brokers[{i}].metrics[{j}]")
    for key, url in (record.get("metrics_urls") or {}).items():
        out.setdefault(str(url), f"$.metrics_urls.{key}")
    return out


def probe_metrics(record: Mapping[str, Any], endpoints: ClusterEndpoints, timeout_s: float) -> list[Problem]:
    """Scrape every declared metrics endpoint once (its CA, its credentials)."""
    targets: list[MetricsEndpoint | str] = [ep for b in endpoints.brokers for ep in b.metrics_endpoints]
    targets += endpoints.unmapped_metrics_urls
    if not targets:
        return []
    failed = scrape_all(targets, timeout_s=timeout_s).failed
    paths = declared_paths(record)
    problems = []
    for url, why in sorted(failed.items()):
        refused = "HTTP 401" in why or "HTTP 403" in why
        message = (f"metrics endpoint {url} refused Guardian's credentials: {why}" if refused
                   else f"metrics endpoint {url} failed: {why}")
        problems.append({"path": paths.get(url, "$.brokers"), "message": message})
    return problems
