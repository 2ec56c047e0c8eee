"""The REST API ``/api/v1`` (FastAPI, OpenAPI at ``/docs`` and ``/openapi.json``).

Reads need role viewer, actions operator, configuration admin. Every mutating call becomes a
command in the replicated state (who = the token's name, why = the ``X-Guardian-Reason`` header)
and is also written to this node's access log with its result. Errors are RFC 7807 problems.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from controlplane.api.auth import Principal, require
from controlplane.api.errors import ApiError, install_error_handlers, problem
from controlplane.executor.reconcile import ExecutionConflict, PlanRejected
from controlplane.service.context import ServiceContext
from controlplane.service.planning import PlanRequestError, make_plan
from controlplane.state.commands import meta
from domain import check_plan, dump_snapshot, parse_plan, parse_snapshot, plan_to_dict, pool_stats
from kafkaio.errors import AdminError

Viewer = Annotated[Principal, Depends(require("viewer"))]
Operator = Annotated[Principal, Depends(require("operator"))]
Admin = Annotated[Principal, Depends(require("admin"))]
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ClusterIn(_In):
    name: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")]
    bootstrap_servers: Annotated[list[str], Field(min_length=1)]
    metrics_urls: dict[str, str] = Field(default_factory=dict)
    control_url: str | None = None
    capabilities: dict[str, bool] = Field(default_factory=dict)


class AutoRebalanceIn(_In):
    enabled: bool
    window_cron: str = "0 2 * * *"
    window_minutes: Annotated[int, Field(ge=1, le=1440)] = 240
    threshold: Annotated[float, Field(gt=1.0, le=100.0)] = 1.25
    max_partitions: Annotated[int, Field(ge=1, le=100_000)] = 50
    load_basis: Literal["window", "modelled_peak"] = "window"


class PlacementIn(_In):
    topic: str | None = None
    placement: dict[str, Annotated[int, Field(ge=1, le=16)]] | None


class PoolIn(_In):
    brokers: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class PlanIn(_In):
    cluster: str
    kind: str = "rebalance"
    params: dict[str, Any] = Field(default_factory=dict)


class StopIn(_In):
    rollback: bool = False


class ThrottleIn(_In):
    kind: Annotated[str, Field(min_length=1)]
    target: dict[str, Any]
    rate_bytes_per_s: Annotated[float, Field(ge=0)]


class IdsIn(_In):
    count: Annotated[int, Field(ge=1, le=1_000_000)] = 1


def create_app(ctx: ServiceContext) -> FastAPI:
    """The FastAPI application over ``ctx``."""
    app = FastAPI(title="Guardian", version="0.1.0",
                  description="Control plane for a federation of Kafka clusters.")
    app.state.ctx = ctx
    app.state.http_of = ctx.http_of
    install_error_handlers(app)

    @app.middleware("http")
    async def record(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        ctx.metrics.http_requests.labels(request.method, route, str(response.status_code)).inc()
        if request.method in MUTATING and route.startswith("/api/"):
            principal = getattr(request.state, "principal", None)
            entry = {"at": datetime.now(UTC).isoformat(), "who": principal.name if principal else None,
                     "method": request.method, "path": request.url.path, "status": response.status_code,
                     "why": request.headers.get("x-guardian-reason", ""),
                     "ms": round((time.perf_counter() - start) * 1000, 2)}
            ctx.access_log.parent.mkdir(parents=True, exist_ok=True)
            with ctx.access_log.open("a") as out:
                out.write(json.dumps(entry) + "\n")
        return response

    def propose(request: Request, principal: Principal, command: dict[str, Any]) -> Any:
        command["meta"] = meta(principal.name, request.headers.get("x-guardian-reason", ""))
        result = ctx.store.propose(command)
        ctx.metrics.actions.labels(command["type"]).inc()
        return result

    def read(fn: Callable[[dict[str, Any]], Any]) -> Any:
        """``fn`` over the state, returned as a detached JSON copy (safe to change or serialise later)."""
        return ctx.store.read(lambda s: json.loads(json.dumps(fn(s))))

    def cluster_or_404(name: str) -> dict[str, Any]:
        cluster = read(lambda s: s["clusters"].get(name))
        if cluster is None:
            raise ApiError(404, f"unknown cluster {name!r}")
        return dict(cluster)

    def snapshot_or_409(name: str) -> Any:
        cluster_or_404(name)
        return ctx.snapshots.fresh(name, ctx.settings.max_snapshot_age_s)

    # ------------------------------------------------------------------ health
    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], response_model=None)
    def readyz() -> dict[str, Any] | Response:
        """Readiness: a leader is known and this node's state is caught up."""
        status = ctx.store.status()
        if not status.get("ready"):
            return problem(503, "not ready: no leader known or state not caught up", raft=status)
        return {"status": "ready", "role": status.get("role"), "leader": status.get("leader")}

    @app.get("/metrics", tags=["health"])
    def metrics() -> Response:
        """Guardian's own Prometheus metrics."""
        status = ctx.store.status()
        ctx.metrics.raft_is_leader.set(1 if status.get("is_leader") else 0)
        ctx.metrics.raft_term.set(float(status.get("term") or 0))
        ctx.metrics.raft_commit_index.set(float(status.get("commit_index") or 0))
        return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/status", tags=["health"])
    def status(_: Viewer) -> dict[str, Any]:
        """Raft role, term, leader and commit index of this node."""
        return {"raft": ctx.store.status(), "clusters": read(lambda s: sorted(s["clusters"]))}

    # ------------------------------------------------------------------ federation
    @app.get("/api/v1/clusters", tags=["federation"])
    def list_clusters(_: Viewer) -> list[dict[str, Any]]:
        """Registered clusters with their connection settings and policies."""
        return read(lambda s: list(s["clusters"].values()))

    @app.post("/api/v1/clusters", tags=["federation"], status_code=201)
    def register_cluster(body: ClusterIn, request: Request, who: Admin) -> Any:
        """Register (or update) a cluster."""
        return propose(request, who, {"type": "cluster.register", **body.model_dump()})

    @app.get("/api/v1/clusters/{name}", tags=["federation"])
    def get_cluster(name: str, _: Viewer) -> dict[str, Any]:
        """One cluster, with the figures of its latest snapshot when there is one."""
        cluster = cluster_or_404(name)
        snap = ctx.snapshots.get(name)
        if snap is not None:
            cluster["snapshot"] = {
                "taken_at": snap.taken_at.isoformat(), "brokers": len(snap.brokers),
                "partitions": len(snap.index.partitions),
                "pools": {p: {"max_util": s.max_util, "mean_util": s.mean_util, "peak_to_mean": s.peak_to_mean}
                          for p, s in pool_stats(snap).items()}}
        cluster["maintenance"] = read(lambda s: dict(s["maintenance"].get(name, {})))
        return cluster

    @app.delete("/api/v1/clusters/{name}", tags=["federation"])
    def remove_cluster(name: str, request: Request, who: Admin) -> Any:
        """Forget a cluster (refused while an execution runs on it)."""
        cluster_or_404(name)
        result = propose(request, who, {"type": "cluster.remove", "name": name})
        ctx.snapshots.drop(name)
        return result

    @app.put("/api/v1/clusters/{name}/auto-rebalance", tags=["federation"])
    def set_auto_rebalance(name: str, body: AutoRebalanceIn, request: Request, who: Admin) -> Any:
        """Opt a cluster in or out of scheduled auto-rebalance (cron window, imbalance threshold)."""
        cluster_or_404(name)
        return propose(request, who, {"type": "cluster.auto_rebalance", "name": name, **body.model_dump()})

    @app.put("/api/v1/clusters/{name}/placement", tags=["federation"])
    def set_placement(name: str, body: PlacementIn, request: Request, who: Admin) -> Any:
        """Set the cluster default (no topic) or a topic's IDC placement policy; null clears it."""
        cluster_or_404(name)
        return propose(request, who, {"type": "placement.set", "cluster": name, **body.model_dump()})

    @app.put("/api/v1/clusters/{name}/pools/{pool}", tags=["federation"])
    def assign_pool(name: str, pool: str, body: PoolIn, request: Request, who: Admin) -> Any:
        """Move brokers into resource pool ``pool``."""
        cluster_or_404(name)
        return propose(request, who, {"type": "pool.assign", "cluster": name, "pool": pool, **body.model_dump()})

    @app.get("/api/v1/clusters/{name}/snapshot", tags=["federation"])
    def get_snapshot(name: str, _: Viewer) -> Response:
        """The latest snapshot (guardian.snapshot/v1)."""
        cluster_or_404(name)
        snap = ctx.snapshots.get(name)
        if snap is None:
            raise ApiError(404, f"no snapshot of cluster {name!r} yet")
        return Response(dump_snapshot(snap), media_type="application/json")

    @app.put("/api/v1/clusters/{name}/snapshot", tags=["federation"])
    async def put_snapshot(name: str, request: Request, _: Operator) -> dict[str, Any]:
        """Import a guardian.snapshot/v1 document as the cluster's latest snapshot."""
        cluster_or_404(name)
        snap = parse_snapshot(await request.body())
        if snap.cluster != name:
            raise ApiError(400, f"$.cluster: snapshot is of cluster {snap.cluster!r}, not {name!r}")
        ctx.snapshots.put(snap)
        return {"cluster": name, "taken_at": snap.taken_at.isoformat(), "brokers": len(snap.brokers)}

    @app.get("/api/v1/clusters/{name}/brokers", tags=["federation"])
    def brokers(name: str, _: Viewer) -> list[dict[str, Any]]:
        """Brokers with live load from the latest snapshot."""
        snap = snapshot_or_409(name)
        loads = snap.index.broker_load
        return [{"id": b.id, "host": b.host, "port": b.port, "idc": b.idc, "rack": b.rack, "pool": b.pool,
                 "state": b.state.value, "replicas": loads[b.id].replicas, "leaders": loads[b.id].leaders,
                 "bytes_in_per_s": loads[b.id].bytes_in_per_s, "bytes_out_per_s": loads[b.id].bytes_out_per_s,
                 "disk_load_bytes_per_s": loads[b.id].disk_load_bytes_per_s} for b in snap.brokers]

    @app.get("/api/v1/clusters/{name}/disks", tags=["federation"])
    def disks(name: str, _: Viewer) -> list[dict[str, Any]]:
        """Disks with measured util/await and estimated utilisation from the latest snapshot."""
        snap = snapshot_or_409(name)
        index = snap.index
        return [{"broker": b.id, "path": d.path, "kind": d.kind.value, "util": d.util, "await_ms": d.await_ms,
                 "estimated_util": index.disk_util_estimate((b.id, d.path)),
                 "used_bytes": d.used_bytes, "capacity_bytes": d.capacity_bytes,
                 "replicas": len(index.replicas_on_disk[(b.id, d.path)])} for b in snap.brokers for d in b.disks]

    @app.get("/api/v1/clusters/{name}/topics", tags=["federation"])
    def topics(name: str, _: Viewer) -> list[dict[str, Any]]:
        """Topics with their pool, placement and live load from the latest snapshot."""
        snap = snapshot_or_409(name)
        return [{"name": t.name, "pool": t.pool, "placement": snap.placement_of(t), "partitions": len(t.partitions),
                 "bytes_in_per_s": sum(p.bytes_in_per_s for p in t.partitions),
                 "bytes_out_per_s": sum(p.bytes_out_per_s for p in t.partitions),
                 "size_bytes": sum(p.size_bytes for p in t.partitions)} for t in snap.topics]

    @app.put("/api/v1/clusters/{name}/maintenance/{broker}", tags=["maintenance"])
    def maintenance_on(name: str, broker: int, request: Request, who: Operator) -> Any:
        """Put a broker in maintenance: self-healing leaves it alone (e.g. while it restarts)."""
        cluster_or_404(name)
        return propose(request, who, {"type": "maintenance.set", "cluster": name, "broker": broker, "enabled": True})

    @app.delete("/api/v1/clusters/{name}/maintenance/{broker}", tags=["maintenance"])
    def maintenance_off(name: str, broker: int, request: Request, who: Operator) -> Any:
        """Take a broker out of maintenance."""
        cluster_or_404(name)
        return propose(request, who, {"type": "maintenance.set", "cluster": name, "broker": broker,
                                      "enabled": False})

    # ------------------------------------------------------------------ plans
    def plan_or_404(plan_id: int) -> dict[str, Any]:
        plan = read(lambda s: s["plans"].get(str(plan_id)))
        if plan is None:
            raise ApiError(404, f"unknown plan {plan_id}")
        return dict(plan)

    @app.get("/api/v1/plans", tags=["plans"])
    def list_plans(_: Viewer, cluster: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """Plans (without their move lists), newest first."""
        def pick(s: dict[str, Any]) -> list[dict[str, Any]]:
            return [{k: v for k, v in p.items() if k != "plan"} | {"summary": p["plan"].get("summary")}
                    for p in s["plans"].values()
                    if (cluster is None or p["cluster"] == cluster) and (status is None or p["status"] == status)]
        return sorted(read(pick), key=lambda p: -p["id"])

    @app.post("/api/v1/plans", tags=["plans"], status_code=201)
    def create_plan(body: PlanIn, request: Request, who: Operator) -> Any:
        """Run a planner over the cluster's latest fresh snapshot and record the result as a proposal."""
        snap = snapshot_or_409(body.cluster)
        try:
            plan = make_plan(snap, body.kind, body.params, load_model=ctx.load_model)
        except PlanRequestError as exc:
            raise ApiError(400, str(exc)) from None
        violations = check_plan(snap, plan)
        if violations:
            raise ApiError(409, "the planner produced an invalid plan", violations=[str(v) for v in violations])
        return propose(request, who, {"type": "plan.propose", "cluster": body.cluster, "kind": plan.kind,
                                      "plan": plan_to_dict(plan), "snapshot_taken_at": snap.taken_at.isoformat()})

    @app.post("/api/v1/plans/import", tags=["plans"], status_code=201)
    async def import_plan(request: Request, who: Operator) -> Any:
        """Record a guardian.plan/v1 document as a proposal after checking it against the latest snapshot."""
        plan = parse_plan(await request.body())
        snap = snapshot_or_409(plan.cluster)
        violations = check_plan(snap, plan)
        if violations:
            raise ApiError(409, "the plan breaks constraints", violations=[str(v) for v in violations])
        return propose(request, who, {"type": "plan.propose", "cluster": plan.cluster, "kind": plan.kind,
                                      "plan": plan_to_dict(plan), "snapshot_taken_at": snap.taken_at.isoformat()})

    @app.get("/api/v1/plans/{plan_id}", tags=["plans"])
    def get_plan(plan_id: int, _: Viewer) -> dict[str, Any]:
        """One plan, with its guardian.plan/v1 document."""
        return plan_or_404(plan_id)

    @app.post("/api/v1/plans/{plan_id}/validate", tags=["plans"])
    def validate_plan(plan_id: int, _: Viewer) -> dict[str, Any]:
        """Check a recorded plan against the cluster's latest snapshot."""
        record = plan_or_404(plan_id)
        snap = snapshot_or_409(record["cluster"])
        violations = check_plan(snap, parse_plan(json.dumps(record["plan"])))
        return {"plan_id": plan_id, "valid": not violations, "violations": [str(v) for v in violations]}

    @app.post("/api/v1/plans/{plan_id}/approve", tags=["plans"])
    def approve_plan(plan_id: int, request: Request, who: Operator) -> Any:
        """Approve a proposed plan."""
        plan_or_404(plan_id)
        return propose(request, who, {"type": "plan.approve", "plan_id": plan_id})

    @app.post("/api/v1/plans/{plan_id}/reject", tags=["plans"])
    def reject_plan(plan_id: int, request: Request, who: Operator) -> Any:
        """Reject a proposed plan."""
        plan_or_404(plan_id)
        return propose(request, who, {"type": "plan.reject", "plan_id": plan_id})

    @app.post("/api/v1/plans/{plan_id}/execute", tags=["plans"], status_code=201)
    def execute_plan(plan_id: int, request: Request, who: Operator) -> Any:
        """Start executing an approved plan; the executor re-checks it against the live cluster first."""
        record = plan_or_404(plan_id)
        if record["status"] not in ("approved", "executing"):
            raise ApiError(409, f"plan {plan_id} is {record['status']}; approve it before executing")
        if ctx.executor is None:
            raise ApiError(503, "no executor on this node")
        try:
            execution_id = ctx.executor.start_approved(plan_id, why=request.headers.get("x-guardian-reason", ""))
        except PlanRejected as exc:
            raise ApiError(409, "the plan no longer fits the cluster",
                           violations=[str(v) for v in exc.violations]) from None
        except ExecutionConflict as exc:
            raise ApiError(409, str(exc)) from None
        except AdminError as exc:
            raise ApiError(503, f"cluster {record['cluster']!r} unreachable: {exc}") from None
        return {"execution_id": execution_id, "plan_id": plan_id, "executed_by": who.name}

    # ------------------------------------------------------------------ executions
    def execution_or_404(execution_id: int) -> dict[str, Any]:
        execution = read(lambda s: s["executions"].get(str(execution_id)))
        if execution is None:
            raise ApiError(404, f"unknown execution {execution_id}")
        return dict(execution)

    @app.get("/api/v1/executions", tags=["executions"])
    def list_executions(_: Viewer, cluster: str | None = None) -> list[dict[str, Any]]:
        """Executions with task counts by state, newest first."""
        def pick(s: dict[str, Any]) -> list[dict[str, Any]]:
            out = []
            for e in s["executions"].values():
                if cluster is None or e["cluster"] == cluster:
                    counts: dict[str, int] = {}
                    for t in e["tasks"].values():
                        counts[t["state"]] = counts.get(t["state"], 0) + 1
                    out.append({k: v for k, v in e.items() if k != "tasks"} | {"task_states": counts})
            return out
        return sorted(read(pick), key=lambda e: -e["id"])

    @app.get("/api/v1/executions/{execution_id}", tags=["executions"])
    def get_execution(execution_id: int, _: Viewer) -> dict[str, Any]:
        """One execution with every task, its state and progress."""
        execution = execution_or_404(execution_id)
        total = sum(t["size_bytes"] for t in execution["tasks"].values())
        done = sum(t["size_bytes"] if t["state"] == "COMPLETED" else t["bytes_done"]
                   for t in execution["tasks"].values())
        execution["progress"] = {"bytes_total": total, "bytes_done": done,
                                 "fraction": done / total if total else 1.0}
        return execution

    @app.post("/api/v1/executions/{execution_id}/stop", tags=["executions"])
    def stop_execution(execution_id: int, request: Request, who: Operator,
                       body: Annotated[StopIn | None, Body()] = None) -> Any:
        """Stop submitting new tasks; with rollback, cancel the in-flight ones too."""
        execution_or_404(execution_id)
        return propose(request, who, {"type": "execution.stop", "execution_id": execution_id,
                                      "rollback": bool(body and body.rollback)})

    # ------------------------------------------------------------------ throttles, ids, actions
    @app.get("/api/v1/throttles", tags=["throttles"])
    def list_throttles(_: Viewer, cluster: str | None = None) -> list[dict[str, Any]]:
        """Throttles in force, with the evidence that justified each."""
        def pick(s: dict[str, Any]) -> list[dict[str, Any]]:
            return [{"cluster": c, **t} for c, items in sorted(s["throttles"].items()) for t in items.values()
                    if cluster is None or c == cluster]
        return read(pick)

    @app.put("/api/v1/throttles/{cluster}/{key}", tags=["throttles"])
    def set_throttle(cluster: str, key: str, body: ThrottleIn, request: Request, who: Operator) -> Any:
        """Record a manual throttle (applied by the throttle loop on the leader)."""
        cluster_or_404(cluster)
        return propose(request, who, {"type": "throttle.set", "cluster": cluster, "key": key,
                                      "evidence": {"manual": True}, **body.model_dump()})

    @app.delete("/api/v1/throttles/{cluster}/{key}", tags=["throttles"])
    def clear_throttle(cluster: str, key: str, request: Request, who: Operator) -> Any:
        """Clear a throttle."""
        cluster_or_404(cluster)
        exists = read(lambda s: key in s["throttles"].get(cluster, {}))
        if not exists:
            raise ApiError(404, f"no throttle {key!r} on cluster {cluster!r}")
        return propose(request, who, {"type": "throttle.clear", "cluster": cluster, "key": key})

    @app.post("/api/v1/ids", tags=["ids"])
    def allocate_ids(body: IdsIn, request: Request, who: Operator) -> Any:
        """Allocate globally unique, monotonic 64-bit ids (unique across failovers)."""
        return propose(request, who, {"type": "ids.allocate", "count": body.count})

    @app.get("/api/v1/actions", tags=["audit"])
    def actions(_: Viewer, limit: Annotated[int, Query(ge=1, le=5000)] = 100) -> list[dict[str, Any]]:
        """The operator action log (replicated), newest first."""
        return read(lambda s: s["actions"][-limit:][::-1])

    from controlplane.api.analytics_routes import add_analytics_routes
    from controlplane.api.throttle_routes import add_throttle_routes

    add_throttle_routes(app, ctx)
    add_analytics_routes(app, ctx)
    return app
