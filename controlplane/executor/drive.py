"""Driving one task: a started task compared with the cluster — completed, measured or (re)submitted —
and a cancelled one undone.

Goal: per task and pass, the one step that brings the cluster closer to the task's target, without ever
sending a request twice for a move the cluster already runs or has done.

Method: :meth:`TaskDriver.drive` reads the task's partition in the live metadata and log dirs.
A leadership task reorders the replicas (reassignment), then asks for the election once its broker is in
sync. A reassignment in flight has its copy progress measured (:class:`~.copy_meter.CopyMeter`); one not
in flight whose replica set differs is sent, with the new replicas the plan leaves to the executor placed
(:class:`~.placement.Placement`). A task whose copy reads from a follower (:mod:`.read_source`; recorded
as ``Task.reader``) first makes it leader and after the copy makes the plan's first replica leader again,
each change a reorder, then (a later pass, the order seen) a preferred election, then (the leader seen)
the next phase (:meth:`TaskDriver._lead`); a reader lost during the lead-in is dropped and the copy
reads the leader (:meth:`TaskDriver._fall_back`). With the replica set reached, the KIP-113 log-dir moves
follow, their future replicas measured, and the task completes when every replica sits in its target dir.
:func:`cancel_reason` says why an open task must be cancelled (a dead broker, its topic deleted or grown);
:meth:`TaskDriver.abort` starts cancelling a started task and :meth:`TaskDriver.undo` drives an aborting
one: :func:`cancel_task` prepares the requests that undo it (cancel the reassignment, move future replicas
back) while :func:`has_future` or the metadata shows something of it in the cluster; then a follower read's
leadership is put back (:func:`~.read_source.restore_order`, the lead-out's steps) before it is ABORTED.

Guarantee: requests are only prepared into the pass's :class:`~.submit.Submission` and state changes
into its :class:`~.changes.TaskChanges` (the reconcile commits them before anything is sent). A started
task the cluster shows neither in flight nor done is re-sent only when two passes running agree (a stale
metadata read never duplicates a submission), and at most ``max_attempts`` times; each leader change of
a follower read sends at most ``max_attempts`` requests too (then the task is given up on, naming the
cluster's last answer; a cancelled one's restore is ABORTED naming the wanted and the seen leader). Both
counts are task fields, committed before the requests are sent, so they survive a failover; the passes a
task went unseen are the driver's only state (:meth:`TaskDriver.forget` drops them).

Cost: O(replicas of the task) per task and pass, no I/O.
"""

from __future__ import annotations

import logging
from typing import Any

from collectors.disk_rates import DiskLoad
from controlplane.executor.changes import TaskChanges
from controlplane.executor.copy_meter import CopyMeter
from controlplane.executor.live import DirMap, future_dir, main_dir
from controlplane.executor.placement import Placement
from controlplane.executor.read_source import (
    blocked,
    lead_order,
    lead_step,
    old_order,
    reader_lost,
    restore_order,
    settle_order,
    submit_order,
)
from controlplane.executor.submit import Submission
from controlplane.executor.tasks import involved_brokers, removed_brokers
from domain.execution import NO_READER, Execution, Task
from kafkaio.types import LiveCluster, PartitionMeta, ReplicaDir

log = logging.getLogger("guardian.executor")
FALLBACK = "follower read abandoned"
"""How a task's reason starts once its reader was dropped (kept in its completion reason)."""
REFUSED = "; last refused: "
"""Joins an aborting task's cancel reason and the cluster's last refusal of a step restoring its leadership."""
__all__ = ["TaskDriver", "cancel_reason", "cancel_task", "has_future"]


def cancel_reason(t: Task, live: LiveCluster, ex: Execution) -> str | None:
    """Why an open task must be cancelled now (a dead broker of its replica sets, its topic deleted or
    grown), or ``None``."""
    keep = removed_brokers(t) if ex.options.get("keep_dead_sources") else set()
    dead = sorted(b for b in involved_brokers(t) - keep if b not in live.alive)
    if dead:  # a self-healing plan replaces the dead brokers it removes: those moves go on
        return f"broker {dead[0]} of the old/new replica set is dead"
    expected = ex.partition_counts.get(t.topic)
    actual = live.topic_sizes.get(t.topic)
    if actual is None:
        return f"topic {t.topic} was deleted"
    if expected is not None and actual != expected:
        return f"topic {t.topic} changed partition count {expected} -> {actual}"
    return None


def has_future(t: Task, dirs: DirMap) -> bool:
    """Whether a future (KIP-113) replica of the task is still in the cluster."""
    return any(future_dir(dirs, t.topic, t.partition, b) is not None
               for b in set(t.target_replicas) | set(t.source_replicas))


def cancel_task(t: Task, live: LiveCluster, dirs: DirMap, submit: Submission) -> None:
    """Ask the cluster to undo a started task: cancel its reassignment, move future replicas back."""
    tp = t.tp
    if tp in live.reassignments:
        submit.reassign[tp] = None
        submit.owner[tp] = t.key
    for b in set(t.target_replicas) | set(t.source_replicas):
        cur = main_dir(dirs, t.topic, t.partition, b)
        if future_dir(dirs, t.topic, t.partition, b) is not None and cur is not None:
            submit.log_dirs[(t.topic, t.partition, b)] = cur.log_dir  # back to where it is: no future
            submit.owner[(t.topic, t.partition, b)] = t.key


def gave_up(t: Task, attempts: int, what: str) -> str:
    """The reason a task is given up on after ``attempts`` submissions of ``what`` (with the cluster's last
    refusal, if one was recorded)."""
    last = f"; last answer: {t.reason}" if " refused: " in t.reason else ""
    return f"gave up after {attempts} submissions ({what} did not take effect{last})"


class TaskDriver:
    """Compares started tasks with the cluster, one at a time (see the module docstring)."""

    def __init__(self, copies: CopyMeter, placement: Placement, scraper: DiskLoad | None, max_attempts: int) -> None:
        self.copies = copies
        self.placement = placement
        self.scraper = scraper
        """Its clock dates a new copy's start when the pass has no fresh one."""
        self.max_attempts = max_attempts
        self.suspect: dict[str, int] = {}
        """Task key -> passes in a row a started task was seen neither in flight nor done."""

    def forget(self) -> None:
        """Drop the passes each task went unseen (an execution ended, or leadership was regained)."""
        self.suspect.clear()

    def drive(self, t: Task, live: LiveCluster, dirs: DirMap, now: float | None,
              update: TaskChanges, submit: Submission, *, resubmit: bool, reader: int | None = None) -> None:
        """Compare one started task with the cluster; complete it, record progress or (re)submit. ``reader``:
        the follower a task being started reads its copy from (:mod:`.read_source`), if any."""
        suspect_before = self.suspect.get(t.key, 0)
        self._drive_once(t, live, dirs, now, update, submit, resubmit=resubmit, reader=reader)
        if self.suspect.get(t.key, 0) == suspect_before:
            self.suspect.pop(t.key, None)  # seen in flight or done this pass: start counting afresh

    def _drive_once(self, t: Task, live: LiveCluster, dirs: DirMap, now: float | None,
                    update: TaskChanges, submit: Submission, *, resubmit: bool, reader: int | None) -> None:
        tp = t.tp
        p = live.partitions.get(tp)
        attempts = t.attempts
        if p is None:
            update.kill(t, "partition no longer exists")
            return

        def send(kind: str, key: Any, value: Any, first: bool = not resubmit) -> None:
            """``first``: nothing was sent for it yet (else a resubmission: the two-pass rule, ``max_attempts``)."""
            nonlocal attempts
            if not first:
                # a started task the cluster shows neither in flight nor done: act only when two passes
                # agree, so a stale metadata read never causes a duplicate submission
                seen = self.suspect.get(t.key, 0) + 1
                self.suspect[t.key] = seen
                if seen < 2:
                    return
            self.suspect.pop(t.key, None)
            if not first and attempts >= self.max_attempts:
                update.kill(t, gave_up(t, attempts, kind))
                return
            attempts += 1
            update.progress(t, attempts=attempts, **({"leader_attempts": 0} if t.leader_attempts else {}))
            started = now if now is not None else (self.scraper.clock if self.scraper is not None else None)
            if first and started is not None:  # a new copy starts from zero: its first interval counts
                self.copies.started(t, started)
            if kind == "reassign":
                submit.reassign[key] = value
            elif kind == "log_dir":
                submit.log_dirs[key] = value
            submit.owner[key] = t.key

        if t.action == "elect_leader":
            want = int(t.leader or 0)
            if p.leader == want and p.replicas and p.replicas[0] == want:
                update.complete(t, f"broker {want} leads")
            elif want not in p.replicas:
                update.kill(t, f"broker {want} is not a replica of {tp[0]}-{tp[1]}")
            elif tp in live.reassignments:
                pass  # the reorder (or another move) is still being applied
            elif p.replicas[0] != want:
                send("reassign", tp, [want, *[b for b in p.replicas if b != want]])
            elif want in p.isr:
                submit.elect.append(tp)
                submit.owner[tp] = t.key
            return

        target = list(t.target_replicas)
        dirs_wanted = list(t.target_log_dirs) or [None] * len(target)
        if t.action == "reassign" and tp in live.reassignments:
            ra = live.reassignments[tp]
            if not ra.adding:
                return  # a reorder being applied (a follower read's leader change): nothing to measure
            done, total = self.copies.progress(t, ra.adding, dirs, live)
            update.progress(t, bytes_done=done, bytes_total=total, rate_bytes_per_s=self.copies.observe(t, now, done))
            return
        lead = t.reader if t.reader is not None else (None if resubmit else reader)
        lost = reader_lost(t, p, live) if lead is not None and lead == t.reader else None
        if lost is not None:
            if self._fall_back(t, p, live, lost, update, submit):
                return
            lead = None
        if lead is None and t.action == "reassign" and settle_order(t, p, live):
            lead = p.replicas[0]  # copied in a reader's order by an executor that did not record the reader
        if lead is not None and lead != t.reader:
            update.progress(t, reader=lead)
        order = lead_order(t, p, lead)
        step = lead_step(p, order) if order is not None else None
        if order is not None and step is not None:
            self._lead(t, p, order, step, update, submit)
            return
        if t.action == "reassign" and list(p.replicas) != target:
            order = submit_order(t, lead)  # a copy whose reader was made leader first: its first submission now
            fresh = lost is not None or (lead is not None and t.attempts == 0)  # no copy was sent yet
            send("reassign", tp, order, first=not resubmit or fresh)
            if lead is not None and p.leader == lead and submit.reassign.get(tp) == order:
                update.note(t, f"copy reads from broker {lead}, made leader")  # not the lead-in's last refusal
            if submit.reassign.get(tp) == order and submit.owner.get(tp) == t.key:
                self.placement.preplace(t, p.replicas, live, submit)
            return
        # replica set is right: log dirs next (KIP-113)
        pending_dirs: list[tuple[int, str, ReplicaDir | None]] = []
        done = total = 0
        for b, d in zip(target, dirs_wanted, strict=True):
            if d is None:
                continue
            cur = main_dir(dirs, t.topic, t.partition, b)
            fut = future_dir(dirs, t.topic, t.partition, b)
            if cur is None and b in live.alive:
                pending_dirs.append((b, d, None))
                continue
            if cur is not None and cur.log_dir == d and fut is None:
                continue
            size = cur.size if cur is not None else 0
            total += size
            if fut is not None and fut.log_dir == d:
                done += min(fut.size, size)
                pending_dirs.append((b, d, fut))
            else:
                pending_dirs.append((b, d, None))
        if not pending_dirs:
            self.copies.final(t, now)
            kept = f" ({t.reason})" if t.reason.startswith(FALLBACK) else ""
            update.complete(t, f"target replicas and log dirs reached{kept}",
                            bytes_done=max(t.bytes_total, t.bytes_done))
            return
        if t.action == "move_log_dir":
            update.progress(t, bytes_done=done, bytes_total=max(total, t.size_bytes),
                            rate_bytes_per_s=self.copies.observe(t, now, done))
        else:  # a reassignment's new replica landed elsewhere: its KIP-113 copy counts on top of the first copy
            copied = self.copies.reassigned(t, dirs, p)
            update.progress(t, bytes_done=copied + done, bytes_total=copied + total,
                            rate_bytes_per_s=self.copies.observe(t, now, copied + done))
        for b, d, fut in pending_dirs:
            known = main_dir(dirs, t.topic, t.partition, b) is not None
            if fut is None and (known or not resubmit):
                send("log_dir", (t.topic, t.partition, b), d)

    def _lead(self, t: Task, p: PartitionMeta, order: list[int], step: str, update: TaskChanges,
              submit: Submission) -> None:
        """One request of a follower read's leader change (:func:`~.read_source.lead_step`), counted in the
        task (write-ahead); the task is given up on once ``max_attempts`` requests did not make ``order[0]``
        leader. A reorder copies nothing (no two-pass rule: sending it twice is harmless)."""
        sent = t.leader_attempts
        if sent >= self.max_attempts:
            update.kill(t, gave_up(t, sent, f"making broker {order[0]} leader with replicas {order}; the cluster "
                                            f"shows replicas {list(p.replicas)} led by {p.leader}"))
            return
        update.progress(t, leader_attempts=sent + 1)
        _send_step(t, order, step, submit)

    def _fall_back(self, t: Task, p: PartitionMeta, live: LiveCluster, lost: str, update: TaskChanges,
                   submit: Submission) -> bool:
        """A lead-in whose reader was lost (:func:`~.read_source.reader_lost`): send the order before the task
        back while the metadata shows the lead-in's reorder (a counted request; True: this pass's step), else
        clear ``reader`` (False: the copy is submitted now, reading the leader). Both noted in the reason."""
        note = f"{FALLBACK}: {lost}"
        order = old_order(t, p)
        if order is not None and t.leader_attempts < self.max_attempts and blocked(order, "reorder", p, live) is None:
            update.progress(t, leader_attempts=t.leader_attempts + 1)
            update.note(t, f"{note}; restoring replicas {order}")
            _send_step(t, order, "reorder", submit)
            return True
        log.warning("task %s: %s; the copy reads from leader %s", t.key, note, p.leader)
        update.progress(t, reader=NO_READER)
        update.note(t, f"{note}; the copy reads from leader {p.leader}")
        return False

    def abort(self, t: Task, reason: str, live: LiveCluster, dirs: DirMap, update: TaskChanges,
              submit: Submission) -> None:
        """IN_PROGRESS -> ABORTING, its cancel prepared; a follower read's leader change counts afresh."""
        update.abort(t, reason)
        if t.reader is not None and t.leader_attempts:
            update.progress(t, leader_attempts=0)
        cancel_task(t, live, dirs, submit)

    def undo(self, t: Task, live: LiveCluster, dirs: DirMap, update: TaskChanges, submit: Submission) -> None:
        """An aborting task: its cancel sent again while the cluster shows something of it; then, with a
        reader recorded, its leadership put back (:func:`~.read_source.restore_order`: one counted reorder or
        election per pass, a step that cannot take waits, counted); then ABORTED — after ``max_attempts``
        with the wanted and the seen leader in its reason."""
        tp = t.tp
        ra = live.reassignments.get(tp)
        if ra is not None and t.reader is not None and not ra.adding and not ra.removing:
            return  # a reorder being applied (its leader change): nothing to cancel
        if ra is not None or has_future(t, dirs):
            cancel_task(t, live, dirs, submit)
            return
        reason = t.reason or "cancelled"
        p = live.partitions.get(tp)
        order = restore_order(t, p) if p is not None else None
        step = lead_step(p, order) if p is not None and order is not None else None
        if p is None or order is None or step is None:  # nothing (more) to restore: a refusal on the way is moot
            done = reason.split(REFUSED)[0] or "cancelled"
            update.aborted(t, done if p is None or order is None else f"{done}; replicas {order} led by {order[0]}")
            return
        sent = t.leader_attempts
        why = blocked(order, step, p, live)
        if sent >= self.max_attempts:
            update.aborted(t, f"{reason}; leadership not restored after {sent} attempts{f' ({why})' if why else ''}: "
                              f"wanted replicas {order} led by {order[0]}, the cluster shows replicas "
                              f"{list(p.replicas)} led by {p.leader}")
            return
        update.progress(t, leader_attempts=sent + 1)
        if why is None:  # else counted and waiting: bounded by max_attempts
            _send_step(t, order, step, submit)


def _send_step(t: Task, order: list[int], step: str, submit: Submission) -> None:
    """Prepare one request of a leader change to ``order`` (:func:`~.read_source.lead_step`): a reorder (a
    reassignment that copies nothing) or a preferred election, owned by ``t``."""
    if step == "reorder":
        submit.reassign[t.tp] = order
    else:
        submit.elect.append(t.tp)
        submit.leader_steps.add(t.tp)
    submit.owner[t.tp] = t.key
