"""The plan writer's indented JSON is ``json.dumps(indent=2)`` byte for byte (it only keeps fewer strings alive)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.plan_file import indented_json

_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
    st.text(max_size=5) | st.integers(), inner, max_size=5), max_leaves=40)


@given(_JSON)
@settings(max_examples=300, deadline=None)
def test_indented_json_is_the_standard_encoders_bytes(value: Any) -> None:
    assert indented_json(value, "  ") == json.dumps(value, indent=2, allow_nan=False)


@pytest.mark.parametrize("bad", [float("nan"), [1, float("inf")], {"a": float("-inf")}])
def test_non_finite_numbers_are_refused_as_the_standard_encoder_refuses_them(bad: Any) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        indented_json(bad, "  ")
