"""The tiered-metadata service over real gRPC, on three real `guardian serve` processes.

Appends under load from several writers, a stale leader epoch refused (FAILED_PRECONDITION), a
follower naming the leader, kill -9 of the tiered Raft leader during batched appends: no acknowledged
group lost, group and segment ids unique and increasing, identical stores on every node, and the
killed node, restarted, catches up.

Load: the tiered Raft group elects in 0.2-0.5 s, so a node starved of CPU for that long (a loaded CI
machine) makes the others elect a new leader in the middle of a test.  The tests therefore wait on
conditions, not on time, and never rely on the leader found at the start still leading later; a failure
message carries every node's Raft view (:func:`describe`) and what the clients saw.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from controlplane.launcher import ServiceCluster
from tiered.client import COPY_FINISHED, COPY_STARTED, TieredClient
from tiered.proto import pb
from tiered.server import LEADER_KEY

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


def raft_addr(cluster: ServiceCluster, node: int) -> str:
    return f"127.0.0.1:{cluster.tiered_raft_ports[node - 1]}"


def describe(cluster: ServiceCluster) -> str:
    """Every node's tiered Raft view, one line each (for failure messages)."""
    lines = []
    for node, proc in sorted(cluster.procs.items()):
        st = tiered_status(cluster, node)
        if st is None:
            lines.append(f"  node {node}: no tiered status (exit code {proc.poll()}, last log line "
                         f"{cluster.last_log_line(node)!r})")
            continue
        lines.append(f"  node {node} ({st['self']}): {st['role']} term {st['term']} leader {st['leader']} "
                     f"ready {st['ready']} commit {st['commit_index']} applied {st['last_applied']} "
                     f"watermark {st.get('store_watermark')} quorum {st['has_quorum']} peers {st['connected_peers']}")
    return "\n".join(lines)


def wait_for(cond: Callable[[], bool], timeout: float, what: str, cluster: ServiceCluster) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s\n{describe(cluster)}")
        time.sleep(0.05)


def stable_pair(statuses: dict[int, dict[str, Any] | None], cluster: ServiceCluster,
                expect: tuple[int, int, int] | None = None) -> tuple[int, int, int] | None:
    """(leader, follower, term): a ready leader and a follower of the same term naming it, else None.

    With ``expect``: whether that same pair and term still hold (None when not)."""
    for leader, st in statuses.items():
        if not (st and st["is_leader"] and st["ready"]):
            continue
        for follower, fst in statuses.items():
            if (follower != leader and fst and fst["role"] == "follower" and fst["term"] == st["term"]
                    and fst["leader"] == raft_addr(cluster, leader)):
                pair = (leader, follower, int(st["term"]))
                if expect is None or pair == expect:
                    return pair
    return None


def refused_by_follower(cluster: ServiceCluster, request: Any, timeout: float = 30.0
                        ) -> tuple[grpc.RpcError, int, list[str]]:
    """Send ``request`` to a follower until one attempt has the same leader and term before and after it.

    Returns (the follower's error, the leader, every attempt as text).  An attempt during which the
    leadership moved (the follower became leader, or knew no leader for a moment) tests nothing and is
    repeated; an attempt with a stable leader is returned whatever it answered, so a wrong answer fails.
    Send a request that changes nothing on a leader either (a fenced epoch): an unstable attempt may land
    on one."""
    attempts: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = stable_pair({n: tiered_status(cluster, n) for n in cluster.procs}, cluster)
        if view is None:
            time.sleep(0.1)
            continue
        leader, follower, term = view
        address = cluster.grpc_addresses[follower - 1]
        pinned = TieredClient([address], cluster.token)
        error: grpc.RpcError | None = None
        try:
            answer = f"OK {pinned._stub(address).AppendGroup(request, metadata=pinned.metadata, timeout=5)}"
        except grpc.RpcError as exc:
            error = exc
            answer = f"{exc.code().name} {exc.details()!r} trailers {dict(exc.trailing_metadata() or ())}"
        finally:
            pinned.close()
        stable = stable_pair({n: tiered_status(cluster, n) for n in cluster.procs}, cluster, expect=view) is not None
        attempts.append(f"  leader {leader} follower {follower} term {term}: {answer} (leader unchanged: {stable})")
        if stable:
            assert error is not None, "a follower under a stable leader accepted a write:\n" + "\n".join(attempts)
            return error, leader, attempts
    raise AssertionError(f"no follower answered under a stable leader within {timeout:.0f} s:\n"
                         + "\n".join(attempts) + "\n" + describe(cluster))


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
    tiered_leader(cluster)
    # a call may span an election or two on a starved machine: 30 s per append, 3 s per attempt
    client = TieredClient(cluster.grpc_addresses, cluster.token, timeout=30.0, attempt_timeout=3.0)
    acked: list[tuple[int, int, list[int]]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def writer(p: int) -> None:
        for g in range(25):
            try:
                r = client.append_group("c1", "topicA", p, 3, copy_batch(4, 400 * g, 3))
            except Exception as exc:  # reported by the assertion below (a thread's exception is only a warning)
                with lock:
                    errors.append(f"partition {p} group {g}: {exc!r}")
                return
            with lock:
                acked.append((p, r.group_id, list(r.segment_ids)))

    threads = [threading.Thread(target=writer, args=(p,), name=f"writer-{p}") for p in range(WRITERS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 240
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert len(acked) == WRITERS * 25, (
        f"{len(acked)} of {WRITERS * 25} acknowledged; still running: {[t.name for t in threads if t.is_alive()]}; "
        f"errors: {errors}; client retries {client.retries} redirects {client.redirects}; last acks: {acked[-4:]}\n"
        + describe(cluster))
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

    # a follower refuses writes naming the leader's gRPC address (the request is fenced: on a leader that
    # took over meanwhile it changes nothing)
    fenced_request = pb.AppendGroupRequest(
        partition=pb.PartitionRef(cluster="c1", topic_id="topicA", partition=acked[0][0]), leader_epoch=1,
        events=[pb.SegmentEvent(**copy_batch(1, 3 * 10**6, 1)[0])])
    refused, leader, attempts = refused_by_follower(cluster, fenced_request)
    seen = "\n".join(attempts) + "\n" + describe(cluster)
    print("follower refusal attempts:\n" + seen)  # shown with -rP, and on failure
    assert refused.code() == grpc.StatusCode.UNAVAILABLE, seen
    assert dict(refused.trailing_metadata() or ()).get(LEADER_KEY) == cluster.grpc_addresses[leader - 1], seen
    # reads: every group of a partition in id order; the current state after the copy finished
    groups = client.all_groups("c1", "topicA", acked[0][0], page=7)
    assert [g.group_id for g in groups] == sorted(g.group_id for g in groups)
    assert len(groups) == 25 + 2
    state = client.current_state("c1", "topicA", acked[0][0])
    assert state.state.live_segments == 4 * 25 + 1 and state.state.remote_bytes == 1000
    with pytest.raises(grpc.RpcError) as unauth:
        TieredClient(cluster.grpc_addresses, "wrong").list_partitions()
    assert unauth.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert len(converged_digests(cluster)) == 1, describe(cluster)
    for node in cluster.procs:  # converged: every node's store answers the same
        code, rows = cluster.request(node, "GET", "/api/v1/tiered/partitions?cluster=c1")
        assert code == 200 and len(rows) == WRITERS, (node, code, rows)


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
    def total() -> int:
        return sum(len(v) for v in acked.values())

    for t in threads:
        t.start()
    wait_for(lambda: total() > 10, 60, "more than 10 groups acknowledged before the kill", cluster)
    before = total()
    cluster.kill(leader)
    new_leader = tiered_leader(cluster, exclude=leader)
    at_failover = total()
    wait_for(lambda: total() > at_failover, 60, "a group acknowledged by the new leader", cluster)
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
