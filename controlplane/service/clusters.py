"""The one binding of each registered cluster to its Kafka clients, shared by every loop of the service.

Goal: one client lifecycle per cluster. The observer (collection job), the executor and the throttle
levers of a cluster all use the clients bound here, instead of each translating the cluster record into
clients of its own (before: up to four admin clients per cluster).

Method: :func:`bind_clients` translates a replicated cluster record once (:func:`endpoints_of`:
bootstrap servers, the cluster's Kafka ``security`` settings, every metrics endpoint of every broker,
the rack->IDC rule, IDC overrides and hardware profile, the consumer-offsets source, control URL) into
:class:`ClusterClients`, every client connected with the cluster's security settings: the cluster's
admin client (:class:`~kafkaio.admin.KafkaAdmin`, used by the executor and, through
:class:`~kafkaio.throttle_writer.ThrottleWriter`, by throttle protection), the observer's bulk reader
(:class:`~kafkaio.source.KafkaSource`), both on the one :class:`~kafkaio.connection.KafkaConnection`,
and the audit-topic reader. :class:`ClusterBindings` keeps one per cluster, rebinds when the record's
endpoints change and closes what was removed.

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

from controlplane.state.registration import endpoints_of as registered_endpoints
from kafkaio.admin import KafkaAdmin
from kafkaio.audit import AUDIT_TOPIC, AuditShares
from kafkaio.connection import KafkaConnection
from kafkaio.endpoints import ClusterEndpoints
from kafkaio.source import KafkaSource, KafkaSourceOptions
from kafkaio.throttle_writer import ThrottleWriter

ADMIN_CLIENT_ID = f"guardian-service-{socket.gethostname()}-{os.getpid()}"
"""This node's Kafka client id: distinct per process, so brokers' logs and quotas tell executors apart."""


def endpoints_of(name: str, cluster: Mapping[str, Any]) -> ClusterEndpoints:
    """The cluster's endpoints from its registered record: bootstrap servers, security, every metrics endpoint
    of every broker, the rack->IDC rule and IDC overrides, the hardware profile, the consumer-offsets source
    (:func:`controlplane.state.registration.endpoints_of`, the one reading of a record)."""
    return registered_endpoints(name, cluster)


def has_broker_metrics(endpoints: ClusterEndpoints) -> bool:
    """True when some broker metrics endpoint is declared (its disks can be observed)."""
    return bool(endpoints.unmapped_metrics_urls) or any(b.metrics_endpoints for b in endpoints.brokers)


@dataclass
class ClusterClients:
    """Everything that talks to one cluster, bound once from its record."""

    endpoints: ClusterEndpoints
    admin: KafkaAdmin
    """The cluster's admin client: executor reads and writes, throttle levers."""
    source: KafkaSource
    """The observer's bulk reader (metadata cache, log dirs, configs, quotas of every broker)."""
    levers: ThrottleWriter
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
    return ClusterClients(endpoints, admin, source, ThrottleWriter(admin),
                          AuditShares(endpoints.bootstrap_servers, audit_topic, security=endpoints.security),
                          connection)


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
