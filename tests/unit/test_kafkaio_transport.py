"""The connection's transports deliver what a broker sent before it closed (kafka-python 3.0 dropped it).

A broker answers a refused login with SaslAuthenticate error 58 and closes the connection; when the
answer and the close arrive in one read, kafka-python's own transport discards the answer, and the
refusal looks like a dropped connection (retried with backoff until the bootstrap deadline).
"""

from __future__ import annotations

import socket
import ssl
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.net.selector import NetworkSelector
from kafka.net.transport import KafkaTCPTransport

from kafkaio.connection import _GuardedManager, _TcpTransport


class _Protocol:
    _sensors = None

    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.lost: BaseException | None = None
        self.done = False

    def data_received(self, data: bytes) -> None:
        self.got.append(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost, self.done = exc, True


def _read_until_closed(cls: Any) -> _Protocol:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.sendall(b"error 58: invalid credentials")  # the answer and the close, both before the first read
    peer.close()
    net = NetworkSelector()
    proto = _Protocol()
    try:
        transport = cls(net, ours)
        transport.set_protocol(proto)
        transport.resume_reading()
        for _ in range(100):
            net.poll(timeout_ms=10)
            if proto.done:
                break
    finally:
        net.close()
    assert proto.done
    return proto


def test_the_bytes_before_the_close_reach_the_protocol() -> None:
    proto = _read_until_closed(_TcpTransport)
    assert b"".join(proto.got) == b"error 58: invalid credentials"
    assert "socket disconnected" in str(proto.lost)


def test_kafka_pythons_own_transport_still_drops_them() -> None:
    """Why :class:`_TcpTransport` exists: when this fails, kafka-python fixed it and the override can go."""
    proto = _read_until_closed(KafkaTCPTransport)
    if proto.got:
        pytest.fail("kafka-python now delivers the bytes read with EOF: drop kafkaio.connection._DeliverBeforeEof")


def _depth(exc: BaseException) -> int:
    tb, n = exc.__traceback__, 0
    while tb is not None:
        tb, n = tb.tb_next, n + 1
    return n


def test_a_recorded_login_failure_is_reraised_with_a_traceback_that_does_not_grow() -> None:
    """kafka-python re-raises the one stored exception; each raise appended frames to its traceback."""
    stored = ssl.SSLCertVerificationError("certificate verify failed")
    manager: Any = SimpleNamespace(_auth_failures={1: stored})
    depths = []
    for _ in range(50):
        with pytest.raises(ssl.SSLCertVerificationError) as caught:
            _GuardedManager.maybe_raise_auth_failure(manager, 1)
        depths.append(_depth(caught.value))
    assert depths[-1] == depths[0] <= 3
    manager._auth_failures.clear()
    _GuardedManager.maybe_raise_auth_failure(manager, 1)  # nothing recorded: no raise
