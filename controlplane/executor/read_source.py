"""Read source of a reassignment's copy: the leader, or a kept in-sync follower made leader for the move.

Goal: a new replica fetches from the partition's leader, so the copy reads the leader's disk. When that
disk bounds the execution (it must read many copies' bytes) and a replica the plan keeps is in sync on a
less-loaded disk, that follower is made leader before the copy starts and the copy reads its disk instead.
Opt-in (:attr:`~.migration_rate.MigrationRatePolicy.follower_reads`: ``exec run --follower-reads``, the API's
``throttle.follower_reads``): every such partition changes leader twice while it moves, which clients see.

Method: every pass, :func:`plan_readers` spreads the reads of the reassignments not started yet over their
possible sources (largest first, each to the source disk that would finish its work first: bytes it must
still read or write for the execution, in flight or pending, over its migration budget; ties keep the
leader). A task started with a reader other than its leader records it (``Task.reader``, write-ahead) and
changes leader twice, each change a reconciled step re-derived from the re-read metadata every pass
(:func:`lead_order`, :func:`lead_step`): **lead-in** — its current replicas are reordered with the reader
first (a reassignment that copies nothing); in a later pass, once the metadata shows that order, a KIP-460
preferred election; once it shows the reader leading, the copy is submitted with the reader first in its
target (:func:`submit_order`; during a reassignment Kafka's replica list is the target then the replicas
removed, so the reader stays the preferred replica) and reads the reader's disk from its first byte.
**Lead-out** — when the copy is done the cluster shows the target's replicas in the reader's order: the
plan's order is sent (a reorder copies nothing), then, once the metadata shows it, a preferred election;
the task completes only once the re-read leader is the plan's first replica — as Kafka itself would have
made it leader when the old leader left the replica set. A Kafka controller may handle an election
before a reorder sent just before it lands (ELECTION_NOT_NEEDED), and an executor may fail over between
the two: never sending both in one pass, and deciding from the metadata alone, the step is retried until
it takes. Each change sends at most ``max_attempts`` requests (``Task.leader_attempts``, replicated; a
stale read or an ELECTION_NOT_NEEDED costs one), then the task is given up on with the cluster's last
answer (:mod:`.drive`). A task holds its slots under the caps through both leader changes (the caps bound
the tasks in progress; freeing them in the lead-out was 0.5-1 % faster on the bench, not taken).
**Fallback** — a reader that leaves the ISR (or the replica set, or dies) before the lead-in is done is
dropped (:func:`reader_lost`): the order before the task is sent back if the metadata shows the lead-in's
reorder (:func:`old_order`, one more counted request), then ``reader`` is cleared (write-ahead) and the copy
is submitted as without follower reads, reading the leader; the task's reason says so. **Cancel** — a task
cancelled with a reader recorded (stop with rollback, a dead broker, its topic changed) is ABORTED only once
its copy's cancel took effect and its leadership is back (:func:`restore_order`): the order before the task
and its first replica leading, or the plan's when the copy was already done — the same reorder / election
steps, counted afresh (``leader_attempts`` reset when the cancel is decided); a step that cannot take (a
replica of the order dead, the wanted leader out of the ISR) waits a pass, counted; after ``max_attempts``
the task is ABORTED anyway, its reason naming the wanted and the seen leader (:mod:`.drive`).

Guarantee: only tasks whose leader is the plan's source leader and whose final leader is the target's
first replica either way (the old leader leaves the replica set, or stays first) use another reader, and
none with a leadership task of its own in the execution (a drain's elections stay as planned). A reader is
alive, in the ISR, kept by the plan and on a disk with live load figures. The copy stays throttled: the
leader-side throttled-replica lists name every source replica and a replica that may lead gets a rate
(:mod:`.migration_levers`). A task completes only with the plan's order and its first replica leading; its
copy is never submitted before the reader leads, and never waits on a reader out of the ISR. A cancelled
task counts as cancelled only with its old replicas back in their order and its old leader leading (or
its reason saying why not, after at most ``max_attempts`` counted passes). Deterministic; every decision is a
function of the task record and the metadata read this pass, so a new executor taking over mid-way goes
on where the cluster stands.

Cost: O(pending tasks x (log + replicas)) per pass; no extra admin call (the reorders and elections ride in
the pass's submission). In passes: the copy starts two passes after its task (reorder, election, copy),
and the task completes two passes after its copy (reorder, election, check) — three passes more than when
the election rode with the reorder, which the bench measures (README). A fallback costs one pass when the
lead-in's reorder is undone; a cancelled task takes up to two passes more (reorder, election) to be ABORTED.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from controlplane.executor.live import DirMap, main_dir, replica_disk
from domain.execution import Task, TaskState
from kafkaio.types import LiveCluster, PartitionMeta

DiskKey = tuple[int, str]
TP = tuple[str, int]
MARGIN = 0.6
"""A follower reads a copy only when its disk would finish within this share of the leader's disk's time. Bench,
seeds 11-30, sim-s against no follower reads: with the leader changes as reconciled steps (three passes more per
such copy) 0.6 -1.1 %, 0.7 -0.2 %, 0.9 about +4 %; before, with each election sent beside its reorder, 0.9 -3.7 %
(-5.5 % before kafkasim honoured the retention check), 1.0 -2.9 %, 0.8 -4.3 %, 0.7 -4.1 %."""


def copy_source(t: Task, p: PartitionMeta, readers: Mapping[TP, int] | None = None) -> int:
    """The broker whose disk a data task's copy reads (its caps, the backlog, the reader choice count it
    there): a pending task's reader chosen this pass (``readers``), a started one's recorded reader while it
    is still a replica (being made leader, leading the copy, or in the lead-out), else the leader."""
    if t.state == TaskState.PENDING:
        return (readers or {}).get(t.tp, p.leader)
    return t.reader if t.reader is not None and t.reader in p.replicas else p.leader


def candidates(t: Task, p: PartitionMeta, live: LiveCluster, dirs: DirMap) -> list[tuple[int, DiskKey]]:
    """The brokers a pending reassignment could read from and their disks: its leader first, then every
    follower the plan keeps that is alive and in sync (``[]`` when the task may not change its reader)."""
    target, src = list(t.target_replicas), t.source_replicas
    if (t.action != "reassign" or t.state != TaskState.PENDING or not src or p.leader != src[0]
            or t.tp in live.reassignments or not any(b not in p.replicas for b in target)
            or (p.leader in target and target[0] != p.leader)):
        return []
    lead = replica_disk(t, dirs, p.leader)
    if lead is None:
        return []
    out = [(p.leader, lead)]
    for b in target:
        if b != p.leader and b in p.replicas and b in p.isr and b in live.alive:
            d = replica_disk(t, dirs, b)
            if d is not None:
                out.append((b, d))
    return out


def plan_readers(tasks: Mapping[str, Task], live: LiveCluster, dirs: DirMap, budgets: Mapping[DiskKey, float],
                 remaining: Callable[[str, float], float]) -> dict[TP, int]:
    """Per pending reassignment that may change its reader: the broker its copy should read from.

    Every disk's work is what the copies in flight still read and write on it (``remaining``), the writes of
    the pending tasks (spread over the destination broker's disks: the placement picks one later), and the
    reads of the pending tasks that keep their leader; then each task with a choice, largest first, reads
    the candidate disk that would finish first with it (``(work + size) / budget``, a follower's time over
    :data:`MARGIN`; the leader on ties). Only disks in ``budgets`` (live load figures) are candidates;
    ``remaining(task key, default)``: bytes a copy in flight still has to copy."""
    work: dict[DiskKey, float] = {}

    def add(d: DiskKey | None, b: float) -> None:
        if d is not None:
            work[d] = work.get(d, 0.0) + b

    by_broker: dict[int, list[DiskKey]] = {}
    for d in sorted(budgets):
        by_broker.setdefault(d[0], []).append(d)
    choosing: list[tuple[Task, list[tuple[int, DiskKey]]]] = []
    skip = {t.tp for t in tasks.values() if t.action == "elect_leader"}
    for t in tasks.values():
        if t.action != "reassign" or t.state not in (TaskState.PENDING, TaskState.IN_PROGRESS):
            continue
        p = live.partitions.get(t.tp)
        if p is None or p.leader < 0:
            continue
        adding = [b for b in t.target_replicas if b not in p.replicas]
        if t.state == TaskState.IN_PROGRESS:
            left = float(remaining(t.key, float(t.size_bytes)))
            add(replica_disk(t, dirs, copy_source(t, p)), left)
            for b in adding or t.adding:
                cur = main_dir(dirs, t.topic, t.partition, b)
                if cur is not None:
                    add((b, cur.log_dir), left / max(len(adding or t.adding), 1))
            continue
        if not adding:
            continue
        size = float(t.size_bytes)
        for b in adding:
            dsts = by_broker.get(b, [])
            for d in dsts:
                add(d, size / len(adding) / len(dsts))
        cands = [] if t.tp in skip else candidates(t, p, live, dirs)
        opts = [o for o in cands if o[1] in budgets]
        if len(opts) > 1 and cands[0][1] in budgets:  # opts[0] is the leader: without its figures, no choice
            choosing.append((t, opts))
        else:
            add(replica_disk(t, dirs, p.leader), size)
    out: dict[TP, int] = {}
    for t, opts in sorted(choosing, key=lambda c: (-c[0].size_bytes, c[0].key)):
        size = float(t.size_bytes)
        best = opts[min(((work.get(d, 0.0) + size) / max(budgets[d], 1.0) / (1.0 if i == 0 else MARGIN), i)
                        for i, (_, d) in enumerate(opts))[1]]
        add(best[1], size)
        if best[0] != opts[0][0]:
            out[t.tp] = best[0]
    return out


def submit_order(t: Task, reader: int | None) -> list[int]:
    """The target a task is submitted with: the plan's, with ``reader`` (a kept replica) moved first."""
    target = list(t.target_replicas)
    if reader is None or reader not in target or target[0] == reader:
        return target
    return [reader, *[b for b in target if b != reader]]


def settle_order(t: Task, p: PartitionMeta, live: LiveCluster) -> bool:
    """True when a reassignment's copy is done with its replicas in a reader's order (a kept source replica
    first, the plan's first replica elsewhere, nothing in flight): the task needs its lead-out though it
    records no reader (started by an executor that did not record one); its reader is the first replica."""
    target, src = list(t.target_replicas), t.source_replicas
    return (t.action == "reassign" and t.tp not in live.reassignments and bool(t.adding) and bool(src)
            and list(p.replicas) != target and sorted(p.replicas) == sorted(target)
            and p.replicas[0] in src and p.replicas[0] != target[0]
            and (src[0] not in target or target[0] == src[0]))


def lead_order(t: Task, p: PartitionMeta, reader: int | None) -> list[int] | None:
    """The replica order a follower-read task's leader change under way wants (its first replica leading),
    or ``None`` when none is under way. Lead-in (the copy not submitted yet, ``attempts`` 0): the current
    replicas with ``reader`` first. Lead-out (the replica set is the target's): the plan's order. Call it
    with no reassignment of the partition in flight."""
    if reader is None or t.action != "reassign":
        return None
    if sorted(p.replicas) == sorted(t.target_replicas):
        return list(t.target_replicas)
    if t.attempts == 0 and reader in p.replicas:
        return [reader, *[b for b in p.replicas if b != reader]]
    return None


def lead_step(p: PartitionMeta, order: list[int]) -> Literal["reorder", "elect"] | None:
    """The next request of a leader change to ``order``: a reorder while the metadata shows another replica
    order, a preferred election once it shows ``order`` with another leader, ``None`` once ``order[0]``
    leads."""
    if list(p.replicas) != order:
        return "reorder"
    return "elect" if p.leader != order[0] else None


def reader_lost(t: Task, p: PartitionMeta, live: LiveCluster) -> str | None:
    """Why a task's lead-in can no longer make its reader leader (the fallback's reason), or ``None``: the
    reader's broker is dead, no longer a replica, or out of the ISR. Only during the lead-in (a recorded
    reader, no copy submitted yet, the replica set not the target's)."""
    r = t.reader
    if (r is None or t.action != "reassign" or t.attempts != 0
            or sorted(p.replicas) == sorted(t.target_replicas)):
        return None
    if r not in live.alive:
        return f"broker {r} is dead"
    if r not in p.replicas:
        return f"broker {r} is no longer a replica"
    return None if r in p.isr else f"broker {r} left the ISR {list(p.isr)}"


def old_order(t: Task, p: PartitionMeta) -> list[int] | None:
    """The order before the task, when the metadata shows its old replica set in another order (a lead-in's
    reorder seen), else ``None``."""
    src = list(t.source_replicas)
    return src if sorted(p.replicas) == sorted(src) and list(p.replicas) != src else None


def restore_order(t: Task, p: PartitionMeta) -> list[int] | None:
    """The replica order a cancelled follower-read task puts back, its first replica leading: the order
    before the task when the cluster shows the old replica set (the copy cancelled or never sent), the plan's
    when it shows the target's (the copy was done: the lead-out's), ``None`` without a reader or with
    another replica set. Call it with nothing of the task in flight."""
    if t.reader is None or t.action != "reassign":
        return None
    if sorted(p.replicas) == sorted(t.source_replicas):
        return list(t.source_replicas)
    if sorted(p.replicas) == sorted(t.target_replicas):
        return list(t.target_replicas)
    return None


def blocked(order: list[int], step: str, p: PartitionMeta, live: LiveCluster) -> str | None:
    """Why the next step of a leader change to ``order`` cannot take now (a reorder naming a dead broker is
    refused; a preferred election of a replica out of the ISR finds no preferred leader), or ``None``."""
    if step == "reorder":
        dead = [b for b in order if b not in live.alive]
        return f"broker {dead[0]} is dead" if dead else None
    return None if order[0] in p.isr else f"broker {order[0]} is not in the ISR {list(p.isr)}"
