"""The planner registry: one signature for the service, clear errors for bad parameters."""

from __future__ import annotations

import pytest

from domain import check_plan
from kafkasim.generator import GeneratorSpec, generate_snapshot
from planners import PlannerError
from planners.registry import PLANNERS

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
