"""Throttle-protection endpoints: the Alertmanager webhook, explain, and an on-demand evaluation.

``POST /api/v1/alerts/alertmanager`` takes Alertmanager's webhook JSON (version 4). Every alert whose
labels name a ``cluster``, a ``broker`` and a ``disk`` (the log dir; ``log_dir`` is accepted too)
triggers an immediate evaluation of that disk on the leader; other alerts are counted as ignored.
A malformed payload is a 400 naming the bad field; a repeated alert (same fingerprint, status and
``startsAt``) and resolved alerts are idempotent (no evaluation, no new throttle).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI
from pydantic import BaseModel, ConfigDict, Field

from controlplane.api.auth import Principal, require
from controlplane.api.errors import ApiError
from controlplane.service.context import ServiceContext
from controlplane.service.throttle_loop import AlertRecord, ThrottleService
from raft.errors import NotLeaderError

Viewer = Annotated[Principal, Depends(require("viewer"))]
Operator = Annotated[Principal, Depends(require("operator"))]


class AlertIn(BaseModel):
    """One alert of the webhook (Alertmanager's other fields are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str = ""  # Alertmanager spells it so
    endsAt: str = ""
    fingerprint: str | None = None


class AlertmanagerIn(BaseModel):
    """Alertmanager webhook payload (``version`` "4")."""

    model_config = ConfigDict(extra="allow")
    version: str = "4"
    status: Literal["firing", "resolved"] | None = None
    alerts: Annotated[list[AlertIn], Field(max_length=10_000)]


def _service(ctx: ServiceContext) -> ThrottleService:
    service = ctx.throttle
    assert service is not None  # add_throttle_routes guarantees one
    return service


def _leader_only(ctx: ServiceContext) -> None:
    if not ctx.store.is_leader:
        raise NotLeaderError(ctx.store.status().get("leader"))


def to_records(body: AlertmanagerIn, now: str) -> tuple[list[AlertRecord], int]:
    """Alerts that name a disk, as records (broker label must be an integer id; else 400)."""
    records, ignored = [], 0
    for i, a in enumerate(body.alerts):
        labels = a.labels
        cluster, broker, disk = labels.get("cluster"), labels.get("broker"), labels.get("disk") or labels.get("log_dir")
        if not (cluster and broker and disk):
            ignored += 1
            continue
        try:
            broker_id = int(broker)
            if broker_id < 0:
                raise ValueError
        except ValueError:
            raise ApiError(400, f"$.alerts[{i}].labels.broker: expected a broker id (integer >= 0), "
                                f"got {broker!r}") from None
        fingerprint = a.fingerprint or hashlib.sha256(
            json.dumps(sorted(labels.items())).encode()).hexdigest()[:16]
        records.append(AlertRecord(fingerprint=fingerprint, cluster=cluster, disk=(broker_id, disk), status=a.status,
                                   starts_at=a.startsAt, labels=dict(labels), received_at=now))
    return records, ignored


def add_throttle_routes(app: FastAPI, ctx: ServiceContext) -> None:
    """Mount the throttle endpoints on ``app``. A context without a throttle service gets one that is bound
    to no cluster (alerts are recorded and evaluations skipped with a reason; nothing is contacted)."""
    if ctx.throttle is None:
        ctx.throttle = ThrottleService(ctx.store, max_snapshot_age_s=ctx.settings.max_snapshot_age_s)

    @app.post("/api/v1/alerts/alertmanager", tags=["throttles"])
    def alertmanager(body: AlertmanagerIn, _: Operator) -> dict[str, Any]:
        """Alertmanager webhook: alerts with cluster/broker/disk labels trigger an immediate evaluation."""
        service = _service(ctx)
        _leader_only(ctx)
        records, ignored = to_records(body, datetime.now(UTC).isoformat())
        result = service.on_alerts(records)
        return {"received": len(body.alerts), "ignored": ignored, **result}

    @app.get("/api/v1/throttle/explain/{cluster}", tags=["throttles"])
    def explain(cluster: str, _: Viewer) -> dict[str, Any]:
        """Disk health, abnormal-behaviour queue and decisions of the last evaluation, with active throttles."""
        service = _service(ctx)
        out = service.explain(cluster)
        out["throttles"] = ctx.store.read(lambda s: json.loads(json.dumps(list(s["throttles"].get(cluster, {})
                                                                                .values()))))
        out["history"] = ctx.store.read(lambda s: json.loads(json.dumps(
            [a for a in s["actions"] if a["type"].startswith("throttle.") and a["subject"].get("cluster") == cluster]
            [-200:])))
        return out

    @app.post("/api/v1/throttle/evaluate/{cluster}", tags=["throttles"])
    def evaluate(cluster: str, _: Operator) -> dict[str, Any]:
        """Run one throttle evaluation of ``cluster`` now (leader only)."""
        service = _service(ctx)
        _leader_only(ctx)
        if not ctx.store.read(lambda s: cluster in s["clusters"]):
            raise ApiError(404, f"unknown cluster {cluster!r}")
        return service.evaluate(cluster, trigger="api")
