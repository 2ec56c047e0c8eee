"""The state machine's handlers: one per command type of the union, and the typed records read back every
stored member exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controlplane.state.commands import COMMANDS, PlanDecide
from controlplane.state.handlers import HANDLERS, missing
from controlplane.state.handlers.registry import handles
from domain.cluster_record import ClusterRecord
from domain.execution import Execution
from domain.migration import MigrationRecord
from domain.plan_record import PLAN_TRANSITIONS, IllegalPlanTransition, PlanRecord, PlanStatus, check_plan_transition
from domain.throttle_record import ThrottleRecord

GOLDEN = json.loads((Path(__file__).parent / "data" / "state_wire_golden.json").read_text())["state"]


def test_every_command_type_has_exactly_one_handler() -> None:
    assert missing() == []
    assert set(HANDLERS) == set(COMMANDS)


def test_a_handler_for_a_type_of_another_model_or_a_second_handler_is_refused_at_registration() -> None:
    with pytest.raises(TypeError, match="not a command type of PlanDecide"):
        handles(PlanDecide, "plan.propose")(lambda led, cmd: {})
    with pytest.raises(TypeError, match="already has a handler"):
        handles(PlanDecide, "plan.approve")(lambda led, cmd: {})


def test_plan_transition_table_guards() -> None:
    check_plan_transition(1, PlanStatus.PROPOSED, PlanStatus.APPROVED)
    with pytest.raises(IllegalPlanTransition, match="plan 1 is completed"):
        check_plan_transition(1, PlanStatus.COMPLETED, PlanStatus.EXECUTING)
    assert all(PLAN_TRANSITIONS[s] == frozenset() for s in (PlanStatus.REJECTED, PlanStatus.COMPLETED))


@pytest.mark.parametrize(("member", "record"), [("plans", PlanRecord), ("executions", Execution),
                                                ("migrations", MigrationRecord), ("clusters", ClusterRecord)])
def test_records_read_back_every_stored_member_exactly(member: str, record: Any) -> None:
    docs = list(GOLDEN[member].values())
    assert docs
    for doc in docs:
        assert record.from_json(doc).to_json() == doc


def test_throttle_records_read_back_exactly_and_are_detached() -> None:
    docs = [{"key": "k", "kind": "partition_fetch", "target": {"topic": "t"}, "rate_bytes_per_s": 9.0,
             "evidence": {"disk": "d"}, "set_by": "a", "why": "", "since": "s", "updated_at": "u"}]
    for doc in docs:
        rec = ThrottleRecord.from_json(doc)
        assert rec.to_json() == doc
        rec.to_json()["target"]["topic"] = "changed"
        assert rec.target == doc["target"]
