"""A local group whose picked port was taken before its node bound it starts again on new ports.

Ports picked free (``free_ports``) stay free only until another process binds them, and an outgoing
connection's ephemeral port is enough: a node then exits with ``EXIT_PORT_IN_USE``. ``start_group`` picks
again; any other exit is reported at once (``NodeExited`` with the node's last log line), not after the
whole start-up timeout.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane import launcher
from controlplane.bootstrap import EXIT_PORT_IN_USE
from controlplane.launcher import NodeExited, ServiceCluster

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture()
def taken() -> Iterator[int]:
    """A port something else listens on."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        yield srv.getsockname()[1]


def test_a_picked_port_taken_meanwhile_is_picked_again(tmp_path: Path, taken: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = launcher.free_ports
    calls: list[list[int]] = []

    def first_one_taken(count: int) -> list[int]:
        ports = real(count)
        if not calls:
            ports[1] = taken  # the node's HTTP port (size 1: [raft, http])
        calls.append(ports)
        return ports

    monkeypatch.setattr(launcher, "free_ports", first_one_taken)
    group = ServiceCluster(tmp_path, size=1)
    try:
        assert group.http_ports == [taken]
        group.start_group(timeout=60)
        assert len(calls) == 2 and group.http_ports == [calls[1][1]] != [taken]
        assert group.status(1) is not None
    finally:
        group.close()


def test_given_ports_are_not_picked_again_and_an_exit_is_reported_at_once(tmp_path: Path, taken: int) -> None:
    group = ServiceCluster(tmp_path, size=1, raft_ports=launcher.free_ports(1))
    group.http_ports = [taken]  # given, then taken (the constructor probes given ports)
    started = time.monotonic()
    try:
        with pytest.raises(NodeExited) as exc:
            group.start_group(timeout=60)
        assert exc.value.code == EXIT_PORT_IN_USE and f"port {taken}" in str(exc.value)
        assert time.monotonic() - started < 30
    finally:
        group.close()
