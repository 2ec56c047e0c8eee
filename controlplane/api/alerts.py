"""The Alertmanager webhook: disk alerts trigger an immediate throttle evaluation on the leader.

Goal: react to a disk alert within one request instead of the next throttle-loop round. Method:
``POST /api/v1/alerts/alertmanager`` takes Alertmanager's webhook JSON (version 4); every alert whose
labels name a ``cluster``, a ``broker`` and a ``disk`` (the log dir; ``log_dir`` is accepted too)
becomes an :class:`AlertRecord` handed to the throttle service; other alerts are counted as ignored.
Guarantee: a malformed payload is a 400 naming the bad field; a repeated alert (same fingerprint,
status and ``startsAt``) and resolved alerts are idempotent (no evaluation, no new throttle); a
follower redirects to the leader (307). Cost: O(alerts) plus one evaluation per alerting disk.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from controlplane.api.deps import Ctx, Operator
from controlplane.api.errors import ApiError
from controlplane.api.guard import MiB, max_body
from controlplane.api.schemas import INT32_MAX
from controlplane.api.throttles import leader_only, throttle_service
from controlplane.service.protection import AlertRecord

router = APIRouter(tags=["throttles"])
ALERTS_MAX_BODY = 8 * MiB
"""10,000 alerts (the model's cap) of ~800 bytes each."""


class AlertIn(BaseModel):
    """One alert of the webhook (Alertmanager's other fields are accepted and ignored)."""

    model_config = ConfigDict(extra="allow", strict=True)
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str = ""  # Alertmanager spells it so
    endsAt: str = ""
    fingerprint: str | None = None


class AlertmanagerIn(BaseModel):
    """Alertmanager webhook payload (``version`` "4")."""

    model_config = ConfigDict(extra="allow", strict=True)
    version: str = "4"
    status: Literal["firing", "resolved"] | None = None
    alerts: Annotated[list[AlertIn], Field(max_length=10_000)]


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
            if not 0 <= broker_id <= INT32_MAX:
                raise ValueError
        except ValueError:
            raise ApiError(400, f"$.alerts[{i}].labels.broker: expected a broker id (integer 0..2147483647), "
                                f"got {broker!r}") from None
        fingerprint = a.fingerprint or hashlib.sha256(
            json.dumps(sorted(labels.items())).encode()).hexdigest()[:16]
        records.append(AlertRecord(fingerprint=fingerprint, cluster=cluster, disk=(broker_id, disk), status=a.status,
                                   starts_at=a.startsAt, labels=dict(labels), received_at=now))
    return records, ignored


@router.post("/api/v1/alerts/alertmanager", openapi_extra=max_body(ALERTS_MAX_BODY))
def alertmanager(ctx: Ctx, body: AlertmanagerIn, _: Operator) -> dict[str, Any]:
    """Alertmanager webhook: alerts with cluster/broker/disk labels trigger an immediate evaluation."""
    service = throttle_service(ctx)
    leader_only(ctx)
    records, ignored = to_records(body, datetime.now(UTC).isoformat())
    result = service.on_alerts(records)
    return {"received": len(body.alerts), "ignored": ignored, **result}
