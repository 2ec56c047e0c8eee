"""Handlers of the anomaly aggregate (``state["anomalies"]``: id -> record, created on first use): raise a
finding, move it along its lifecycle (:data:`controlplane.state.commands.ANOMALY_TRANSITIONS`), note it.

Guarantee: never two open anomalies with one key; a fix starts only from ``confirmed`` (``expect``). Cost:
O(anomalies) per raise (the open one with the key is looked up), O(1) otherwise.
"""

from __future__ import annotations

from controlplane.state.commands import (
    ANOMALY_TRANSITIONS,
    OPEN_ANOMALY_STATES,
    AnomalyNote,
    AnomalyRaise,
    AnomalyUpdate,
)
from controlplane.state.handlers.registry import Ledger, handles
from raft.protocol import CommandRejected, JsonDict

CLOSED = ("fixed", "cleared", "ignored", "failed")


@handles(AnomalyRaise)
def raise_anomaly(led: Ledger, cmd: AnomalyRaise) -> JsonDict:
    """Record a finding: a new anomaly, or the open one with the same key updated (never two open)."""
    led.cluster(cmd.cluster)
    anomalies = led.anomalies()
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
    anomaly_id = led.allocate()
    status = "confirmed" if cmd.confirmed else "detected"
    anomalies[str(anomaly_id)] = {
        "id": anomaly_id, "cluster": cmd.cluster, "key": cmd.key, "kind": cmd.kind, "subject": cmd.subject,
        "evidence": cmd.evidence, "summary": cmd.summary, "status": status, "detected_at": at, "last_seen": at,
        "reason": cmd.meta.why, "plan_id": None, "execution_id": None,
        "history": [{"at": at, "status": status, "reason": cmd.meta.why}]}
    return {"anomaly_id": anomaly_id, "status": status, "created": True, "changed": True}


@handles(AnomalyUpdate)
def update(led: Ledger, cmd: AnomalyUpdate) -> JsonDict:
    """Move an anomaly along its lifecycle; ``expect`` guards a fix's start."""
    anomalies = led.anomalies()
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
    if cmd.status in CLOSED:
        rec["closed_at"] = at
    anomalies[str(cmd.anomaly_id)] = rec
    return {"anomaly_id": cmd.anomaly_id, "status": cmd.status, "changed": True}


@handles(AnomalyNote)
def note(led: Ledger, cmd: AnomalyNote) -> JsonDict:
    """Append a note to an anomaly's history (its status stays)."""
    anomalies = led.anomalies()
    rec = anomalies.get(str(cmd.anomaly_id))
    if rec is None:
        raise CommandRejected(f"unknown anomaly {cmd.anomaly_id}")
    rec = dict(rec)
    rec["history"] = [*rec["history"], {"at": cmd.meta.at.isoformat(), "status": rec["status"],
                                        "reason": cmd.reason, "by": cmd.meta.who, "note": True}]
    anomalies[str(cmd.anomaly_id)] = rec
    return {"anomaly_id": cmd.anomaly_id, "status": rec["status"], "note": cmd.reason}
