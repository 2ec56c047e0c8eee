"""Placement of new replicas: the log dir each replica a reassignment creates is placed in.

Goal: when a plan lets the broker pick a new replica's disk (``log_dirs`` null), the executor picks the
disk that finishes its copy work first, so that no disk becomes the tail of the whole execution and the
per-disk cap counts the disks the copies really load.

Method: while the batch is selected, :meth:`Placement.place` chooses for each new replica, among its
broker's disks with a free per-disk slot, the one with the least ``(bytes it must still read or write
for the execution + bytes already headed to it this pass + this replica) / its migration budget`` (live
util less the measured migration, against the policy's threshold and headroom) that keeps
``FREE_SPACE_FACTOR x`` the replica's size free (:meth:`Placement.roomiest_dir`). When that disk is not
the broker's best one (the best is at the per-disk cap) and would then need more than ``CRITICAL_SHARE x``
the most loaded disk's time, the task waits for the best disk instead: written to because its neighbour
was busy, a disk with reads of its own pending became the bound of the whole execution. The choice is named
to the broker before the reassignment (KIP-113: the broker answers ReplicaNotAvailable and creates the
replica there when it arrives) by :meth:`Placement.preplace`, which also places the replicas of tasks
driven without a batch choice. :meth:`Placement.placed_dirs` reports where running copies' new replicas
live, for the per-disk cap.

Guarantee: a disk without live load or free-space figures is never chosen blindly — the broker then
picks; a destination broker whose disks are all at the per-disk cap, or whose only free disk would become
critical, makes the task wait. The plan's own dirs are always kept.

Cost: O(disks of the broker) per new replica, O(disks) when its best disk is full; free space is read once
per pass, lazily.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from collectors.disk_rates import DiskRate
from controlplane.executor.copy_meter import CopyMeter
from controlplane.executor.live import DirMap, main_dir, replica_disk
from controlplane.executor.migration_rate import PLACEMENT_MIN_BUDGET, MigrationRatePolicy, PendingWork, bytes_per_util
from controlplane.executor.read_source import copy_source
from controlplane.executor.submit import Submission
from controlplane.executor.tasks import recorded_dir
from domain.execution import Task, TaskState
from kafkaio.errors import AdminError
from kafkaio.port import KafkaCluster
from kafkaio.types import LiveCluster

log = logging.getLogger("guardian.executor")
FREE_SPACE_FACTOR = 1.2
"""A destination disk chosen by the executor keeps at least this many times the replica's size free."""
CRITICAL_SHARE = 0.8
"""A new replica whose best disk is at the per-disk cap waits (its task is not started this pass) rather than go
to another disk of its broker whose work would then take longer than this share of the most loaded disk's:
such a write would make that disk the execution's bound (bench: -8 % sim-s over seeds 21-30, 0.7 and 0.9
gain less)."""


class Placement:
    """Where this pass's new replicas go (see the module docstring); per-pass state, reset by :meth:`begin_pass`."""

    def __init__(self, admin: KafkaCluster, policy: MigrationRatePolicy, meter: CopyMeter,
                 migration: Callable[[], Mapping[tuple[int, str], float]]) -> None:
        self.admin = admin
        self.policy = policy
        self.meter = meter
        self.migration = migration
        """Migration bytes/s each disk carried over the last interval (measured)."""
        self.disks: Mapping[tuple[int, str], DiskRate] = {}
        self._chosen: dict[tuple[int, str], float] = {}
        """Bytes headed to each disk by the destinations chosen this pass."""
        self._placement: dict[tuple[str, int], str] = {}
        """(task key, broker) -> the log dir chosen this pass for a new replica (while selecting the batch)."""
        self._backlog: dict[tuple[int, str], float] = {}
        self._capacity: dict[tuple[int, str], tuple[int, int]] | None = None

    def begin_pass(self, disks: Mapping[tuple[int, str], DiskRate]) -> None:
        """Forget the last pass's choices; ``disks`` is this pass's live disk load (free space read lazily)."""
        self.disks = disks
        self._chosen, self._capacity, self._backlog = {}, None, {}
        self._placement = {}

    def preplace(self, t: Task, current: tuple[int, ...], live: LiveCluster, submit: Submission) -> None:
        """Choose the log dir of every replica the reassignment adds: the plan's, or else (the plan lets the
        broker pick) the destination disk with the most live migration headroom that has room for it."""
        target = list(t.target_replicas)
        wanted = list(t.target_log_dirs) or [None] * len(target)
        for b, d in zip(target, wanted, strict=True):
            if b in current or b not in live.alive:
                continue
            early = None if d else self._placement.get((t.key, b))
            chosen = d or early or self.roomiest_dir(b, t.size_bytes // max(
                sum(1 for x in target if x not in current), 1))
            if chosen is None:
                continue
            key3 = (t.topic, t.partition, b)
            submit.log_dirs[key3] = chosen
            submit.owner[key3] = t.key
            submit.preplace.add(key3)
            if early is None:  # an early choice was counted when it was made
                self._chosen[(b, chosen)] = self._chosen.get((b, chosen), 0.0) + float(t.size_bytes)

    def placed_dirs(self, running: Iterable[Task], dirs: DirMap) -> dict[str, set[tuple[int, str]]]:
        """Per running reassignment: the disks its new replicas live on (the executor or broker chose them)."""
        out: dict[str, set[tuple[int, str]]] = {}
        for t in running:
            if t.action != "reassign":
                continue
            for b in t.target_replicas:
                if b in t.source_replicas:
                    continue
                cur = main_dir(dirs, t.topic, t.partition, b)
                if cur is not None:
                    out.setdefault(t.key, set()).add((b, cur.log_dir))
        return out

    def place(self, t: Task, full: Callable[[tuple[int, str]], bool]) -> set[tuple[int, str]] | None:
        """Choose now (while selecting the batch) the log dir of each new replica the plan leaves to the
        executor, among its broker's disks with a free per-disk slot; ``None`` when a broker with live disk
        data has none free. The choice is kept for :meth:`preplace`."""
        if t.action != "reassign":
            return set()
        target, src = list(t.target_replicas), t.source_replicas
        wanted = list(t.target_log_dirs) or [None] * len(target)
        adding = [(b, d) for b, d in zip(target, wanted, strict=True) if b not in src]
        out: set[tuple[int, str]] = set()
        picks: list[tuple[int, str]] = []
        for b, d in adding:
            if d:
                continue  # the plan's dir: counted by copy_endpoints
            disks = [k for k in self.disks if k[0] == b]
            free = {k[1] for k in disks if not full(k)}
            if disks and not free:
                return None
            size = t.size_bytes // max(len(adding), 1)
            chosen = self.roomiest_dir(b, size, exclude={k[1] for k in disks} - free)
            if chosen is None:
                continue  # no live data or free-space figures: the broker picks
            if self._wait_for_best(b, chosen, size):
                return None
            picks.append((b, chosen))
            out.add((b, chosen))
        for b, chosen in picks:
            self._placement[(t.key, b)] = chosen
            self._chosen[(b, chosen)] = self._chosen.get((b, chosen), 0.0) + float(t.size_bytes)
        return out

    def _wait_for_best(self, broker: int, chosen: str, size: int) -> bool:
        """True when ``chosen`` (the best disk with a free slot) is not the broker's best disk and would
        become critical: it would finish its work later than :data:`CRITICAL_SHARE` x the latest finish of
        any disk now. The task then waits for a slot on the right disk instead of lengthening the run."""
        best = self.roomiest_dir(broker, size)
        if best is None or best == chosen:
            return False
        finish = self._finish((broker, chosen), size)
        latest = max((self._finish(d, 0) for d in self.disks), default=0.0)
        return finish > CRITICAL_SHARE * latest

    def _finish(self, disk: tuple[int, str], size: int) -> float:
        """Seconds ``disk`` needs for its backlog, this pass's choices and ``size`` more at its budget."""
        return (self._backlog.get(disk, 0.0) + self._chosen.get(disk, 0.0) + size) / self.budget(disk)

    def budget(self, disk: tuple[int, str]) -> float:
        """Migration bytes/s ``disk`` can take: live util less the measured migration, against the policy's
        threshold and headroom."""
        rate = self.disks[disk]
        policy = self.policy
        k = bytes_per_util(rate)
        u0 = max(rate.util - self.migration().get(disk, 0.0) / k, 0.0)
        return max((policy.planning_target - u0) * k, PLACEMENT_MIN_BUDGET)

    def roomiest_dir(self, broker: int, size: int, exclude: set[str] | frozenset[str] = frozenset()) -> str | None:
        """The broker's disk that would finish its copy work first: least ``(bytes still to read from or
        write to it + this replica) / its migration budget`` (live util, measured migration, the policy's
        threshold), among disks keeping ``FREE_SPACE_FACTOR x size`` free. A disk that many pending moves
        must still read from is thereby spared new writes. ``None`` without live disk data or free-space
        figures (the broker then picks)."""
        disks = {d: r for d, r in self.disks.items() if d[0] == broker}
        if not disks:
            return None
        if self._capacity is None:
            try:
                self._capacity = self.admin.disk_capacity({d[0] for d in self.disks})
            except AdminError as exc:
                log.warning("reading free space failed (brokers pick new replicas' dirs): %s", exc)
                self._capacity = {}
        best: tuple[float, str] | None = None
        for b, path in sorted(disks):
            usable = self._capacity.get((b, path), (0, -1))[1]
            if path in exclude or usable < FREE_SPACE_FACTOR * size:
                continue
            finish = self._finish((b, path), size)
            if best is None or finish < best[0]:
                best = (finish, path)
        return best[1] if best else None

    def measure_backlog(self, tasks: Mapping[str, Task], live: LiveCluster, dirs: DirMap,
                        readers: Mapping[tuple[str, int], int] | None = None) -> None:
        """Bytes every disk must still read (as a copy source: the leader, or a pending copy's ``readers``
        entry) or write (as the destination of a running copy) for the open data tasks of the execution (the
        backlog :meth:`roomiest_dir` weighs)."""
        out: dict[tuple[int, str], float] = {}
        for t in tasks.values():
            if t.state not in (TaskState.PENDING, TaskState.IN_PROGRESS) or t.action == "elect_leader":
                continue
            tp = t.tp
            p = live.partitions.get(tp)
            if p is None or p.leader < 0:
                continue
            size = float(t.size_bytes)
            left = float(self.meter.remaining(t.key, size)) if t.state == TaskState.IN_PROGRESS else size
            src_disk = replica_disk(t, dirs, copy_source(t, p, readers))
            if src_disk is not None:
                out[src_disk] = out.get(src_disk, 0.0) + left
            if t.state == TaskState.IN_PROGRESS:
                adding = [b for b in t.target_replicas if b not in t.source_replicas]
                for b in adding:
                    dst = main_dir(dirs, tp[0], tp[1], b)
                    if dst is not None:
                        out[(b, dst.log_dir)] = out.get((b, dst.log_dir), 0.0) + left / len(adding)
        self._backlog = out


def pending_work(tasks: Mapping[str, Task], live: LiveCluster, dirs: DirMap,
                 readers: Mapping[tuple[str, int], int] | None = None) -> PendingWork:
    """Bytes the data tasks not started yet will read or write: a reassignment reads its leader's disk (its
    ``readers`` entry's, when it has one) and writes each new replica's planned dir — or, left to the executor,
    its broker (:meth:`~.migration_rate.PendingWork.expected` puts those bytes where :meth:`Placement.place` will); a
    log-dir move reads and writes its broker's two dirs. What the migration throttle weighs to put first the
    disks that bound the execution."""
    out: dict[tuple[int, str], float] = {}
    brokers: dict[int, float] = {}
    for t in tasks.values():
        if t.state != TaskState.PENDING or t.action == "elect_leader":
            continue
        p = live.partitions.get(t.tp)
        if p is None:
            continue
        size = float(t.size_bytes)
        wanted = list(t.target_log_dirs) or [None] * len(t.target_replicas)
        if t.action == "reassign":
            adding = [(b, d) for b, d in zip(t.target_replicas, wanted, strict=True) if b not in p.replicas]
            if not adding:
                continue
            lead = (readers or {}).get(t.tp, p.leader)
            src_disk = replica_disk(t, dirs, lead)
            if src_disk is not None:
                out[src_disk] = out.get(src_disk, 0.0) + size
            for b, d in adding:
                if d:
                    out[(b, d)] = out.get((b, d), 0.0) + size / len(adding)
                else:
                    brokers[b] = brokers.get(b, 0.0) + size / len(adding)
        else:
            for b, d in zip(t.target_replicas, wanted, strict=True):
                cur = main_dir(dirs, t.topic, t.partition, b)
                old = cur.log_dir if cur is not None else (recorded_dir(t, b) or (b, ""))[1]
                if d and old and d != old:
                    out[(b, old)] = out.get((b, old), 0.0) + size
                    out[(b, d)] = out.get((b, d), 0.0) + size
    return PendingWork(out, brokers)
