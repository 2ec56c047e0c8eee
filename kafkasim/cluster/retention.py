"""When each simulated broker checks retention: Kafka's ``log.retention.check.interval.ms`` schedule.

Goal
    A Kafka broker does not delete old log data continuously: its log manager runs the retention check
    (``retention.ms`` / ``retention.bytes``, whole segments) every ``log.retention.check.interval.ms``
    (default 300000 ms), so between two checks a log grows past its limits and the log start offset stays
    put. kafkasim trims a partition only when the broker leading it runs a check.

Method
    :class:`RetentionClock` keeps, per broker (the engine's broker index), its interval (seconds, from its
    read-only configs, :func:`kafkasim.cluster.configs.interval_s`) and the simulated time of its next check.
    :meth:`RetentionClock.sync` runs on every engine rebuild: a new broker, a changed interval or a broker
    back from the dead (its :attr:`~kafkasim.cluster.model.Broker.revivals` counted up, so that a kill and revive
    between two rebuilds counts too) starts its schedule at ``now + interval`` (Kafka's extra 30 s delay
    before the first check after start-up is not modelled). :meth:`RetentionClock.due` is asked once per tick: the alive
    brokers whose next check falls within the tick run it, and their next check moves on by whole
    intervals (a fixed-rate schedule, as Kafka's scheduler; intervals shorter than a tick run once per tick).
    The engine applies the retention of the elapsed time since a partition's last check
    (:meth:`kafkasim.physics.engine.Engine.step`), so a check every interval removes what the continuous model
    would have removed over that interval.
    Tiered topics (KIP-405) keep two schedules, as Kafka does: local retention (``local.retention.ms/bytes``,
    copied segments only) runs at the same retention check, and remote segments past ``retention.ms/bytes``
    are deleted (and closed segments copied) by the remote log manager's task of the partition's leader, every
    ``remote.log.manager.task.interval.ms`` (default 30000 ms) on a schedule of each partition's own
    (:mod:`kafkasim.tiering.rlm_tasks`, as Kafka schedules that task per partition when it becomes leader).

Guarantee
    A broker never checks before ``interval`` has passed since its schedule started or since its previous
    check (up to the tick's granularity), and at least once in every tick that reaches its next check
    while it is alive; a dead broker checks nothing.

Cost
    O(brokers) numpy per tick; O(brokers) Python per rebuild.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kafkasim.cluster.configs import RETENTION_CHECK, interval_s
from kafkasim.cluster.model import Broker

F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]


class RetentionClock:
    """Per broker: the retention check interval (s, its ``log.retention.check.interval.ms``) and the simulated time
    of the next check."""

    def __init__(self) -> None:
        self.interval: F64 = np.zeros(0)
        self.next: F64 = np.zeros(0)
        self._revivals: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)

    def sync(self, brokers: list[Broker], t: float) -> None:
        """Read every broker's interval; (re)start the schedule of new, changed or revived brokers at ``t``."""
        interval = np.array([interval_s(b.static_configs, RETENTION_CHECK) for b in brokers], dtype=np.float64)
        revivals = np.array([b.revivals for b in brokers], dtype=np.int64)
        n_old = len(self.interval)
        restart = np.ones(len(brokers), dtype=bool)
        if n_old:
            restart[:n_old] = (self.interval != interval[:n_old]) | (revivals[:n_old] != self._revivals)
        nxt = np.full(len(brokers), np.inf)
        nxt[:n_old] = self.next
        nxt[restart] = t + interval[restart]
        self.interval, self.next, self._revivals = interval, nxt, revivals

    def due(self, t_end: float, alive: BOOL) -> BOOL:
        """Brokers whose check runs in the tick ending at ``t_end`` (their next check moves past ``t_end``)."""
        due = alive[: len(self.next)] & (self.next <= t_end + 1e-9)
        if due.any():
            nxt, step = self.next[due], self.interval[due]
            self.next[due] = nxt + (np.floor((t_end + 1e-9 - nxt) / step) + 1.0) * step
        return due
