"""kafkasim's group coordinator without sockets: coordinator placement, simulated groups, the join protocol."""

from __future__ import annotations

import json
from typing import Any

from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from kafkasim import model as m
from kafkasim.groups import GroupCoordinator, coordinator, offsets_partition, simulated_groups
from kafkasim.model import Cluster
from kafkasim.protocol import ReqContext
from kafkasim.scenario import Federation, build_federation

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
