"""Anomalies and self-healing settings in the replicated state: one open record per key, a lifecycle whose
fix starts once, and approved plans that can expire with a reason."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.state.commands import ANOMALY_TRANSITIONS, validate_command
from controlplane.state.store import LocalStateStore
from raft.protocol import CommandRejected

AT = "2026-11-21T10:00:00Z"


def cmd(command_type: str, /, **payload: Any) -> dict[str, Any]:
    return validate_command({"type": command_type, "meta": {"who": "self-healing", "why": "test", "at": AT},
                             **payload})


def store() -> LocalStateStore:
    s = LocalStateStore()
    s.propose(cmd("cluster.register", name="c1", bootstrap_servers=["127.0.0.1:9092"]))
    return s


def raise_(s: LocalStateStore, confirmed: bool = False, **evidence: Any) -> dict[str, Any]:
    return s.propose(cmd("anomaly.raise", cluster="c1", key="broker-dead:2", kind="broker-dead",
                         subject={"broker": 2}, evidence=evidence, confirmed=confirmed))


def test_one_open_anomaly_per_key_promoted_when_confirmed() -> None:
    s = store()
    first = raise_(s, dead_for_s=10)
    assert first["created"] and first["status"] == "detected"
    again = raise_(s, confirmed=True, dead_for_s=400)
    assert again == {"anomaly_id": first["anomaly_id"], "status": "confirmed", "created": False, "changed": True}
    rec = s.read(lambda st: st["anomalies"][str(first["anomaly_id"])])
    assert rec["evidence"] == {"dead_for_s": 400} and [h["status"] for h in rec["history"]] == ["detected", "confirmed"]


def test_a_fix_starts_only_once_even_when_two_leaders_try() -> None:
    s = store()
    aid = raise_(s, confirmed=True)["anomaly_id"]
    s.propose(cmd("anomaly.update", anomaly_id=aid, status="fixing", expect="confirmed", plan_id=7))
    with pytest.raises(CommandRejected, match="is fixing, not confirmed"):
        s.propose(cmd("anomaly.update", anomaly_id=aid, status="fixing", expect="confirmed", plan_id=8))
    assert s.read(lambda st: st["anomalies"][str(aid)]["plan_id"]) == 7
    s.propose(cmd("anomaly.update", anomaly_id=aid, status="fixed", reason="under-replicated 0"))
    with pytest.raises(CommandRejected, match="cannot go from fixed to confirmed"):
        s.propose(cmd("anomaly.update", anomaly_id=aid, status="confirmed"))
    assert raise_(s)["created"]  # a closed anomaly does not swallow a new occurrence


def test_transition_table_is_closed_and_terminal_states_are_final() -> None:
    for src, dsts in ANOMALY_TRANSITIONS.items():
        assert dsts <= set(ANOMALY_TRANSITIONS)
        if src in ("fixed", "cleared", "ignored", "failed"):
            assert not dsts
    assert "fixing" in ANOMALY_TRANSITIONS["confirmed"] and "fixing" not in ANOMALY_TRANSITIONS["detected"]


def test_ignore_and_unknown() -> None:
    s = store()
    aid = raise_(s)["anomaly_id"]
    s.propose(cmd("anomaly.update", anomaly_id=aid, status="ignored", reason="planned work"))
    assert s.read(lambda st: st["anomalies"][str(aid)]["reason"]) == "planned work"
    with pytest.raises(CommandRejected, match="unknown anomaly 999"):
        s.propose(cmd("anomaly.update", anomaly_id=999, status="ignored"))
    with pytest.raises(CommandRejected, match="unknown cluster"):
        s.propose(cmd("anomaly.raise", cluster="nope", key="k", kind="x"))


def test_self_healing_settings_and_plan_expiry() -> None:
    s = store()
    out = s.propose(cmd("cluster.self_healing", name="c1", enabled=True, grace_s=60, max_concurrent_fixes=2))
    assert out["self_healing"]["grace_s"] == 60 and out["self_healing"]["mass_failure_share"] == 0.34
    with pytest.raises(CommandRejected, match="mass_failure_share"):
        s.propose(cmd("cluster.self_healing", name="c1", enabled=True, mass_failure_share=1.5))
    pid = s.propose(cmd("plan.propose", cluster="c1", kind="rebalance", plan={}))["plan_id"]
    s.propose(cmd("plan.approve", plan_id=pid))
    assert s.propose(cmd("plan.expire", plan_id=pid))["status"] == "failed"
    plan = s.read(lambda st: st["plans"][str(pid)])
    assert plan["status"] == "failed" and plan["reason"] == "test"


def test_a_refused_fix_goes_back_to_confirmed_once_its_plan_expired_and_starts_once_again() -> None:
    s = store()
    aid = raise_(s, confirmed=True)["anomaly_id"]
    s.propose(cmd("anomaly.update", anomaly_id=aid, status="fixing", expect="confirmed", plan_id=7))
    s.propose(cmd("anomaly.update", anomaly_id=aid, status="confirmed", reason="retry: executor refused plan 7"))
    s.propose(cmd("anomaly.update", anomaly_id=aid, status="fixing", expect="confirmed", plan_id=9))
    with pytest.raises(CommandRejected, match="is fixing, not confirmed"):
        s.propose(cmd("anomaly.update", anomaly_id=aid, status="fixing", expect="confirmed", plan_id=10))
    rec = s.read(lambda st: st["anomalies"][str(aid)])
    assert rec["plan_id"] == 9
    assert [h["status"] for h in rec["history"]] == ["confirmed", "fixing", "confirmed", "fixing"]


def test_a_note_keeps_the_status_and_lands_in_the_action_log() -> None:
    s = store()
    aid = raise_(s, confirmed=True)["anomaly_id"]
    out = s.propose(validate_command({"type": "anomaly.note", "anomaly_id": aid, "reason": "spared the clients",
                                      "meta": {"who": "throttle-protection", "why": "spared", "at": AT}}))
    assert out == {"anomaly_id": aid, "status": "confirmed", "note": "spared the clients"}
    rec = s.read(lambda st: st["anomalies"][str(aid)])
    assert rec["status"] == "confirmed" and rec["history"][-1]["note"] and rec["history"][-1]["by"] == \
        "throttle-protection"
    action = s.read(lambda st: st["actions"][-1])
    assert action["type"] == "anomaly.note" and action["subject"] == {"anomaly_id": aid}
    with pytest.raises(CommandRejected, match="unknown anomaly 999"):
        s.propose(cmd("anomaly.note", anomaly_id=999, reason="x"))
    with pytest.raises(CommandRejected, match="reason"):
        s.propose({"type": "anomaly.note", "anomaly_id": aid, "reason": "",
                   "meta": {"who": "x", "why": "", "at": AT}})
