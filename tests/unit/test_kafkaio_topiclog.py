"""kafkaio.topiclog.read when retention deletes the log's start between ListOffsets and Fetch."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import kafka.errors as kerrors
import pytest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest

from kafkaio import topiclog
from tests.support.records import record_batch


class _Log:
    """One partition whose first offset moves from ``firsts[i]`` at the i-th ListOffsets(-2)."""

    def __init__(self, firsts: list[int], end: int) -> None:
        self.firsts, self.end = list(firsts), end
        self.fetched: list[int] = []
        self.first = self.firsts.pop(0)
        self._manager = NS(send=self._send, run=self._run)

    def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        return [{"name": topics[0], "error_code": 0, "partitions": [{"partition_index": 0, "leader_id": 1}]}]

    def _run(self, go: Any) -> Any:
        coro = go()
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value
        raise AssertionError("the fake never suspends")

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

    log._manager = NS(send=refuse, run=log._run)
    with pytest.raises(kerrors.OffsetOutOfRangeError):
        topiclog.read(log, "lease")
