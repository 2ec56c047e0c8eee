"""The one binding of each registered cluster to its Kafka clients, shared by every loop of the service.

Goal: one client lifecycle per cluster. The observer (collection job), the executor and the throttle
levers of a cluster all use the clients bound here, instead of each translating the cluster record into
clients of its own (before: up to four admin clients per cluster).

Method: :func:`bind_clients` translates a replicated cluster record once — bootstrap servers, metrics
URLs (broker id -> URL; other keys are scraped and mapped by the payload's ``broker_id`` label), control
URL — into :class:`ClusterClients`: the cluster's admin client (:class:`~kafkaio.admin.KafkaAdmin`, used
by the executor and, through :class:`~kafkaio.levers.KafkaLevers`, by throttle protection), the
observer's bulk reader (:class:`~kafkaio.source.KafkaSource`; the Kafka edge is merging it into the
admin client's lifecycle), and the audit-topic reader. :class:`ClusterBindings` keeps one per cluster,
rebinds when the record's connection facts change and closes what was removed.

Guarantee: for a given record, every caller gets the same :class:`ClusterClients` object. Clients
connect lazily (on first use) and reconnect after a failure, so binding never blocks or raises on an
unreachable cluster. Cost: O(brokers) per bind; nothing per call.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkaio.admin import KafkaAdmin
from kafkaio.audit import AUDIT_TOPIC, AuditShares
from kafkaio.connection import KafkaConnection
from kafkaio.endpoints import BrokerInfo, ClusterEndpoints
from kafkaio.levers import KafkaLevers
from kafkaio.source import KafkaSource, KafkaSourceOptions

ADMIN_CLIENT_ID = f"guardian-service-{socket.gethostname()}-{os.getpid()}"
"""This node's Kafka client id: distinct per process, so brokers' logs and quotas tell executors apart."""


def endpoints_of(name: str, cluster: Mapping[str, Any]) -> ClusterEndpoints:
    """Collector endpoints from a registered cluster record."""
    urls: Mapping[str, str] = cluster.get("metrics_urls") or {}
    brokers = tuple(BrokerInfo(id=int(k), metrics_url=u) for k, u in sorted(urls.items()) if k.isdigit())
    unmapped = tuple(u for k, u in sorted(urls.items()) if not k.isdigit())
    return ClusterEndpoints(cluster=name, bootstrap_servers=",".join(cluster["bootstrap_servers"]),
                            brokers=brokers, unmapped_metrics_urls=unmapped, control_url=cluster.get("control_url"))


@dataclass
class ClusterClients:
    """Everything that talks to one cluster, bound once from its record."""

    endpoints: ClusterEndpoints
    admin: KafkaAdmin
    """The cluster's admin client: executor reads and writes, throttle levers."""
    source: KafkaSource
    """The observer's bulk reader (metadata cache, log dirs, configs, quotas of every broker)."""
    levers: KafkaLevers
    audit: AuditShares
    connection: KafkaConnection
    """The one Kafka client of the cluster, shared by ``admin``, ``source`` and ``levers``."""
    _closed: bool = field(default=False, repr=False)

    @property
    def name(self) -> str:
        """The cluster's name."""
        return self.endpoints.cluster

    def close(self) -> None:
        """Close every client (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.admin.close()
        self.source.close()
        self.connection.close()
        self.audit.close()


def bind_clients(name: str, record: Mapping[str, Any], timeout_s: float = 5.0,
                 audit_topic: str = AUDIT_TOPIC) -> ClusterClients:
    """The clients of a registered cluster; requests give up after ``timeout_s`` (an unreachable cluster
    must not hold up a pass for the admin client's 30 s default)."""
    endpoints = endpoints_of(name, record)
    ms = int(timeout_s * 1000)
    connection = KafkaConnection.for_endpoints(endpoints, client_id=ADMIN_CLIENT_ID, request_timeout_ms=ms,
                                               bootstrap_timeout_ms=ms)
    admin = KafkaAdmin(connection)
    source = KafkaSource(connection, KafkaSourceOptions(request_timeout_ms=ms, bootstrap_timeout_ms=ms))
    return ClusterClients(endpoints, admin, source, KafkaLevers(admin),
                          AuditShares(endpoints.bootstrap_servers, audit_topic), connection)


class ClusterBindings:
    """cluster name -> its :class:`ClusterClients` (thread-safe; rebinds when the record's endpoints change)."""

    def __init__(self, timeout_s: float = 5.0, audit_topic: str = AUDIT_TOPIC) -> None:
        self.timeout_s = timeout_s
        self.audit_topic = audit_topic
        self._lock = threading.Lock()
        self._bound: dict[str, ClusterClients] = {}

    def get(self, name: str, record: Mapping[str, Any]) -> ClusterClients:
        """The clients of ``name`` as ``record`` describes it (the same object while the record's endpoints
        stay the same)."""
        endpoints = endpoints_of(name, record)
        with self._lock:
            held = self._bound.get(name)
            if held is not None and held.endpoints == endpoints:
                return held
            if held is not None:
                held.close()
            held = self._bound[name] = bind_clients(name, record, self.timeout_s, self.audit_topic)
            return held

    def bound(self, name: str) -> ClusterClients | None:
        """The clients of ``name`` if bound (no binding is made)."""
        with self._lock:
            return self._bound.get(name)

    def retain(self, names: Iterable[str]) -> None:
        """Close and forget every cluster not in ``names`` (it was removed)."""
        keep = set(names)
        with self._lock:
            for gone in sorted(set(self._bound) - keep):
                self._bound.pop(gone).close()

    def close(self) -> None:
        """Close every cluster's clients."""
        with self._lock:
            for clients in self._bound.values():
                clients.close()
            self._bound.clear()
