"""Handlers of the plan aggregate: propose, approve, reject, expire (``state["plans"]``).

Guarantee: a plan moves only along :data:`domain.plan_record.PLAN_TRANSITIONS` (a decision repeated is
answered unchanged); the stored shape is :class:`domain.plan_record.PlanRecord`'s. Cost: O(1) but the copy
of the proposed plan body.
"""

from __future__ import annotations

from controlplane.state.commands import PlanDecide, PlanExpire, PlanPropose
from controlplane.state.handlers.registry import Ledger, handles
from domain.plan_record import FINAL_PLAN_STATUSES, PLAN_TRANSITIONS, PlanStatus
from raft.protocol import CommandRejected, JsonDict


@handles(PlanPropose)
def propose(led: Ledger, cmd: PlanPropose) -> JsonDict:
    led.cluster(cmd.cluster)
    plan_id = led.allocate()
    led.state["plans"][str(plan_id)] = {
        "id": plan_id, "cluster": cmd.cluster, "kind": cmd.kind, "status": PlanStatus.PROPOSED.value,
        "plan": cmd.plan, "proposed_by": cmd.meta.who, "proposed_at": cmd.meta.at.isoformat(), "why": cmd.meta.why,
        "snapshot_taken_at": cmd.snapshot_taken_at.isoformat() if cmd.snapshot_taken_at else None,
        "decided_by": None, "execution_id": None,
        **({"params": dict(cmd.params)} if cmd.params else {}),
        **({"prerequisites": dict(cmd.prerequisites)} if cmd.prerequisites else {}),
    }
    return {"plan_id": plan_id, "status": PlanStatus.PROPOSED.value}


@handles(PlanDecide, "plan.approve")
def approve(led: Ledger, cmd: PlanDecide) -> JsonDict:
    return _decide(led, cmd, PlanStatus.APPROVED)


@handles(PlanDecide, "plan.reject")
def reject(led: Ledger, cmd: PlanDecide) -> JsonDict:
    return _decide(led, cmd, PlanStatus.REJECTED)


def _decide(led: Ledger, cmd: PlanDecide, status: PlanStatus) -> JsonDict:
    plan = led.plan(cmd.plan_id)
    current = PlanStatus(plan["status"])
    if current == status:
        return {"plan_id": cmd.plan_id, "status": status.value, "changed": False}
    if status not in PLAN_TRANSITIONS[current]:
        raise CommandRejected(f"plan {cmd.plan_id} is {current}, only a proposed plan can be {status}")
    if status == PlanStatus.APPROVED and plan["cluster"] not in led.state["clusters"]:
        raise CommandRejected(f"plan {cmd.plan_id} is for cluster {plan['cluster']!r}, which is no longer "
                              "registered")
    plan.update(status=status.value, decided_by=cmd.meta.who, decided_at=cmd.meta.at.isoformat())
    led.state["plans"][str(cmd.plan_id)] = plan
    return {"plan_id": cmd.plan_id, "status": status.value, "changed": True}


@handles(PlanExpire)
def expire(led: Ledger, cmd: PlanExpire) -> JsonDict:
    """An approved plan nobody can execute any more ends ``failed`` with the reason (no orphan approvals)."""
    plan = led.plan(cmd.plan_id)
    current = PlanStatus(plan["status"])
    if current in FINAL_PLAN_STATUSES:
        return {"plan_id": cmd.plan_id, "status": current.value, "changed": False}
    if PlanStatus.FAILED not in PLAN_TRANSITIONS[current] or current == PlanStatus.EXECUTING:
        raise CommandRejected(f"plan {cmd.plan_id} is {current}; only a proposed or approved plan expires")
    plan.update(status=PlanStatus.FAILED.value, decided_by=plan.get("decided_by") or cmd.meta.who,
                reason=cmd.meta.why, expired_at=cmd.meta.at.isoformat())
    led.state["plans"][str(cmd.plan_id)] = plan
    return {"plan_id": cmd.plan_id, "status": PlanStatus.FAILED.value, "changed": True}
