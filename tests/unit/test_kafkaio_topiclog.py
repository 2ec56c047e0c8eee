"""kafkaio.topiclog.read when retention deletes the log's start between ListOffsets and Fetch."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import kafka.errors as kerrors
import pytest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest

from kafkaio import topiclog
from tests.support.records import record_batch


def _drive(go: Any) -> Any:
    """Run a coroutine that never suspends (the fake connection manager's ``run``)."""
    coro = go()
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the fake never suspends")


class _Log:
    """One partition whose first offset moves from ``firsts[i]`` at the i-th ListOffsets(-2)."""

    def __init__(self, firsts: list[int], end: int) -> None:
        self.firsts, self.end = list(firsts), end
        self.fetched: list[int] = []
        self.first = self.firsts.pop(0)
        self._manager = NS(send=self._send, run=_drive)

    def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        return [{"name": topics[0], "error_code": 0, "partitions": [{"partition_index": 0, "leader_id": 1}]}]

    async def _send(self, request: Any, node_id: int) -> Any:
        if isinstance(request, ListOffsetsRequest):
            which = request.topics[0].partitions[0].timestamp
            offset = self.first if which == -2 else self.end
            if which == -2 and self.firsts:
                self.first = self.firsts.pop(0)
            return NS(topics=[NS(partitions=[NS(error_code=0, offset=offset)])])
        assert isinstance(request, FetchRequest)
        at = request.topics[0].partitions[0].fetch_offset
        self.fetched.append(at)
        if at < self.first:
            return NS(responses=[NS(partitions=[NS(error_code=kerrors.OffsetOutOfRangeError.errno, records=b"")])])
        values = [f"r{o}".encode() for o in range(at, self.end)]
        return NS(responses=[NS(partitions=[NS(error_code=0, records=record_batch(values, at))])])


def test_a_start_deleted_after_list_offsets_is_read_from_the_new_start() -> None:
    log = _Log(firsts=[0, 5], end=8)  # ListOffsets says 0; by the Fetch retention moved it to 5
    got = topiclog.read(log, "lease")
    assert log.fetched == [0, 5]
    assert (got.first, got.end) == (5, 8) and [r.offset for r in got.records] == [5, 6, 7]


def test_out_of_range_for_any_other_reason_still_raises() -> None:
    log = _Log(firsts=[0], end=8)

    async def refuse(request: Any, node_id: int) -> Any:
        if isinstance(request, FetchRequest):
            return NS(responses=[NS(partitions=[NS(error_code=kerrors.OffsetOutOfRangeError.errno, records=b"")])])
        return NS(topics=[NS(partitions=[NS(error_code=0, offset=0 if request.topics[0].partitions[0].timestamp
                                            == -2 else 8)])])

    log._manager = NS(send=refuse, run=_drive)
    with pytest.raises(kerrors.OffsetOutOfRangeError):
        topiclog.read(log, "lease")


class _NewLog:
    """A log just created: the metadata names broker 1 leader, then broker 2; broker 1 answers
    NOT_LEADER_OR_FOLLOWER the first ``refusals`` times (its own metadata is behind), as Kafka 4.2 does."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.sent_to: list[int] = []
        self.describes = 0
        self._manager = NS(send=self._send, run=_drive)

    def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        self.describes += 1
        return [{"name": topics[0], "error_code": 0, "partitions": [{"partition_index": 0, "leader_id": 1}]}]

    async def _send(self, request: Any, node_id: int) -> Any:
        self.sent_to.append(node_id)
        refused = self.refusals > 0
        self.refusals -= refused
        code = kerrors.NotLeaderForPartitionError.errno if refused else 0
        return NS(responses=[NS(partition_responses=[NS(error_code=code, base_offset=7, log_append_time_ms=42)])])


def test_an_append_refused_by_a_leader_not_yet_leading_is_sent_again() -> None:
    log = _NewLog(refusals=2)
    assert topiclog.append(log, "lease", b"k", b"v") == (7, 42)
    assert log.sent_to == [1, 1, 1] and log.describes == 3  # the leader asked again before each send


def test_an_append_still_refused_after_the_wait_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topiclog._at_leader, "__defaults__", (0.0,))  # no wait left
    with pytest.raises(kerrors.NotLeaderForPartitionError):
        topiclog.append(_NewLog(refusals=10**6), "lease", b"k", b"v")
