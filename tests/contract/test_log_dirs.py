"""Contract: KIP-113 AlterReplicaLogDirs — the error names, a future replica in flight (throttled by
``replica.alter.log.dirs.io.max.bytes.per.second``), cancelled by naming the current dir, and its completion."""

from __future__ import annotations

from tests.contract.backends import Backend, unique

DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"


def test_refusals(backend: Backend) -> None:
    t = unique("dirs")
    backend.create_topic(t, {0: [1, 2], 1: [2, 3]})
    try:
        d1 = backend.log_dirs[1][0]
        got = backend.port.alter_log_dirs({(t, 0, 1): "/no/such/dir", (t, 1, 1): d1, (t, 9, 1): d1})
        assert got == {(t, 0, 1): "LogDirNotFoundError",  # 57: not a log dir of that broker
                       (t, 1, 1): "ReplicaNotAvailableError",  # 9: the broker holds no replica of it
                       (t, 9, 1): "UnknownTopicOrPartitionError"}  # 3
        assert backend.port.alter_log_dirs({}) == {}
    finally:
        backend.delete_topic(t)


def test_future_replica_in_flight_then_complete(backend: Backend) -> None:
    t = unique("future")
    backend.create_topic(t, {0: [1, 2]})
    b = 1
    try:
        backend.produce(t, 0, 4 << 20)
        cur = backend.wait("the replica's dir", lambda: backend.port.log_dirs([b], [t]).get((t, 0, b)))[0]
        other = next(d for d in backend.log_dirs[b] if d != cur.log_dir)
        # the current dir: accepted, nothing moves
        assert backend.port.alter_log_dirs({(t, 0, b): cur.log_dir}) == {(t, 0, b): None}
        assert [e.log_dir for e in backend.port.log_dirs([b], [t])[(t, 0, b)]] == [cur.log_dir]

        backend.port.set_broker_configs({b: {DIR_RATE: "10000"}})
        backend.wait("the log-dir throttle in force",
                     lambda: backend.port.broker_configs([b], [DIR_RATE])[b].get(DIR_RATE) == "10000")
        assert backend.port.alter_log_dirs({(t, 0, b): other}) == {(t, 0, b): None}
        entries = backend.wait("the future replica", lambda: (e := backend.port.log_dirs([b], [t])[(t, 0, b)])
                               and len(e) == 2 and e)
        current, future = sorted(entries, key=lambda e: e.is_future)
        assert (current.log_dir, current.is_future, future.log_dir, future.is_future) == \
            (cur.log_dir, False, other, True)
        assert future.size < current.size  # throttled
        assert future.offset_lag > 0
        # the replica is still served from its current dir: the partition is unchanged
        meta = backend.port.live().partitions[(t, 0)]
        assert meta.replicas == (1, 2) and set(meta.isr) == {1, 2}

        # naming the current dir cancels the future replica (ReplicaManager removes it, creates none)
        assert backend.port.alter_log_dirs({(t, 0, b): cur.log_dir}) == {(t, 0, b): None}
        backend.wait("the future replica cancelled", lambda: [(e.log_dir, e.is_future) for e in backend.port.log_dirs(
            [b], [t])[(t, 0, b)]] == [(cur.log_dir, False)])
        assert backend.port.alter_log_dirs({(t, 0, b): other}) == {(t, 0, b): None}
        backend.wait("the future replica again", lambda: len(backend.port.log_dirs([b], [t])[(t, 0, b)]) == 2)

        backend.port.set_broker_configs({b: {DIR_RATE: None}})
        backend.proceed([(t, 0)])
        done = backend.wait("the future replica to replace the current one", lambda: (
            e := backend.port.log_dirs([b], [t])[(t, 0, b)]) and len(e) == 1 and e[0].log_dir == other and e,
            timeout_s=60)
        assert not done[0].is_future and done[0].size >= 4 << 20
    finally:
        backend.port.set_broker_configs({b: {DIR_RATE: None}})
        backend.delete_topic(t)
