"""A Python client of the tiered-metadata service (what a broker's RemoteLogMetadataManager calls).

Goal
    Append event groups and read a partition's metadata from whichever node leads, with no caller
    code for leader changes, over TLS when the nodes serve it, and with appends applied at most once
    however often a lost answer makes the client retry.

Method
    One channel per node address (TLS with ``ca_file`` — or ``tls=True`` for the system's roots —
    plus ``cert_file``/``key_file`` for mutual TLS); writes go to the last known leader; an
    ``UNAVAILABLE`` answer naming a leader (``x-tiered-leader``) switches to it, one without a name
    (election in progress, node down, connection lost) tries the next address after a short pause,
    until the call's deadline.  Reads go to the leader too by default (read-your-writes).  A connection
    attempt may take the whole call deadline (a node starved of CPU answers late, not never); after a
    failed one the channel retries after 0.1 s, backing off to 1 s.
    Idempotent appends (default): the client has a random producer id and, per partition, a sequence
    number; each new group takes the next one, a retry (by the client, or by the caller repeating
    the same group after an unknown outcome) keeps it, and the state machine answers a retry of an
    applied group with that group's ids instead of applying it again.  Appends to one partition
    through one client are serialised (a later sequence must not overtake an earlier one).

Guarantee
    ``append_group`` returns only for a committed group (``duplicate`` set when this call's attempt
    was a retry of one already applied).  Idempotent: it also retries the outcomes that may have
    committed (connection lost, ``UNKNOWN``, ``DEADLINE_EXCEEDED``, each attempt bounded by
    ``attempt_timeout``) until the deadline, so a group is applied at most once; what is raised after
    the deadline is of unknown outcome, and calling again with the same group reuses its sequence.
    With ``idempotent=False`` only "not applied" answers are retried (a retry after a lost connection
    may then apply a group twice).

Cost
    One RPC per call plus one per leader change or retry; per partition written, a lock and two ints.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from tiered.proto import pb, rpc
from tiered.server import LEADER_KEY

T = TypeVar("T")

COPY_STARTED, COPY_FINISHED, DELETE_STARTED, DELETE_FINISHED = 1, 2, 3, 4
#: Codes whose outcome is unknown (the group may have committed): retried only by idempotent appends.
UNKNOWN_OUTCOME = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED,
                             grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL})


@dataclass
class _Sequence:
    """One partition's sequence state: the last sequence used, and the one of an unknown outcome."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    last: int = 0
    pending: tuple[int, str] | None = None  # (sequence, digest) of a call that ended with an unknown outcome


def partition_ref(cluster: str, topic_id: str, partition: int) -> Any:
    return pb.PartitionRef(cluster=cluster, topic_id=topic_id, partition=partition)


class TieredClient:
    """See the module docstring; ``addresses`` are the nodes' gRPC host:port.

    TLS: ``ca_file`` (PEM) to trust the nodes' certificates (``tls=True`` alone: the system's roots),
    ``cert_file``/``key_file`` to present a client certificate (mutual TLS), ``server_name`` to verify
    the certificates against that name instead of the address's host.  Idempotence: ``producer_id``
    (default: random) and ``attempt_timeout`` (default: a third of the call's timeout, at least 1 s).
    """

    def __init__(self, addresses: Sequence[str], token: str, timeout: float = 10.0, *,
                 ca_file: str | Path | None = None, cert_file: str | Path | None = None,
                 key_file: str | Path | None = None, server_name: str | None = None, tls: bool = False,
                 idempotent: bool = True, producer_id: int | None = None,
                 attempt_timeout: float | None = None) -> None:
        self.addresses = list(addresses)
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.timeout = timeout
        self._channels: dict[str, grpc.Channel] = {}
        self._leader = self.addresses[0]
        self.redirects = 0
        self.retries = 0
        if (cert_file is None) != (key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS)")
        self._tls: dict[str, Any] = dict(ca_file=ca_file, cert_file=cert_file, key_file=key_file,
                                         server_name=server_name, tls=tls)
        self._credentials = None
        if tls or ca_file is not None or cert_file is not None:
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(ca_file), private_key=_read(key_file), certificate_chain=_read(cert_file))
        # Reconnect soon after a node comes back (first retry after 0.1 s, then at most every 1 s).  Never set
        # grpc.min_reconnect_backoff_ms: gRPC core takes it as the *connect timeout* (default 20 s); at 100 ms a
        # node unscheduled for a tenth of a second (a loaded machine) failed every new connection with
        # UNAVAILABLE "timed out before receiving SETTINGS frame", whatever the call's deadline.
        self._options: list[tuple[str, Any]] = [("grpc.initial_reconnect_backoff_ms", 100),
                                                 ("grpc.max_reconnect_backoff_ms", 1000)]
        if server_name:
            self._options.append(("grpc.ssl_target_name_override", server_name))
        self.idempotent = idempotent
        self.producer_id = producer_id if producer_id is not None else secrets.randbits(63) + 1
        if not 0 < self.producer_id < 2**64:
            raise ValueError("producer_id must be 1..2^64-1")
        self.attempt_timeout = attempt_timeout
        self._sequences: dict[tuple[str, str, int], _Sequence] = {}
        self._sequences_lock = threading.Lock()

    def _stub(self, address: str) -> Any:
        ch = self._channels.get(address)
        if ch is None:
            if self._credentials is None:
                ch = grpc.insecure_channel(address, options=self._options)
            else:
                ch = grpc.secure_channel(address, self._credentials, options=self._options)
            self._channels[address] = ch
        return rpc.TieredMetadataStub(ch)

    def _call(self, name: str, request: Any, timeout: float | None = None, retry_unknown: bool = False) -> Any:
        """One call following the leader; ``retry_unknown`` also retries outcomes that may have applied."""
        total = timeout or self.timeout
        deadline = time.monotonic() + total
        attempt = self.attempt_timeout or max(1.0, total / 3)
        address = self._leader
        tried = 0
        while True:
            left = deadline - time.monotonic()
            if retry_unknown:
                left = min(left, attempt)
            try:
                return getattr(self._stub(address), name)(request, metadata=self.metadata, timeout=max(0.05, left))
            except grpc.RpcError as exc:
                code = exc.code()
                retry = code in UNKNOWN_OUTCOME if retry_unknown else code == grpc.StatusCode.UNAVAILABLE
                if not retry or time.monotonic() >= deadline:
                    raise
                self.retries += 1
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
                     events: Sequence[dict[str, Any]], timeout: float | None = None,
                     sequence: int | None = None) -> Any:
        """Append one group; the answer has ``group_id``, ``segment_ids``, ``raft_index``, ``duplicate``.

        Idempotent clients pick the partition's next sequence (or reuse the one of the previous call on
        this partition when it ended with an unknown outcome and carried the same group); ``sequence``
        sets it explicitly (with a fixed ``producer_id``: a caller keeping its own sequences).
        """
        req = pb.AppendGroupRequest(partition=partition_ref(cluster, topic_id, partition), leader_epoch=leader_epoch,
                                    events=[pb.SegmentEvent(**e) for e in events])
        if not self.idempotent:
            return self._call("AppendGroup", req, timeout)
        digest = hashlib.sha256(req.SerializeToString(deterministic=True)).hexdigest()
        state = self._sequence_of((cluster, topic_id, partition))
        with state.lock:
            if sequence is not None:
                seq = sequence
            elif state.pending is not None and state.pending[1] == digest:
                seq = state.pending[0]
            else:
                seq = state.last + 1
            req.producer_id, req.sequence = self.producer_id, seq
            state.last = max(state.last, seq)
            try:
                resp = self._call("AppendGroup", req, timeout, retry_unknown=True)
            except grpc.RpcError as exc:
                state.pending = (seq, digest) if exc.code() in UNKNOWN_OUTCOME else None
                raise
            state.pending = None
            return resp

    def _sequence_of(self, key: tuple[str, str, int]) -> _Sequence:
        with self._sequences_lock:
            state = self._sequences.get(key)
            if state is None:
                state = self._sequences[key] = _Sequence()
            return state

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

    def find_segment(self, cluster: str, topic_id: str, partition: int, leader_epoch: int, offset: int) -> Any:
        """KIP-405's lookup: the copied segment holding ``offset`` at ``leader_epoch`` (``found`` false: none)."""
        return self._call("FindSegment", pb.FindSegmentRequest(
            partition=partition_ref(cluster, topic_id, partition), leader_epoch=leader_epoch, offset=offset))

    def epoch_segments(self, cluster: str, topic_id: str, partition: int, leader_epoch: int) -> Any:
        """Copied segments holding ``leader_epoch`` and the epoch's highest remote offset."""
        return self._call("EpochSegments", pb.EpochSegmentsRequest(
            partition=partition_ref(cluster, topic_id, partition), leader_epoch=leader_epoch))

    def segment_by_uuid(self, cluster: str, topic_id: str, partition: int, segment_uuid: str) -> Any:
        """The live segment registered under a Kafka segment uuid (``found`` false: none)."""
        return self._call("SegmentById", pb.SegmentByIdRequest(
            partition=partition_ref(cluster, topic_id, partition), segment_uuid=segment_uuid))

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
        pinned = TieredClient([address], self.metadata[0][1][len("Bearer "):], self.timeout,
                              idempotent=self.idempotent, attempt_timeout=self.attempt_timeout, **self._tls)
        return pinned

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()


def _read(path: str | Path | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()


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
