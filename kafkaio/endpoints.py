"""Where a cluster's data comes from: bootstrap servers and metrics URLs (endpoints documents)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class EndpointsError(ValueError):
    """An endpoints file or option is malformed; the message says where."""


@dataclass(frozen=True)
class BrokerInfo:
    """Static facts about a broker the metadata does not carry (IDC, pool) and its metrics URL."""

    id: int
    metrics_url: str | None = None
    host: str | None = None
    port: int | None = None
    idc: str | None = None
    rack: str | None = None
    pool: str | None = None


@dataclass(frozen=True)
class ClusterEndpoints:
    """One cluster's sources: bootstrap servers, per-broker metrics URLs, extra exporter URLs.

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

    @property
    def metrics_urls(self) -> list[str]:
        """Every URL scraped in a round."""
        urls = [b.metrics_url for b in self.brokers if b.metrics_url]
        return list(dict.fromkeys([*urls, *self.unmapped_metrics_urls, *self.exporter_urls]))

    def url_to_broker(self) -> dict[str, int]:
        """Known metrics URL -> broker id."""
        return {b.metrics_url: b.id for b in self.brokers if b.metrics_url}


def parse_endpoints(doc: Any, cluster: str) -> ClusterEndpoints:
    """Read one cluster out of a ``kafkasim.endpoints/v1`` document (as ``guardian sim up`` writes it)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("clusters"), dict):
        raise EndpointsError("$.clusters: expected an object of clusters")
    clusters = doc["clusters"]
    if cluster not in clusters:
        raise EndpointsError(f"$.clusters: no cluster {cluster!r} (known: {', '.join(sorted(clusters))})")
    c = clusters[cluster]
    at = f"$.clusters.{cluster}"
    if not isinstance(c, dict) or not isinstance(c.get("bootstrap_servers"), str) or not c["bootstrap_servers"]:
        raise EndpointsError(f"{at}.bootstrap_servers: required string")
    brokers: list[BrokerInfo] = []
    for i, b in enumerate(c.get("brokers") or []):
        if not isinstance(b, dict) or not isinstance(b.get("id"), int):
            raise EndpointsError(f"{at}.brokers[{i}].id: required integer")
        brokers.append(BrokerInfo(id=b["id"], metrics_url=b.get("metrics_url"), host=b.get("host"),
                                  port=b.get("port"), idc=b.get("idc"), rack=b.get("rack"), pool=b.get("pool")))
    mapped = {b.metrics_url for b in brokers}
    unmapped = tuple(u for u in (c.get("metrics_urls") or []) if isinstance(u, str) and u not in mapped)
    exporters = tuple(u for u in (c.get("exporter_urls") or []) if isinstance(u, str))
    return ClusterEndpoints(cluster=cluster, bootstrap_servers=c["bootstrap_servers"], brokers=tuple(brokers),
                            unmapped_metrics_urls=unmapped, exporter_urls=exporters,
                            control_url=doc.get("control_url"))


def load_endpoints_file(path: Path, cluster: str) -> ClusterEndpoints:
    """Read ``path`` (JSON) and pick ``cluster``; :class:`EndpointsError` on any problem."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise EndpointsError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise EndpointsError(f"{path}: not valid JSON: {exc}") from None
    return parse_endpoints(doc, cluster)


def endpoints_from_options(cluster: str, bootstrap_servers: str, metrics_urls: list[str],
                           exporter_urls: list[str] | None = None) -> ClusterEndpoints:
    """Endpoints for a real cluster from CLI options; a metrics URL may be written ``ID=URL``."""
    brokers: list[BrokerInfo] = []
    unmapped: list[str] = []
    for item in metrics_urls:
        head, sep, tail = item.partition("=")
        if sep and head.strip().isdigit():
            brokers.append(BrokerInfo(id=int(head), metrics_url=tail.strip()))
        elif item.startswith("http://"):
            unmapped.append(item)
        else:
            raise EndpointsError(f"--metrics-url {item!r}: expected http://host:port/metrics or ID=URL")
    if not bootstrap_servers:
        raise EndpointsError("--bootstrap-servers is required")
    return ClusterEndpoints(cluster=cluster, bootstrap_servers=bootstrap_servers, brokers=tuple(brokers),
                            unmapped_metrics_urls=tuple(unmapped), exporter_urls=tuple(exporter_urls or ()))
