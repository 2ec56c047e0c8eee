"""The gRPC server of the tiered-metadata service (``tiered_metadata.proto``).

Goal
    Brokers (KIP-405 ``RemoteLogMetadataManager`` plug-ins) append event groups and read a
    partition's groups, current state and local start fetch offset over gRPC.

Method
    A ``grpc.server`` with a thread pool; every call first passes :func:`authorize` on the
    ``authorization: Bearer <token>`` metadata (reads need a viewer token, writes an operator token;
    the node has no anonymous access: secure by default).  Writes call :class:`~tiered.node.TieredNode`
    (Raft); a follower answers ``UNAVAILABLE`` with the leader's gRPC address in the trailing metadata
    ``x-tiered-leader`` (and in the details text) so the client retries there.  A stale leader epoch is
    ``FAILED_PRECONDITION``, an idempotent request older than its producer's last applied one
    ``ALREADY_EXISTS``, any other refused batch ``INVALID_ARGUMENT``, an unknown outcome (commit
    timeout) ``DEADLINE_EXCEEDED``.  Reads go to the local store.  The port speaks TLS with
    :class:`ServerTls` (server certificate + key; with a client CA, mutual TLS: a client without a
    certificate signed by it fails the handshake); without TLS, :func:`start_server` refuses any
    address but loopback unless ``allow_plaintext`` (tokens would cross the network in clear).

Guarantee
    An ``AppendGroup`` answered OK is committed on a majority; an error other than
    ``DEADLINE_EXCEEDED``/``UNKNOWN``/``UNAVAILABLE`` after the request was sent means it was not
    applied; with a producer id and sequence a retry of any of those is applied at most once.

Cost
    One Raft commit per AppendGroup; reads are LMDB range reads (~tens of us) plus protobuf encoding.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from raft.errors import NotLeaderError, ProposalFailed, ProposalTimeout, RaftError
from raft.protocol import CommandConflict, CommandRejected
from tiered.machine import STALE_PREFIX, STALE_SEQUENCE_PREFIX
from tiered.model import (
    EventKind,
    KafkaSegment,
    PartitionKey,
    PartitionMeta,
    Segment,
    SegmentEvent,
    find_segment,
    highest_offset_for_epoch,
    local_start_fetch_offset,
    segments_for_epoch,
)
from tiered.node import TieredNode
from tiered.proto import pb, rpc

LEADER_KEY = "x-tiered-leader"
READ_KEY = "x-tiered-read"
"""A read carrying ``x-tiered-read: leader`` is answered by the ready leader only (a follower answers
UNAVAILABLE with the leader's address, as for writes): it sees every write the leader acknowledged."""
#: authorize(token, needs_write) -> whether the token may do it.
Authorizer = Callable[[str, bool], bool]
MAX_LIMIT = 10000


class PlaintextRefused(ValueError):
    """A non-loopback address without TLS and without ``allow_plaintext``."""


@dataclass(frozen=True)
class ServerTls:
    """PEM bytes of the server's certificate chain and key; ``client_ca`` set: mutual TLS."""

    cert_chain: bytes
    private_key: bytes
    client_ca: bytes | None = None

    @classmethod
    def from_files(cls, cert_file: Path, key_file: Path, client_ca_file: Path | None = None) -> ServerTls:
        return cls(Path(cert_file).read_bytes(), Path(key_file).read_bytes(),
                   None if client_ca_file is None else Path(client_ca_file).read_bytes())

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.private_key, self.cert_chain)], root_certificates=self.client_ca,
                                           require_client_auth=self.client_ca is not None)


def is_loopback(host: str) -> bool:
    """True for localhost, 127.x.y.z and ::1 (a bind address only this machine can reach)."""
    host = host.strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def key_of(ref: Any) -> PartitionKey:
    return PartitionKey(ref.cluster, ref.topic_id, ref.partition)


def ref_of(key: PartitionKey) -> Any:
    return pb.PartitionRef(cluster=key.cluster, topic_id=key.topic_id, partition=key.partition)


def kafka_from_pb(k: Any) -> KafkaSegment:
    return KafkaSegment(k.segment_uuid, tuple(sorted((int(e), int(o)) for e, o in k.leader_epochs.items())),
                        k.max_timestamp_ms, k.broker_id, k.event_timestamp_ms,
                        base64.b64encode(k.custom_metadata).decode() if k.custom_metadata else "", k.txn_index_empty,
                        k.topic)


def kafka_to_pb(k: KafkaSegment) -> Any:
    return pb.KafkaSegment(segment_uuid=k.segment_uuid, leader_epochs=dict(k.leader_epochs),
                           max_timestamp_ms=k.max_timestamp_ms, broker_id=k.broker_id,
                           event_timestamp_ms=k.event_timestamp_ms,
                           custom_metadata=base64.b64decode(k.custom_metadata) if k.custom_metadata else b"",
                           txn_index_empty=k.txn_index_empty, topic=k.topic)


def event_from_pb(e: Any) -> SegmentEvent:
    return SegmentEvent(EventKind(e.kind) if e.kind else EventKind.COPY_STARTED, e.segment_id, e.start_offset,
                        e.end_offset, e.leader_epoch, e.size_bytes, e.remote_path,
                        kafka_from_pb(e.kafka) if e.HasField("kafka") else None)


def event_to_pb(d: dict[str, Any]) -> Any:
    kafka = d.get("kafka")
    return pb.SegmentEvent(kind=d["kind"], segment_id=d["segment_id"], start_offset=d["start_offset"],
                           end_offset=d["end_offset"], leader_epoch=d["leader_epoch"], size_bytes=d["size_bytes"],
                           remote_path=d["remote_path"],
                           kafka=kafka_to_pb(KafkaSegment.from_json(kafka)) if kafka else None)


def segment_to_pb(s: Segment) -> Any:
    return pb.Segment(segment_id=s.segment_id, state=int(s.state), start_offset=s.start_offset,
                      end_offset=s.end_offset, leader_epoch=s.leader_epoch, size_bytes=s.size_bytes,
                      remote_path=s.remote_path, kafka=None if s.kafka is None else kafka_to_pb(s.kafka))


def state_to_pb(key: PartitionKey, m: PartitionMeta) -> Any:
    return pb.PartitionState(partition=ref_of(key), leader_epoch=m.leader_epoch, last_group_id=m.last_group_id,
                             groups=m.groups, events=m.events, live_segments=m.live_segments,
                             remote_bytes=m.remote_bytes)


class TieredServicer(rpc.TieredMetadataServicer):
    """The service's calls over one :class:`TieredNode`."""

    def __init__(self, node: TieredNode, authorize: Authorizer, grpc_of: dict[str, str]) -> None:
        self.node = node
        self.authorize = authorize
        self.grpc_of = grpc_of  # Raft address -> gRPC address of each node

    def _auth(self, context: Any, write: bool) -> None:
        token = ""
        for k, v in context.invocation_metadata():
            if k == "authorization" and isinstance(v, str) and v.startswith("Bearer "):
                token = v[len("Bearer "):]
        if not token:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing authorization: Bearer <token>")
        if not self.authorize(token, write):
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          "token not accepted" + (" for writes (needs operator)" if write else ""))

    def _read(self, context: Any) -> None:
        """Authorize a read; with ``x-tiered-read: leader`` only the ready leader answers."""
        self._auth(context, False)
        if not any(k == READ_KEY and v == "leader" for k, v in context.invocation_metadata()):
            return
        raft = self.node.raft
        if raft.is_leader and raft.ready:
            return
        leader = self.grpc_of.get(raft.leader or "", "") if not raft.is_leader else ""
        context.set_trailing_metadata(((LEADER_KEY, leader),))
        context.abort(grpc.StatusCode.UNAVAILABLE, f"not the ready leader; leader={leader or 'unknown'}")

    def _write(self, context: Any, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except NotLeaderError as exc:
            leader = self.grpc_of.get(exc.leader or "", "")
            context.set_trailing_metadata(((LEADER_KEY, leader),))
            context.abort(grpc.StatusCode.UNAVAILABLE, f"not the leader; leader={leader or 'unknown'}")
        except CommandConflict as exc:
            text = str(exc)
            if text.startswith(STALE_PREFIX):
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, text[len(STALE_PREFIX):])
            if text.startswith(STALE_SEQUENCE_PREFIX):
                context.abort(grpc.StatusCode.ALREADY_EXISTS, text[len(STALE_SEQUENCE_PREFIX):])
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, text)
        except CommandRejected as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except ProposalTimeout as exc:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"outcome unknown: {exc}")
        except ProposalFailed as exc:
            code = grpc.StatusCode.UNKNOWN if exc.maybe_applied else grpc.StatusCode.UNAVAILABLE
            context.abort(code, f"proposal failed: {exc}")
        except RaftError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"raft: {exc}")

    def AppendGroup(self, request: Any, context: Any) -> Any:
        self._auth(context, True)
        key = key_of(request.partition)
        events = [event_from_pb(e) for e in request.events]
        producer_id, sequence = request.producer_id, request.sequence
        if bool(producer_id) != bool(sequence):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "set producer_id and sequence together (idempotence)")
        done = self._write(context, lambda: self.node.append(key, request.leader_epoch, events,
                                                             producer_id=producer_id, sequence=sequence))
        return pb.AppendGroupResponse(group_id=done.group_id, segment_ids=done.segment_ids,
                                      raft_index=done.raft_index, duplicate=done.duplicate)

    def DeletePartition(self, request: Any, context: Any) -> Any:
        self._auth(context, True)
        key = key_of(request.partition)
        return pb.DeletePartitionResponse(deleted=self._write(context, lambda: self.node.delete_partition(key)))

    def FetchGroups(self, request: Any, context: Any) -> Any:
        self._read(context)
        limit = min(request.limit or 1000, MAX_LIMIT)
        groups, more = self.node.store.fetch_groups(key_of(request.partition), request.after_group_id, limit)
        return pb.FetchGroupsResponse(more=more, groups=[
            pb.EventGroup(group_id=g["group_id"], leader_epoch=g["leader_epoch"],
                          events=[event_to_pb(e) for e in g["events"]]) for g in groups])

    def CurrentState(self, request: Any, context: Any) -> Any:
        self._read(context)
        key = key_of(request.partition)
        meta, segs = self.node.store.current_state(key)
        if meta is None:
            return pb.CurrentStateResponse(found=False)
        return pb.CurrentStateResponse(found=True, state=state_to_pb(key, meta),
                                       segments=[segment_to_pb(s) for s in segs])

    def LocalStartFetchOffset(self, request: Any, context: Any) -> Any:
        self._read(context)
        _, segs = self.node.store.current_state(key_of(request.partition))
        copied = [s.end_offset for s in segs if s.state == EventKind.COPY_FINISHED]
        remote_end = max(copied) if copied else None
        try:
            offset = local_start_fetch_offset(request.local_log_start, request.local_log_end,
                                              request.avg_ingress_per_s, request.threshold_s, remote_end)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.LocalStartFetchOffsetResponse(offset=offset, remote_end_offset=-1 if remote_end is None
                                                else remote_end)

    def ListPartitions(self, request: Any, context: Any) -> Any:
        self._read(context)
        after = key_of(request.after) if request.HasField("after") and request.after.cluster else None
        rows = self.node.store.partitions(request.cluster or None, min(request.limit or 1000, MAX_LIMIT), after)
        return pb.ListPartitionsResponse(partitions=[state_to_pb(k, m) for k, m in rows])

    def FindSegment(self, request: Any, context: Any) -> Any:
        self._read(context)
        _, segs = self.node.store.current_state(key_of(request.partition))
        seg = find_segment(segs, request.leader_epoch, request.offset)
        return pb.FindSegmentResponse(found=False) if seg is None else \
            pb.FindSegmentResponse(found=True, segment=segment_to_pb(seg))

    def EpochSegments(self, request: Any, context: Any) -> Any:
        self._read(context)
        _, segs = self.node.store.current_state(key_of(request.partition))
        highest = highest_offset_for_epoch(segs, request.leader_epoch)
        listed = segments_for_epoch(segs, request.leader_epoch)
        return pb.EpochSegmentsResponse(segments=[segment_to_pb(s) for s in listed],
                                        has_highest=highest is not None, highest_offset=highest or 0)

    def SegmentById(self, request: Any, context: Any) -> Any:
        self._read(context)
        seg = self.node.store.segment_by_uuid(key_of(request.partition), request.segment_uuid)
        return pb.FindSegmentResponse(found=False) if seg is None else \
            pb.FindSegmentResponse(found=True, segment=segment_to_pb(seg))


def start_server(node: TieredNode, address: str, authorize: Authorizer, grpc_of: dict[str, str],
                 workers: int = 16, tls: ServerTls | None = None, allow_plaintext: bool = False) -> grpc.Server:
    """Start serving on ``address`` (host:port); returns the running server (``stop(grace)`` to end it).

    Without ``tls`` only a loopback address is accepted unless ``allow_plaintext``
    (:class:`PlaintextRefused`)."""
    host = address.rpartition(":")[0]
    if tls is None and not allow_plaintext and not is_loopback(host):
        raise PlaintextRefused(f"the tiered gRPC port {address} is not on loopback and has no TLS: bearer tokens "
                               "would cross the network in clear (set [tiered] tls_cert_file and tls_key_file, "
                               "or allow_plaintext = true behind a TLS proxy)")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tiered-grpc"))
    rpc.add_TieredMetadataServicer_to_server(TieredServicer(node, authorize, grpc_of), server)
    bound = server.add_insecure_port(address) if tls is None else server.add_secure_port(address, tls.credentials())
    if bound == 0:
        raise OSError(f"cannot bind the tiered gRPC port {address}")
    server.start()
    return server
