"""Fixtures shared by the integration tests."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient

from tests.support.executor_support import Sim


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


@pytest.fixture(autouse=True, scope="module")
def _no_kafka_client_outlives_its_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """Close (with a warning naming the module) every kafka-python admin client a module left open.

    A client left running after its simulator stopped keeps reconnecting to that simulator's ports; a later
    module's simulator can be given the same ports, and the stale client's failed TLS handshakes and retries
    then run inside that module (the secured-cluster tests timed out on one in CI)."""
    yield
    leaked = [o for o in gc.get_objects()  # type(), not isinstance(): a dead weakref proxy raises on __class__
              if issubclass(type(o), KafkaAdminClient) and not getattr(o, "_closed", True)]
    for client in leaked:
        with contextlib.suppress(Exception):
            client.close()
    if leaked:
        warnings.warn(f"{request.module.__name__} left {len(leaked)} Kafka admin client(s) open "
                      f"({', '.join(sorted({str(c.config.get('client_id')) for c in leaked}))}); closed them",
                      stacklevel=1)
