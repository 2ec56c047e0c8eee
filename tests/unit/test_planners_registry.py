"""The planner registry: one signature for the service, clear errors for bad parameters."""

from __future__ import annotations

import pytest

from domain import apply_plan, check_plan
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import PlannerError
from planners.registry import PLANNERS, PROPOSERS

SNAP = generate_snapshot(GeneratorSpec(brokers=12, disks_per_broker=3, partitions=200, seed=2,
                                       pools={"shared": 0.75, "free": 0.25}))


@pytest.mark.parametrize(("kind", "params"), [
    ("rebalance", {}),
    ("rebalance", {"max_moves": 10, "max_bytes": 10**15, "capacity_headroom": 0.2, "threshold": 1.2}),
    ("rebalance", {"tolerance": 1.05}),
    ("leaders", {"tolerance": 1.1}),
    ("drain", {"brokers": [1, 2]}),
    ("pool-shrink", {"pool": "shared", "count": 1}),
])
def test_every_kind_gives_a_valid_plan(kind: str, params: dict[str, object]) -> None:
    plan = PLANNERS[kind](SNAP, params)
    assert plan.kind == kind
    assert check_plan(SNAP, plan) == []
    if "max_moves" in params:
        assert plan.summary is not None and plan.summary.partitions_moved <= 10


def test_preallocate_kind_returns_the_new_topic_plan() -> None:
    plan = PLANNERS["preallocate"](SNAP, {"topic": "fresh", "partitions": 3, "bytes_in_per_s": 3e6})
    assert plan.kind == "preallocate" and len(plan.moves) == 3


@pytest.mark.parametrize(("kind", "params"), [
    ("rebalance", {"nope": 1}),
    ("rebalance", {"max_moves": "ten"}),
    ("rebalance", {"capacity_headroom": 2}),
    ("rebalance", {"threshold": 0.5}),
    ("drain", {}),
    ("drain", {"brokers": "1,2"}),
    ("pool-shrink", {"count": 1}),
    ("preallocate", {"topic": "x"}),
])
def test_bad_parameters_are_type_errors(kind: str, params: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        PLANNERS[kind](SNAP, params)


def test_impossible_requests_are_planner_errors() -> None:
    with pytest.raises(PlannerError):
        PLANNERS["drain"](SNAP, {"brokers": [999]})


def test_every_planner_kind_is_a_proposer_and_pool_grow_needs_its_brokers_moved_first() -> None:
    assert set(PLANNERS) < set(PROPOSERS) and {"pool-grow", "migrate-idc"} <= set(PROPOSERS)
    grown = PROPOSERS["pool-grow"](SNAP, {"pool": "shared", "count": 2})
    (plan,) = grown.plans
    moved = grown.pools["shared"]
    assert len(moved) == 2 and all(SNAP.index.broker_by_id[b].pool == "free" for b in moved)
    assert check_plan(grown.snapshot, plan) == []  # valid once the brokers are in the pool ...
    assert check_plan(SNAP, plan) != []  # ... and not before, which is why they are a prerequisite
    assert grown.prerequisites == {"pools": {"shared": moved}}


def test_migrate_idc_proposes_steps_each_valid_after_the_previous() -> None:
    topic = next(t for t in SNAP.topics if len(t.partitions[0].replicas) == 3)
    target = sorted({b.idc for b in SNAP.brokers})[-1]
    proposal = PROPOSERS["migrate-idc"](SNAP, {"topics": [topic.name], "placement": {target: 3}})
    assert proposal.placements == {topic.name: {target: 3}} and len(proposal.plans) == 3
    current = proposal.snapshot
    for step in proposal.plans:
        assert step.kind == "migrate-idc" and check_plan(current, step) == []
        current = apply_plan(current, step)
    with pytest.raises(TypeError, match="placement"):
        PROPOSERS["migrate-idc"](SNAP, {"topics": [topic.name], "placement": {target: "3"}})
