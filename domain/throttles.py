"""Throttle levers, who owns them, and the Kafka config names behind them, written once.

Goal: one vocabulary for every module that decides, records or writes a throttle. Lever kinds are the ``kind`` of
a throttle in the replicated state (:class:`LeverKind`); a :class:`Lever` is one wish (kind, target, rate); the
config names are Kafka's (KIP-73 replication throttles, KIP-113 intra-broker move rate) plus Guardian's
partition-level throttle extension keys.

Method: two owners move levers on a cluster — throttle protection (and the API's manual throttles, applied by
its reconcile) and the executor (its migration rates). :func:`lever_owner` says which one writes a lever kind
now; :func:`migration_rate` is the one rule that merges their wishes on a migration rate: **protection is a
ceiling, the executor's rate runs under it** (never below the floor its copies need to ever finish).

Guarantee: pure (no I/O, no clock); the enum values are the strings already stored in the replicated state
(``LeverKind`` is a ``StrEnum``, so a stored ``"migration_rate"`` equals :attr:`LeverKind.MIGRATION`).
Cost: constant.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class LeverKind(enum.StrEnum):
    """The kinds of protection and manual levers (the ``kind`` of a throttle in the replicated state)."""

    PARTITION_FETCH = "partition_fetch"
    PARTITION_PRODUCE = "partition_produce"
    CONSUMER_QUOTA = "consumer_quota"
    PRODUCER_QUOTA = "producer_quota"
    FOLLOWER = "follower_replication"
    MIGRATION = "migration_rate"
    INTRA_BROKER = "intra_broker_rate"


# the kinds by their short names (every caller that predates the enum uses these)
PARTITION_FETCH = LeverKind.PARTITION_FETCH
PARTITION_PRODUCE = LeverKind.PARTITION_PRODUCE
CONSUMER_QUOTA = LeverKind.CONSUMER_QUOTA
PRODUCER_QUOTA = LeverKind.PRODUCER_QUOTA
FOLLOWER = LeverKind.FOLLOWER
MIGRATION = LeverKind.MIGRATION
INTRA_BROKER = LeverKind.INTRA_BROKER
LEVER_KINDS: tuple[LeverKind, ...] = tuple(LeverKind)


TARGET_FIELDS: Mapping[str, tuple[str, ...]] = {
    LeverKind.PARTITION_FETCH: ("topic", "partition"),
    LeverKind.PARTITION_PRODUCE: ("topic", "partition"),
    LeverKind.CONSUMER_QUOTA: ("client_id",),
    LeverKind.PRODUCER_QUOTA: ("client_id",),
    LeverKind.FOLLOWER: ("broker", "topic", "partition"),
    LeverKind.MIGRATION: ("broker",),
    LeverKind.INTRA_BROKER: ("broker",),
}
"""The target fields each lever kind needs (a follower lever: the catching-up replica's broker and partition)."""


@dataclass(frozen=True, slots=True)
class Lever:
    """One wish on one lever: ``kind`` on ``target`` (broker, topic/partition or client id, by kind) at ``rate``
    bytes/s; ``rate`` None means the lever is to be removed."""

    kind: LeverKind
    target: Mapping[str, Any] = field(default_factory=dict)
    rate: float | None = None

    @classmethod
    def of(cls, kind: str, target: Mapping[str, Any], rate: float | None = None) -> Lever:
        """A lever from a stored kind string (raises ``ValueError`` on an unknown kind)."""
        return cls(LeverKind(kind), dict(target), rate)


class Owner(enum.StrEnum):
    """Who writes a lever's configs on the cluster now."""

    PROTECTION = "protection"
    """Throttle protection (and the API's manual throttles, through its reconcile)."""
    EXECUTOR = "executor"
    """A running execution: it recomputes its migration rates every pass."""


# KIP-73 replication throttles (broker rates, topic throttled-replica lists "partition:broker,...")
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
# KIP-113 intra-broker (log dir to log dir) copy rate
ALTER_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
# Guardian's partition-level throttle extension ("partition:rate,..." topic configs; a broker flag marks support)
PT_FETCH = "guardian.partition.throttle.fetch.bytes.per.second"
PT_PRODUCE = "guardian.partition.throttle.produce.bytes.per.second"
PT_ENABLE = "guardian.partition.throttle.enable"

BROKER_THROTTLE_KEYS = (LEADER_RATE, FOLLOWER_RATE, ALTER_DIRS_RATE)
TOPIC_THROTTLE_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS, PT_PRODUCE, PT_FETCH)
CAPABILITY_KEYS = (PT_ENABLE,)

MIGRATION_CEILINGS: Mapping[str, str] = {LeverKind.MIGRATION: FOLLOWER_RATE,
                                        LeverKind.INTRA_BROKER: ALTER_DIRS_RATE}
"""The lever kinds that cap a running execution's migration rate, and the broker config each one caps."""


def lever_owner(kind: str, execution_running: bool) -> Owner:
    """Who writes a lever of ``kind`` while an execution is (or is not) running on the cluster.

    The migration-rate kinds (:data:`MIGRATION_CEILINGS`) belong to the executor while an execution runs: it owns
    the broker's follower / intra-broker rates then, and the protection's lever is only recorded, as a ceiling
    the executor reads (:func:`migration_rate`). Every other kind, and every kind when no execution runs, is the
    protection's."""
    if execution_running and kind in MIGRATION_CEILINGS:
        return Owner.EXECUTOR
    return Owner.PROTECTION


def migration_rate(wanted: float, ceiling: float | None, floor: float = 0.0) -> float:
    """The one rule merging the two owners' wishes on a migration rate: protection is a ceiling and the
    executor's ``wanted`` rate runs under it — except that no ceiling pushes it below ``floor``, the rate the
    copies need to ever finish (their catch-up and heal floors: a copy slower than its partition's writes never
    ends, and a heal is never slowed below its share). Under a ceiling, the result is never below ``floor``."""
    if ceiling is None:
        return wanted
    return max(min(wanted, ceiling), floor)
