"""Handlers of the cluster aggregate: registration, declared topology, labels, removal, auto-rebalance and
self-healing settings, IDC placement, pools and maintenance flags (``state["clusters"]``,
``state["maintenance"]``, ``state["self_healing"]``), and the action-log-only ``topic.created``.

Guarantee: every precondition is checked before the state changes; the stored shapes are those of
:class:`domain.cluster_record.ClusterRecord`. Cost: O(size of the cluster record) per command.
"""

from __future__ import annotations

import copy

from controlplane.state.commands import (
    AutoRebalance,
    ClusterLabels,
    ClusterRegister,
    ClusterRemove,
    ClusterTopology,
    MaintenanceSet,
    PlacementSet,
    PoolAssign,
    SelfHealingSet,
    TopicCreated,
)
from controlplane.state.handlers.registry import Ledger, handles
from controlplane.state.registration import TOPOLOGY_KEYS
from domain.plan_record import LIVE_PLAN_STATUSES
from raft.protocol import CommandRejected, JsonDict


@handles(ClusterRegister)
def register(led: Ledger, cmd: ClusterRegister) -> JsonDict:
    old = led.state["clusters"].get(cmd.name, {})
    led.state["clusters"][cmd.name] = {
        "name": cmd.name, "bootstrap_servers": list(cmd.bootstrap_servers), "metrics_urls": dict(cmd.metrics_urls),
        "control_url": cmd.control_url, "capabilities": dict(cmd.capabilities),
        "security": copy.deepcopy(cmd.security), "brokers": copy.deepcopy(cmd.brokers),
        "rack_to_idc": copy.deepcopy(cmd.rack_to_idc), "idc_overrides": dict(cmd.idc_overrides),
        "hardware": copy.deepcopy(cmd.hardware), "consumer_offsets": cmd.consumer_offsets,
        "placement": old.get("placement", {"default": None, "topics": {}}), "pools": old.get("pools", {}),
        "auto_rebalance": old.get("auto_rebalance", {"enabled": False}),
        "registered_at": old.get("registered_at", cmd.meta.at.isoformat()),
        **({"labels": old["labels"]} if "labels" in old else {}),
    }
    security = cmd.security or {}
    return {"cluster": cmd.name, "created": not old, "security": security.get("protocol", "PLAINTEXT"),
            **({"sasl_mechanism": security["sasl_mechanism"], "username": security.get("username")}
               if security.get("sasl_mechanism") else {})}


@handles(ClusterTopology)
def topology(led: Ledger, cmd: ClusterTopology) -> JsonDict:
    cluster = led.cluster(cmd.name)
    declared = cmd.model_dump(mode="json", include=set(TOPOLOGY_KEYS))
    cluster.update(copy.deepcopy(declared))
    led.state["clusters"][cmd.name] = cluster
    return {"cluster": cmd.name, **declared}


@handles(ClusterLabels)
def labels(led: Ledger, cmd: ClusterLabels) -> JsonDict:
    cluster = led.cluster(cmd.name)
    cluster["labels"] = dict(sorted(cmd.labels.items()))
    led.state["clusters"][cmd.name] = cluster
    return {"name": cmd.name, "labels": cluster["labels"]}


@handles(ClusterRemove)
def remove(led: Ledger, cmd: ClusterRemove) -> JsonDict:
    led.cluster(cmd.name)
    busy = led.active_executions(cmd.name)
    if busy:
        raise CommandRejected(f"cluster {cmd.name!r} has running executions {busy}; stop them first")
    live = sorted(p["id"] for p in led.state["plans"].values()
                  if p["cluster"] == cmd.name and p["status"] in LIVE_PLAN_STATUSES)
    if live:
        raise CommandRejected(f"cluster {cmd.name!r} has approved or executing plans {live[:10]}; "
                              "execute, stop or let them finish first")
    del led.state["clusters"][cmd.name]
    led.state["throttles"].pop(cmd.name, None)
    led.state["maintenance"].pop(cmd.name, None)
    return {"cluster": cmd.name, "removed": True}


@handles(AutoRebalance)
def auto_rebalance(led: Ledger, cmd: AutoRebalance) -> JsonDict:
    cluster = led.cluster(cmd.name)
    cluster["auto_rebalance"] = {"enabled": cmd.enabled, "window_cron": cmd.window_cron,
                                 "window_minutes": cmd.window_minutes, "threshold": cmd.threshold,
                                 "max_partitions": cmd.max_partitions, "load_basis": cmd.load_basis}
    led.state["clusters"][cmd.name] = cluster
    return {"cluster": cmd.name, "auto_rebalance": cluster["auto_rebalance"]}


@handles(SelfHealingSet)
def self_healing(led: Ledger, cmd: SelfHealingSet) -> JsonDict:
    """Per-cluster self-healing settings, kept in ``state["self_healing"]`` (created on first use, so states
    from before it restore unchanged)."""
    led.cluster(cmd.name)
    settings = {"enabled": cmd.enabled, "grace_s": cmd.grace_s, "max_concurrent_fixes": cmd.max_concurrent_fixes,
                "mass_failure_share": cmd.mass_failure_share, "evacuate_slow_after_s": cmd.evacuate_slow_after_s,
                "heal_bound_s": cmd.heal_bound_s, "heal_rate_bytes_per_s": cmd.heal_rate_bytes_per_s,
                "updated_at": cmd.meta.at.isoformat(), "updated_by": cmd.meta.who}
    led.state.setdefault("self_healing", {})[cmd.name] = settings
    return {"cluster": cmd.name, "self_healing": settings}


@handles(PlacementSet)
def placement(led: Ledger, cmd: PlacementSet) -> JsonDict:
    cluster = led.cluster(cmd.cluster)
    policy = copy.deepcopy(cluster["placement"])
    value = dict(cmd.placement) if cmd.placement is not None else None
    if cmd.topic is None:
        policy["default"] = value
    elif value is None:
        policy["topics"].pop(cmd.topic, None)
    else:
        policy["topics"][cmd.topic] = value
    cluster["placement"] = policy
    led.state["clusters"][cmd.cluster] = cluster
    return {"cluster": cmd.cluster, "topic": cmd.topic, "placement": value}


@handles(PoolAssign)
def pool_assign(led: Ledger, cmd: PoolAssign) -> JsonDict:
    cluster = led.cluster(cmd.cluster)
    pools = {name: [b for b in brokers if b not in cmd.brokers] for name, brokers in cluster["pools"].items()}
    pools[cmd.pool] = sorted(set(pools.get(cmd.pool, [])) | set(cmd.brokers))
    cluster["pools"] = {name: brokers for name, brokers in sorted(pools.items()) if brokers}
    led.state["clusters"][cmd.cluster] = cluster
    return {"cluster": cmd.cluster, "pool": cmd.pool, "brokers": cluster["pools"][cmd.pool]}


@handles(MaintenanceSet)
def maintenance(led: Ledger, cmd: MaintenanceSet) -> JsonDict:
    led.cluster(cmd.cluster)
    flags = led.state["maintenance"].setdefault(cmd.cluster, {})
    if cmd.enabled:
        flags[str(cmd.broker)] = {"since": cmd.meta.at.isoformat(), "by": cmd.meta.who, "why": cmd.meta.why}
    else:
        flags.pop(str(cmd.broker), None)
    return {"cluster": cmd.cluster, "broker": cmd.broker, "maintenance": cmd.enabled}


@handles(TopicCreated)
def topic_created(led: Ledger, cmd: TopicCreated) -> JsonDict:
    """A topic Guardian created: nothing changes but the action log."""
    led.cluster(cmd.cluster)
    return {"cluster": cmd.cluster, "topic": cmd.topic, "partitions": cmd.partitions,
            "replication_factor": cmd.replication_factor}
