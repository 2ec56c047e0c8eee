"""Pure task logic: plan -> per-partition tasks, ordering strategies, cap-respecting batch selection.

A task is a :class:`domain.execution.Task` record (its JSON is what the replicated state holds). Nothing
here does I/O; the reconcile loop feeds it live facts and proposes what it returns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from domain import Plan
from domain.execution import OPEN_STATES, TERMINAL_STATES, Action, Task, TaskState

ORDERINGS = ("small_first", "large_first", "urp_first", "bottleneck_first", "plan")
DEFAULT_CAPS: dict[str, int] = {"per_broker": 5, "per_disk": 2, "per_cluster": 50, "leaders_per_pass": 500}


@dataclass(frozen=True)
class CurrentPartition:
    """What the cluster holds now for one partition (replica order matters: first = preferred leader)."""

    replicas: tuple[int, ...]
    log_dirs: tuple[str | None, ...]
    leader: int
    size_bytes: int
    under_replicated: bool = False


def task_key(topic: str, partition: int, suffix: str = "") -> str:
    """Stable key of a partition's task (``topic:partition[:suffix]``)."""
    return f"{topic}:{partition}" + (f":{suffix}" if suffix else "")


def tasks_from_plan(plan: Plan, current: Mapping[tuple[str, int], CurrentPartition],
                    batches: Mapping[tuple[str, int], int] | None = None) -> list[Task]:
    """Per-partition tasks that take the cluster from ``current`` to the plan's targets.

    * a move whose replica set (or order) changes -> ``reassign`` (log dirs fixed afterwards);
    * a move that only changes log dirs -> ``move_log_dir``;
    * a leader change -> ``elect_leader``. When the new leader is already a replica it goes first
      (leadership before replicas: the partition's move waits for it); otherwise it follows the move.

    Moves already satisfied produce no task (tasks are PENDING). Partitions missing from ``current`` raise
    ``KeyError``.
    """
    batches = batches or {}
    tasks: list[Task] = []
    leader_of = {c.id: c.leader for c in plan.leaders}
    for move in plan.moves:
        cur = current[move.id]
        target = tuple(move.replicas)
        dirs = tuple(move.log_dirs) if move.log_dirs else (None,) * len(target)
        dir_changes = any(d is not None and (b not in cur.replicas or cur.log_dirs[cur.replicas.index(b)] != d)
                          for b, d in zip(target, dirs, strict=True))
        if target == cur.replicas and not dir_changes:
            continue
        adding = [b for b in target if b not in cur.replicas]
        action: Action
        if target != cur.replicas:
            action, size = "reassign", cur.size_bytes * len(adding)
        else:
            action = "move_log_dir"
            size = cur.size_bytes * sum(1 for b, d in zip(target, dirs, strict=True)
                                        if d is not None and cur.log_dirs[cur.replicas.index(b)] != d)
        after = []
        new_leader = leader_of.get(move.id)
        if new_leader is not None and new_leader in cur.replicas and new_leader != cur.leader:
            after.append(task_key(*move.id, "leader"))
        tasks.append(Task(key=task_key(*move.id), topic=move.topic, partition=move.partition, action=action,
                          source_replicas=cur.replicas, source_log_dirs=cur.log_dirs, target_replicas=target,
                          target_log_dirs=dirs, size_bytes=size, leader=None, batch=batches.get(move.id, 0),
                          after=tuple(after)))
    moved: dict[str, set[int]] = {t.topic: set() for t in tasks}
    for t in tasks:
        moved[t.topic].add(t.partition)
    for change in plan.leaders:
        cur = current[change.id]
        has_move = change.partition in moved.get(change.topic, set())
        if change.leader == cur.leader and not has_move:
            continue
        leader_first = change.leader in cur.replicas and change.leader != cur.leader
        after = [] if leader_first or not has_move else [task_key(*change.id)]
        tasks.append(Task(key=task_key(*change.id, "leader"), topic=change.topic, partition=change.partition,
                          action="elect_leader", source_replicas=cur.replicas, source_log_dirs=cur.log_dirs,
                          target_replicas=(), target_log_dirs=(), size_bytes=0, leader=change.leader,
                          batch=batches.get(change.id, 0), after=tuple(after)))
    return tasks


def involved_brokers(task: Task) -> set[int]:
    """Every broker of the task's old or new replica set (and its new leader)."""
    out = set(task.source_replicas) | set(task.target_replicas)
    if task.leader is not None:
        out.add(task.leader)
    return out


def removed_brokers(task: Task) -> set[int]:
    """Brokers of the task's old replica set that its new one drops (and that do not lead it)."""
    return set(task.source_replicas) - set(task.target_replicas) - ({task.leader} if task.leader is not None else set())


def recorded_dir(t: Task, broker: int) -> tuple[int, str] | None:
    """The log dir the task recorded for ``broker``'s replica when it was planned (``None`` if unknown)."""
    src, dirs = t.source_replicas, t.source_log_dirs
    if broker in src and dirs and dirs[src.index(broker)]:
        return broker, str(dirs[src.index(broker)])
    return None


def copy_endpoints(task: Task, leader: int | None = None) -> tuple[set[int], set[tuple[int, str]]]:
    """Brokers and disks a running task loads: the copy source (leader) and each destination."""
    src = task.source_replicas
    lead = leader if leader is not None and leader >= 0 else (src[0] if src else None)
    brokers: set[int] = set()
    disks: set[tuple[int, str]] = set()
    if task.action == "reassign":
        adding = [b for b in task.target_replicas if b not in src]
        if not adding:
            return brokers, disks
        if lead is not None:
            brokers.add(lead)
            if lead in src:
                d = task.source_log_dirs[src.index(lead)] if task.source_log_dirs else None
                if d:
                    disks.add((lead, d))
        for b in adding:
            brokers.add(b)
            i = task.target_replicas.index(b)
            d = task.target_log_dirs[i] if task.target_log_dirs else None
            if d:
                disks.add((b, d))
    elif task.action == "move_log_dir":
        for i, b in enumerate(task.target_replicas):
            d = task.target_log_dirs[i] if task.target_log_dirs else None
            s = task.source_log_dirs[src.index(b)] if b in src and task.source_log_dirs else None
            if d and d != s:
                brokers.add(b)
                disks.add((b, d))
                if s:
                    disks.add((b, s))
    return brokers, disks


def order_tasks(tasks: Iterable[Task], strategy: str, under_replicated: set[tuple[str, int]] | None = None,
                open_tasks: Iterable[Task] = (), leaders: Mapping[tuple[str, int], int] | None = None,
                per_disk: int = 1) -> list[Task]:
    """Sort candidate tasks by ``strategy`` (stable, deterministic; key order breaks ties).

    ``bottleneck_first`` (critical path): a task whose source disk, then broker, still has the most bytes
    to copy among ``open_tasks`` (started ones count what is left) goes first, largest first among
    equals; the busiest disk, which bounds the whole execution, then never waits for the others. A disk
    runs ``per_disk`` copies at once, each at about ``1/per_disk`` of its rate, so one task of size ``s``
    takes as long as ``per_disk x s`` bytes of its disk's queue: a large task on a quiet disk counts that
    much and starts early enough not to become the execution's tail.
    """
    if strategy not in ORDERINGS:
        raise ValueError(f"unknown ordering {strategy!r}; choose one of {', '.join(ORDERINGS)}")
    urp = under_replicated or set()
    items = list(tasks)
    if strategy == "plan":
        return items
    if strategy == "large_first":
        return sorted(items, key=lambda t: (-t.size_bytes, t.key))
    if strategy == "bottleneck_first":
        leaders = leaders or {}
        disk_load: Counter[tuple[int, str]] = Counter()
        broker_load: Counter[int] = Counter()
        for t in open_tasks:
            left = max(t.size_bytes - t.bytes_done, 0)
            brokers, disks = copy_endpoints(t, leaders.get(t.tp))
            for d in disks:
                disk_load[d] += left
            for b in brokers:
                broker_load[b] += left

        def critical(t: Task) -> tuple[int, int, int, str]:
            brokers, disks = copy_endpoints(t, leaders.get(t.tp))
            own = max(per_disk, 1) * t.size_bytes
            return (-max(max((disk_load[d] for d in disks), default=0), own),
                    -max((broker_load[b] for b in brokers), default=0), -t.size_bytes, t.key)

        return sorted(items, key=critical)
    if strategy == "urp_first":
        return sorted(items, key=lambda t: (t.tp not in urp, t.size_bytes, t.key))
    return sorted(items, key=lambda t: (t.size_bytes, t.key))


def ready_tasks(tasks: Mapping[str, Task], urp_zero: bool, leadership_first: bool = False) -> list[Task]:
    """PENDING tasks allowed to start now.

    A task waits for its ``after`` dependencies to be done, and for every task of an earlier batch to
    be done *and* the cluster to have zero under-replicated partitions (broker batches of a drain).
    With ``leadership_first``, data moves of a batch wait until its dependency-free leadership tasks
    are done (leaders leave drained brokers before any replica does).
    """
    open_batches = sorted({t.batch for t in tasks.values() if t.state in OPEN_STATES})
    if not open_batches:
        return []
    current = open_batches[0]
    earlier_open = any(t.batch < current and t.state in OPEN_STATES for t in tasks.values())
    if earlier_open:
        return []
    if current > min(t.batch for t in tasks.values()) and not urp_zero and not any(
            t.batch == current and t.state != TaskState.PENDING for t in tasks.values()):
        return []  # batch barrier: wait for the cluster to heal before touching the next brokers
    leaders_open = leadership_first and any(
        t.batch == current and t.action == "elect_leader" and not t.after and t.state in OPEN_STATES
        for t in tasks.values())
    out = []
    for t in tasks.values():
        if t.state != TaskState.PENDING or t.batch != current:
            continue
        if leaders_open and t.action != "elect_leader":
            continue
        if any(tasks[d].state not in TERMINAL_STATES for d in t.after if d in tasks):
            continue
        out.append(t)
    return out


def select_batch(candidates: list[Task], running: Iterable[Task], caps: Mapping[str, int],
                 leaders: Mapping[tuple[str, int], int] | None = None, *,
                 placed: Mapping[str, Iterable[tuple[int, str]]] | None = None,
                 place: Callable[[Task, Callable[[tuple[int, str]], bool]], set[tuple[int, str]] | None] | None = None,
                 ) -> list[Task]:
    """The longest prefix-greedy selection of ``candidates`` that keeps every cap.

    ``per_broker`` bounds concurrent data moves touching a broker (copy source or destination),
    ``per_disk`` those touching a log dir, ``per_cluster`` all data moves; leader elections (no data)
    are bounded only by ``leaders_per_pass``. A candidate that does not fit is skipped, not waited
    for: a slow move never blocks one on other brokers. ``placed`` adds, per running task key, the disks
    its new replicas were placed on by the executor (the plan left them to it); ``place`` chooses them for
    a candidate that fits every other cap, given which disks are full (``None``: none of a destination
    broker's disks has a free slot, and the candidate is skipped).
    """
    caps = {**DEFAULT_CAPS, **caps}
    leaders = leaders or {}
    per_broker: Counter[int] = Counter()
    per_disk: Counter[tuple[int, str]] = Counter()
    data_running = 0
    for t in running:
        if t.action == "elect_leader":
            continue
        brokers, disks = copy_endpoints(t, leaders.get(t.tp))
        disks |= set((placed or {}).get(t.key, ()))
        per_broker.update(brokers)
        per_disk.update(disks)
        data_running += 1
    chosen: list[Task] = []
    elections = 0
    for t in candidates:
        if t.action == "elect_leader":
            if elections < caps["leaders_per_pass"]:
                chosen.append(t)
                elections += 1
            continue
        if data_running >= caps["per_cluster"]:
            continue
        brokers, disks = copy_endpoints(t, leaders.get(t.tp))
        if any(per_broker[b] >= caps["per_broker"] for b in brokers):
            continue
        if any(per_disk[d] >= caps["per_disk"] for d in disks):
            continue
        if place is not None:
            extra = place(t, lambda d: per_disk[d] >= caps["per_disk"])
            if extra is None:
                continue
            disks |= extra
        per_broker.update(brokers)
        per_disk.update(disks)
        data_running += 1
        chosen.append(t)
    return chosen
