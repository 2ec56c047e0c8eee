"""The replicated policies overlaid on a snapshot (shared by the collection job and the executor)."""

from __future__ import annotations

from domain import BrokerState, LeaderChange, PartitionMove, Plan, check_plan, parse_snapshot
from domain.policies import apply_policies, has_policies
from tests.support.snapshots import dumps, small_doc


def test_overlay_flags_maintenance_moves_pools_and_placement_and_nothing_else() -> None:
    snap = parse_snapshot(dumps(small_doc()))
    cluster = {"pools": {"pay": [4, 5]}, "placement": {"default": {"idc-a": 1}, "topics": {"ledger": {"idc-b": 1}}}}
    over = apply_policies(snap, cluster, {"2": {"why": "restart"}, "6": {"why": "already dead"}})
    state = {b.id: b.state for b in over.brokers}
    assert state[2] is BrokerState.MAINTENANCE and state[6] is BrokerState.DEAD and state[1] is BrokerState.ALIVE
    assert {b.id: b.pool for b in over.brokers}[4] == "pay"
    assert {t.name: t.placement for t in over.topics}["ledger"] == {"idc-b": 1}
    assert over.default_placement == {"idc-a": 1}
    assert apply_policies(snap, {}, {}) == snap
    assert not has_policies({}, {})
    assert not has_policies({"pools": {}, "placement": {"default": None, "topics": {}}}, {})
    assert has_policies({}, {"2": {}}) and has_policies({"pools": {"pay": [5]}}, {})


def test_a_move_valid_on_the_collected_view_breaks_once_maintenance_is_overlaid() -> None:
    snap = parse_snapshot(dumps(small_doc()))
    plan = Plan("c1", "rebalance", (PartitionMove("orders", 0, (3, 2, 4), (None, None, None)),),
                (LeaderChange("orders", 1, 1),))
    assert check_plan(snap, plan) == []
    codes = {v.code for v in check_plan(apply_policies(snap, {}, {"3": {}}), plan)}
    assert "target-not-alive" in codes
