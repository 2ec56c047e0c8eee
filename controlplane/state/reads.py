"""Typed reads of the replicated state: the records a reader gets, built inside the store's read lock.

Goal: the state is JSON only at the store boundary (this package); a reader (the executor, the migration
driver, the API, the CLI) gets frozen, detached records and never a reference into the live state, nor a
JSON text round trip. Method: each function here takes the state a :meth:`StateStore.read
<controlplane.state.store.StateStore.read>` callback receives and returns records of :mod:`domain`
(:class:`~domain.plan_record.PlanRecord`, :class:`~domain.execution.Execution`,
:class:`~domain.migration.MigrationRecord`, :class:`~domain.cluster_record.ClusterRecord`,
:class:`~domain.throttle_record.ThrottleRecord`), so ``store.read(lambda s: plan_record(s, 7))`` builds
the record under the lock. :func:`detached` is the one copy of a plain JSON value for the API's views,
which serialise it after the lock is released.

Guarantee: what these return shares nothing mutable with the state. Cost: O(size of what is returned).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeVar

from domain import Plan, plan_from_dict
from domain.cluster_record import ClusterRecord
from domain.execution import ACTIVE_STATUSES, Execution
from domain.migration import MigrationRecord
from domain.plan_record import PlanRecord
from domain.throttle_record import ThrottleRecord

State = Mapping[str, Any]
T = TypeVar("T")


def detached(value: T) -> T:
    """A deep copy of a JSON value read from the state (safe to change or serialise after the lock)."""
    return copy.deepcopy(value)


def plan_record(state: State, plan_id: int) -> PlanRecord | None:
    """The recorded plan ``plan_id``, if any."""
    doc = state["plans"].get(str(plan_id))
    return None if doc is None else PlanRecord.from_json(doc)


def plan_to_execute(state: State, plan_id: int) -> tuple[PlanRecord, Plan] | None:
    """The recorded plan ``plan_id`` as its record (``plan`` left empty) and its parsed :class:`~domain.Plan`,
    built from the stored document without deep-copying it first (the plan is the bulk of a record: 15 MB of
    JSON at 1,000 brokers). Raises :class:`domain.errors.ContractError` for a stored document that does not parse."""
    doc = state["plans"].get(str(plan_id))
    if doc is None:
        return None
    return PlanRecord.from_json({k: v for k, v in doc.items() if k != "plan"}), plan_from_dict(doc["plan"])


def execution_record(state: State, execution_id: int) -> Execution | None:
    """The execution ``execution_id``, if any."""
    doc = state["executions"].get(str(execution_id))
    return None if doc is None else Execution.from_json(doc)


def active_execution(state: State, cluster: str) -> Execution | None:
    """The running or stopping execution of ``cluster`` (at most one), if any."""
    for doc in state["executions"].values():
        if doc["cluster"] == cluster and doc["status"] in ACTIVE_STATUSES:
            return Execution.from_json(doc)
    return None


def executions_of(state: State, cluster: str) -> list[Execution]:
    """Every recorded execution of ``cluster`` (in id order as stored)."""
    return [Execution.from_json(doc) for doc in state["executions"].values() if doc["cluster"] == cluster]


def cluster_record(state: State, name: str) -> ClusterRecord | None:
    """The registered cluster ``name``, if any."""
    doc = state["clusters"].get(name)
    return None if doc is None else ClusterRecord.from_json(doc)


def maintenance_flags(state: State, cluster: str) -> dict[str, dict[str, Any]]:
    """Broker id (text) -> the maintenance flag set on it (who, why, since)."""
    return detached(dict(state.get("maintenance", {}).get(cluster) or {}))


def migration_record(state: State, migration_id: int) -> MigrationRecord | None:
    """The migration ``migration_id``, if any (an older state has no migrations)."""
    doc = state.get("migrations", {}).get(str(migration_id))
    return None if doc is None else MigrationRecord.from_json(doc)


def throttle_records(state: State, cluster: str) -> dict[str, ThrottleRecord]:
    """Key -> the throttles recorded in force on ``cluster``."""
    return {key: ThrottleRecord.from_json(doc) for key, doc in state["throttles"].get(cluster, {}).items()}
