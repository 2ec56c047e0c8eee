"""The replicated policies overlaid on a snapshot: maintenance flags, pool membership, IDC placement.

The service's collection job and the executor's submission check both see a cluster through this one
function, so a plan is never executed against constraints the planner would not have seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from domain.model import BrokerState, ClusterSnapshot


def has_policies(cluster: Mapping[str, Any], maintenance: Mapping[str, Any]) -> bool:
    """True when overlaying ``cluster``'s policies and ``maintenance`` flags could change a snapshot."""
    placement = cluster.get("placement") or {}
    return bool(maintenance or cluster.get("pools") or placement.get("default") or placement.get("topics"))


def apply_policies(snapshot: ClusterSnapshot, cluster: Mapping[str, Any],
                   maintenance: Mapping[str, Any]) -> ClusterSnapshot:
    """The snapshot with the replicated policies in force: alive brokers flagged for maintenance become
    ``maintenance``, pool assignments override the brokers' labels, and the cluster's IDC placement
    (default and per topic) overrides what the collector saw. Pure; O(brokers + topics)."""
    pool_of = {b: pool for pool, brokers in (cluster.get("pools") or {}).items() for b in brokers}
    brokers = tuple(
        replace(b, pool=pool_of.get(b.id, b.pool),
                state=BrokerState.MAINTENANCE if str(b.id) in maintenance and b.state is BrokerState.ALIVE
                else b.state)
        for b in snapshot.brokers)
    placement = cluster.get("placement") or {}
    per_topic: Mapping[str, Mapping[str, int]] = placement.get("topics") or {}
    topics = tuple(replace(t, placement=dict(per_topic[t.name])) if t.name in per_topic else t
                   for t in snapshot.topics)
    default = placement.get("default")
    return replace(snapshot, brokers=brokers, topics=topics,
                   default_placement=dict(default) if default else snapshot.default_placement)
