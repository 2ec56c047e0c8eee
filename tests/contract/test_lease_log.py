"""Contract: the small one-partition log Guardian keeps on the cluster (the execution lease, domain/lease.py):
``ensure_log`` creates it once with its configs, ``append_log`` returns consecutive offsets and the time the log
stamped, ``read_log`` returns the records from an offset to the end; an absent log is an error."""

from __future__ import annotations

import time

import pytest

from domain.lease import LEASE_TOPIC_CONFIGS
from kafkaio.errors import AdminError
from tests.contract.backends import Backend, unique


def test_the_lease_log(backend: Backend) -> None:
    port, t = backend.port, unique("lease")
    with pytest.raises(AdminError):
        port.read_log(t)
    with pytest.raises(AdminError):
        port.append_log(t, b"k", b"v")
    port.ensure_log(t, LEASE_TOPIC_CONFIGS)
    port.ensure_log(t, LEASE_TOPIC_CONFIGS)  # idempotent
    try:
        assert port.read_log(t).records == () and port.read_log(t).end == 0
        before = time.time() * 1000
        first = port.append_log(t, b"k", b"claim")
        second = port.append_log(t, b"k", b"renew")
        assert (first[0], second[0]) == (0, 1)
        assert first[1] <= second[1]
        read = port.read_log(t)
        assert (read.first, read.end) == (0, 2)
        assert [(r.offset, r.ts_ms, r.value) for r in read.records] == [(0, first[1], b"claim"),
                                                                         (1, second[1], b"renew")]
        if backend.real:  # LogAppendTime: the broker's clock (the fake stamps its own test clock, clock_ms)
            assert before - 5_000 <= first[1] <= time.time() * 1000 + 5_000
        tail = port.read_log(t, 1)
        assert (tail.first, tail.end, [r.value for r in tail.records]) == (1, 2, [b"renew"])
        past = port.read_log(t, 5)
        assert (past.first, past.end, past.records) == (5, 2, ())
    finally:
        backend.delete_topic(t)


def test_the_lease_log_is_a_topic_with_its_configs(backend: Backend) -> None:
    port, t = backend.port, unique("lease")
    port.ensure_log(t, LEASE_TOPIC_CONFIGS)
    try:
        # a topic like any other: one partition on min(3, brokers) replicas, its configs set
        live = backend.wait("the log's partition", lambda: (lv := port.live()) and (t, 0) in lv.partitions and lv)
        assert live.topic_sizes[t] == 1 and len(live.partitions[(t, 0)].replicas) == 3
        assert port.topic_configs([t], list(LEASE_TOPIC_CONFIGS)) == {t: LEASE_TOPIC_CONFIGS}
    finally:
        backend.delete_topic(t)
