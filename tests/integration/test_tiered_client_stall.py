"""A tiered client connecting to a node that is briefly unscheduled waits for it instead of failing.

On a loaded machine a node process may not run for a few hundred milliseconds.  The client once set
``grpc.min_reconnect_backoff_ms = 100``, which gRPC core uses as the connect timeout: every new connection to
such a node failed within ~0.1 s with UNAVAILABLE ("connection attempt timed out before receiving SETTINGS
frame") whatever the call's deadline, and a call pinned to one node failed outright (the flaky
``test_appends_fencing_and_follower_hint``).  Here a follower of three real member processes is stopped
(SIGSTOP) for 0.4 s while a fresh client connects to it: the call answers after the pause, first time.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.support.tiered_support import TOKEN, Group, running_group
from tiered.client import TieredClient
from tiered.proto import pb

STALL_S = 0.4


@pytest.fixture()
def group(tmp_path: Path) -> Iterator[Group]:
    with running_group(tmp_path, 20000) as g:
        yield g


@pytest.mark.slow
def test_a_new_connection_to_a_stalled_node_waits_for_it(group: Group) -> None:
    leader = group.leader()
    member = next(m for m in group.members if m.index != leader)  # a read on a follower: no election needed
    for attempt in range(3):
        client = TieredClient([member.grpc_addr], TOKEN, timeout=5.0)
        member.signal(signal.SIGSTOP)
        resume = threading.Timer(STALL_S, member.signal, args=(signal.SIGCONT,))
        resume.start()
        started = time.monotonic()
        try:
            raw = client._stub(member.grpc_addr).ListPartitions(pb.ListPartitionsRequest(), metadata=client.metadata,
                                                                timeout=5.0)
        except grpc.RpcError as exc:
            pytest.fail(f"attempt {attempt}: {exc.code().name} after {time.monotonic() - started:.2f} s: "
                        f"{exc.details()}")
        finally:
            resume.join()
            client.close()
        took = time.monotonic() - started
        assert took >= STALL_S * 0.9, took  # it did wait for the stalled node
        assert list(raw.partitions) == []
        # the client's own retry loop needs no retry either
        client = TieredClient([member.grpc_addr], TOKEN, timeout=5.0)
        member.signal(signal.SIGSTOP)
        resume = threading.Timer(STALL_S, member.signal, args=(signal.SIGCONT,))
        resume.start()
        try:
            assert client.list_partitions() == []
        finally:
            resume.join()
            client.close()
        assert client.retries == 0, f"attempt {attempt}: {client.retries} retries"
