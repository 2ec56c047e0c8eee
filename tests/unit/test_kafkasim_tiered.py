"""kafkasim's tiered topics against an in-memory metadata service (the rules of ``tiered.model``).

Rolls, copies (two groups per job, ids from the service), local retention only after the copy, remote
retention, each on its own schedule (the retention check, the remote log manager's task), reads from remote
byte for byte, a leader change fencing the deposed leader's queued job, a new replica starting at
``local_start_fetch_offset``, configs refused as Kafka refuses them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkasim.cluster import model as m
from kafkasim.cluster.configs import REMOTE_LOG_TASK, RETENTION_CHECK
from kafkasim.cluster.model import SimError
from kafkasim.cluster.records import split_batches, store_batches
from kafkasim.scenarios.scenario import Federation, build_federation
from kafkasim.tiering.remote_store import LocalDirStore
from kafkasim.tiering.segments import COPIED, TieredLog
from kafkasim.tiering.tiered import Fenced, TieredManager, TieredSettings
from tests.support.records import record_batch
from tiered.model import (
    EventKind,
    GroupRefused,
    PartitionMeta,
    Segment,
    SegmentEvent,
    local_start_fetch_offset,
    plan_group,
)


class FakeMetadata:
    """The service's rules in memory: fencing, life cycle, id allocation."""

    def __init__(self) -> None:
        self.meta: dict[tuple[str, str, int], PartitionMeta] = {}
        self.segs: dict[tuple[str, str, int], dict[int, Segment]] = {}
        self.groups: list[tuple[tuple[str, str, int], int, int, list[SegmentEvent]]] = []
        self.next_group, self.next_segment = 1, 1
        self.starts: list[tuple[int, int, float, float]] = []

    def append(self, cluster: str, topic_id: str, partition: int, epoch: int,
               events: list[dict[str, Any]]) -> tuple[int, list[int]]:
        key = (cluster, topic_id, partition)
        segs = self.segs.setdefault(key, {})
        evs = [SegmentEvent.from_json(e) for e in events]
        try:
            out = plan_group(self.meta.get(key, PartitionMeta()), epoch, evs, self.next_group, segs.get,
                             self.next_segment)
        except GroupRefused as exc:
            if exc.stale_epoch:
                raise Fenced(str(exc)) from None
            raise
        self.meta[key] = out.meta
        segs.update(out.segments)
        self.groups.append((key, self.next_group, epoch, list(out.events)))
        self.next_group += 1
        self.next_segment += len(out.segment_ids)
        return self.next_group - 1, list(out.segment_ids)

    def copied(self, cluster: str, topic_id: str, partition: int) -> dict[tuple[int, int], tuple[int, str]]:
        return {(s.start_offset, s.end_offset): (s.segment_id, s.remote_path)
                for s in self.segs.get((cluster, topic_id, partition), {}).values()
                if s.state == EventKind.COPY_FINISHED}

    def local_start_fetch_offset(self, cluster: str, topic_id: str, partition: int, log_start: int, log_end: int,
                                 ingress: float, threshold_s: float) -> int:
        self.starts.append((log_start, log_end, ingress, threshold_s))
        ends = [e for _, e in self.copied(cluster, topic_id, partition)]
        return local_start_fetch_offset(log_start, log_end, ingress, threshold_s, max(ends) if ends else None)

    def delete_partition(self, cluster: str, topic_id: str, partition: int) -> None:
        self.segs.pop((cluster, topic_id, partition), None)


def batch(offset: int, values: list[bytes]) -> bytes:
    return record_batch(values, offset, timestamp_ms=1_795_000_000_000)


QUICK = {RETENTION_CHECK: "1000", REMOTE_LOG_TASK: "1000"}
"""Local retention and remote deletes every tick (Kafka: every 300 s and every 30 s)."""


def federation(broker_configs: dict[str, str]) -> Federation:
    return build_federation({"seed": 1, "clusters": [{"name": "c", "broker_configs": broker_configs, "brokers": [
        {"count": 3, "idcs": ["a"], "memory_gb": 8, "disks": [{"count": 1, "kind": "nvme"}]}]}]})


@pytest.fixture()
def sim(tmp_path: Path) -> Iterator[tuple[Federation, TieredManager, FakeMetadata]]:
    fed = federation(QUICK)
    md = FakeMetadata()
    mgr = TieredManager(fed, TieredSettings((), "", tmp_path / "remote", follower_tail_s=5.0), metadata=md,
                        store=LocalDirStore(tmp_path / "remote"))
    mgr.start()
    try:
        yield fed, mgr, md
    finally:
        mgr.stop()


def wait_idle(mgr: TieredManager, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not mgr.idle() and time.monotonic() < deadline:
        time.sleep(0.005)


def settle(fed: Federation, mgr: TieredManager, ticks: int = 3) -> None:
    deadline = time.monotonic() + 10
    for _ in range(ticks):
        fed.engine.step(1.0)
        while not mgr.idle() and time.monotonic() < deadline:
            time.sleep(0.005)
    fed.engine.step(1.0)


def test_tiered_config_needs_the_remote_log_manager_and_cannot_be_disabled(sim: Any) -> None:
    fed, _, _ = sim
    cl = fed.clusters["c"]
    cl.create_topic("t", 1, 1, configs={"remote.storage.enable": "true"})
    with pytest.raises(SimError) as err:
        cl.alter_topic_configs("t", [("remote.storage.enable", 0, "false")])
    assert err.value.code == m.INVALID_CONFIG
    bare = m.Cluster("bare")
    with pytest.raises(SimError):
        bare.validate_topic_configs({"remote.storage.enable": "true"})
    with pytest.raises(SimError):
        bare.validate_topic_configs({"local.retention.bytes": "lots"})


def test_rolls_copy_trim_and_read_back_from_remote(sim: Any) -> None:
    fed, mgr, md = sim
    cl = fed.clusters["c"]
    cl.create_topic("t", 1, 2, configs={"remote.storage.enable": "true", "segment.bytes": "3000",
                                        "local.retention.bytes": "4000"})
    p = cl.partition("t", 0)
    settle(fed, mgr, 1)
    sent: list[bytes] = []
    for k in range(30):
        values = [f"value-{k}-{i}".encode() * 20 for i in range(3)]
        sent.append(batch(0, values))
        store_batches(cl, p, sent[-1])
        if k % 3 == 2:
            settle(fed, mgr, 1)
    settle(fed, mgr, 4)
    lg = mgr.log_of(cl, "t", 0)
    assert lg is not None
    copied = [s for s in lg.segments if s.state == COPIED]
    assert len(copied) >= 5 and mgr.stats["copied_segments"] == len(copied)
    ids = [g[1] for g in md.groups]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    kinds = [e.kind for g in md.groups for e in g[3]]
    assert kinds.count(EventKind.COPY_STARTED) == kinds.count(EventKind.COPY_FINISHED) == len(copied)
    seg_ids = [s.segment_id for s in copied]
    assert seg_ids == sorted(seg_ids) and len(set(seg_ids)) == len(seg_ids)
    # local retention: only copied segments left the disk, the tail stays; the engine reports local bytes
    assert lg.local_start > 0
    local = fed.engine.f["size"][p.slot]
    assert local == pytest.approx(lg.local_bytes())
    assert 4000 <= local < 4000 + 3000 + 2000
    # reads from offset 0 come from the remote files, byte for byte what was stored
    end = fed.engine.partition_offsets(p.slot)[1]
    assert read_all(mgr, cl, p, end) == b"".join(b[3] for b in p.batches)
    assert mgr.stats["remote_fetches"] >= len([s for s in copied if not s.local])
    assert mgr.store.get(copied[0].remote_path) == b"".join(
        b[3] for b in p.batches if copied[0].base <= b[0] <= copied[0].end)


def read_all(mgr: TieredManager, cl: m.Cluster, p: m.Partition, end: int) -> bytes:
    got, offset = b"", 0
    while offset < end:
        chunk = mgr.read(cl, p, offset, end, 1000)
        assert chunk
        got += chunk
        for raw, _count, last_delta, _ts in split_batches(chunk):
            offset = int.from_bytes(raw[:8], "big") + last_delta + 1
    return got


def test_leader_change_fences_the_deposed_leaders_job(sim: Any) -> None:
    fed, mgr, md = sim
    cl = fed.clusters["c"]
    cl.create_topic("f", 1, 2, configs={"remote.storage.enable": "true", "segment.bytes": "1000"})
    p = cl.partition("f", 0)
    settle(fed, mgr, 1)
    mgr.pause()
    store_batches(cl, p, batch(0, [b"x" * 1500]))
    fed.engine.step(1.0)
    fed.engine.step(1.0)  # rolled; the copy job (epoch 0) waits in the queue
    old_epoch = p.leader_epoch
    cl.set_broker_alive(p.leader, False)
    assert p.leader_epoch == old_epoch + 1
    fed.engine.step(1.0)  # the new leader re-queues the segment ahead, under its epoch
    mgr.resume()
    settle(fed, mgr, 3)
    assert mgr.stats["fenced"] == 1
    epochs = {e.leader_epoch for g in md.groups for e in g[3]}
    assert epochs == {old_epoch + 1}
    lg = mgr.log_of(cl, "f", 0)
    assert lg is not None and [s.state for s in lg.segments] == [COPIED]


def test_new_replica_starts_at_local_start_fetch_offset(sim: Any) -> None:
    fed, mgr, md = sim
    cl = fed.clusters["c"]
    cl.create_topic("r", 1, 1, {0: [1]}, configs={"remote.storage.enable": "true", "segment.bytes": "100000",
                                                  "follower.replication.throttled.replicas": "*"})
    cl.alter_broker_configs("2", [("follower.replication.throttled.rate", 0, "100000")])
    p = cl.partition("r", 0)
    fed.engine.f["base_rate"][p.slot] = 20_000.0
    settle(fed, mgr, 50)
    lg = mgr.log_of(cl, "r", 0)
    assert lg is not None and any(s.state == COPIED for s in lg.segments)
    local = float(fed.engine.f["size"][p.slot])
    assert lg.local_start == 0 and local > 900_000  # no local retention: the whole log is local
    cl.alter_reassignment("r", 0, [2])
    settle(fed, mgr, 1)
    start = mgr.starts.get(((cl.name, cl.topics["r"].topic_id, 0), 2))
    assert start is not None and md.starts, dict(mgr.stats)
    log_start, log_end, ingress, threshold = md.starts[-1]
    assert (log_start, threshold) == (0, 5.0) and ingress > 0
    assert start == max(log_start, int(log_end - ingress * threshold))  # the tail: ~5 s of ingress
    ra = p.reassignment
    assert ra is not None and ra.copied[2] >= lg.bytes_below(start) > 0.6 * local
    ticks = 0
    while p.reassignment is not None and ticks < 200:
        fed.engine.step(1.0)
        ticks += 1
    # the tail (~5 s x 20 KB/s + what arrives meanwhile) at 100 KB/s, not the ~1 MB local log
    assert p.replicas == [2] and ticks < 0.3 * local / 80_000, (ticks, ra.copied)


def test_remote_retention_deletes_oldest_segments(sim: Any) -> None:
    fed, mgr, md = sim
    cl = fed.clusters["c"]
    cl.create_topic("d", 1, 1, configs={"remote.storage.enable": "true", "segment.bytes": "2000",
                                        "retention.bytes": "10000", "local.retention.bytes": "3000"})
    p = cl.partition("d", 0)
    settle(fed, mgr, 1)
    for k in range(40):
        store_batches(cl, p, batch(0, [b"r%d" % k * 300]))
        settle(fed, mgr, 1)
    settle(fed, mgr, 3)
    lg = mgr.log_of(cl, "d", 0)
    assert lg is not None and mgr.stats["deleted_segments"] >= 5
    kinds = [e.kind for g in md.groups for e in g[3]]
    assert kinds.count(EventKind.DELETE_FINISHED) == kinds.count(EventKind.DELETE_STARTED) == \
        mgr.stats["deleted_segments"]
    # the log start moved past the deleted segments: fetches and ListOffsets earliest start there
    start, end = fed.engine.partition_offsets(p.slot)
    assert start == lg.log_start > 0 and lg.segments[0].base == start
    assert sum(s.size for s in lg.segments) + lg.active_bytes < 10_000 + 2 * 2000
    gone = [e.remote_path for g in md.groups for e in g[3] if e.kind == EventKind.DELETE_FINISHED]
    assert gone and not any((mgr.settings.remote_dir / path).exists() for path in gone)
    with pytest.raises(SimError):
        mgr.read(cl, p, start - 1, end, 1000)


def test_history_becomes_segments_when_enabled_later() -> None:
    lg = TieredLog.from_history(100, 1100, 10_000.0, [], 0.0, 50.0, 2500.0, 100.0, 3)
    assert [(s.base, s.end) for s in lg.segments] == [(100, 349), (350, 599), (600, 849), (850, 1099)]
    assert lg.active_base == 1100 and lg.local_bytes() == pytest.approx(10_000.0)
    assert lg.segments[0].closed_t < lg.segments[-1].closed_t == 50.0


def test_local_retention_runs_at_the_retention_check_and_remote_deletes_at_the_remote_log_manager_task(
        tmp_path: Path) -> None:
    fed = federation({RETENTION_CHECK: "10000", REMOTE_LOG_TASK: "4000"})  # Kafka: 300000 and 30000
    md = FakeMetadata()
    mgr = TieredManager(fed, TieredSettings((), "", tmp_path / "remote"), metadata=md,
                        store=LocalDirStore(tmp_path / "remote"))
    mgr.start()
    try:
        cl = fed.clusters["c"]
        cl.create_topic("d", 1, 1, configs={"remote.storage.enable": "true", "segment.bytes": "2000",
                                            "retention.bytes": "20000", "local.retention.bytes": "3000"})
        p = cl.partition("d", 0)
        t0 = fed.engine.t  # the brokers' schedules started here (the federation was built)
        local_moved: list[float] = []
        start_moved: list[float] = []
        copied_before_first_check = 0
        for k in range(80):
            store_batches(cl, p, batch(0, [b"r%02d" % k * 250]))
            local0, start0 = (lg.local_start, lg.log_start) if (lg := mgr.log_of(cl, "d", 0)) else (0, 0)
            fed.engine.step(1.0)
            wait_idle(mgr)
            lg = mgr.log_of(cl, "d", 0)
            assert lg is not None
            if lg.local_start != local0:
                local_moved.append(fed.engine.t - t0)
            if lg.log_start != start0:
                start_moved.append(fed.engine.t - t0)
            if fed.engine.t - t0 < 10.0:
                copied_before_first_check = sum(s.state == COPIED for s in lg.segments)
    finally:
        mgr.stop()
    # copied segments stay on the local disk until the leader's broker checks retention (every 10 s) ...
    assert copied_before_first_check >= 2 and local_moved and min(local_moved) == 10.0
    assert all(t % 10.0 == 0.0 for t in local_moved) and len(local_moved) >= 4, local_moved
    # ... and leave the remote store only when the partition's remote log manager task runs (every 4 s from
    # its first run, a seeded phase after the topic was created at t0)
    first = math.ceil(4.0 * mgr.tasks.phase("c/d/0") - 1e-9)
    assert start_moved and all((t - first) % 4.0 == 0.0 for t in start_moved) and len(start_moved) >= 3, \
        (first, start_moved)
    assert not set(start_moved) <= set(local_moved)
    assert mgr.stats["deleted_segments"] >= 3
