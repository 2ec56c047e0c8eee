"""kafkasim's group coordinator without sockets: coordinator placement, simulated groups, the join protocol."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
)

from kafkasim.broker.groups import (
    GroupCoordinator,
    RealGroup,
    coordinator,
    offset_fetch_body_v8,
    offset_fetch_group_v8,
    offsets_partition,
    simulated_groups,
)
from kafkasim.broker.wire import ReqContext
from kafkasim.cluster import model as m
from kafkasim.cluster.model import Cluster
from kafkasim.scenarios.scenario import Federation, build_federation

SPEC: dict[str, Any] = {
    "seed": 3, "tick_seconds": 1.0,
    "clusters": [{"name": "east", "brokers": [{"count": 4, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 2,
                                                "memory_gb": 16, "disks": [{"count": 1, "kind": "ssd"}]}],
                  "topics": [{"name": "orders", "partitions": 4, "rf": 3, "bytes_in_per_s": 500_000, "size_gb": 1,
                              "tail_groups": 1}]}],
}


def fed() -> Federation:
    return build_federation(json.loads(json.dumps(SPEC)))


def test_offsets_partition_is_kafkas_java_hash() -> None:
    assert offsets_partition("test") == 3556498 % 50  # "test".hashCode() == 3556498
    assert offsets_partition("polygenelubricants") == 0  # hashCode() == Integer.MIN_VALUE; Utils.abs -> 0
    assert offsets_partition("") == 0
    assert 0 <= offsets_partition("groupe-café-☕") < 50


def test_coordinator_follows_the_alive_brokers() -> None:
    cl = fed().clusters["east"]
    ids = [b.id for b in cl.alive_brokers()]
    c = coordinator(cl, "g1")
    assert c is not None and c.id == ids[offsets_partition("g1") % len(ids)]
    cl.set_broker_alive(c.id, False)
    moved = coordinator(cl, "g1")
    assert moved is not None and moved.id != c.id and moved.alive
    for b in list(cl.brokers):
        cl.set_broker_alive(b, False)
    assert coordinator(cl, "g1") is None


def test_simulated_groups_follow_tail_groups_and_lagging_consumers() -> None:
    f = fed()
    cl = f.clusters["east"]
    eng = f.engine
    parts = cl.topics["orders"].partitions
    assert set(simulated_groups(cl)) == {"orders-consumer-tail-1"}  # tail_groups: 1, no laggard
    eng.f["tail_groups"][parts[0].slot] = 2.5  # three tailing groups on partition 0 only
    eng.f["lag"][parts[1].slot] = 10 * 1024.0
    eng.f["lag_rate"][parts[1].slot] = 1e6
    groups = simulated_groups(cl)
    assert set(groups) == {"orders-consumer-tail-1", "orders-consumer-tail-2", "orders-consumer-tail-3",
                           "orders-consumer"}
    assert [i for _, i, _ in groups["orders-consumer-tail-3"].partitions] == [0]
    assert [i for _, i, _ in groups["orders-consumer-tail-1"].partitions] == [0, 1, 2, 3]
    lagging = groups["orders-consumer"]
    assert lagging.kind == "lagging" and [i for _, i, _ in lagging.partitions] == [1]
    co = GroupCoordinator()
    start, end = eng.partition_offsets(parts[1].slot)
    assert co.committed(cl, "orders-consumer") == {("orders", 1): max(start, end - 10)}
    assert co.committed(cl, "orders-consumer-tail-1")[("orders", 1)] == end
    eng.f["lag"][parts[1].slot] = 0.0
    eng.f["lag_rate"][parts[1].slot] = 0.0  # the replay ended: the group is gone
    assert "orders-consumer" not in co.sim_groups(cl)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _ctx(cl: Cluster, group: str, client: str) -> ReqContext:
    b = coordinator(cl, group)
    assert b is not None
    return ReqContext(client, "127.0.0.1", cl, b)


def _join(co: GroupCoordinator, ctx: ReqContext, member: str, v: int = 5) -> Any:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    return co.api_11(ctx, v, JoinGroupRequest(version=v, group_id="g", session_timeout_ms=10_000,
                                              rebalance_timeout_ms=10_000, member_id=member, group_instance_id=None,
                                              protocol_type="consumer", protocols=[P(name="range", metadata=b"s")]))


def _sync(co: GroupCoordinator, ctx: ReqContext, member: str, gen: int, assign: dict[str, bytes]) -> Any:
    A = SyncGroupRequest.SyncGroupRequestAssignment
    return co.api_14(ctx, 3, SyncGroupRequest(version=3, group_id="g", generation_id=gen, member_id=member,
                                              group_instance_id=None,
                                              assignments=[A(member_id=k, assignment=v) for k, v in assign.items()]))


def _beat(co: GroupCoordinator, ctx: ReqContext, member: str, gen: int) -> int:
    r = co.api_12(ctx, 3, HeartbeatRequest(version=3, group_id="g", generation_id=gen, member_id=member,
                                           group_instance_id=None))
    return int(r.error_code)


def test_join_sync_and_session_expiry() -> None:
    cl = fed().clusters["east"]
    clock = Clock()
    co = GroupCoordinator(clock)
    ctx = _ctx(cl, "g", "a")
    first = _join(co, ctx, "")
    assert first.error_code == m.MEMBER_ID_REQUIRED and first.member_id  # v4+: rejoin with the given id
    a = _join(co, ctx, first.member_id)
    assert (a.error_code, a.generation_id, a.leader) == (0, 1, a.member_id) and len(a.members) == 1
    assert _sync(co, ctx, a.member_id, 1, {a.member_id: b"A"}).assignment == b"A"
    assert _beat(co, ctx, a.member_id, 1) == 0
    b = _join(co, _ctx(cl, "g", "b"), "", v=3)  # v3: a member id at once; a new generation
    assert (b.error_code, b.generation_id, b.leader, b.members) == (0, 2, a.member_id, [])
    assert _sync(co, ctx, b.member_id, 2, {}).error_code == m.REBALANCE_IN_PROGRESS  # the leader has not synced
    assert _beat(co, ctx, a.member_id, 1) == m.REBALANCE_IN_PROGRESS
    a2 = _join(co, ctx, a.member_id)  # a known member rejoining does not start another generation
    assert a2.generation_id == 2 and {x.member_id for x in a2.members} == {a.member_id, b.member_id}
    assert _sync(co, ctx, a.member_id, 2, {a.member_id: b"A2", b.member_id: b"B2"}).assignment == b"A2"
    assert _sync(co, ctx, b.member_id, 2, {}).assignment == b"B2"
    assert co.real(cl, "g") is not None and co.real(cl, "g").state == "Stable"  # type: ignore[union-attr]
    clock.t += 8
    assert _beat(co, ctx, a.member_id, 2) == 0
    clock.t += 4  # b's 10 s session ran out; a heartbeat 4 s ago
    assert _beat(co, ctx, a.member_id, 2) == m.REBALANCE_IN_PROGRESS
    a3 = _join(co, ctx, a.member_id)
    assert a3.generation_id == 3 and [x.member_id for x in a3.members] == [a.member_id]
    assert _beat(co, ctx, b.member_id, 2) == m.UNKNOWN_MEMBER_ID
    other = next(x for x in cl.alive_brokers() if x is not ctx.broker)
    assert _beat(co, ReqContext("a", "127.0.0.1", cl, other), a.member_id, 3) == m.NOT_COORDINATOR


# ---------------------------------------------------------------------- OffsetFetch v8 encoded without objects
_names = st.text(st.characters(codec="utf-8"), max_size=12)
_parts = st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1),
                            st.integers(-2**31, 2**31 - 1), st.none() | _names, st.integers(-2**15, 2**15 - 1)),
                  max_size=4)
_groups = st.lists(st.tuples(_names, st.integers(-2**15, 2**15 - 1),
                             st.lists(st.tuples(_names, _parts), max_size=3)), max_size=4)


def _reference_v8(groups: list[tuple[str, int, list[tuple[str, list[Any]]]]]) -> bytes:
    """kafka-python's encoding of the same response object (the body, no header)."""
    R = OffsetFetchResponse
    G = R.OffsetFetchResponseGroup
    T = G.OffsetFetchResponseTopics
    return bytes(R(version=8, throttle_time_ms=0, groups=[G(group_id=gid, error_code=err, topics=[T(name=t, partitions=[
        T.OffsetFetchResponsePartitions(partition_index=i, committed_offset=o, committed_leader_epoch=e, metadata=md,
                                        error_code=pe) for i, o, e, md, pe in ps]) for t, ps in topics])
        for gid, err, topics in groups]).encode())


@settings(deadline=None, max_examples=200)
@given(_groups)
def test_offset_fetch_v8_encoding_is_kafka_pythons(groups: list[tuple[str, int, list[tuple[str, list[Any]]]]]) -> None:
    body = offset_fetch_body_v8([offset_fetch_group_v8(gid, err, topics) for gid, err, topics in groups])
    assert body == _reference_v8(groups)


def test_offset_fetch_v8_answers_every_kind_of_group_as_the_objects_did() -> None:
    """Simulated groups (numpy path), a stored group, a group of another coordinator and a named-partitions
    request, after the engine moved: the encoded answer is byte-identical to kafka-python's encoding of the
    expected rows, and the committed offsets are :meth:`GroupCoordinator.committed`'s."""
    f = fed()
    cl = f.clusters["east"]
    parts = cl.topics["orders"].partitions
    f.engine.f["tail_groups"][parts[0].slot] = 2.0
    f.engine.f["lag"][parts[1].slot] = 10 * 1024.0
    f.engine.f["lag_rate"][parts[1].slot] = 1e6
    co = GroupCoordinator(Clock())
    co.groups[("east", "real")] = RealGroup("real", offsets={("orders", 2): (77, 3, None, 0.0),
                                                              ("orders", 0): (5, -1, "md", 0.0)})
    sims = sorted(co.sim_groups(cl))
    assert len(sims) == 3
    Q = OffsetFetchRequest.OffsetFetchRequestGroup
    QT = Q.OffsetFetchRequestTopics
    for _ in range(3):
        f.engine.step(5.0)
        for b in cl.alive_brokers():
            ctx = ReqContext("x", "127.0.0.1", cl, b)
            req = OffsetFetchRequest(version=8, require_stable=False, groups=[
                *(Q(group_id=g, topics=None) for g in [*sims, "real"]),
                Q(group_id=sims[0], topics=[QT(name="orders", partition_indexes=[3, 9])])])
            got = co.api_9(ctx, 8, req)
            expect: list[tuple[str, int, list[tuple[str, list[Any]]]]] = []
            for g in [*sims, "real", sims[0]]:
                if coordinator(cl, g) is not b:
                    expect.append((g, m.NOT_COORDINATOR, []))
                    continue
                if g == "real":
                    expect.append((g, 0, [("orders", [(0, 5, -1, "md", 0), (2, 77, 3, None, 0)])]))
                    continue
                have = co.committed(cl, g)
                if len(expect) == len(sims) + 1:  # the named-partitions request: 9 has no commit
                    expect.append((g, 0, [("orders", [(3, have.get(("orders", 3), -1),
                                                       parts[3].leader_epoch if ("orders", 3) in have else -1,
                                                       "", 0), (9, -1, -1, "", 0)])]))
                    continue
                expect.append((g, 0, [("orders", [(i, o, parts[i].leader_epoch, "", 0)
                                                  for (_, i), o in sorted(have.items())])]))
            assert got.body == _reference_v8(expect)
            decoded = OffsetFetchResponse[8].decode(got.encode(header=False, framed=False))
            assert [x.group_id for x in decoded.groups] == [*sims, "real", sims[0]]


def test_list_groups_on_every_broker_lists_each_group_once_at_its_coordinator() -> None:
    f = fed()
    cl = f.clusters["east"]
    f.engine.f["tail_groups"][cl.topics["orders"].partitions[0].slot] = 3.0
    co = GroupCoordinator(Clock())
    co.groups[("east", "real")] = RealGroup("real", offsets={("orders", 2): (77, 3, None, 0.0)})
    req = ListGroupsRequest(version=4, states_filter=[])
    seen: dict[str, int] = {}
    for b in cl.alive_brokers():
        for g in co.api_16(ReqContext("x", "127.0.0.1", cl, b), 4, req).groups:
            assert g.group_id not in seen
            seen[g.group_id] = b.id
            c = coordinator(cl, g.group_id)
            assert c is not None and c.id == b.id
    assert set(seen) == {gid for gid, _, _ in co.listing(cl)} == {*co.sim_groups(cl), "real"}
    cl.set_broker_alive(next(iter(seen.values())), False)  # coordinators move: the cached listing follows
    moved = {g.group_id: b.id for b in cl.alive_brokers()
             for g in co.api_16(ReqContext("x", "127.0.0.1", cl, b), 4, req).groups}
    assert set(moved) == set(seen)
    assert all(moved[g] == coordinator(cl, g).id for g in moved)  # type: ignore[union-attr]
    stable = ListGroupsRequest(version=4, states_filter=["Empty"])
    assert [g.group_id for b in cl.alive_brokers()
            for g in co.api_16(ReqContext("x", "127.0.0.1", cl, b), 4, stable).groups] == ["real"]
