"""The Kafka config names and values kafkasim understands: topic defaults, broker keys, throttle extensions.

Goal
    One table of what a simulated broker answers for DescribeConfigs and accepts in (Incremental)AlterConfigs:
    Kafka's topic config defaults, the dynamic broker configs Guardian's levers use (KIP-73 replication
    throttles, KIP-113 log-dir move rate), the read-only broker configs a scenario may set, and the
    partition-level throttle extension's names.

Method
    Plain constants and two parsers of throttle values: ``*.replication.throttled.replicas``
    (``p:b,...`` or ``*``) and the partition-level throttle rates (``p:rate,*:rate``).

Guarantee
    The parsers accept what Kafka accepts for these keys and raise ``ValueError`` on anything else, so the
    model can answer ``INVALID_CONFIG`` before changing a config.

Cost
    O(length of the value) per parse.
"""

from __future__ import annotations

import math

PT_PRODUCE = "guardian.partition.throttle.produce.bytes.per.second"
PT_FETCH = "guardian.partition.throttle.fetch.bytes.per.second"
PT_ENABLE = "guardian.partition.throttle.enable"

TOPIC_CONFIG_DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "segment.bytes": "1073741824",
    "min.insync.replicas": "1",
    "max.message.bytes": "1048588",
    "compression.type": "producer",
    "message.timestamp.type": "CreateTime",
    "segment.ms": "604800000",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    "remote.storage.enable": "false",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
}
BROKER_DYNAMIC_KEYS = {
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
}
BROKER_STATIC_DEFAULTS: dict[str, str] = {
    "num.network.threads": "3",
    "num.io.threads": "8",
    "remote.log.storage.system.enable": "false",
    "auto.create.topics.enable": "false",
}
REPLICA_SELECTOR = "replica.selector.class"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
BROKER_STATIC_KEYS = {REPLICA_SELECTOR}
"""Read-only broker configs a scenario may set per cluster (``broker_configs``: its brokers' server.properties)
or a restart may change (``POST /fault/revive-broker`` with ``configs``); Kafka's default for each is unset.
``replica.selector.class`` is read-only in Kafka too (AlterConfigs answers INVALID_CONFIG): with it unset the
leader never names a preferred read replica (KIP-392), whatever ``client.rack`` a consumer sends."""


def parse_throttled_replicas(value: str) -> set[tuple[int, int]] | None:
    """Parse ``p:b,p:b`` into a set of (partition, broker); ``*`` returns None (= all).

    Raises ValueError on malformed input.
    """
    value = value.strip()
    if value == "*":
        return None
    out: set[tuple[int, int]] = set()
    if not value:
        return out
    for item in value.split(","):
        p, _, b = item.strip().partition(":")
        out.add((int(p), int(b)))
    return out


def parse_partition_rates(value: str) -> dict[int, float]:
    """Parse ``p:rate,*:rate`` (partition-level throttle values); ``-1`` partition key means ``*``."""
    out: dict[int, float] = {}
    if not value.strip():
        return out
    for item in value.split(","):
        p, _, r = item.strip().partition(":")
        rate = float(r)
        if not math.isfinite(rate) or rate < 0:
            raise ValueError(f"bad rate {r!r}")
        out[-1 if p.strip() == "*" else int(p)] = rate
    return out
