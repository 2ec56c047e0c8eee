"""Fixtures of the Kafka port's conformance suite: one ``backend`` parametrised over fake, kafkasim and Kafka.

Goal: each contract test is written once and runs on the three backends (``backend``), or on the two that
speak the wire (``wire_backend``: kafkasim and Kafka) when it checks something the in-memory fake has no
notion of (consumer groups, OffsetForLeaderEpoch).

Method: the fake is built per test (free); kafkasim and the lab are session-scoped and started lazily, on
the first test that asks for them, so ``-k fake`` starts neither. :func:`xfail_on` marks a known, listed
difference of one backend as a strict xfail (it must fail there, and pass everywhere else).

Guarantee: at most one lab and one kafkasim per session, both stopped at its end (the lab's loop devices
released: ``running_lab``'s guarantee). Cost: see :mod:`tests.contract.backends`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.backends import (
    Backend,
    FakeBackend,
    LabBackend,
    SimBackend,
    lab_for_session,
    quiet_kafka_logs,
    start_kafkasim,
)
from tests.support.lab_support import require_lab

ALL = ["fake", "kafkasim", "kafka"]
WIRE = ["kafkasim", "kafka"]


@pytest.fixture(scope="package")  # stopped once the contract tests are done, not at the end of the run
def kafkasim_backend() -> Iterator[SimBackend]:
    quiet_kafka_logs()
    sim = start_kafkasim()
    try:
        b = SimBackend(sim)
        yield b
        b.close()
    finally:
        sim.stop()


@pytest.fixture(scope="package")  # stopped once the contract tests are done, not at the end of the run
def kafka_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabBackend]:
    require_lab()
    quiet_kafka_logs()
    with lab_for_session(Path(tmp_path_factory.mktemp("contract-lab"))) as lab:
        b = LabBackend(lab)
        yield b
        b.close()


def _backend(request: pytest.FixtureRequest, name: str) -> Backend:
    if name == "fake":
        return FakeBackend()
    b: Backend = request.getfixturevalue(f"{name}_backend")
    return b


@pytest.fixture(params=ALL)
def backend(request: pytest.FixtureRequest) -> Backend:
    """The port on each of the three backends."""
    return _backend(request, str(request.param))


@pytest.fixture(params=WIRE)
def wire_backend(request: pytest.FixtureRequest) -> Backend:
    """kafkasim and Kafka: for behaviour the fake does not model (consumer groups, OffsetForLeaderEpoch)."""
    return _backend(request, str(request.param))


def xfail_on(request: pytest.FixtureRequest, backend: Backend, names: set[str], reason: str,
             raises: type[BaseException] | None = None) -> None:
    """Mark this test a strict xfail on the backends named (a difference listed in kafkasim/README.md's table);
    with ``raises``, only that exception counts as the expected failure (anything else fails the test)."""
    if backend.name in names:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason, raises=raises))
