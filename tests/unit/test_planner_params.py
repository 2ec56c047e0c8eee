"""One parameter model per planner kind: the registry, the API's check and the CLI apply the same rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controlplane.api.plan_params import PARAMS_BY_KIND
from controlplane.cli.app import app
from planners.params import DEFAULT_BALANCE_TARGET, PARAMS, ParamsError, RebalanceParams, parse_params
from planners.registry import PROPOSERS


def test_every_proposer_kind_has_its_model_and_the_api_checks_with_it() -> None:
    assert set(PARAMS) == set(PROPOSERS)
    assert all(PARAMS_BY_KIND[kind] is model for kind, model in PARAMS.items())


@pytest.mark.parametrize(("params", "goal"), [({}, DEFAULT_BALANCE_TARGET), ({"tolerance": 1.3}, 1.3),
                                              ({"target": 1.2, "tolerance": 1.3}, 1.2),
                                              ({"threshold": 1.05, "target": 1.2}, 1.05), ({"target": 2}, 2.0)])
def test_rebalance_goal_alias_rule(params: dict[str, float], goal: float) -> None:
    assert parse_params(RebalanceParams, params).options().threshold == goal


@pytest.mark.parametrize(("params", "path"), [({"threshold": 0.9}, "$.threshold"), ({"floor": 1.5}, "$.floor"),
                                              ({"evacuate_dead": "yes"}, "$.evacuate_dead"),
                                              ({"max_bytes": 1.5}, "$.max_bytes"), ({"nope": 1}, "$.nope")])
def test_a_bad_parameter_is_a_type_error_naming_it(params: dict[str, object], path: str) -> None:
    with pytest.raises(ParamsError, match=path.replace("$", r"\$")):
        parse_params(RebalanceParams, params)


def test_integral_json_numbers_are_integers_and_booleans_are_not() -> None:
    assert parse_params(RebalanceParams, {"max_bytes": 3.0}).max_bytes == 3
    with pytest.raises(ParamsError, match=r"\$.max_bytes"):
        parse_params(RebalanceParams, {"max_bytes": True})


def test_the_cli_refuses_by_the_same_rule(tmp_path: Path) -> None:
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps({}))  # never read: the parameters are refused first
    r = CliRunner().invoke(app, ["plan", "rebalance", "-s", str(snapshot), "-o", str(tmp_path / "p.json"),
                                 "--target", "0.9"])
    assert r.exit_code == 2, r.output
    assert "$.threshold" in r.output and "greater than or equal to 1" in r.output
