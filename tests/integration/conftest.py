"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.executor_support import Sim


@pytest.fixture
def make_sim(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], Sim]]:
    """A factory of kafkasim processes for one test; every one it made is stopped afterwards."""
    sims: list[Sim] = []

    def make(spec: dict[str, Any]) -> Sim:
        sims.append(Sim(spec, tmp_path))
        return sims[-1]

    yield make
    for s in sims:
        s.stop()
