"""Consumer groups in kafkasim: the group coordinator's wire APIs, for simulated and real consumers.

Goal: a client reads consumer groups and their committed offsets the way it reads them from Kafka
(``KafkaAdminClient.list_groups`` / ``describe_groups`` / ``list_group_offsets``, confluent-kafka's
``AdminClient.list_consumer_groups``), so nothing like kafka_exporter is needed; and a real
``KafkaConsumer(group_id=...)`` can commit (``assign()`` + ``commit()``) and join a group
(``subscribe()``).

Method:

* **Coordinator**: as Kafka does with ``__consumer_offsets`` (50 partitions), a group's partition is
  ``abs(java_hash(group_id)) % 50`` and its coordinator is alive broker ``partition % n`` (by id) —
  deterministic, and it moves when brokers die or revive.  Every other broker answers the group's
  requests with ``NOT_COORDINATOR``; ListGroups on a broker lists only the groups it coordinates.
* **Simulated groups** are derived from the engine, never stored: a partition with
  ``tail_groups = k > 0`` has ``ceil(k)`` tailing groups ``<base>-tail-1 … -tail-N`` whose committed
  offset is the log end offset; a partition with a lagging (or replaying) consumer — ``lag > 0`` or
  ``lag_rate > 0``, e.g. ``sim fault lagging-consumer`` — belongs to group ``<base>`` whose committed
  offset is ``LEO − floor(lag_bytes / msg_size)``, at least the log start offset.  ``<base>`` is the
  topic's consumer client id (scenario ``consumer.client_id``, by default ``<topic>-consumer``; the
  legacy ``kafka_consumergroup_lag`` series uses the same name).  Each has one member (client id and
  ``/ip`` of the simulated consumer client), state ``Stable``, protocol ``consumer``/``range``.
  As the engine moves ``lag`` at the consumer's achieved rate, the committed offset advances at that
  rate in simulated time.
* **Real groups** (classic protocol) are stored per cluster: committed offsets (offset, leader epoch,
  metadata), and members with JoinGroup/SyncGroup/Heartbeat/LeaveGroup.  A join completes at once
  (v4+: ``MEMBER_ID_REQUIRED`` first, as Kafka does); a new member or a changed subscription starts
  a new generation and the other members learn it from ``REBALANCE_IN_PROGRESS`` and rejoin; members
  whose session times out (wall clock) leave.  Commits outside a generation (``generation -1``, e.g.
  ``assign()`` + ``commit()``) are accepted while the group has no members, as Kafka does.

Guarantee: committed offsets of simulated groups equal kafkasim's internal state at the current tick
(``LEO − committed`` = the lagging consumer's lag in messages, 0 for tailing groups); offsets a real
client committed are returned exactly.  Simplifications: a simulated group id is reserved (joins get
``GROUP_MAX_SIZE_REACHED``, commits ``UNKNOWN_MEMBER_ID``); a follower's SyncGroup before the
leader's gets ``REBALANCE_IN_PROGRESS`` (it rejoins) instead of waiting; no transactions, no
KIP-848 groups, no offset expiry.

Cost: the directory of simulated groups is rebuilt — O(partitions), numpy per topic, about 80 ms for
20,000 partitions in 1,000 topics — only when the topology (``Engine.generation``) or the set of lagging
partitions changes; OffsetFetch is O(partitions of the group): v8+ answers are encoded here, not through
response objects — a simulated group's fixed bytes (group id, topic names, partition indexes) are built once
per directory and each answer fills offsets and leader epochs in one numpy pass (byte-identical to
kafka-python's encoding); ListGroups costs O(its own groups): the simulated groups by coordinator are
cached while the directory and the alive brokers are unchanged.  Measured at 1,000 brokers × 100,000
partitions (10,000 simulated groups; 2,000 of them asked, 40,000 offsets, in 50 batched requests): OffsetFetch
0.70 s → 0.034 s of CPU, ListGroups on every broker 7.2 s → 0.34 s, FindCoordinator of 2,000 keys
0.15 s → 0.012 s.
"""

from __future__ import annotations

import functools
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from kafka.protocol.admin.groups import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer.group import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorResponse

from kafkasim.cluster import model as m
from kafkasim.cluster.model import Broker, Cluster

if TYPE_CHECKING:
    from kafkasim.broker.wire import ReqContext

# api key -> highest version answered (merged into kafkasim.broker.wire.SUPPORTED)
GROUP_VERSIONS: dict[int, int] = {
    8: 8,  # OffsetCommit
    9: 8,  # OffsetFetch (v8: batched groups)
    10: 4,  # FindCoordinator (v4: batched keys)
    11: 7,  # JoinGroup
    12: 4,  # Heartbeat
    13: 4,  # LeaveGroup
    14: 5,  # SyncGroup
    15: 5,  # DescribeGroups
    16: 5,  # ListGroups (v4 states filter, v5 types filter)
    42: 2,  # DeleteGroups
}
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions
MIN_SESSION_MS, MAX_SESSION_MS = 6_000, 1_800_000  # group.min/max.session.timeout.ms
MAX_METADATA = 4096  # offset.metadata.max.bytes
PENDING_MEMBER_S = 300.0
GROUP_OPERATIONS = frozenset({3, 6, 8})  # READ, DELETE, DESCRIBE bits (no authorizer: all allowed)


@functools.lru_cache(maxsize=65536)
def offsets_partition(group_id: str) -> int:
    """The ``__consumer_offsets`` partition of a group: ``Utils.abs(groupId.hashCode) % 50``."""
    h = 0
    data = group_id.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % OFFSETS_PARTITIONS


def coordinator(cl: Cluster, group_id: str, alive: list[Broker] | None = None) -> Broker | None:
    """The broker coordinating ``group_id`` now (None when every broker is dead); ``alive`` =
    ``cl.alive_brokers()`` when the caller already has it."""
    alive = cl.alive_brokers() if alive is None else alive
    return alive[offsets_partition(group_id) % len(alive)] if alive else None


def group_base(client_id: str, topic: str) -> str:
    """Name of a topic's lagging consumer group (tailing groups add ``-tail-K``)."""
    return client_id or f"{topic}-consumer"


@dataclass(frozen=True)
class SimGroup:
    """A consumer group of the simulation: one member reading ``partitions`` (topic, index, slot)."""

    group_id: str
    kind: str  # "tail" (commits the log end offset) or "lagging" (LEO minus the consumer's lag)
    client_id: str
    host: str
    partitions: tuple[tuple[str, int, int], ...]

    @property
    def member_id(self) -> str:
        return f"{self.client_id}-{uuid.uuid5(uuid.NAMESPACE_URL, 'kafkasim/group/' + self.group_id)}"

    def topics(self) -> list[str]:
        return sorted({t for t, _, _ in self.partitions})


def simulated_groups(cl: Cluster) -> dict[str, SimGroup]:
    """Every simulated consumer group of ``cl`` now, by group id (see the module docstring)."""
    eng = cl.engine
    lag, lag_rate, tail, cons = eng.f["lag"], eng.f["lag_rate"], eng.f["tail_groups"], eng.i["cons_client"]
    found: dict[str, tuple[str, Any, str, list[tuple[str, int, int]]]] = {}
    for name in sorted(cl.topics):
        parts = cl.topics[name].partitions
        slots = np.fromiter((p.slot for p in parts), dtype=np.int64, count=len(parts))
        clients = cons[slots]
        n_tail = np.ceil(tail[slots] - 1e-9).astype(np.int64)
        lagging = (lag[slots] > 0) | (lag_rate[slots] > 0)
        for ci in np.unique(clients).tolist():  # one consumer client per topic unless seeded otherwise
            mine = clients == ci
            client = eng.clients[int(ci)]
            base = group_base(client.client_id, name)
            ids = [(f"{base}-tail-{k}", "tail", mine & (n_tail >= k)) for k in range(1, int(n_tail[mine].max()) + 1)]
            ids.append((base, "lagging", mine & lagging))
            for gid, kind, sel in ids:
                idx = np.flatnonzero(sel).tolist()
                if idx:
                    found.setdefault(gid, (kind, client, base, []))[3].extend(
                        (name, parts[i].index, parts[i].slot) for i in idx)
    return {gid: SimGroup(gid, kind, c.client_id or base, c.ip or "127.0.0.1", tuple(ps))
            for gid, (kind, c, base, ps) in found.items()}


def sim_committed(cl: Cluster, g: SimGroup, slot: int) -> int:
    """Committed offset of a simulated group on the partition in engine ``slot``."""
    eng = cl.engine
    start, end = eng.partition_offsets(slot)
    if g.kind == "tail":
        return end
    behind = int(float(eng.f["lag"][slot]) / max(float(eng.f["msg_size"][slot]), 1.0))
    return max(start, end - behind)


def sim_committed_many(cl: Cluster, g: SimGroup, slots: np.ndarray) -> np.ndarray:
    """:func:`sim_committed` of the partitions in engine ``slots`` at once (int64, the same values)."""
    f = cl.engine.f
    end = np.ceil(f["leo"][slots] - 1e-9).astype(np.int64)
    if g.kind == "tail":
        return end
    start = f["lso"][slots].astype(np.int64)
    behind = (f["lag"][slots] / np.maximum(f["msg_size"][slots], 1.0)).astype(np.int64)
    return np.maximum(start, end - behind)


# ---------------------------------------------------------------------------- OffsetFetch v8+ on the wire
ROW_V8 = np.dtype([("p", ">i4"), ("o", ">i8"), ("e", ">i4"), ("m", "u1"), ("err", ">i2"), ("tags", "u1")])
"""One partition of an OffsetFetch v8+ response with metadata ``""`` (or null) and no tagged fields: 20 bytes."""


def uvarint(n: int) -> bytes:
    """Kafka's unsigned varint (compact array / string lengths + 1, tagged-field counts)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_string(s: str | None) -> bytes:
    """A COMPACT_NULLABLE_STRING (a non-null one is also a COMPACT_STRING)."""
    if s is None:
        return b"\x00"
    b = s.encode()
    return uvarint(len(b) + 1) + b


def offset_fetch_group_v8(group_id: str, error: int,
                          topics: list[tuple[str, list[tuple[int, int, int, str | None, int]]]]) -> bytes:
    """One ``OffsetFetchResponseGroup`` of a v8+ (flexible) response, encoded: ``topics`` as
    [(name, [(partition, committed offset, leader epoch, metadata, error)])]."""
    out = [compact_string(group_id), uvarint(len(topics) + 1)]
    for name, parts in topics:
        out.append(compact_string(name))
        out.append(uvarint(len(parts) + 1))
        for i, o, e, md, pe in parts:
            out.append(struct.pack(">iqi", i, o, e))
            out.append(compact_string(md))
            out.append(struct.pack(">hB", pe, 0))
        out.append(b"\x00")
    out.append(struct.pack(">hB", error, 0))
    return b"".join(out)


def offset_fetch_body_v8(groups: list[bytes], throttle_time_ms: int = 0) -> bytes:
    """The body of an OffsetFetch v8+ response made of encoded groups (:func:`offset_fetch_group_v8`)."""
    return struct.pack(">i", throttle_time_ms) + uvarint(len(groups) + 1) + b"".join(groups) + b"\x00"


class EncodedResponse:
    """A flexible-version response whose body is already encoded: what ``kafkasim.broker.wire.encode_response``
    uses of a kafka-python response object (``API_VERSION``, ``with_header``, ``encode``)."""

    def __init__(self, version: int, body: bytes) -> None:
        self.API_VERSION = version
        self.body = body
        self.throttle_time_ms = 0
        self.correlation_id = 0

    def with_header(self, correlation_id: int = 0) -> None:
        self.correlation_id = correlation_id

    def encode(self, header: bool = True, framed: bool = True) -> bytes:
        data = (struct.pack(">iB", self.correlation_id, 0) if header else b"") + self.body  # header v1: no tags
        return struct.pack(">i", len(data)) + data if framed else data


@dataclass(frozen=True)
class _SimPlan:
    """The fixed part of a simulated group's OffsetFetch answer (every partition, sorted by topic and index)."""

    group: SimGroup
    slots: np.ndarray
    parts: list[m.Partition]
    template: np.ndarray
    head: bytes
    topics: list[tuple[bytes, int, int]]  # encoded name + partition count, rows [lo, hi)


def _sim_plan(cl: Cluster, g: SimGroup) -> _SimPlan:
    rows = sorted((t, i, s) for t, i, s in g.partitions)
    template = np.zeros(len(rows), dtype=ROW_V8)
    template["p"] = [i for _, i, _ in rows]
    template["m"] = 1  # metadata ""
    topics: list[tuple[bytes, int, int]] = []
    lo = 0
    for k in range(1, len(rows) + 1):
        if k == len(rows) or rows[k][0] != rows[lo][0]:
            topics.append((compact_string(rows[lo][0]) + uvarint(k - lo + 1), lo, k))
            lo = k
    return _SimPlan(g, np.asarray([s for _, _, s in rows], dtype=np.int64),
                    [cl.topics[t].partitions[i] for t, i, _ in rows], template,
                    compact_string(g.group_id) + uvarint(len(topics) + 1), topics)


@dataclass
class Member:
    """A real client in a group (classic protocol)."""

    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    session_s: float
    protocols: list[tuple[str, bytes]]
    last_seen: float
    needs_rejoin: bool = False
    assignment: bytes = b""


@dataclass
class RealGroup:
    """A group real clients joined or committed to."""

    group_id: str
    protocol_type: str | None = None
    generation: int = 0
    leader: str | None = None
    synced: bool = False  # the leader sent this generation's assignments
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # ids handed out with MEMBER_ID_REQUIRED
    offsets: dict[tuple[str, int], tuple[int, int, str | None, float]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if any(x.needs_rejoin for x in self.members.values()):
            return "PreparingRebalance"
        return "Stable" if self.synced else "CompletingRebalance"

    def protocol(self) -> str | None:
        """The leader's most preferred protocol every member supports."""
        if not self.members or self.leader not in self.members:
            return None
        common = set.intersection(*({n for n, _ in x.protocols} for x in self.members.values()))
        return next((n for n, _ in self.members[self.leader].protocols if n in common), None)

    def rebalance(self, joined: str | None = None) -> None:
        """Start a new generation; every member but ``joined`` must rejoin."""
        self.generation += 1
        self.synced = False
        for x in self.members.values():
            x.needs_rejoin = x.member_id != joined
            x.assignment = b""
        if self.leader not in self.members:
            self.leader = joined if joined in self.members else next(iter(self.members), None)


class GroupCoordinator:
    """Answers the group APIs of every cluster of a federation (``api_<key>(ctx, version, request)``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.groups: dict[tuple[str, str], RealGroup] = {}
        self._dirs: dict[str, tuple[tuple[int, int, int], dict[str, SimGroup]]] = {}
        self._plans: dict[tuple[str, str], _SimPlan] = {}
        self._listed: dict[str, tuple[dict[str, SimGroup], tuple[int, ...], dict[int, list[str]]]] = {}

    def api(self, key: int) -> Callable[[ReqContext, int, Any], Any] | None:
        """The handler of group API ``key`` (None when not answered)."""
        fn: Callable[[ReqContext, int, Any], Any] | None = getattr(self, f"api_{key}", None)
        return fn

    # ------------------------------------------------------------------ state
    def sim_groups(self, cl: Cluster) -> dict[str, SimGroup]:
        """Simulated groups of ``cl`` (cached until the topology or the set of lagging partitions changes)."""
        eng = cl.engine
        n = eng.n_slots
        lagging = np.flatnonzero((eng.f["lag"][:n] > 0) | (eng.f["lag_rate"][:n] > 0))
        key = (eng.generation, n, hash(lagging.tobytes()))
        got = self._dirs.get(cl.name)
        if got is None or got[0] != key:
            got = (key, simulated_groups(cl))
            self._dirs[cl.name] = got
            self._plans = {k: v for k, v in self._plans.items() if k[0] != cl.name}
        return got[1]

    def sim_by_coordinator(self, cl: Cluster, alive: list[Broker]) -> dict[int, list[str]]:
        """Simulated group ids by coordinating broker id (cached while the directory and the alive brokers
        are unchanged: ListGroups on every broker costs one pass over the groups, not one per broker)."""
        sims = self.sim_groups(cl)
        ids = tuple(b.id for b in alive)
        got = self._listed.get(cl.name)
        if got is None or got[0] is not sims or got[1] != ids:
            by: dict[int, list[str]] = {}
            for gid in sims:
                b = coordinator(cl, gid, alive)
                if b is not None:
                    by.setdefault(b.id, []).append(gid)
            got = (sims, ids, by)
            self._listed[cl.name] = got
        return got[2]

    def sim_offsets_v8(self, cl: Cluster, g: SimGroup) -> bytes:
        """The encoded v8+ OffsetFetch answer of simulated group ``g`` for all its partitions (the bytes
        :func:`offset_fetch_group_v8` gives for its :meth:`committed` offsets): the group's fixed part is
        built once per directory, each call fills the offsets and leader epochs in one numpy pass."""
        plan = self._plans.get((cl.name, g.group_id))
        if plan is None or plan.group is not g:
            plan = self._plans[(cl.name, g.group_id)] = _sim_plan(cl, g)
        rows = plan.template.copy()
        rows["o"] = sim_committed_many(cl, g, plan.slots)
        rows["e"] = [p.leader_epoch for p in plan.parts]
        raw = rows.tobytes()
        size = ROW_V8.itemsize
        out = [plan.head]
        for head, lo, hi in plan.topics:
            out += (head, raw[lo * size:hi * size], b"\x00")
        out.append(b"\x00\x00\x00")  # group error 0, no tagged fields
        return b"".join(out)

    def real(self, cl: Cluster, group_id: str) -> RealGroup | None:
        """The stored group (members whose session expired removed first)."""
        g = self.groups.get((cl.name, group_id))
        if g is not None:
            now = self.clock()
            gone = [x for x in g.members.values() if now - x.last_seen > x.session_s]
            for x in gone:
                del g.members[x.member_id]
            g.pending = {k: t for k, t in g.pending.items() if now - t < PENDING_MEMBER_S}
            if gone:
                self._after_leave(g)
        return g

    @staticmethod
    def _after_leave(g: RealGroup) -> None:
        if g.members:
            g.rebalance()
        else:
            g.generation += 1
            g.synced, g.leader = False, None

    def committed(self, cl: Cluster, group_id: str) -> dict[tuple[str, int], int]:
        """Committed offsets of a group as OffsetFetch returns them (for the control API and tests)."""
        sg = self.sim_groups(cl).get(group_id)
        if sg is not None:
            return {(t, i): sim_committed(cl, sg, s) for t, i, s in sg.partitions}
        g = self.real(cl, group_id)
        return {tp: c[0] for tp, c in g.offsets.items()} if g is not None else {}

    def listing(self, cl: Cluster) -> list[tuple[str, str, str]]:
        """(group id, state, protocol type) of every group of ``cl``."""
        sims = self.sim_groups(cl)
        out = [(gid, "Stable", "consumer") for gid in sims]
        for (cname, gid), _ in list(self.groups.items()):
            g = self.real(cl, gid) if cname == cl.name and gid not in sims else None
            if g is not None and (g.members or g.offsets):
                out.append((gid, g.state, g.protocol_type or ""))
        return out

    def report(self, cl: Cluster) -> dict[str, Any]:
        """Every group of ``cl`` with its kind, state, coordinator, members and committed offsets / lag
        (``GET /groups?cluster=NAME`` on the control URL: the ground truth of consumer positions)."""
        sims = self.sim_groups(cl)
        out: dict[str, Any] = {}
        for gid, state, _ in sorted(self.listing(cl)):
            sg = sims.get(gid)
            g = None if sg is not None else self.groups.get((cl.name, gid))
            offsets, lags = {}, {}
            for (t, i), off in sorted(self.committed(cl, gid).items()):
                if t in cl.topics and 0 <= i < len(cl.topics[t].partitions):
                    offsets[f"{t}:{i}"] = off
                    lags[f"{t}:{i}"] = cl.engine.partition_offsets(cl.topics[t].partitions[i].slot)[1] - off
            b = coordinator(cl, gid)
            members = [sg.client_id] if sg is not None else [x.client_id for x in (g.members if g else {}).values()]
            out[gid] = {"kind": sg.kind if sg is not None else "real", "state": state,
                        "coordinator": b.id if b is not None else None, "members": members,
                        "offsets": offsets, "lag": lags}
        return {"cluster": cl.name, "sim_time": float(cl.engine.t), "groups": out}

    @staticmethod
    def _mine(ctx: ReqContext, group_id: str) -> bool:
        return coordinator(ctx.cluster, group_id) is ctx.broker

    # ------------------------------------------------------------------ 10 FindCoordinator
    def api_10(self, ctx: ReqContext, v: int, req: Any) -> Any:
        R = FindCoordinatorResponse
        key_type = req.key_type if v >= 1 else 0
        rows: list[tuple[str, int, str, int, int, str | None]] = []
        alive = ctx.cluster.alive_brokers()
        for key in (list(req.coordinator_keys) if v >= 4 else [req.key]):
            b = coordinator(ctx.cluster, key, alive) if key_type == 0 else None
            if b is None:
                why = "no alive broker" if key_type == 0 else "kafkasim has no transaction coordinator"
                rows.append((key, -1, "", -1, m.COORDINATOR_NOT_AVAILABLE, why))
            else:
                rows.append((key, b.id, b.host, b.port, 0, None))
        if v >= 4:
            return R(version=v, throttle_time_ms=0, coordinators=[
                R.Coordinator(key=k, node_id=n, host=h, port=p, error_code=e, error_message=why)
                for k, n, h, p, e, why in rows])
        _, n, h, p, e, text = rows[0]
        return R(version=v, throttle_time_ms=0, error_code=e, error_message=text, node_id=n, host=h, port=p)

    # ------------------------------------------------------------------ 16 ListGroups
    def api_16(self, ctx: ReqContext, v: int, req: Any) -> Any:
        R = ListGroupsResponse
        states = {s.lower() for s in (req.states_filter or [])} if v >= 4 else set()
        types = {t.lower() for t in (req.types_filter or [])} if v >= 5 else set()
        out = []
        cl = ctx.cluster
        alive = cl.alive_brokers()
        if not types or "classic" in types:
            # what listing() gives, this broker's only: simulated groups (all Stable) first, then stored ones
            mine = self.sim_by_coordinator(cl, alive).get(ctx.broker.id, []) if not states or "stable" in states else []
            rows = [(gid, "Stable", "consumer") for gid in mine]
            sims = self.sim_groups(cl)
            for (cname, gid), _ in list(self.groups.items()):
                g = self.real(cl, gid) if cname == cl.name and gid not in sims else None
                if g is not None and (g.members or g.offsets) and coordinator(cl, gid, alive) is ctx.broker \
                        and (not states or g.state.lower() in states):
                    rows.append((gid, g.state, g.protocol_type or ""))
            out = [R.ListedGroup(group_id=gid, protocol_type=ptype, group_state=state, group_type="classic")
                   for gid, state, ptype in rows]
        return R(version=v, throttle_time_ms=0, error_code=0, groups=out)

    # ------------------------------------------------------------------ 15 DescribeGroups
    def api_15(self, ctx: ReqContext, v: int, req: Any) -> Any:
        R = DescribeGroupsResponse
        D = R.DescribedGroup
        ops = set(GROUP_OPERATIONS) if v >= 3 and req.include_authorized_operations else None
        out = []
        for gid in req.groups:
            row: dict[str, Any] = {"error_code": 0, "group_id": gid, "group_state": "Dead", "protocol_type": "",
                                   "protocol_data": "", "members": [], "authorized_operations": ops}
            sg = self.sim_groups(ctx.cluster).get(gid)
            g = self.real(ctx.cluster, gid) if sg is None else None
            if not self._mine(ctx, gid):
                row["error_code"] = m.NOT_COORDINATOR
            elif sg is not None:
                topics: dict[str, list[int]] = {}
                for t, i, _ in sg.partitions:
                    topics.setdefault(t, []).append(i)
                meta = ConsumerProtocolSubscription(version=0, topics=sg.topics(), user_data=None).encode()
                assign = ConsumerProtocolAssignment(version=0, assigned_partitions=sorted(topics.items()),
                                                    user_data=None).encode()
                row.update(group_state="Stable", protocol_type="consumer", protocol_data="range", members=[
                    D.DescribedGroupMember(member_id=sg.member_id, group_instance_id=None, client_id=sg.client_id,
                                           client_host="/" + sg.host, member_metadata=bytes(meta),
                                           member_assignment=bytes(assign))])
            elif g is not None and (g.members or g.offsets):
                stable = g.state == "Stable"
                proto = g.protocol() if stable else None
                row.update(group_state=g.state, protocol_type=g.protocol_type or "", protocol_data=proto or "",
                           members=[D.DescribedGroupMember(
                               member_id=x.member_id, group_instance_id=x.instance_id, client_id=x.client_id,
                               client_host=x.host, member_metadata=dict(x.protocols).get(proto or "", b""),
                               member_assignment=x.assignment if stable else b"") for x in g.members.values()])
            out.append(D(**row))
        return R(version=v, throttle_time_ms=0, groups=out)

    # ------------------------------------------------------------------ 9 OffsetFetch
    def _fetch(self, ctx: ReqContext, gid: str, topics: Any,
               alive: list[Broker] | None = None) -> tuple[int, list[tuple[str, list[Any]]]]:
        """(group error, [(topic, [(partition, offset, epoch, metadata, error)])]) for one group."""
        cl = ctx.cluster
        if coordinator(cl, gid, alive) is not ctx.broker:
            return m.NOT_COORDINATOR, []
        have: dict[tuple[str, int], tuple[int, int, str | None]] = {}
        sg = self.sim_groups(cl).get(gid)
        if sg is not None:
            for t, i, s in sg.partitions:
                have[(t, i)] = (sim_committed(cl, sg, s), cl.topics[t].partitions[i].leader_epoch, "")
        else:
            g = self.real(cl, gid)
            if g is not None:
                have = {tp: (o, e, md) for tp, (o, e, md, _) in g.offsets.items() if tp[0] in cl.topics}
        if topics is None:
            want: dict[str, list[int]] = {}
            for t, i in sorted(have):
                want.setdefault(t, []).append(i)
        else:
            want = {t.name: list(t.partition_indexes) for t in topics}
        out = []
        for t, parts in want.items():
            out.append((t, [(i, *have.get((t, i), (-1, -1, "")), 0) for i in parts]))
        return 0, out

    def api_9(self, ctx: ReqContext, v: int, req: Any) -> Any:
        R = OffsetFetchResponse
        if v >= 8:  # encoded here: a batch of 2,000 groups is 40,000 partitions (response objects: ~10x the CPU)
            cl = ctx.cluster
            alive = cl.alive_brokers()
            sims = self.sim_groups(cl)
            blocks = []
            for rg in req.groups:
                gid = rg.group_id
                sg = sims.get(gid)
                if sg is not None and rg.topics is None and coordinator(cl, gid, alive) is ctx.broker:
                    blocks.append(self.sim_offsets_v8(cl, sg))
                else:
                    err, rows = self._fetch(ctx, gid, rg.topics, alive)
                    blocks.append(offset_fetch_group_v8(gid, err, rows))
            return EncodedResponse(v, offset_fetch_body_v8(blocks))
        T1 = R.OffsetFetchResponseTopic
        err, rows = self._fetch(ctx, req.group_id, req.topics)
        if err and v < 2:  # v1 has no top-level error: every requested partition carries it
            rows = [(t.name, [(i, -1, -1, "", err) for i in t.partition_indexes]) for t in req.topics or []]
        return R(version=v, throttle_time_ms=0, error_code=err, topics=[T1(name=t, partitions=[
            T1.OffsetFetchResponsePartition(partition_index=i, committed_offset=o, committed_leader_epoch=e,
                                            metadata=md, error_code=pe) for i, o, e, md, pe in ps])
            for t, ps in rows])

    # ------------------------------------------------------------------ 8 OffsetCommit
    def _commit_error(self, ctx: ReqContext, gid: str, gen: int, mid: str) -> int:
        cl = ctx.cluster
        if not gid:
            return m.INVALID_GROUP_ID
        if not self._mine(ctx, gid):
            return m.NOT_COORDINATOR
        if gid in self.sim_groups(cl):
            return m.UNKNOWN_MEMBER_ID
        g = self.real(cl, gid)
        if g is None or not g.members:
            if gen < 0:
                return 0
            return m.ILLEGAL_GENERATION if g is None else m.UNKNOWN_MEMBER_ID
        if mid not in g.members:
            return m.UNKNOWN_MEMBER_ID
        if gen != g.generation:
            return m.ILLEGAL_GENERATION
        if g.state == "CompletingRebalance":
            return m.REBALANCE_IN_PROGRESS
        g.members[mid].last_seen = self.clock()
        return 0

    def api_8(self, ctx: ReqContext, v: int, req: Any) -> Any:
        R = OffsetCommitResponse
        T = R.OffsetCommitResponseTopic
        cl = ctx.cluster
        gen = int(getattr(req, "generation_id_or_member_epoch", -1))
        err = self._commit_error(ctx, req.group_id, gen, req.member_id or "")
        g = self.groups.setdefault((cl.name, req.group_id), RealGroup(req.group_id)) if err == 0 else None
        out = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                code = err
                if code == 0:
                    md = p.committed_metadata
                    if t.name not in cl.topics or not 0 <= p.partition_index < len(cl.topics[t.name].partitions):
                        code = m.UNKNOWN_TOPIC_OR_PARTITION
                    elif md is not None and len(md.encode()) > MAX_METADATA:
                        code = m.OFFSET_METADATA_TOO_LARGE
                    elif g is not None:
                        epoch = int(getattr(p, "committed_leader_epoch", -1) if v >= 6 else -1)
                        g.offsets[(t.name, p.partition_index)] = (int(p.committed_offset), epoch, md,
                                                                  float(cl.engine.t))
                parts.append(T.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code))
            out.append(T(name=t.name, partitions=parts))
        return R(version=v, throttle_time_ms=0, topics=out)

    # ------------------------------------------------------------------ 11 JoinGroup
    def api_11(self, ctx: ReqContext, v: int, req: Any) -> Any:
        R = JoinGroupResponse

        def fail(code: int, member_id: str = "") -> Any:
            return R(version=v, throttle_time_ms=0, error_code=code, generation_id=-1, protocol_type=None,
                     protocol_name=None if v >= 7 else "", leader="", member_id=member_id, members=[])

        gid, cl, now = req.group_id, ctx.cluster, self.clock()
        protos = [(p.name, bytes(p.metadata)) for p in req.protocols]
        if not gid:
            return fail(m.INVALID_GROUP_ID)
        if not self._mine(ctx, gid):
            return fail(m.NOT_COORDINATOR)
        if gid in self.sim_groups(cl):
            return fail(m.GROUP_MAX_SIZE_REACHED)
        if not MIN_SESSION_MS <= req.session_timeout_ms <= MAX_SESSION_MS:
            return fail(m.INVALID_SESSION_TIMEOUT)
        g = self.real(cl, gid) or self.groups.setdefault((cl.name, gid), RealGroup(gid))
        others = [x for x in g.members.values() if x.member_id != req.member_id]
        if not req.protocol_type or not protos or (others and (
                g.protocol_type != req.protocol_type
                or not set.intersection({n for n, _ in protos}, *({n for n, _ in x.protocols} for x in others)))):
            return fail(m.INCONSISTENT_GROUP_PROTOCOL)
        mid = req.member_id or ""
        if not mid:
            mid = f"{ctx.client_id or 'consumer'}-{uuid.uuid4()}"
            if v >= 4:
                g.pending[mid] = now
                return fail(m.MEMBER_ID_REQUIRED, mid)
        elif mid not in g.members and mid not in g.pending:
            return fail(m.UNKNOWN_MEMBER_ID, mid)
        g.pending.pop(mid, None)
        me = g.members.get(mid)
        changed = me is None or me.protocols != protos
        if me is None:
            me = Member(mid, ctx.client_id, "/" + ctx.host, getattr(req, "group_instance_id", None),
                        req.session_timeout_ms / 1000.0, protos, now)
            g.members[mid] = me
        me.protocols, me.last_seen, me.session_s = protos, now, req.session_timeout_ms / 1000.0
        g.protocol_type = req.protocol_type
        if changed:
            g.rebalance(joined=mid)
        me.needs_rejoin = False
        proto = g.protocol()
        members = [R.JoinGroupResponseMember(member_id=x.member_id, group_instance_id=x.instance_id,
                                             metadata=dict(x.protocols).get(proto or "", b""))
                   for x in g.members.values()] if mid == g.leader else []
        return R(version=v, throttle_time_ms=0, error_code=0, generation_id=g.generation,
                 protocol_type=g.protocol_type, protocol_name=proto, leader=g.leader or "", member_id=mid,
                 members=members)

    def _member(self, ctx: ReqContext, gid: str, mid: str) -> tuple[int, RealGroup | None]:
        if not self._mine(ctx, gid):
            return m.NOT_COORDINATOR, None
        g = self.real(ctx.cluster, gid)
        if g is None or mid not in g.members:
            return m.UNKNOWN_MEMBER_ID, None
        g.members[mid].last_seen = self.clock()
        return 0, g

    # ------------------------------------------------------------------ 14 SyncGroup
    def api_14(self, ctx: ReqContext, v: int, req: Any) -> Any:
        R = SyncGroupResponse
        err, g = self._member(ctx, req.group_id, req.member_id)
        if g is not None:
            me = g.members[req.member_id]
            if req.generation_id != g.generation:
                err = m.ILLEGAL_GENERATION
            else:
                if req.member_id == g.leader:
                    given = {a.member_id: bytes(a.assignment) for a in req.assignments}
                    for x in g.members.values():
                        x.assignment = given.get(x.member_id, b"")
                    g.synced = True
                if not g.synced or me.needs_rejoin:
                    err = m.REBALANCE_IN_PROGRESS
            if err == 0:
                return R(version=v, throttle_time_ms=0, error_code=0, protocol_type=g.protocol_type,
                         protocol_name=g.protocol(), assignment=me.assignment)
        return R(version=v, throttle_time_ms=0, error_code=err, protocol_type=None, protocol_name=None,
                 assignment=b"")

    # ------------------------------------------------------------------ 12 Heartbeat
    def api_12(self, ctx: ReqContext, v: int, req: Any) -> Any:
        err, g = self._member(ctx, req.group_id, req.member_id)
        if g is not None:
            if g.members[req.member_id].needs_rejoin or not g.synced:
                err = m.REBALANCE_IN_PROGRESS
            elif req.generation_id != g.generation:
                err = m.ILLEGAL_GENERATION
        return HeartbeatResponse(version=v, throttle_time_ms=0, error_code=err)

    # ------------------------------------------------------------------ 13 LeaveGroup
    def api_13(self, ctx: ReqContext, v: int, req: Any) -> Any:
        R = LeaveGroupResponse
        leaving = [(req.member_id, None)] if v < 3 else [(x.member_id, x.group_instance_id) for x in req.members]
        if not self._mine(ctx, req.group_id):
            return R(version=v, throttle_time_ms=0, error_code=m.NOT_COORDINATOR, members=[])
        g = self.real(ctx.cluster, req.group_id)
        results = []
        for mid, iid in leaving:
            ok = g is not None and g.members.pop(mid, None) is not None
            results.append(R.MemberResponse(member_id=mid, group_instance_id=iid,
                                            error_code=0 if ok else m.UNKNOWN_MEMBER_ID))
        if g is not None and any(r.error_code == 0 for r in results):
            self._after_leave(g)
        top = results[0].error_code if v < 3 and results else 0
        return R(version=v, throttle_time_ms=0, error_code=top, members=results if v >= 3 else [])

    # ------------------------------------------------------------------ 42 DeleteGroups
    def api_42(self, ctx: ReqContext, v: int, req: Any) -> Any:
        R = DeleteGroupsResponse
        out = []
        for gid in req.groups_names:
            g = self.real(ctx.cluster, gid)
            if not self._mine(ctx, gid):
                code = m.NOT_COORDINATOR
            elif gid in self.sim_groups(ctx.cluster) or (g is not None and g.members):
                code = m.NON_EMPTY_GROUP
            elif g is None or not g.offsets:
                code = m.GROUP_ID_NOT_FOUND
            else:
                del self.groups[(ctx.cluster.name, gid)]
                code = 0
            out.append(R.DeletableGroupResult(group_id=gid, error_code=code))
        return R(version=v, throttle_time_ms=0, results=out)
