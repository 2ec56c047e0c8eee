"""Contract: client-id quotas (KIP-55/257 AlterClientQuotas): set, change, remove one key, remove an unset one,
and the values Kafka refuses (zero, an unknown key)."""

from __future__ import annotations

import pytest

from kafkaio.errors import AdminError
from tests.contract.backends import Backend, unique


def test_client_quotas(backend: Backend) -> None:
    port, cid = backend.port, unique("client")
    try:
        port.set_client_quotas(cid, {"consumer_byte_rate": 1_000_000.0, "producer_byte_rate": 2_000_000.0})
        seen(backend, cid, {"consumer_byte_rate": 1_000_000.0, "producer_byte_rate": 2_000_000.0})
        port.set_client_quotas(cid, {"consumer_byte_rate": 500_000.0, "request_percentage": None})
        seen(backend, cid, {"consumer_byte_rate": 500_000.0, "producer_byte_rate": 2_000_000.0})
        port.set_client_quotas(cid, {"producer_byte_rate": None})
        seen(backend, cid, {"consumer_byte_rate": 500_000.0})
        with pytest.raises(AdminError, match="greater than 0"):
            port.set_client_quotas(cid, {"consumer_byte_rate": 0.0})
        with pytest.raises(AdminError):
            port.set_client_quotas(cid, {"no_such_quota": 5.0})
        assert backend.quotas(cid) == {"consumer_byte_rate": 500_000.0}
    finally:
        port.set_client_quotas(cid, {"consumer_byte_rate": None, "producer_byte_rate": None})
    seen(backend, cid, {})


def seen(backend: Backend, cid: str, quotas: dict[str, float]) -> None:
    """DescribeClientQuotas shows ``quotas`` (on Kafka a change reaches the answering broker's metadata cache
    a moment after AlterClientQuotas returns)."""
    backend.wait(f"quotas {quotas}", lambda: backend.quotas(cid) == quotas)
