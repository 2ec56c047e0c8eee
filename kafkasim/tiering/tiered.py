"""Tiered topics in kafkasim: the brokers' remote log manager, a real client of Guardian's tiered metadata.

Goal
    ``remote.storage.enable=true`` topics behave as under KIP-405 with Guardian holding the segment
    metadata: leaders roll segments, copy closed ones to a remote store and record each copy and delete as
    event groups through :class:`tiered.client.TieredClient` (gRPC) with their leader epoch; local retention
    keeps only the tail; fetches below the local log start are served from remote; a new follower
    (reassignment) starts at the service's ``local_start_fetch_offset``, so a move copies only the tail.

Method
    :class:`TieredManager` is an engine listener (it runs on the simulator's loop thread after every
    tick) plus one worker thread for everything that waits on the network or the store.  Per tick and
    tiered partition (:class:`kafkasim.tiering.segments.TieredLog`): roll by ``segment.bytes``/``segment.ms``; when the
    leader's broker runs its retention check (``log.retention.check.interval.ms``,
    :attr:`kafkasim.physics.engine.Engine.retention_due`), copied segments past local retention leave the local log.
    Copies and remote deletes happen only when the partition's own remote log manager task runs
    (:class:`kafkasim.tiering.rlm_tasks.TaskSchedule`: every ``remote.log.manager.task.interval.ms`` of the leader,
    default 30 s, fixed delay; a new leader's task runs at once, as Kafka's ``scheduleWithFixedDelay(task, 0,
    interval)``; a partition that becomes tiered runs first at a seeded phase of its own): a run turns the
    copied segments past retention into a *delete job* and every closed segment not copied yet (its end below
    the high watermark), oldest first, into copy jobs (epoch = the partition's leader epoch then), each segment
    when the leader's copy quota allows (KIP-956 ``remote.log.manager.copy.max.bytes.per.second``, unset:
    unlimited; :class:`kafkasim.tiering.rlm_tasks.CopyQuota`) — a run waiting for the quota continues in later ticks.
    So, as under KIP-405, between two runs closed segments stay local only and the remote log grows past its
    limits.  After each tick and run the engine's ``size`` of the partition is set to its **local** bytes (what
    DescribeLogDirs reports, what a move copies, what Guardian's executor estimates from) and its log start
    offset to the first offset still readable.  The worker runs a copy job as Kafka's
    ``RLMCopyTask`` does: one group of ``COPY_STARTED`` events (Guardian allocates the segment ids), the
    uploads (``cluster/topic-topicid/partition/<base offset>-<epoch>.log``), one group of ``COPY_FINISHED``;
    a delete job: ``DELETE_STARTED`` group, file deletes, ``DELETE_FINISHED`` group.  Results come back to
    the loop thread through a queue, so the model is only changed there.  A leader change moves the task to
    the new leader: its first run (at once) re-queues the segments still being copied under the new epoch
    *ahead* of older jobs, with a state check first (the new leader copies from the highest copied offset it
    reads from Guardian, as Kafka's does; a failed job's segments wait for the next run); a job of
    the deposed leader that reaches Guardian afterwards is refused (``FAILED_PRECONDITION``): counted in
    ``stats["fenced"]``, never applied.  Kafka's tiered-storage meters and gauges (copy/fetch/delete requests,
    bytes and errors; copy and delete lag; remote log size) are marked and recorded on the leader where and when
    Kafka's ``RemoteLogManager`` does (:mod:`kafkasim.tiering.tiered_metrics`); the exporters render them.
    When a reassignment adds a replica, the worker asks
    ``LocalStartFetchOffset(local log start, log end, ingress offsets/s, follower_tail_s)``; the local bytes
    below that offset count as already held by the new replica (its DescribeLogDirs size is the bytes it
    holds of the leader's local log), so it copies only ``[start, log end)``.  Topics that are deleted
    have their remote files and metadata deleted.

Guarantee
    Local bytes are dropped only after ``COPY_FINISHED`` is committed; a fenced or failed job changes
    nothing and its segments are retried at the task's next run under the current epoch; a closed segment is
    never copied between two runs of its partition's task; reads from remote return the stored
    batches byte for byte.  One worker: jobs of the federation run one at a time (groups batch a
    partition's segments to amortise Raft commits).

Cost
    Per tick O(tiered partitions + their segments) for rolls and sizes, plus O(segments) per task due (the
    schedule pops only due tasks); per copy job 2 RPCs + one file write per segment.
"""

from __future__ import annotations

import base64
import collections
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
import numpy as np
import numpy.typing as npt

from kafkasim.cluster import configs as kc
from kafkasim.cluster import model as m
from kafkasim.cluster.configs import REMOTE_LOG_TASK, interval_s
from kafkasim.cluster.model import Cluster, Partition, SimError, Topic
from kafkasim.cluster.records import split_batches, synthetic_batch
from kafkasim.tiering.remote_store import LocalDirStore, RemoteStore
from kafkasim.tiering.rlm_tasks import CopyQuota, TaskSchedule
from kafkasim.tiering.segments import (
    COPIED,
    COPYING,
    DELETING,
    LOCAL,
    Batch,
    Segment,
    TieredLog,
    retention_limit,
    slice_batches,
)
from kafkasim.tiering.tiered_metrics import TieredMetrics
from tiered.client import COPY_FINISHED, COPY_STARTED, DELETE_FINISHED, DELETE_STARTED, TieredClient

log = logging.getLogger("kafkasim.tiering.tiered")
PKey = tuple[str, uuid.UUID, int]
MAX_SEGMENTS_PER_JOB = 500  # events per group (the service takes up to 1000)


class Fenced(Exception):
    """Guardian refused a group: the caller's leader epoch is below the partition's mark."""


class TieredMetadata(Protocol):
    """What the remote log manager needs from the metadata service (a fake implements it in unit tests)."""

    def append(self, cluster: str, topic_id: str, partition: int, epoch: int,
               events: list[dict[str, Any]]) -> tuple[int, list[int]]:
        """Append one group; returns (group id, segment ids of its COPY_STARTED events); raises :class:`Fenced`."""
        ...

    def copied(self, cluster: str, topic_id: str, partition: int) -> dict[tuple[int, int], tuple[int, str]]:
        """Copy-finished live segments: (start, end offset) -> (segment id, remote path)."""
        ...

    def local_start_fetch_offset(self, cluster: str, topic_id: str, partition: int, log_start: int, log_end: int,
                                 ingress: float, threshold_s: float) -> int:
        ...

    def delete_partition(self, cluster: str, topic_id: str, partition: int) -> None:
        ...


class GrpcMetadata:
    """:class:`TieredMetadata` over :class:`tiered.client.TieredClient` (leader following included)."""

    def __init__(self, addresses: Sequence[str], token: str, timeout: float = 10.0,
                 ca_file: Path | None = None) -> None:
        self.client = TieredClient(addresses, token, timeout, ca_file=ca_file)

    def append(self, cluster: str, topic_id: str, partition: int, epoch: int,
               events: list[dict[str, Any]]) -> tuple[int, list[int]]:
        try:
            resp = self.client.append_group(cluster, topic_id, partition, epoch, events)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise Fenced(str(exc.details())) from None
            raise
        return int(resp.group_id), [int(s) for s in resp.segment_ids]

    def copied(self, cluster: str, topic_id: str, partition: int) -> dict[tuple[int, int], tuple[int, str]]:
        resp = self.client.current_state(cluster, topic_id, partition)
        return {(s.start_offset, s.end_offset): (int(s.segment_id), str(s.remote_path))
                for s in resp.segments if s.state == COPY_FINISHED}

    def local_start_fetch_offset(self, cluster: str, topic_id: str, partition: int, log_start: int, log_end: int,
                                 ingress: float, threshold_s: float) -> int:
        return int(self.client.local_start_fetch_offset(cluster, topic_id, partition, log_start, log_end,
                                                        ingress, threshold_s).offset)

    def delete_partition(self, cluster: str, topic_id: str, partition: int) -> None:
        self.client.delete_partition(cluster, topic_id, partition)

    def close(self) -> None:
        self.client.close()


@dataclass(frozen=True)
class TieredSettings:
    """Where the metadata service and the remote store are; ``follower_tail_s`` is the threshold a new
    follower's start is computed with (``log end − ingress × threshold``)."""

    addresses: tuple[str, ...]
    token: str
    remote_dir: Path
    follower_tail_s: float = 3600.0
    ca_file: Path | None = None
    """CA of the service's gRPC certificate (TLS); None: plaintext (a loopback service)."""


def _ran(due: npt.NDArray[np.bool_], gidx: int) -> bool:
    """Whether broker ``gidx`` ran the scheduled task of ``due`` (an engine's per-broker array) in the last tick."""
    return gidx < len(due) and bool(due[gidx])


def kafka_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's string form of a topic id (url-safe base64 of the 16 bytes, no padding)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


@dataclass
class Job:
    """Work for the worker thread; plain data captured on the loop thread (``segments`` only travel back)."""

    id: int
    kind: str  # copy | delete | start | drop
    key: PKey
    epoch: int
    segments: list[Segment] = field(default_factory=list)
    ranges: list[tuple[int, int, int, str]] = field(default_factory=list)  # (base, end, size, path) / (id, path)
    payloads: list[bytes] = field(default_factory=list)
    check_state: bool = False
    start: tuple[int, int, float, float] = (0, 0, 0.0, 0.0)
    broker: int = -1  # start: the new replica; copy, delete: the leader that runs it
    begun: int = 0
    """Uploads (copy) or remote deletes (delete) the worker began (``RemoteCopy/DeleteRequestsPerSec``)."""
    done_bytes: int = 0
    """Bytes of the segments whose ``COPY_FINISHED`` the worker recorded (``RemoteCopyBytesPerSec``)."""
    store_error: bool = False
    """The remote store refused a delete (``RemoteDeleteErrorsPerSec``)."""

    @property
    def where(self) -> tuple[str, str, int]:
        """(cluster, topic id, partition) as the metadata service names the partition."""
        return self.key[0], kafka_topic_id(self.key[1]), self.key[2]


class TieredManager:
    """See the module docstring.  Construct, hand to ``SimServer(..., tiered=manager)`` (it calls
    :meth:`start`/:meth:`stop` and routes fetches to :meth:`read`)."""

    def __init__(self, fed: Any, settings: TieredSettings, metadata: TieredMetadata | None = None,
                 store: RemoteStore | None = None) -> None:
        self.fed = fed
        self.engine = fed.engine
        self.settings = settings
        self.metadata: TieredMetadata = metadata or GrpcMetadata(settings.addresses, settings.token,
                                                                        ca_file=settings.ca_file)
        self.store: RemoteStore = store or LocalDirStore(settings.remote_dir)
        self.logs: dict[PKey, TieredLog] = {}
        self.epochs: dict[PKey, int] = {}
        self.starts: dict[tuple[PKey, int], int] = {}
        """(partition, new replica) -> the offset its copy started at (from ``LocalStartFetchOffset``)."""
        self._asked: set[tuple[PKey, int, int]] = set()
        self._retry_at: dict[PKey, float] = {}
        self._ids = itertools.count(1)
        self._jobs: collections.deque[Job] = collections.deque()
        self._results: collections.deque[tuple[str, Job, Any]] = collections.deque()
        self._cv = threading.Condition()
        self._stop = False
        self._paused = False
        self._busy = False
        self._thread: threading.Thread | None = None
        self._cache: collections.OrderedDict[str, list[Batch]] = collections.OrderedDict()
        self.stats: dict[str, int] = collections.defaultdict(int)
        self.metrics = TieredMetrics()
        """The brokers' tiered-storage meters and gauges (:mod:`kafkasim.tiering.tiered_metrics`), rendered by the
        exporters."""
        self.engine.tiered_metrics = self.metrics
        self._leaders: dict[PKey, int] = {}
        """The leader each partition's gauge values were last recorded on (dropped there when it changes)."""
        for cl in self.engine.clusters.values():
            cl.remote_storage = True
            self.metrics.enabled.add(cl.name)
        self.tasks: TaskSchedule[PKey] = TaskSchedule(int(getattr(self.engine, "seed", 0)))
        """Each tiered partition's remote log manager task (copies, then remote retention), on its leader."""
        self._parts: dict[PKey, tuple[Cluster, Topic, Partition]] = {}
        self._fresh: set[PKey] = set()
        """Tasks of a new leader that have not copied yet: their first copy reads Guardian's state first."""
        self._run_left: dict[PKey, list[Segment]] = {}
        """Runs in progress: the segments a run still has to copy (waiting for the copy quota)."""
        self._quotas: dict[tuple[str, int], CopyQuota] = {}
        """(cluster, broker) -> its remote copy quota's recent copies (KIP-956)."""
        self.engine.listeners.append(self.on_tick)
        self.engine.append_listeners.append(self.on_append)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="kafkasim-tiered", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(15)
        close = getattr(self.metadata, "close", None)
        if close is not None:
            close()

    def pause(self) -> None:
        """Hold the worker (tests: let jobs queue up, e.g. across a leader change)."""
        with self._cv:
            self._paused = True

    def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    def idle(self) -> bool:
        """No job queued or running (results may wait for the next tick to be applied)."""
        with self._cv:
            return not self._jobs and not self._busy

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def tiered(cl: Cluster, topic: Topic) -> bool:
        return cl.remote_storage and topic.configs.get("remote.storage.enable") == "true"

    def log_of(self, cl: Cluster, topic: str, index: int) -> TieredLog | None:
        t = cl.topics.get(topic)
        return None if t is None else self.logs.get((cl.name, t.topic_id, index))

    def _int(self, cl: Cluster, topic: str, key: str) -> int:
        try:
            return int(cl.topic_config(topic, key))
        except ValueError:
            return int(kc.TOPIC_CONFIG_DEFAULTS[key])

    def _enqueue(self, job: Job, front: bool = False) -> None:
        with self._cv:
            if front:
                self._jobs.appendleft(job)
            else:
                self._jobs.append(job)
            self._cv.notify_all()

    def _job(self, kind: str, cl: Cluster, topic: Topic, p: Partition, **kw: Any) -> Job:
        return Job(next(self._ids), kind, (cl.name, topic.topic_id, p.index), p.leader_epoch, **kw)

    # ------------------------------------------------------------------ loop thread
    def on_append(self, cl: Cluster, p: Partition, batch: Batch) -> None:
        """A real Produce batch stored on ``p`` (engine hook): it belongs to the active segment."""
        t = cl.topics.get(p.topic)
        lg = self.logs.get((cl.name, t.topic_id, p.index)) if t is not None else None
        if t is not None and lg is not None:
            lg.add_batch(batch, self.engine.t, float(max(self._int(cl, t.name, "segment.bytes"), 1)), p.leader_epoch)

    def on_tick(self, eng: Any, dt: float) -> None:
        self._drain()
        seen: set[PKey] = set()
        for cl in eng.clusters.values():
            for topic in cl.topics.values():
                if not self.tiered(cl, topic):
                    continue
                for p in topic.partitions:
                    key = (cl.name, topic.topic_id, p.index)
                    seen.add(key)
                    self._parts[key] = (cl, topic, p)
                    self._tick_partition(cl, topic, p, key, eng.t, dt)
        for key in [k for k in self.logs if k not in seen]:
            self._drop(key)
        self._run_tasks(eng.t)

    def _interval(self, cl: Cluster, p: Partition) -> float:
        """The leader's ``remote.log.manager.task.interval.ms`` in seconds (Kafka's default with no leader)."""
        leader = cl.brokers.get(p.leader) if p.leader >= 0 else None
        return interval_s(leader.static_configs if leader is not None else {}, REMOTE_LOG_TASK)

    def _tick_partition(self, cl: Cluster, topic: Topic, p: Partition, key: PKey, t: float, dt: float) -> None:
        eng = self.engine
        f, s = eng.f, p.slot
        start, end = eng.partition_offsets(s)
        bytes_in = float(f["bytes_in_total"][s])
        seg_bytes = float(max(self._int(cl, topic.name, "segment.bytes"), 1))
        seg_s = self._int(cl, topic.name, "segment.ms") / 1000.0
        lg = self.logs.get(key)
        if lg is None:
            rate = float(f["base_rate"][s]) or float(f["in_rate"][s])  # the mean ingress dates the history
            lg = self.logs[key] = TieredLog.from_history(start, end, float(f["size"][s]), list(p.batches), bytes_in,
                                                         t, seg_bytes, rate, p.leader_epoch)
            # the partition's task: its first run at the partition's seeded phase after the tiering began (the
            # tick's start), then every interval (see kafkasim.tiering.rlm_tasks for why not at once)
            phase = self.tasks.phase(f"{cl.name}/{topic.name}/{p.index}")
            self.tasks.start(key, t - dt + phase * self._interval(cl, p))
        leader_ok = p.leader >= 0 and cl.brokers[p.leader].alive
        was = self._leaders.get(key, p.leader)
        if was != p.leader:  # the old leader's task is gone: its gauges forget the partition (Kafka's remove*)
            self.metrics.remove_partition(cl.name, was, topic.name, p.index)
        self._leaders[key] = p.leader
        changed = key in self.epochs and self.epochs[key] != p.leader_epoch
        self.epochs[key] = p.leader_epoch
        if changed:  # the new leader takes over what the old one was copying (its jobs will be fenced) ...
            for seg in lg.segments:
                if seg.state == COPYING:
                    seg.state, seg.owner = LOCAL, 0
            self._run_left.pop(key, None)
            self._fresh.add(key)  # ... with a task of its own that runs at once (Kafka: delay 0 on becoming
            self.tasks.start(key, t - dt)  # leader) and reads Guardian's state first
        lg.advance(bytes_in)
        if leader_ok:
            lg.maybe_roll(end, t, seg_bytes, seg_s, p.leader_epoch)
            if _ran(eng.retention_due, cl.brokers[p.leader].gidx):  # the leader's retention check: local retention
                self._trim_local(cl, topic, lg, t)
        f["size"][s] = lg.local_bytes()
        f["lso"][s] = min(lg.log_start, end)
        ra = p.reassignment
        if ra is not None and leader_ok:
            for b in ra.adding:
                mark = (key, b, id(ra))
                if mark not in self._asked:
                    self._asked.add(mark)
                    self._enqueue(self._job("start", cl, topic, p, broker=b,
                                            start=(lg.local_start, end, lg.ingress(end, t),
                                                   self.settings.follower_tail_s)))

    def _run_tasks(self, t: float) -> None:
        """The remote log manager tasks due in this tick, on each partition's leader.  A run expires the remote
        segments past retention (Kafka 3.8+'s expiration task shares the copy task's schedule) and copies every
        eligible segment, oldest first, each when the leader's copy quota lets it start; a run whose copies wait
        beyond this tick continues when the quota allows (the task is busy meanwhile, as Kafka's thread is), and
        the next run is due an interval after the run's last copy started (fixed delay).  O(tasks due)."""
        f = self.engine.f
        for key, when in self.tasks.due(t):
            ref, lg = self._parts.get(key), self.logs.get(key)
            left = self._run_left.pop(key, None)
            if ref is None or lg is None:
                self.tasks.cancel(key)
                continue
            cl, topic, p = ref
            if p.leader < 0 or not cl.brokers[p.leader].alive:
                self.tasks.again(key, when, self._interval(cl, p), t)  # no leader here: nothing runs
                continue
            fresh = key in self._fresh
            if left is None:  # a new run
                self.stats["task_runs"] += 1
                self._plan_deletes(cl, topic, p, lg, t, after_change=fresh)
                hw = self.engine.partition_offsets(p.slot)[1]  # the last stable offset (kafkasim: the log end)
                backoff = time.monotonic() < self._retry_at.get(key, 0.0)
                left = [] if backoff else [seg for seg in lg.to_copy() if seg.end < hw]
            ended, left = self._copy(cl, topic, p, when, left, t, after_change=fresh)
            f["size"][p.slot] = lg.local_bytes()
            f["lso"][p.slot] = min(lg.log_start, self.engine.partition_offsets(p.slot)[1])
            if left:
                self._run_left[key] = left
                self.tasks.resume(key, ended)
            else:
                self.tasks.again(key, ended, self._interval(cl, p), t)

    def _copy(self, cl: Cluster, topic: Topic, p: Partition, when: float, candidates: list[Segment], t: float,
              after_change: bool) -> tuple[float, list[Segment]]:
        """Copy jobs for the ``candidates`` (oldest first) whose start the leader's copy quota allows by ``t``
        (``remote.log.manager.copy.max.bytes.per.second``, unset: unlimited), in jobs of up to
        ``MAX_SEGMENTS_PER_JOB`` segments queued in order (a new leader's ahead of older jobs).  Returns the
        time the last one started (or the next may start) and the candidates left for later."""
        rate = cl.broker_rate(p.leader, kc.REMOTE_COPY_QUOTA)
        quota = self._quotas.setdefault((cl.name, p.leader), CopyQuota())
        chosen: list[Segment] = []
        cursor, left = when, []
        for k, seg in enumerate(candidates):
            if seg.state != LOCAL:
                continue
            start = quota.start_time(cursor, rate)
            if start > t + 1e-9:
                cursor, left = start, candidates[k:]
                self.stats["copy_quota_waits"] += 1
                break
            quota.record(start, seg.size)
            cursor = start
            chosen.append(seg)
        if chosen:
            self._fresh.discard((cl.name, topic.topic_id, p.index))
        jobs: list[Job] = []
        for k in range(0, len(chosen), MAX_SEGMENTS_PER_JOB):
            chunk = chosen[k:k + MAX_SEGMENTS_PER_JOB]
            job = self._job("copy", cl, topic, p, segments=chunk, broker=p.leader,
                            check_state=after_change or any(seg.tried for seg in chunk))
            for seg in chunk:
                seg.state, seg.owner, seg.tried = COPYING, job.id, seg.tried + 1
                path = (f"{cl.name}/{topic.name}-{kafka_topic_id(topic.topic_id)}/{p.index}/"
                        f"{seg.base:020d}-{p.leader_epoch}.log")
                job.ranges.append((seg.base, seg.end, int(seg.size), path))
                job.payloads.append(seg.data())
                self.stats["copied_bytes_planned"] += int(seg.size)
            jobs.append(job)
        for job in reversed(jobs) if after_change else jobs:
            self._enqueue(job, front=after_change)
        return cursor, left

    def _trim_local(self, cl: Cluster, topic: Topic, lg: TieredLog, t: float) -> None:
        """Local retention (``local.retention.ms/bytes``; -2: the topic's retention) drops copied segments."""
        r_ms = self._int(cl, topic.name, "retention.ms")
        r_bytes = self._int(cl, topic.name, "retention.bytes")
        lg.trim_local(t, retention_limit(self._int(cl, topic.name, "local.retention.bytes"), r_bytes),
                      retention_limit(self._int(cl, topic.name, "local.retention.ms"), r_ms) / 1000.0)

    def _plan_deletes(self, cl: Cluster, topic: Topic, p: Partition, lg: TieredLog, t: float,
                      after_change: bool) -> None:
        """Remote retention (``retention.ms/bytes``): the oldest copied segments past it, and those whose delete
        failed before, become one delete job."""
        r_ms = self._int(cl, topic.name, "retention.ms")
        r_bytes = self._int(cl, topic.name, "retention.bytes")
        remote = sum(seg.size for seg in lg.segments if seg.state in (COPIED, DELETING))
        self.metrics.record(cl.name, p.leader, topic.name, p.index, "RemoteLogSizeBytes", int(remote))
        lg.expire_remote(t, retention_limit(-2, r_bytes), retention_limit(-2, r_ms) / 1000.0)
        self._record_delete_lag(cl.name, p.leader, topic.name, p.index, lg)
        doomed = [seg for seg in lg.segments if seg.state == DELETING and seg.owner == 0]
        if doomed:
            job = self._job("delete", cl, topic, p, segments=doomed, broker=p.leader)
            for seg in doomed:
                seg.owner = job.id
                job.ranges.append((seg.segment_id, 0, 0, seg.remote_path))
            self._enqueue(job, front=after_change)

    def _record_delete_lag(self, cluster: str, broker: int, topic: str, index: int, lg: TieredLog) -> None:
        """``RemoteDeleteLag{Bytes,Segments}``: the remote segments retention wants deleted and still there."""
        doomed = [seg.size for seg in lg.segments if seg.state == DELETING]
        self.metrics.record(cluster, broker, topic, index, "RemoteDeleteLagBytes", int(sum(doomed)))
        self.metrics.record(cluster, broker, topic, index, "RemoteDeleteLagSegments", len(doomed))

    def _record_copy_lag(self, cluster: str, broker: int, topic: str, index: int, lg: TieredLog) -> None:
        """``RemoteCopyLag{Bytes,Segments}`` as Kafka records them after a copy: the closed local segments not
        copied yet (``onlyLocalLogSegmentsSize`` less the active segment)."""
        waiting = [seg.size for seg in lg.segments if seg.state in (LOCAL, COPYING)]
        self.metrics.record(cluster, broker, topic, index, "RemoteCopyLagBytes", int(sum(waiting)))
        self.metrics.record(cluster, broker, topic, index, "RemoteCopyLagSegments", len(waiting))

    def _still_leads(self, job: Job) -> bool:
        """Whether ``job.broker`` still leads the job's partition (else Kafka cancelled its task: no record)."""
        ref = self._parts.get(job.key)
        return ref is not None and ref[2].leader == job.broker

    def _drop(self, key: PKey) -> None:
        lg = self.logs.pop(key)
        self.epochs.pop(key, None)
        ref = self._parts.pop(key, None)
        leader = self._leaders.pop(key, None)
        if ref is not None:
            cl, topic, p = ref
            if cl.topics.get(topic.name) is not topic:
                self.metrics.remove_topic(cl.name, topic.name)
            elif leader is not None:
                self.metrics.remove_partition(cl.name, leader, topic.name, p.index)
        self._fresh.discard(key)
        self._run_left.pop(key, None)
        self.tasks.cancel(key)
        job = Job(next(self._ids), "drop", key, -1,
                  ranges=[(seg.segment_id, 0, 0, seg.remote_path) for seg in lg.segments if seg.remote_path])
        self._enqueue(job)

    def _drain(self) -> None:
        while self._results:
            outcome, job, value = self._results.popleft()
            self.stats[f"job_{outcome}"] += 1
            if job.kind == "copy":
                self._copy_result(outcome, job, value)
            elif job.kind == "delete":
                for seg in job.segments:
                    if outcome == "ok":
                        lg = self.logs.get(job.key)
                        if lg is not None:
                            lg.forget(seg)
                        self.stats["deleted_segments"] += 1
                    elif seg.owner == job.id:
                        seg.owner = 0  # retried next tick under the then current epoch
                self._delete_metrics(outcome, job)
            elif job.kind == "start" and outcome == "ok":
                self._follower_start((job.key, job.broker), int(value))
            if outcome != "ok":
                self._retry_at[job.key] = time.monotonic() + 0.5

    def _delete_metrics(self, outcome: str, job: Job) -> None:
        ref, lg = self._parts.get(job.key), self.logs.get(job.key)
        if ref is None or lg is None:
            return
        cl, topic, p = ref
        if job.begun:
            self.metrics.mark(cl.name, job.broker, topic.name, "RemoteDeleteRequests", job.begun)
        if job.store_error:
            self.metrics.mark(cl.name, job.broker, topic.name, "RemoteDeleteErrors")
        if outcome == "ok" and self._still_leads(job):
            self._record_delete_lag(cl.name, job.broker, topic.name, p.index, lg)

    def _copy_metrics(self, outcome: str, job: Job) -> None:
        ref, lg = self._parts.get(job.key), self.logs.get(job.key)
        if ref is None or lg is None:
            return
        cl, topic, p = ref
        if job.begun:
            self.metrics.mark(cl.name, job.broker, topic.name, "RemoteCopyRequests", job.begun)
        if job.done_bytes:
            self.metrics.mark(cl.name, job.broker, topic.name, "RemoteCopyBytes", job.done_bytes)
        if outcome == "error":  # a fenced job is the deposed leader's: Kafka cancelled that task, no error
            self.metrics.mark(cl.name, job.broker, topic.name, "RemoteCopyErrors")
        if job.done_bytes and self._still_leads(job):
            self._record_copy_lag(cl.name, job.broker, topic.name, p.index, lg)

    def _copy_result(self, outcome: str, job: Job, value: Any) -> None:
        for seg, got in zip(job.segments, value if outcome == "ok" else [None] * len(job.segments), strict=True):
            if got is not None and seg.state in (LOCAL, COPYING):
                seg.state, seg.segment_id, seg.remote_path = COPIED, got[0], got[1]
                self.stats["copied_segments"] += 1
            elif got is not None:
                self.stats["duplicate_copies"] += 1
            elif seg.owner == job.id and seg.state == COPYING:
                seg.state, seg.owner = LOCAL, 0
        if outcome == "fenced":
            self.stats["fenced"] += 1
        self._copy_metrics(outcome, job)

    def _follower_start(self, target: tuple[PKey, int], offset: int) -> None:
        key, b = target
        self.starts[target] = offset
        lg = self.logs.get(key)
        cl = self.engine.clusters.get(key[0])
        if lg is None or cl is None:
            return
        for t in cl.topics.values():
            if t.topic_id == key[1] and key[2] < len(t.partitions):
                ra = t.partitions[key[2]].reassignment
                if ra is not None and b in ra.adding:
                    ra.copied[b] = max(ra.copied.get(b, 0.0), lg.bytes_below(offset))

    # ------------------------------------------------------------------ fetch (loop thread)
    def read(self, cl: Cluster, p: Partition, offset: int, hw: int, max_bytes: int) -> bytes | None:
        """Records for a Fetch of a tiered partition at ``offset`` (None: not tiered, the caller serves it)."""
        t = cl.topics.get(p.topic)
        lg = self.logs.get((cl.name, t.topic_id, p.index)) if t is not None else None
        if t is None or lg is None or not self.tiered(cl, t):
            return None
        seg, batches, stop = lg.locate(offset)
        if seg is not None:
            self.metrics.mark(cl.name, p.leader, p.topic, "RemoteFetchRequests")
            try:
                batches = self._remote_batches(seg)
            except Exception:
                self.metrics.mark(cl.name, p.leader, p.topic, "RemoteFetchErrors")
                raise
            self.stats["remote_fetches"] += 1
        elif offset < lg.local_start:
            raise SimError(m.OFFSET_OUT_OF_RANGE, f"offset {offset} is no longer in remote storage")
        else:
            stop = hw
        chunks, next_real = slice_batches(batches, offset, stop, max_bytes)
        if not chunks and offset < next_real:
            chunks = [synthetic_batch(cl, p, offset, next_real, max_bytes)]
        data = b"".join(chunks)
        if seg is not None:
            self.stats["remote_bytes_read"] += len(data)
            self.metrics.mark(cl.name, p.leader, p.topic, "RemoteFetchBytes", len(data))
        return data

    def _remote_batches(self, seg: Segment) -> list[Batch]:
        cached = self._cache.get(seg.remote_path)
        if cached is not None:
            self._cache.move_to_end(seg.remote_path)
            return cached
        out: list[Batch] = []
        for raw, _count, last_delta, max_ts in split_batches(self.store.get(seg.remote_path)):
            base = int.from_bytes(raw[:8], "big", signed=True)
            out.append((base, base + last_delta, max_ts, raw))
        self._cache[seg.remote_path] = out
        while len(self._cache) > 8:
            self._cache.popitem(last=False)
        return out

    # ------------------------------------------------------------------ worker thread
    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._stop and (self._paused or not self._jobs):
                    self._cv.wait(0.5)
                if self._stop:
                    return
                job = self._jobs.popleft()
                self._busy = True
            try:
                self._results.append(("ok", job, self._run(job)))
            except Fenced as exc:
                log.info("tiered job %s (%s %s epoch %s) fenced: %s", job.id, job.kind, job.where, job.epoch, exc)
                self._results.append(("fenced", job, str(exc)))
            except Exception as exc:  # the service is down, a file cannot be written: retried later
                log.warning("tiered job %s (%s) failed: %r", job.id, job.kind, exc)
                self._results.append(("error", job, repr(exc)))
                time.sleep(0.2)
            finally:
                with self._cv:
                    self._busy = False

    def _run(self, job: Job) -> Any:
        md, where = self.metadata, job.where
        if job.kind == "start":
            log_start, log_end, ingress, threshold = job.start
            return md.local_start_fetch_offset(*where, log_start, log_end, ingress, threshold)
        if job.kind == "drop":
            for _sid, _, _, path in job.ranges:
                self.store.delete(path)
            md.delete_partition(*where)
            return None
        if job.kind == "delete":
            ids = [r[0] for r in job.ranges]
            md.append(*where, job.epoch, [dict(kind=DELETE_STARTED, segment_id=i) for i in ids])
            for _sid, _, _, path in job.ranges:
                job.begun += 1
                try:
                    self.store.delete(path)
                except Exception:
                    job.store_error = True
                    raise
            md.append(*where, job.epoch, [dict(kind=DELETE_FINISHED, segment_id=i) for i in ids])
            return None
        done: dict[tuple[int, int], tuple[int, str]] = md.copied(*where) if job.check_state else {}
        todo = [k for k, r in enumerate(job.ranges) if (r[0], r[1]) not in done]
        got: list[tuple[int, str] | None] = [done.get((r[0], r[1])) for r in job.ranges]
        if todo:
            _, ids = md.append(*where, job.epoch, [
                dict(kind=COPY_STARTED, start_offset=job.ranges[k][0], end_offset=job.ranges[k][1],
                     leader_epoch=job.epoch, size_bytes=job.ranges[k][2], remote_path=job.ranges[k][3])
                for k in todo])
            for k in todo:
                job.begun += 1
                self.store.put(job.ranges[k][3], job.payloads[k])
            md.append(*where, job.epoch, [
                dict(kind=COPY_FINISHED, segment_id=sid, size_bytes=job.ranges[k][2])
                for k, sid in zip(todo, ids, strict=True)])
            job.done_bytes = sum(job.ranges[k][2] for k in todo)
            for k, sid in zip(todo, ids, strict=True):
                got[k] = (sid, job.ranges[k][3])
        return got
