"""The tiered-metadata service over real gRPC, on three real `guardian serve` processes.

Appends under load from several writers, a stale leader epoch refused (FAILED_PRECONDITION), a
follower naming the leader, kill -9 of the tiered Raft leader during batched appends: no acknowledged
group lost, group and segment ids unique and increasing, identical stores on every node, and the
killed node, restarted, catches up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from controlplane.launcher import ServiceCluster
from tiered.client import COPY_FINISHED, COPY_STARTED, TieredClient
from tiered.proto import pb

WRITERS = 4


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[ServiceCluster]:
    c = ServiceCluster(tmp_path, tiered=True)
    c.start_all()
    try:
        c.wait_up(60)
        yield c
    finally:
        c.close()


def tiered_status(cluster: ServiceCluster, node: int, digest: bool = False) -> dict[str, Any] | None:
    code, body = cluster.request(node, "GET", "/api/v1/tiered/status" + ("?digest=true" if digest else ""),
                                 timeout=5.0)
    return body if code == 200 else None


def tiered_leader(cluster: ServiceCluster, timeout: float = 20.0, exclude: int | None = None) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in cluster.procs:
            st = tiered_status(cluster, node)
            if node != exclude and st and st["is_leader"] and st["ready"]:
                return node
        time.sleep(0.05)
    raise TimeoutError("no ready tiered leader")


def converged_digests(cluster: ServiceCluster, timeout: float = 20.0) -> set[str]:
    deadline = time.monotonic() + timeout
    digests: set[str] = set()
    while time.monotonic() < deadline:
        statuses = [tiered_status(cluster, n, digest=True) for n in cluster.procs]
        digests = {s["digest"] for s in statuses if s}
        if len(digests) == 1 and all(statuses):
            return digests
        time.sleep(0.2)
    return digests


def copy_batch(n: int, base: int, epoch: int) -> list[dict[str, Any]]:
    return [dict(kind=COPY_STARTED, start_offset=base + 100 * i, end_offset=base + 100 * i + 99, leader_epoch=epoch,
                 size_bytes=1000 + i, remote_path=f"/remote/{base + 100 * i}.log") for i in range(n)]


@pytest.mark.slow
def test_appends_fencing_and_follower_hint(cluster: ServiceCluster) -> None:
    leader = tiered_leader(cluster)
    client = TieredClient(cluster.grpc_addresses, cluster.token)
    acked: list[tuple[int, int, list[int]]] = []
    lock = threading.Lock()

    def writer(p: int) -> None:
        for g in range(25):
            r = client.append_group("c1", "topicA", p, 3, copy_batch(4, 400 * g, 3))
            with lock:
                acked.append((p, r.group_id, list(r.segment_ids)))

    threads = [threading.Thread(target=writer, args=(p,)) for p in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(acked) == WRITERS * 25
    gids = [g for _, g, _ in acked]
    sids = [s for _, _, ss in acked for s in ss]
    assert len(set(gids)) == len(gids) and len(set(sids)) == len(sids) == 4 * len(gids)

    # finish one segment, then a stale leader epoch is fenced, a newer one takes over
    seg = acked[0][2][0]
    client.append_group("c1", "topicA", acked[0][0], 3, [dict(kind=COPY_FINISHED, segment_id=seg)])
    with pytest.raises(grpc.RpcError) as stale:
        client.append_group("c1", "topicA", acked[0][0], 2, copy_batch(1, 10**6, 2))
    assert stale.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    client.append_group("c1", "topicA", acked[0][0], 4, copy_batch(1, 10**6, 4))
    with pytest.raises(grpc.RpcError) as fenced:
        client.append_group("c1", "topicA", acked[0][0], 3, copy_batch(1, 2 * 10**6, 3))
    assert fenced.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    # a follower refuses writes naming the leader's gRPC address
    follower = next(n for n in cluster.procs if n != leader)
    pinned = TieredClient([cluster.grpc_addresses[follower - 1]], cluster.token, timeout=0.3)
    with pytest.raises(grpc.RpcError) as refused:
        pinned._stub(pinned.addresses[0]).AppendGroup(
            pb.AppendGroupRequest(partition=pb.PartitionRef(cluster="c1", topic_id="t", partition=0),
                                  leader_epoch=1, events=[pb.SegmentEvent(**copy_batch(1, 0, 1)[0])]),
            metadata=pinned.metadata, timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert dict(refused.value.trailing_metadata())["x-tiered-leader"] == cluster.grpc_addresses[leader - 1]
    # reads: every group of a partition in id order; the current state after the copy finished
    groups = client.all_groups("c1", "topicA", acked[0][0], page=7)
    assert [g.group_id for g in groups] == sorted(g.group_id for g in groups)
    assert len(groups) == 25 + 2
    state = client.current_state("c1", "topicA", acked[0][0])
    assert state.state.live_segments == 4 * 25 + 1 and state.state.remote_bytes == 1000
    with pytest.raises(grpc.RpcError) as unauth:
        TieredClient(cluster.grpc_addresses, "wrong").list_partitions()
    assert unauth.value.code() == grpc.StatusCode.PERMISSION_DENIED
    code, rows = cluster.request(leader, "GET", "/api/v1/tiered/partitions?cluster=c1")
    assert code == 200 and len(rows) == WRITERS
    assert len(converged_digests(cluster)) == 1


@pytest.mark.slow
def test_leader_kill_during_batched_appends_loses_nothing(cluster: ServiceCluster) -> None:
    leader = tiered_leader(cluster)
    client = TieredClient(cluster.grpc_addresses, cluster.token, timeout=15.0)
    acked: dict[int, list[tuple[int, list[int]]]] = {p: [] for p in range(WRITERS)}
    unknown: list[str] = []
    stop = threading.Event()

    def writer(p: int) -> None:
        g = 0
        while not stop.is_set():
            try:
                r = client.append_group("c1", "topicK", p, 1, copy_batch(8, 800 * g, 1))
                acked[p].append((r.group_id, list(r.segment_ids)))
            except grpc.RpcError as exc:  # outcome unknown (deadline/unknown): not acknowledged
                unknown.append(exc.code().name)
            g += 1

    threads = [threading.Thread(target=writer, args=(p,)) for p in range(WRITERS)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    before = sum(len(v) for v in acked.values())
    cluster.kill(leader)
    new_leader = tiered_leader(cluster, exclude=leader)
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join(30)
    after = sum(len(v) for v in acked.values())
    assert before > 10 and after > before, (before, after, unknown)

    all_gids: list[int] = []
    all_sids: list[int] = []
    for p in range(WRITERS):
        groups = client.all_groups("c1", "topicK", p)
        stored = {g.group_id: [e.segment_id for e in g.events] for g in groups}
        ids = [g.group_id for g in groups]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        for gid, sids in acked[p]:
            assert stored.get(gid) == sids, f"acknowledged group {gid} of partition {p} lost or changed"
        # each writer waits for its ack, so its acknowledged groups are increasing too
        assert [gid for gid, _ in acked[p]] == sorted(gid for gid, _ in acked[p])
        all_gids += ids
        all_sids += [s for sids in stored.values() for s in sids]
    assert len(set(all_gids)) == len(all_gids) and len(set(all_sids)) == len(all_sids)

    cluster.start(leader)  # the killed node restarts from its store + journal and catches up
    cluster.wait_up(60)
    assert len(converged_digests(cluster, timeout=30)) == 1
    st = tiered_status(cluster, leader)
    assert st is not None and not st["is_leader"] and st["leader"] is not None
    assert tiered_status(cluster, new_leader) is not None
