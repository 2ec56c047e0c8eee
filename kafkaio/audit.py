"""Live per-partition client shares from the audit topic (who fetches and produces how much, right now).

Goal: the per-client split of each partition's traffic that throttle protection needs to pick a client
quota, read live from the audit topic (``__guardian_audit``: one JSON record per client x partition x
interval, as brokers' audit reporters — and kafkasim — write them).

Method: one assigned :class:`kafka.KafkaConsumer` (no group, nothing committed), connected with the
cluster's security settings (:mod:`kafkaio.security`, the same as its admin connection; secrets
resolved when the consumer is created), reads the topic from the earliest offset, then only what is
new each :meth:`AuditShares.poll`; per ``(kind, topic, partition)`` only the records of the newest
interval are kept, summed per client id, as bytes/s (``bytes / interval_s``). Malformed records are
skipped.

Guarantee: plain data out (``(kind, topic, partition) -> {client_id: bytes/s}``); the reader never
raises on a bad record; :meth:`AuditShares.close` releases the consumer.
Cost: one fetch of at most 50,000 records per poll; memory O(partitions x clients of one interval).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kafkaio.security import PLAINTEXT, SecuritySettings

log = logging.getLogger(__name__)

AUDIT_TOPIC = "__guardian_audit"
ShareKey = tuple[str, str, int]
"""``(kind, topic, partition)``; kind is ``fetch`` or ``produce``."""
PlacedKey = tuple[str, str, int]
"""``(client_id, client_idc, broker)`` of one audited flow (broker -1 when the record names none)."""


class AuditShares:
    """Latest-interval client shares of every audited partition of one cluster."""

    def __init__(self, bootstrap_servers: str, topic: str = AUDIT_TOPIC,
                 client_id: str = "guardian-throttle-audit", security: SecuritySettings = PLAINTEXT) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security
        self.topic = topic
        self.client_id = client_id
        self._consumer: Any = None
        self._latest: dict[ShareKey, tuple[str, dict[str, float]]] = {}
        self._placed: dict[ShareKey, tuple[str, dict[PlacedKey, float]]] = {}

    def close(self) -> None:
        """Close the consumer (the next poll reconnects and re-reads from the earliest offset)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # closing is best effort
                log.debug("closing the audit consumer failed", exc_info=True)

    def poll(self) -> dict[ShareKey, dict[str, float]]:
        """Read what is new and return every partition's client shares of its newest interval."""
        from kafka import KafkaConsumer, TopicPartition

        if self._consumer is None:
            kwargs = self.security.client_kwargs()
            try:
                self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap_servers, client_id=self.client_id,
                                               group_id=None, enable_auto_commit=False,
                                               auto_offset_reset="earliest", consumer_timeout_ms=500, **kwargs)
            finally:
                kwargs.clear()
            parts = self._consumer.partitions_for_topic(self.topic) or set()
            self._consumer.assign([TopicPartition(self.topic, p) for p in sorted(parts)])
        batches = self._consumer.poll(timeout_ms=100, max_records=50_000)
        for records in batches.values():
            for rec in records:
                self._add(rec.value)
        return {key: dict(clients) for key, (_, clients) in self._latest.items()}

    def _add(self, raw: Any) -> None:
        try:
            a = json.loads(raw)
            key = (str(a["kind"]), str(a["topic"]), int(a["partition"]))
            ts, interval = str(a["ts"]), float(a.get("interval_s") or 60.0)
            rate = float(a["bytes"]) / interval
        except (ValueError, KeyError, TypeError):
            return
        old = self._latest.get(key)
        if old is None or old[0] < ts:
            old = self._latest[key] = (ts, {})
        if old[0] == ts:
            client = str(a.get("client_id", ""))
            old[1][client] = old[1].get(client, 0.0) + rate
        placed = self._placed.get(key)
        if placed is None or placed[0] < ts:
            placed = self._placed[key] = (ts, {})
        if placed[0] == ts:
            try:
                broker = int(a.get("broker", -1))
            except (TypeError, ValueError):
                broker = -1
            where = (str(a.get("client_id", "")), str(a.get("client_idc") or ""), broker)
            placed[1][where] = placed[1].get(where, 0.0) + rate

    def placed(self) -> dict[ShareKey, dict[PlacedKey, float]]:
        """The newest interval of every audited partition by client, client IDC and serving broker (bytes/s),
        as of the last :meth:`poll` (leased-line accounting: where each client's bytes go)."""
        return {key: dict(rows) for key, (_, rows) in self._placed.items()}
