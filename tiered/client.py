"""A Python client of the tiered-metadata service (what a broker's RemoteLogMetadataManager calls).

Goal
    Append event groups and read a partition's metadata from whichever node leads, with no caller
    code for leader changes.

Method
    One channel per node address; writes go to the last known leader; an ``UNAVAILABLE`` answer
    naming a leader (``x-tiered-leader``) switches to it, one without a name (election in progress,
    node down) tries the next address after a short pause, until the call's deadline.  Reads go to
    the leader too by default (read-your-writes); ``any_node=True`` reads the first that answers.

Guarantee
    ``append_group`` returns only for a committed group.  It retries only answers that mean "not
    applied" (UNAVAILABLE from a follower or an unreachable node); a ``DEADLINE_EXCEEDED``/``UNKNOWN``
    outcome is raised to the caller (it may have committed: a broker re-reads the state).

Cost
    One RPC per call plus one per leader change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from tiered.proto import pb, rpc
from tiered.server import LEADER_KEY

T = TypeVar("T")

COPY_STARTED, COPY_FINISHED, DELETE_STARTED, DELETE_FINISHED = 1, 2, 3, 4


def partition_ref(cluster: str, topic_id: str, partition: int) -> Any:
    return pb.PartitionRef(cluster=cluster, topic_id=topic_id, partition=partition)


class TieredClient:
    """See the module docstring; ``addresses`` are the nodes' gRPC host:port."""

    def __init__(self, addresses: Sequence[str], token: str, timeout: float = 10.0) -> None:
        self.addresses = list(addresses)
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.timeout = timeout
        self._channels: dict[str, grpc.Channel] = {}
        self._leader = self.addresses[0]
        self.redirects = 0

    def _stub(self, address: str) -> Any:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = grpc.insecure_channel(address)
        return rpc.TieredMetadataStub(ch)

    def _call(self, name: str, request: Any, timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (timeout or self.timeout)
        address = self._leader
        tried = 0
        while True:
            left = deadline - time.monotonic()
            try:
                return getattr(self._stub(address), name)(request, metadata=self.metadata, timeout=max(0.05, left))
            except grpc.RpcError as exc:
                code = exc.code()
                if code != grpc.StatusCode.UNAVAILABLE or time.monotonic() >= deadline:
                    raise
                hint = dict(exc.trailing_metadata() or ()).get(LEADER_KEY) or ""
                if hint and hint != address:
                    address = hint
                else:
                    tried += 1
                    address = self.addresses[tried % len(self.addresses)]
                    time.sleep(0.05)
                self.redirects += 1
                self._leader = address

    def append_group(self, cluster: str, topic_id: str, partition: int, leader_epoch: int,
                     events: Sequence[dict[str, Any]], timeout: float | None = None) -> Any:
        req = pb.AppendGroupRequest(partition=partition_ref(cluster, topic_id, partition), leader_epoch=leader_epoch,
                                    events=[pb.SegmentEvent(**e) for e in events])
        return self._call("AppendGroup", req, timeout)

    def fetch_groups(self, cluster: str, topic_id: str, partition: int, after: int = 0, limit: int = 1000) -> Any:
        return self._call("FetchGroups", pb.FetchGroupsRequest(partition=partition_ref(cluster, topic_id, partition),
                                                               after_group_id=after, limit=limit))

    def all_groups(self, cluster: str, topic_id: str, partition: int, page: int = 1000) -> list[Any]:
        out: list[Any] = []
        after = 0
        while True:
            resp = self.fetch_groups(cluster, topic_id, partition, after, page)
            out.extend(resp.groups)
            if not resp.more or not resp.groups:
                return out
            after = resp.groups[-1].group_id

    def current_state(self, cluster: str, topic_id: str, partition: int) -> Any:
        return self._call("CurrentState", pb.CurrentStateRequest(partition=partition_ref(cluster, topic_id, partition)))

    def local_start_fetch_offset(self, cluster: str, topic_id: str, partition: int, log_start: int, log_end: int,
                                 avg_ingress_per_s: float, threshold_s: float) -> Any:
        return self._call("LocalStartFetchOffset", pb.LocalStartFetchOffsetRequest(
            partition=partition_ref(cluster, topic_id, partition), local_log_start=log_start, local_log_end=log_end,
            avg_ingress_per_s=avg_ingress_per_s, threshold_s=threshold_s))

    def delete_partition(self, cluster: str, topic_id: str, partition: int) -> bool:
        resp = self._call("DeletePartition",
                          pb.DeletePartitionRequest(partition=partition_ref(cluster, topic_id, partition)))
        return bool(resp.deleted)

    def list_partitions(self, cluster: str = "", limit: int = 1000) -> list[Any]:
        return list(self._call("ListPartitions", pb.ListPartitionsRequest(cluster=cluster, limit=limit)).partitions)

    def on(self, address: str) -> TieredClient:
        """A client pinned to one node (no leader following; tests read each node's local state)."""
        pinned = TieredClient([address], self.metadata[0][1][len("Bearer "):], self.timeout)
        return pinned

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()


def retrying(fn: Callable[[], T], attempts: int = 3) -> T:
    """Call ``fn`` again on UNAVAILABLE (helper for scripts)."""
    for i in range(attempts):
        try:
            return fn()
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or i == attempts - 1:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")
