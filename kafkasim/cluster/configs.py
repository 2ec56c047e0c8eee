"""The Kafka config names and values kafkasim understands: topic defaults, broker keys, throttle extensions.

Goal
    One table of what a simulated broker answers for DescribeConfigs and accepts in (Incremental)AlterConfigs:
    Kafka's topic config defaults, the dynamic broker configs Guardian's levers use (KIP-73 replication
    throttles, KIP-113 log-dir move rate) and KIP-956's remote copy quota, the read-only broker configs a
    scenario may set, and the partition-level throttle extension's names.

Method
    Plain constants, two parsers of throttle values: ``*.replication.throttled.replicas``
    (``p:b,...`` or ``*``) and the partition-level throttle rates (``p:rate,*:rate``), and the check and
    reading of the read-only broker configs a scenario may set.

Guarantee
    The parsers and :func:`check_static_config` accept what Kafka accepts for these keys and raise
    ``ValueError`` on anything else, so the model can answer ``INVALID_CONFIG`` (a scenario its error) before
    changing a config.

Cost
    O(length of the value) per parse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

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
REMOTE_COPY_QUOTA = "remote.log.manager.copy.max.bytes.per.second"
"""KIP-956: a broker's byte rate for copies to remote storage (unset: Kafka's default, Long.MAX_VALUE)."""
BROKER_DYNAMIC_KEYS = {
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    REMOTE_COPY_QUOTA,
}
BROKER_STATIC_DEFAULTS: dict[str, str] = {  # read-only configs only reported (DescribeConfigs), never set
    "num.network.threads": "3",
    "num.io.threads": "8",
    "remote.log.storage.system.enable": "false",
    "auto.create.topics.enable": "false",
}
REPLICA_SELECTOR = "replica.selector.class"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RETENTION_CHECK = "log.retention.check.interval.ms"
REMOTE_LOG_TASK = "remote.log.manager.task.interval.ms"
SETTABLE_STATIC_DEFAULTS: dict[str, str | None] = {REPLICA_SELECTOR: None, RETENTION_CHECK: "300000",
                                                   REMOTE_LOG_TASK: "30000"}
"""The read-only broker configs a scenario or a revive may set, each with Kafka's default (None: unset)."""
BROKER_STATIC_KEYS = set(SETTABLE_STATIC_DEFAULTS)
"""Read-only broker configs a scenario may set per cluster (``broker_configs``: its brokers' server.properties)
or a restart may change (``POST /fault/revive-broker`` with ``configs``); each is read-only in Kafka too
(AlterConfigs answers INVALID_CONFIG). ``replica.selector.class`` (unset by default): with it unset the leader
never names a preferred read replica (KIP-392), whatever ``client.rack`` a consumer sends.
``log.retention.check.interval.ms`` (default 300000, at least 1): how often a broker's retention deletes what
``retention.ms`` / ``retention.bytes`` allow, and for tiered topics what ``local.retention.ms/bytes`` allow of
the local log (:mod:`kafkasim.cluster.retention`). ``remote.log.manager.task.interval.ms`` (default 30000, at least 1):
how often the remote log manager's task of a tiered partition's leader copies closed segments and deletes remote
segments past ``retention.ms/bytes`` (KIP-405; one schedule per partition: :mod:`kafkasim.tiering.rlm_tasks`)."""
INTERVAL_KEYS = (RETENTION_CHECK, REMOTE_LOG_TASK)
"""Read-only broker configs that are an interval in milliseconds (an integer >= 1)."""


def check_static_config(key: str, value: str) -> None:
    """Raise ``ValueError`` when ``value`` is not one Kafka accepts for read-only broker config ``key``."""
    if key not in BROKER_STATIC_KEYS:
        raise ValueError(f"unknown read-only broker config {key!r}; known: {sorted(BROKER_STATIC_KEYS)}")
    if key in INTERVAL_KEYS:
        try:
            ok = int(value) >= 1
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{key} must be an integer >= 1 (ms), got {value!r}")


def interval_s(static_configs: Mapping[str, str], key: str) -> float:
    """A broker's interval ``key`` (one of :data:`INTERVAL_KEYS`, in ms) in seconds: its own, else Kafka's default."""
    return int(static_configs.get(key) or str(SETTABLE_STATIC_DEFAULTS[key])) / 1000.0


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
