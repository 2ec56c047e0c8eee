"""Guardian's authoritative state: a deterministic state machine that Raft replicates.

Holds clusters and their connection settings, IDC placement policies, pools, plans and executions
with per-partition task states, active throttles, maintenance flags, the operator action log and the
ID allocator. :meth:`GuardianState.apply` depends only on the state and the command (no clock, no
I/O), rejects a command whose preconditions fail *before* changing anything, and records every
applied command in the action log (who / what / why / when).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from controlplane.state.commands import (
    ANOMALY_TRANSITIONS,
    OPEN_ANOMALY_STATES,
    AllocateIds,
    AnomalyNote,
    AnomalyRaise,
    AnomalyUpdate,
    AutoRebalance,
    ClusterLabels,
    ClusterRegister,
    ClusterRemove,
    ClusterTopology,
    ExecutionControl,
    ExecutionProgress,
    ExecutionRefused,
    ExecutionStart,
    ExecutionTasks,
    MaintenanceSet,
    MigrationStart,
    MigrationUpdate,
    PlacementSet,
    PlanDecide,
    PlanExpire,
    PlanPropose,
    PoolAssign,
    SelfHealingSet,
    StateVersionSet,
    ThrottleClear,
    ThrottleSet,
    TopicCreated,
    parse_command,
)
from controlplane.state.registration import TOPOLOGY_KEYS
from controlplane.state.versions import group_version, supported_version, unwrap
from domain.execution import (
    ACTIVE_STATUSES,
    OPEN_STATES,
    ExecutionStatus,
    IllegalTransition,
    Task,
)
from raft.protocol import CommandRejected, EntryTooNew, JsonDict, canonical_json

ACTION_LOG_LIMIT = 5000
ACTIVE_EXECUTION = ACTIVE_STATUSES  # the domain's set, under the name the service and the demo import
LIVE_PLAN = frozenset({"approved", "executing"})


def empty_state() -> JsonDict:
    """The state of a new federation."""
    return {"next_id": 1, "log_seq": 0, "clusters": {}, "plans": {}, "executions": {}, "throttles": {},
            "maintenance": {}, "actions": []}


class GuardianState:
    """The replicated state machine (implements :class:`raft.protocol.StateMachine`)."""

    def __init__(self, supported: int | None = None) -> None:
        self.state: JsonDict = empty_state()
        self.supported = supported_version() if supported is None else supported
        """The highest state version this node's code applies (an entry needing more: EntryTooNew)."""

    # ------------------------------------------------------------------ protocol
    def snapshot(self) -> JsonDict:
        """A deep copy of the whole state."""
        return copy.deepcopy(self.state)

    def canonical_json(self) -> str:
        """Canonical JSON text of the live state (no copy): what :func:`raft.protocol.state_hash` hashes.
        Optional for :class:`raft.node.RaftNode`, which then hashes under its lock without a deep copy."""
        return canonical_json(self.state)

    def restore(self, snapshot: JsonDict) -> None:
        """Replace the state with one from :meth:`snapshot`; :class:`raft.protocol.EntryTooNew` (state untouched)
        when its state version is newer than this code supports."""
        if group_version(snapshot) > self.supported:
            raise EntryTooNew(f"the state is at state version {group_version(snapshot)}; this node's code supports "
                              f"up to {self.supported}: upgrade this node (docs/upgrading.md)")
        self.state = copy.deepcopy(snapshot)

    def apply(self, command: JsonDict) -> Any:
        """Apply one committed command; raise :class:`CommandRejected` (state untouched) to refuse it, and
        :class:`raft.protocol.EntryTooNew` when it needs a newer state version than this code supports."""
        command = unwrap(command, self.state, self.supported)
        cmd = parse_command(command)
        handler = getattr(self, "_" + command["type"].replace(".", "_"))
        result = handler(cmd)
        self._record(command, result)
        return result

    # ------------------------------------------------------------------ helpers
    def _record(self, command: JsonDict, result: Any) -> None:
        self.state["log_seq"] += 1
        meta = command["meta"]
        subject = {k: command[k] for k in ("name", "cluster", "plan_id", "execution_id", "key", "broker", "topic",
                                           "anomaly_id", "migration_id") if k in command}
        self.state["actions"].append({"seq": self.state["log_seq"], "at": meta["at"], "who": meta["who"],
                                      "why": meta.get("why", ""), "type": command["type"], "subject": subject,
                                      "result": result if isinstance(result, dict) else {"value": result}})
        if len(self.state["actions"]) > ACTION_LOG_LIMIT:
            del self.state["actions"][: len(self.state["actions"]) - ACTION_LOG_LIMIT]

    def _allocate(self, count: int = 1) -> int:
        first = int(self.state["next_id"])
        self.state["next_id"] = first + count
        return first

    def _cluster(self, name: str) -> JsonDict:
        cluster = self.state["clusters"].get(name)
        if cluster is None:
            raise CommandRejected(f"unknown cluster {name!r}")
        return dict(cluster)

    def _plan(self, plan_id: int) -> JsonDict:
        plan = self.state["plans"].get(str(plan_id))
        if plan is None:
            raise CommandRejected(f"unknown plan {plan_id}")
        return dict(plan)

    def _active_executions(self, cluster: str) -> list[int]:
        """Ids of the running or stopping executions of ``cluster``."""
        return [e["id"] for e in self.state["executions"].values()
                if e["cluster"] == cluster and e["status"] in ACTIVE_STATUSES]

    def _execution(self, execution_id: int) -> JsonDict:
        execution = self.state["executions"].get(str(execution_id))
        if execution is None:
            raise CommandRejected(f"unknown execution {execution_id}")
        return dict(execution)

    # ------------------------------------------------------------------ clusters
    def _cluster_register(self, cmd: ClusterRegister) -> JsonDict:
        old = self.state["clusters"].get(cmd.name, {})
        self.state["clusters"][cmd.name] = {
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

    def _cluster_topology(self, cmd: ClusterTopology) -> JsonDict:
        cluster = self._cluster(cmd.name)
        declared = cmd.model_dump(mode="json", include=set(TOPOLOGY_KEYS))
        cluster.update(copy.deepcopy(declared))
        self.state["clusters"][cmd.name] = cluster
        return {"cluster": cmd.name, **declared}

    def _cluster_labels(self, cmd: ClusterLabels) -> JsonDict:
        cluster = self._cluster(cmd.name)
        cluster["labels"] = dict(sorted(cmd.labels.items()))
        self.state["clusters"][cmd.name] = cluster
        return {"name": cmd.name, "labels": cluster["labels"]}

    def _state_version(self, cmd: StateVersionSet) -> JsonDict:
        old = group_version(self.state)
        if cmd.version < old:
            raise CommandRejected(f"state version {cmd.version} is below the group's version {old}: state versions "
                                  "never go down")
        if cmd.version > old:
            self.state["state_version"] = cmd.version
        return {"version": cmd.version, "previous": old}

    def _cluster_remove(self, cmd: ClusterRemove) -> JsonDict:
        self._cluster(cmd.name)
        busy = self._active_executions(cmd.name)
        if busy:
            raise CommandRejected(f"cluster {cmd.name!r} has running executions {busy}; stop them first")
        live = sorted(p["id"] for p in self.state["plans"].values()
                      if p["cluster"] == cmd.name and p["status"] in LIVE_PLAN)
        if live:
            raise CommandRejected(f"cluster {cmd.name!r} has approved or executing plans {live[:10]}; "
                                  "execute, stop or let them finish first")
        del self.state["clusters"][cmd.name]
        self.state["throttles"].pop(cmd.name, None)
        self.state["maintenance"].pop(cmd.name, None)
        return {"cluster": cmd.name, "removed": True}

    def _cluster_auto_rebalance(self, cmd: AutoRebalance) -> JsonDict:
        cluster = self._cluster(cmd.name)
        cluster["auto_rebalance"] = {"enabled": cmd.enabled, "window_cron": cmd.window_cron,
                                     "window_minutes": cmd.window_minutes, "threshold": cmd.threshold,
                                     "max_partitions": cmd.max_partitions, "load_basis": cmd.load_basis}
        self.state["clusters"][cmd.name] = cluster
        return {"cluster": cmd.name, "auto_rebalance": cluster["auto_rebalance"]}

    def _placement_set(self, cmd: PlacementSet) -> JsonDict:
        cluster = self._cluster(cmd.cluster)
        placement = copy.deepcopy(cluster["placement"])
        value = dict(cmd.placement) if cmd.placement is not None else None
        if cmd.topic is None:
            placement["default"] = value
        elif value is None:
            placement["topics"].pop(cmd.topic, None)
        else:
            placement["topics"][cmd.topic] = value
        cluster["placement"] = placement
        self.state["clusters"][cmd.cluster] = cluster
        return {"cluster": cmd.cluster, "topic": cmd.topic, "placement": value}

    def _pool_assign(self, cmd: PoolAssign) -> JsonDict:
        cluster = self._cluster(cmd.cluster)
        pools = {name: [b for b in brokers if b not in cmd.brokers] for name, brokers in cluster["pools"].items()}
        pools[cmd.pool] = sorted(set(pools.get(cmd.pool, [])) | set(cmd.brokers))
        cluster["pools"] = {name: brokers for name, brokers in sorted(pools.items()) if brokers}
        self.state["clusters"][cmd.cluster] = cluster
        return {"cluster": cmd.cluster, "pool": cmd.pool, "brokers": cluster["pools"][cmd.pool]}

    def _maintenance_set(self, cmd: MaintenanceSet) -> JsonDict:
        self._cluster(cmd.cluster)
        flags = self.state["maintenance"].setdefault(cmd.cluster, {})
        if cmd.enabled:
            flags[str(cmd.broker)] = {"since": cmd.meta.at.isoformat(), "by": cmd.meta.who, "why": cmd.meta.why}
        else:
            flags.pop(str(cmd.broker), None)
        return {"cluster": cmd.cluster, "broker": cmd.broker, "maintenance": cmd.enabled}

    def _ids_allocate(self, cmd: AllocateIds) -> JsonDict:
        first = self._allocate(cmd.count)
        return {"first": first, "last": first + cmd.count - 1}

    # ------------------------------------------------------------------ plans
    def _plan_propose(self, cmd: PlanPropose) -> JsonDict:
        self._cluster(cmd.cluster)
        plan_id = self._allocate()
        self.state["plans"][str(plan_id)] = {
            "id": plan_id, "cluster": cmd.cluster, "kind": cmd.kind, "status": "proposed", "plan": cmd.plan,
            "proposed_by": cmd.meta.who, "proposed_at": cmd.meta.at.isoformat(), "why": cmd.meta.why,
            "snapshot_taken_at": cmd.snapshot_taken_at.isoformat() if cmd.snapshot_taken_at else None,
            "decided_by": None, "execution_id": None,
            **({"params": dict(cmd.params)} if cmd.params else {}),
            **({"prerequisites": dict(cmd.prerequisites)} if cmd.prerequisites else {}),
        }
        return {"plan_id": plan_id, "status": "proposed"}

    def _plan_approve(self, cmd: PlanDecide) -> JsonDict:
        return self._decide(cmd, "approved")

    def _plan_reject(self, cmd: PlanDecide) -> JsonDict:
        return self._decide(cmd, "rejected")

    def _decide(self, cmd: PlanDecide, status: str) -> JsonDict:
        plan = self._plan(cmd.plan_id)
        if plan["status"] == status:
            return {"plan_id": cmd.plan_id, "status": status, "changed": False}
        if plan["status"] != "proposed":
            raise CommandRejected(f"plan {cmd.plan_id} is {plan['status']}, only a proposed plan can be {status}")
        if status == "approved" and plan["cluster"] not in self.state["clusters"]:
            raise CommandRejected(f"plan {cmd.plan_id} is for cluster {plan['cluster']!r}, which is no longer "
                                  "registered")
        plan.update(status=status, decided_by=cmd.meta.who, decided_at=cmd.meta.at.isoformat())
        self.state["plans"][str(cmd.plan_id)] = plan
        return {"plan_id": cmd.plan_id, "status": status, "changed": True}

    # ------------------------------------------------------------------ executions
    def _execution_start(self, cmd: ExecutionStart) -> JsonDict:
        plan = self._plan(cmd.plan_id)
        if plan["status"] == "executing":  # idempotent retry after a failover
            return {"execution_id": plan["execution_id"], "plan_id": cmd.plan_id, "created": False}
        if plan["status"] != "approved":
            raise CommandRejected(f"plan {cmd.plan_id} is {plan['status']}; approve it before executing")
        self._cluster(plan["cluster"])  # removed since it was approved (only a state from before the rule)
        busy = self._active_executions(plan["cluster"])
        if busy:
            raise CommandRejected(f"cluster {plan['cluster']!r} already runs execution {busy[0]}")
        keys = [t.key for t in cmd.tasks]
        if len(set(keys)) != len(keys):
            raise CommandRejected("task keys must be unique")
        unknown_deps = sorted({d for t in cmd.tasks for d in t.after if d not in set(keys)})
        if unknown_deps:
            raise CommandRejected(f"tasks depend on unknown task keys {unknown_deps[:5]}")
        execution_id = self._allocate()
        self.state["executions"][str(execution_id)] = {
            "id": execution_id, "plan_id": cmd.plan_id, "cluster": plan["cluster"],
            "status": ExecutionStatus.RUNNING.value,
            "rollback": False, "caps": dict(cmd.caps), "started_by": cmd.meta.who,
            "started_at": cmd.meta.at.isoformat(), "finished_at": None, "reason": "",
            "partition_counts": dict(cmd.partition_counts), "options": dict(cmd.options), "progress": {},
            "tasks": {t.key: Task.planned(t.model_dump(mode="json"), cmd.meta.at.isoformat()).to_json()
                      for t in cmd.tasks},
        }
        plan.update(status="executing", execution_id=execution_id)
        self.state["plans"][str(cmd.plan_id)] = plan
        return {"execution_id": execution_id, "plan_id": cmd.plan_id, "created": True}

    def _execution_tasks(self, cmd: ExecutionTasks) -> JsonDict:
        execution = self._execution(cmd.execution_id)
        tasks = execution["tasks"]
        at = cmd.meta.at.isoformat()
        changes: list[tuple[str, Task]] = []
        for update in cmd.updates:  # check every update before changing anything (against the stored record)
            stored = tasks.get(update.key)
            if stored is None:
                raise CommandRejected(f"execution {cmd.execution_id} has no task {update.key!r}")
            task = Task.from_json(stored)
            try:
                new = task.moved_to(update.state, update.reason)
            except IllegalTransition as exc:
                raise CommandRejected(str(exc)) from None
            new = new.with_progress(bytes_done=update.bytes_done, bytes_total=update.bytes_total,
                                    rate_bytes_per_s=update.rate_bytes_per_s, attempts=update.attempts,
                                    reader=update.reader, leader_attempts=update.leader_attempts)
            changes.append((update.key, replace(new, updated_at=at)))
        changed = sum(1 for key, new in changes if new.state != tasks[key]["state"])
        new_tasks = dict(tasks)
        for key, new in changes:
            new_tasks[key] = new.to_json()
        execution["tasks"] = new_tasks
        self.state["executions"][str(cmd.execution_id)] = execution
        return {"execution_id": cmd.execution_id, "changed": changed}

    def _execution_stop(self, cmd: ExecutionControl) -> JsonDict:
        execution = self._execution(cmd.execution_id)
        if execution["status"] not in ACTIVE_STATUSES:
            return {"execution_id": cmd.execution_id, "status": execution["status"], "changed": False}
        execution.update(status=ExecutionStatus.STOPPING.value, rollback=execution["rollback"] or cmd.rollback,
                         reason=cmd.meta.why)
        self.state["executions"][str(cmd.execution_id)] = execution
        return {"execution_id": cmd.execution_id, "status": ExecutionStatus.STOPPING.value,
                "rollback": execution["rollback"], "changed": True}

    def _execution_caps(self, cmd: ExecutionControl) -> JsonDict:
        execution = self._execution(cmd.execution_id)
        execution["caps"] = {**execution["caps"], **cmd.caps}
        self.state["executions"][str(cmd.execution_id)] = execution
        return {"execution_id": cmd.execution_id, "caps": execution["caps"]}

    def _execution_progress(self, cmd: ExecutionProgress) -> JsonDict:
        execution = self._execution(cmd.execution_id)
        execution["progress"] = {**cmd.progress, "updated_at": cmd.meta.at.isoformat()}
        self.state["executions"][str(cmd.execution_id)] = execution
        return {"execution_id": cmd.execution_id}

    def _execution_finish(self, cmd: ExecutionControl) -> JsonDict:
        execution = self._execution(cmd.execution_id)
        if cmd.status is None:
            raise CommandRejected("$.status: required to finish an execution")
        if execution["status"] not in ACTIVE_STATUSES:
            return {"execution_id": cmd.execution_id, "status": execution["status"], "changed": False}
        open_tasks = [k for k, t in execution["tasks"].items()
                      if t["state"] in OPEN_STATES and cmd.status == ExecutionStatus.COMPLETED]
        if open_tasks:
            raise CommandRejected(f"execution {cmd.execution_id} still has open tasks {open_tasks[:5]}")
        execution.update(status=cmd.status, finished_at=cmd.meta.at.isoformat(),
                         reason=cmd.meta.why or execution["reason"])
        self.state["executions"][str(cmd.execution_id)] = execution
        plan = self._plan(execution["plan_id"])
        plan["status"] = cmd.status
        self.state["plans"][str(execution["plan_id"])] = plan
        return {"execution_id": cmd.execution_id, "status": cmd.status, "changed": True}

    # ------------------------------------------------------------------ refused executions (action log only)
    def _execution_refused(self, cmd: ExecutionRefused) -> JsonDict:
        self._cluster(cmd.cluster)
        return {"refused": True, "plan_id": cmd.plan_id, "reason": cmd.reason}

    # ------------------------------------------------------------------ throttles
    # ------------------------------------------------------------------ migrations (chained executions)
    def _migration(self, migration_id: int) -> JsonDict:
        migration = self.state.setdefault("migrations", {}).get(str(migration_id))
        if migration is None:
            raise CommandRejected(f"unknown migration {migration_id}")
        return dict(migration)

    def _migration_start(self, cmd: MigrationStart) -> JsonDict:
        self._cluster(cmd.cluster)
        migrations = self.state.setdefault("migrations", {})
        busy = [m["id"] for m in migrations.values() if m["cluster"] == cmd.cluster and m["status"] == "running"]
        if busy:
            raise CommandRejected(f"cluster {cmd.cluster!r} already runs migration {busy[0]}; stop it first")
        for plan_id in cmd.steps:
            plan = self._plan(plan_id)
            if plan["cluster"] != cmd.cluster or plan["status"] != "approved":
                raise CommandRejected(f"step plan {plan_id} is {plan['status']} on cluster {plan['cluster']!r}; "
                                      f"every step must be an approved plan of {cmd.cluster!r}")
        migration_id = self._allocate()
        migrations[str(migration_id)] = {
            "id": migration_id, "cluster": cmd.cluster, "kind": cmd.kind, "topics": list(cmd.topics),
            "placement": dict(cmd.placement), "previous_placement": copy.deepcopy(cmd.previous_placement),
            "steps": list(cmd.steps), "step": 0, "executions": [], "status": "running",
            "started_by": cmd.meta.who, "started_at": cmd.meta.at.isoformat(), "finished_at": None, "reason": "",
            "caps": dict(cmd.caps), "options": copy.deepcopy(cmd.options)}
        return {"migration_id": migration_id, "steps": len(cmd.steps), "status": "running"}

    def _migration_step(self, cmd: MigrationUpdate) -> JsonDict:
        migration = self._migration(cmd.migration_id)
        if migration["status"] != "running":
            return {"migration_id": cmd.migration_id, "status": migration["status"], "changed": False}
        step = migration["step"] if cmd.step is None else cmd.step
        if step >= len(migration["steps"]):
            raise CommandRejected(f"migration {cmd.migration_id} has {len(migration['steps'])} steps, no step {step}")
        executions = list(migration["executions"])
        if cmd.execution_id is not None:
            executions = executions[:step] + [None] * (step - len(executions)) + [cmd.execution_id]
        migration.update(step=step, executions=executions)
        self.state["migrations"][str(cmd.migration_id)] = migration
        return {"migration_id": cmd.migration_id, "step": step, "execution_id": cmd.execution_id, "changed": True}

    def _migration_stop(self, cmd: MigrationUpdate) -> JsonDict:
        return self._migration_end(cmd, "stopped")

    def _migration_finish(self, cmd: MigrationUpdate) -> JsonDict:
        if cmd.status is None:
            raise CommandRejected("$.status: required to finish a migration")
        return self._migration_end(cmd, cmd.status)

    def _migration_end(self, cmd: MigrationUpdate, status: str) -> JsonDict:
        migration = self._migration(cmd.migration_id)
        if migration["status"] != "running":
            return {"migration_id": cmd.migration_id, "status": migration["status"], "changed": False}
        migration.update(status=status, finished_at=cmd.meta.at.isoformat(), reason=cmd.meta.why)
        self.state["migrations"][str(cmd.migration_id)] = migration
        return {"migration_id": cmd.migration_id, "status": status, "changed": True}

    def _topic_created(self, cmd: TopicCreated) -> JsonDict:
        self._cluster(cmd.cluster)
        return {"cluster": cmd.cluster, "topic": cmd.topic, "partitions": cmd.partitions,
                "replication_factor": cmd.replication_factor}

    def _throttle_set(self, cmd: ThrottleSet) -> JsonDict:
        self._cluster(cmd.cluster)
        throttles = self.state["throttles"].setdefault(cmd.cluster, {})
        old = throttles.get(cmd.key)
        throttles[cmd.key] = {"key": cmd.key, "kind": cmd.kind, "target": cmd.target,
                              "rate_bytes_per_s": cmd.rate_bytes_per_s, "evidence": cmd.evidence,
                              "set_by": cmd.meta.who, "why": cmd.meta.why,
                              "since": old["since"] if old else cmd.meta.at.isoformat(),
                              "updated_at": cmd.meta.at.isoformat()}
        return {"cluster": cmd.cluster, "key": cmd.key, "created": old is None}

    def _throttle_clear(self, cmd: ThrottleClear) -> JsonDict:
        removed = self.state["throttles"].get(cmd.cluster, {}).pop(cmd.key, None)
        return {"cluster": cmd.cluster, "key": cmd.key, "removed": removed is not None}

    # ------------------------------------------------------------------ self-healing (anomalies)
    # Kept in ``state["self_healing"]`` (per cluster settings) and ``state["anomalies"]`` (id -> record),
    # created on first use so states from before them restore unchanged.
    def _cluster_self_healing(self, cmd: SelfHealingSet) -> JsonDict:
        self._cluster(cmd.name)
        settings = {"enabled": cmd.enabled, "grace_s": cmd.grace_s, "max_concurrent_fixes": cmd.max_concurrent_fixes,
                    "mass_failure_share": cmd.mass_failure_share, "evacuate_slow_after_s": cmd.evacuate_slow_after_s,
                    "heal_bound_s": cmd.heal_bound_s, "heal_rate_bytes_per_s": cmd.heal_rate_bytes_per_s,
                    "updated_at": cmd.meta.at.isoformat(), "updated_by": cmd.meta.who}
        self.state.setdefault("self_healing", {})[cmd.name] = settings
        return {"cluster": cmd.name, "self_healing": settings}

    def _anomaly_raise(self, cmd: AnomalyRaise) -> JsonDict:
        """Record a finding: a new anomaly, or the open one with the same key updated (never two open)."""
        self._cluster(cmd.cluster)
        anomalies = self.state.setdefault("anomalies", {})
        at = cmd.meta.at.isoformat()
        for rec in anomalies.values():
            if rec["cluster"] == cmd.cluster and rec["key"] == cmd.key and rec["status"] in OPEN_ANOMALY_STATES:
                rec = dict(rec)
                rec.update(evidence=cmd.evidence, summary=cmd.summary or rec["summary"], last_seen=at)
                promoted = cmd.confirmed and rec["status"] == "detected"
                if promoted:
                    rec["status"] = "confirmed"
                    rec["history"] = [*rec["history"], {"at": at, "status": "confirmed", "reason": cmd.meta.why}]
                anomalies[str(rec["id"])] = rec
                return {"anomaly_id": rec["id"], "status": rec["status"], "created": False, "changed": promoted}
        anomaly_id = self._allocate()
        status = "confirmed" if cmd.confirmed else "detected"
        anomalies[str(anomaly_id)] = {
            "id": anomaly_id, "cluster": cmd.cluster, "key": cmd.key, "kind": cmd.kind, "subject": cmd.subject,
            "evidence": cmd.evidence, "summary": cmd.summary, "status": status, "detected_at": at, "last_seen": at,
            "reason": cmd.meta.why, "plan_id": None, "execution_id": None,
            "history": [{"at": at, "status": status, "reason": cmd.meta.why}]}
        return {"anomaly_id": anomaly_id, "status": status, "created": True, "changed": True}

    def _anomaly_update(self, cmd: AnomalyUpdate) -> JsonDict:
        """Move an anomaly along its lifecycle (:data:`ANOMALY_TRANSITIONS`); ``expect`` guards a fix's start."""
        anomalies = self.state.setdefault("anomalies", {})
        rec = anomalies.get(str(cmd.anomaly_id))
        if rec is None:
            raise CommandRejected(f"unknown anomaly {cmd.anomaly_id}")
        if cmd.expect is not None and rec["status"] != cmd.expect:
            raise CommandRejected(f"anomaly {cmd.anomaly_id} is {rec['status']}, not {cmd.expect}")
        restage = (cmd.plan_id is not None and cmd.plan_id != rec.get("plan_id")) or (
            cmd.execution_id is not None and cmd.execution_id != rec.get("execution_id"))
        if rec["status"] == cmd.status and not restage:
            return {"anomaly_id": cmd.anomaly_id, "status": cmd.status, "changed": False}
        if rec["status"] != cmd.status and cmd.status not in ANOMALY_TRANSITIONS[rec["status"]]:
            raise CommandRejected(f"anomaly {cmd.anomaly_id} cannot go from {rec['status']} to {cmd.status}")
        rec = dict(rec)
        at = cmd.meta.at.isoformat()
        rec.update(status=cmd.status, reason=cmd.reason or cmd.meta.why,
                   history=[*rec["history"], {"at": at, "status": cmd.status, "reason": cmd.reason or cmd.meta.why,
                                              "by": cmd.meta.who}])
        if cmd.plan_id is not None:
            rec["plan_id"] = cmd.plan_id
        if cmd.execution_id is not None:
            rec["execution_id"] = cmd.execution_id
        if cmd.status in ("fixed", "cleared", "ignored", "failed"):
            rec["closed_at"] = at
        anomalies[str(cmd.anomaly_id)] = rec
        return {"anomaly_id": cmd.anomaly_id, "status": cmd.status, "changed": True}

    def _anomaly_note(self, cmd: AnomalyNote) -> JsonDict:
        """Append a note to an anomaly's history (its status stays)."""
        anomalies = self.state.setdefault("anomalies", {})
        rec = anomalies.get(str(cmd.anomaly_id))
        if rec is None:
            raise CommandRejected(f"unknown anomaly {cmd.anomaly_id}")
        rec = dict(rec)
        rec["history"] = [*rec["history"], {"at": cmd.meta.at.isoformat(), "status": rec["status"],
                                            "reason": cmd.reason, "by": cmd.meta.who, "note": True}]
        anomalies[str(cmd.anomaly_id)] = rec
        return {"anomaly_id": cmd.anomaly_id, "status": rec["status"], "note": cmd.reason}

    def _plan_expire(self, cmd: PlanExpire) -> JsonDict:
        """An approved plan nobody can execute any more ends ``failed`` with the reason (no orphan approvals)."""
        plan = self._plan(cmd.plan_id)
        if plan["status"] in ("failed", "rejected", "completed", "stopped"):
            return {"plan_id": cmd.plan_id, "status": plan["status"], "changed": False}
        if plan["status"] not in ("proposed", "approved"):
            raise CommandRejected(f"plan {cmd.plan_id} is {plan['status']}; only a proposed or approved plan expires")
        plan.update(status="failed", decided_by=plan.get("decided_by") or cmd.meta.who, reason=cmd.meta.why,
                    expired_at=cmd.meta.at.isoformat())
        self.state["plans"][str(cmd.plan_id)] = plan
        return {"plan_id": cmd.plan_id, "status": "failed", "changed": True}
