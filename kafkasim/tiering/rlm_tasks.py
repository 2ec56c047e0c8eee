"""When each tiered partition's remote log manager task runs in kafkasim (KIP-405): one schedule per partition.

Goal
    Kafka (3.6+) gives every tiered partition a task of its own on the broker that leads it (``RLMTask``; from
    3.8 an ``RLMCopyTask`` and an ``RLMExpirationTask`` created together on the same schedule), scheduled with a
    fixed delay of ``remote.log.manager.task.interval.ms`` (default 30000) between runs and a first run as soon
    as the broker becomes the partition's leader (``scheduleWithFixedDelay(task, 0, interval)``).  A run copies
    every eligible segment, oldest first, and deletes the remote segments past retention; between runs closed
    segments stay local.  Each partition has its own phase, so a broker's partitions are not all copied and
    expired in the same instant.  This module is that schedule, without I/O.

Method
    A heap of ``(next run, sequence, key, generation)``.  :meth:`TaskSchedule.start` (re)creates a partition's
    task with its first run at a given time (a leader change: the generation moves on, so entries of the
    deposed leader's task are skipped when they surface); :meth:`TaskSchedule.due` pops the tasks whose run
    falls in the tick ending at ``t_end``; the caller runs them and calls :meth:`TaskSchedule.again` with the
    run's time and the leader's interval (fixed delay: the next run one interval after this one; a run takes no
    simulated time in kafkasim).  First runs: Kafka schedules a new leader's task with delay 0, so a new
    leader's task (a failover, a move, a preferred election) runs at once.  Partitions led by one broker are
    not copied in step in a deployment, though: each next run is an interval after the previous run *ended*,
    runs last as long as their uploads, and the copier pool (``remote.log.manager.copier.thread.pool.size``)
    queues them, so over time each partition's runs settle at a phase of their own.  kafkasim does not model
    upload durations, so a partition that becomes tiered (created so, switched by AlterConfigs, or seen when
    the simulator starts) gets that phase directly: its first run is a seeded fraction of the interval after it
    became tiered (:meth:`TaskSchedule.phase`, a hash of the seed and the partition's name, independent of the
    order partitions are seen in).

Guarantee
    Deterministic (same seed, same events: same runs); a task runs at most once per tick and never earlier than
    its due time; a cancelled or superseded task never runs again; two runs of one task are at least an
    interval apart (up to the tick's granularity: intervals shorter than a tick run once per tick).

Cost
    O(log n) per start or run (n: tasks scheduled); a tick costs O((due + superseded) · log n), not O(partitions).
"""

from __future__ import annotations

import collections
import hashlib
import heapq
import math
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

QUOTA_SAMPLES = 11
"""``remote.log.manager.copy.quota.window.num`` (Kafka's default)."""
QUOTA_WINDOW_S = 1.0
"""``remote.log.manager.copy.quota.window.size.seconds`` (Kafka's default)."""


class TaskSchedule(Generic[K]):
    """Per key (a tiered partition): the simulated time of its task's next run; see the module docstring."""

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._heap: list[tuple[float, int, K, int]] = []
        self._gen: dict[K, int] = {}
        self._next: dict[K, float] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._gen)

    def phase(self, name: str) -> float:
        """A fraction in ``[0, 1)`` fixed by the seed and ``name`` (stable across processes and orders)."""
        digest = hashlib.blake2b(f"{self.seed}/{name}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2.0 ** 64

    def next_run(self, key: K) -> float | None:
        """When ``key``'s task runs next (None: no task)."""
        return self._next.get(key)

    def start(self, key: K, first: float) -> None:
        """(Re)create ``key``'s task with its first run at ``first``; a previous task of ``key`` is superseded."""
        gen = self._gen.get(key, 0) + 1
        self._gen[key] = gen
        self._push(key, first, gen)

    def cancel(self, key: K) -> None:
        """Stop ``key``'s task (the partition is gone or no longer tiered)."""
        self._gen.pop(key, None)
        self._next.pop(key, None)

    def due(self, t_end: float) -> list[tuple[K, float]]:
        """The tasks whose run falls at or before ``t_end``, each with its due time, earliest first; each must be
        given its next run with :meth:`again` (or be cancelled)."""
        out: list[tuple[K, float]] = []
        heap = self._heap
        while heap and heap[0][0] <= t_end + 1e-9:
            when, _, key, gen = heapq.heappop(heap)
            if self._gen.get(key) != gen:
                continue  # superseded or cancelled
            self._next.pop(key, None)
            out.append((key, when))
        return out

    def again(self, key: K, ran: float, interval: float, t_end: float) -> None:
        """Schedule the run after the one at ``ran``: one ``interval`` later, moved past ``t_end`` by whole
        intervals."""
        gen = self._gen.get(key)
        if gen is None:
            return
        step = max(interval, 1e-6)
        nxt = ran + step
        if nxt <= t_end + 1e-9:
            nxt += (math.floor((t_end + 1e-9 - nxt) / step) + 1.0) * step
        self._push(key, nxt, gen)

    def resume(self, key: K, when: float) -> None:
        """Continue ``key``'s current run at ``when`` (its copies wait for the broker's copy quota)."""
        gen = self._gen.get(key)
        if gen is not None:
            self._push(key, when, gen)

    def _push(self, key: K, when: float, gen: int) -> None:
        self._seq += 1
        self._next[key] = when
        heapq.heappush(self._heap, (when, self._seq, key, gen))


class CopyQuota:
    """One broker's remote copy quota (KIP-956, ``remote.log.manager.copy.max.bytes.per.second``) in simulated
    time, as Kafka's ``RLMQuotaManager`` applies it before each segment copy: the segment may start when the byte
    rate measured over the quota's samples (``QUOTA_SAMPLES`` windows of ``QUOTA_WINDOW_S``; the rate divides by
    at least ``QUOTA_SAMPLES - 1`` windows) is at most the quota; then its whole size is recorded.  So a burst
    of up to about ``(QUOTA_SAMPLES - 1) × window × quota`` bytes goes at once, and a segment larger than that
    goes whole and the next one waits until it leaves the samples.  Records are kept ``QUOTA_SAMPLES × window``
    (a continuous approximation of Kafka's whole windows); O(records in that span) per call."""

    def __init__(self, samples: int = QUOTA_SAMPLES, window_s: float = QUOTA_WINDOW_S) -> None:
        self.span = samples * window_s
        self.budget_s = (samples - 1) * window_s
        self.records: collections.deque[tuple[float, float]] = collections.deque()
        self.total = 0.0

    def _expire(self, now: float) -> None:
        while self.records and self.records[0][0] <= now - self.span + 1e-9:
            self.total -= self.records.popleft()[1]

    def start_time(self, now: float, rate: float) -> float:
        """The earliest time ``>= now`` a copy may start under a quota of ``rate`` bytes/s (inf: unlimited)."""
        self._expire(now)
        if not math.isfinite(rate):
            return now
        when = now
        for t, _ in list(self.records):
            if self.total / self.budget_s <= rate:
                break
            when = max(when, t + self.span)
            self._expire(when)
        return when

    def record(self, t: float, nbytes: float) -> None:
        self.records.append((t, nbytes))
        self.total += nbytes
