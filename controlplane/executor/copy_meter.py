"""Copy metering: how far each running copy is, how fast it went, and the flows the throttles act on.

Goal: give the migration throttle (:mod:`controlplane.executor.migration_rate`) and the placement of new
replicas the migration bytes each copy and each disk actually carried, and give progress reports honest
rates — measured from the cluster, never assumed from the throttle.

Method: every pass reads the size of each new replica (a reassignment's adding replicas, a KIP-113
future replica — also one that follows a reassignment in the same task, counted on top of what the
reassignment copied, :meth:`CopyMeter.reassigned`) from the log-dir read the pass makes anyway.
:meth:`CopyMeter.observe` turns two samples of a task into its rate over the interval (smoothed for the
progress report); a task found complete is credited what it copied since its last sample over that whole interval
(:meth:`CopyMeter.final`). :meth:`CopyMeter.flows` turns the in-flight tasks into throttle
:class:`~controlplane.executor.migration_rate.CopyFlow` s (source and destination broker and disk, measured rate,
producers' ingress, bytes left) and the throttled-replica list entries they need; and
:meth:`CopyMeter.disk_migration` sums, per disk, what the previous pass's copies moved, each capped by
the rate its throttle allowed.

Guarantee: a rate is measured only between two samples with a clock that moved and a size that did not
shrink; a pass with no fresh clock (``now`` is ``None``) keeps the last rates. :meth:`CopyMeter.forget`
drops everything (an execution ended, or this node regained leadership: memory from an earlier term
could make a resubmission one pass early).

Cost: O(in-flight tasks x their new replicas) per pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from controlplane.executor.live import DirMap, future_dir, main_dir, replica_disk
from controlplane.executor.migration_rate import CopyFlow
from controlplane.executor.submit import Submission
from domain.execution import Task, TaskState
from domain.throttles import FOLLOWER_REPLICAS, LEADER_REPLICAS
from kafkaio.types import LiveCluster, PartitionMeta


class CopyMeter:
    """Per-task copy progress and rates of this process (see the module docstring)."""

    def __init__(self) -> None:
        self._last_bytes: dict[tuple[str, int], tuple[float, int]] = {}
        self._flow_rate: dict[tuple[str, int], float] = {}
        self._interval_rate: dict[str, float] = {}
        """Task key -> bytes/s it copied over the last pass interval (tasks that completed in it included)."""
        self._prev_flows: list[CopyFlow] = []
        self._remaining: dict[str, int] = {}

    def forget(self) -> None:
        """Drop every sample and rate."""
        self._last_bytes.clear()
        self._flow_rate.clear()
        self._interval_rate.clear()
        self._prev_flows = []
        self._remaining.clear()

    def begin_pass(self, now: float | None) -> None:
        """A pass with a fresh clock refills the interval rates from its own observations."""
        if now is not None:
            self._interval_rate = {}

    def started(self, t: Task, at: float) -> None:
        """A new copy starts from zero: its first interval counts."""
        self._last_bytes[(t.key, 0)] = (at, 0)

    def remaining(self, key: str, default: float) -> float:
        """Bytes the task still has to copy, as last measured (``default`` before any measurement)."""
        return self._remaining.get(key, default)

    def rate(self, key: str) -> float:
        """The task's smoothed copy rate (bytes/s)."""
        return self._flow_rate.get((key, 0), 0.0)

    def progress(self, t: Task, adding: tuple[int, ...], dirs: DirMap, live: LiveCluster) -> tuple[int, int]:
        """``(bytes copied, bytes to copy)`` of a reassignment's new replicas (the leader's size each);
        remembered as what the task has left."""
        p = live.partitions[t.tp]
        lead = main_dir(dirs, t.topic, t.partition, p.leader) if p.leader >= 0 else None
        size = lead.size if lead is not None else t.size_bytes // max(len(adding), 1)
        done = 0
        for b in adding:
            d = main_dir(dirs, t.topic, t.partition, b)
            done += min(d.size, size) if d is not None else 0
        self._remaining[t.key] = max(size * len(adding) - done, 0)
        return done, size * len(adding)

    def reassigned(self, t: Task, dirs: DirMap, p: PartitionMeta) -> int:
        """Bytes a finished reassignment copied (the leader's size per added replica): what a log-dir copy
        that follows it in the same task counts on top of, so its progress never goes back."""
        lead = main_dir(dirs, t.topic, t.partition, p.leader) if p.leader >= 0 else None
        return (lead.size if lead is not None else t.size_bytes // max(len(t.adding), 1)) * len(t.adding)

    def final(self, t: Task, now: float | None) -> None:
        """A task found complete: what it copied since its last observation, over that whole interval."""
        prev = self._last_bytes.pop((t.key, 0), None)
        total = t.bytes_total or t.size_bytes
        if now is not None and prev is not None and now > prev[0] and total >= prev[1]:
            self._interval_rate[t.key] = (total - prev[1]) / (now - prev[0])

    def observe(self, t: Task, now: float | None, done: int) -> float:
        """One sample (``done`` bytes at ``now``) of a running copy; returns its smoothed rate."""
        key = (t.key, 0)
        if now is None:
            return self._flow_rate.get(key, 0.0)
        prev = self._last_bytes.get(key)
        self._last_bytes[key] = (now, done)
        rate = self._flow_rate.get(key, 0.0)
        if prev is not None and now > prev[0] and done >= prev[1]:
            inst = (done - prev[1]) / (now - prev[0])
            self._interval_rate[t.key] = inst
            rate = inst if rate == 0.0 else 0.5 * rate + 0.5 * inst
            self._flow_rate[key] = rate
        return float(rate) if math.isfinite(rate) else 0.0

    def flows(self, tasks: Mapping[str, Task], live: LiveCluster, dirs: DirMap, submit: Submission,
              ingress: Callable[[str, int], float], readers: Mapping[tuple[str, int], int] | None = None
              ) -> tuple[list[CopyFlow], dict[str, dict[str, set[str]]]]:
        """Copy flows of every in-flight task and the throttled-replica entries they need per topic; a copy
        submitted this pass reads from its ``readers`` entry when it has one (made leader in the same pass)."""
        flows: list[CopyFlow] = []
        lists: dict[str, dict[str, set[str]]] = {}
        for t in tasks.values():
            if t.state != TaskState.IN_PROGRESS or t.action == "elect_leader":
                continue
            tp = t.tp
            p = live.partitions.get(tp)
            if p is None:
                continue
            rate = self._interval_rate.get(t.key, 0.0)
            if t.action == "reassign" and (tp in live.reassignments or submit.reassign.get(tp) is not None):
                ra = live.reassignments.get(tp)
                adding = list(ra.adding) if ra else [b for b in submit.reassign.get(tp) or () if b not in p.replicas]
                if not adding:
                    continue
                sources = list(ra.removing) + [b for b in p.replicas if ra is None or b not in ra.adding] \
                    if ra else list(p.replicas)
                entry = lists.setdefault(t.topic, {LEADER_REPLICAS: set(), FOLLOWER_REPLICAS: set()})
                entry[LEADER_REPLICAS].update(f"{tp[1]}:{b}" for b in sorted(set(sources)))
                entry[FOLLOWER_REPLICAS].update(f"{tp[1]}:{b}" for b in adding)
                lead = p.leader if ra is not None else (readers or {}).get(tp, p.leader)
                src_disk = replica_disk(t, dirs, lead)  # new this pass: dirs not read, the recorded one
                for b in adding:
                    dst = main_dir(dirs, tp[0], tp[1], b)
                    i = t.target_replicas.index(b) if b in t.target_replicas else -1
                    want = t.target_log_dirs[i] if i >= 0 and t.target_log_dirs else None
                    want = want or submit.log_dirs.get((tp[0], tp[1], b))
                    flows.append(CopyFlow(f"{t.key}>{b}", "move", lead, b,
                                      src_disk, (b, dst.log_dir) if dst else ((b, want) if want else None),
                                      rate / len(adding), ingress(tp[0], tp[1]),
                                      self._remaining.get(t.key, t.size_bytes) / len(adding), tp))
            else:
                for b in set(t.target_replicas):
                    cur = main_dir(dirs, tp[0], tp[1], b)
                    fut = future_dir(dirs, tp[0], tp[1], b)
                    key3 = (tp[0], tp[1], b)
                    if fut is None and key3 not in submit.log_dirs:
                        continue
                    dst_dir = fut.log_dir if fut else submit.log_dirs[key3]
                    left = max(cur.size - (fut.size if fut else 0), 0) if cur else None
                    flows.append(CopyFlow(f"{t.key}>{b}", "future", b, b, (b, cur.log_dir) if cur else None,
                                      (b, dst_dir), rate, ingress(tp[0], tp[1]), left, tp))
        return flows, lists

    def remember(self, flows: list[CopyFlow]) -> None:
        """The flows of a pass with a fresh clock: what the next pass's :meth:`disk_migration` credits."""
        self._prev_flows = list(flows)

    def disk_migration(self, flows: list[CopyFlow], commanded: Mapping[str, float]) -> dict[tuple[int, str], float]:
        """Migration bytes/s each disk carried over the last interval: every copy that ran in it (the
        previous pass's flows, finished ones included) at the rate its task measured, capped by what its
        throttle allowed (``commanded``, flow key -> bytes/s), on its source and destination disks (a
        destination placed since then is taken from this pass's flow)."""
        now_dst = {f.key: f.dst_disk for f in flows}
        per_task: dict[str, int] = {}
        for f in self._prev_flows:
            task = f.key.rsplit(">", 1)[0]
            per_task[task] = per_task.get(task, 0) + 1
        out: dict[tuple[int, str], float] = {}
        for f in self._prev_flows:
            task = f.key.rsplit(">", 1)[0]
            rate = min(self._interval_rate.get(task, 0.0) / per_task[task], commanded.get(f.key, math.inf))
            for d in {f.src_disk, f.dst_disk or now_dst.get(f.key)}:
                if d is not None and rate > 0:
                    out[d] = out.get(d, 0.0) + rate
        return out
