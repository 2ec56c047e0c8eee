"""A partition's leader-epoch history and the end offset of a leader epoch, as Kafka's ``LeaderEpochFileCache``.

Goal
    OffsetForLeaderEpoch (API 23) answered as a Kafka broker answers it: clients (kafka-python's consumer
    validating its position after a leader change, KIP-320) ask "where did epoch E end?" and act on the
    answer (keep the position, or seek back to where the log diverged).

Method
    A history is a list of ``(epoch, start offset)`` entries, ascending in both.  :func:`assign` records a
    new leader's epoch at the log end offset it starts from (Kafka's ``Partition.makeLeader`` →
    ``UnifiedLog.maybeAssignEpochStartOffset`` → ``LeaderEpochFileCache.assign``): an entry already there
    is kept, entries that would break monotonicity (an epoch >= the new one, or a start offset >= the new
    one — an epoch in which nothing was written) are dropped first.  :func:`truncate_from_start` is
    ``truncateFromStart``: when retention moves the log start, the entries starting at or before it go but
    the newest of them, which is moved up to the log start.  :func:`end_offset_for` is ``endOffsetFor``:

    * requested ``UNDEFINED_EPOCH`` (-1): ``(-1, -1)``;
    * the latest epoch: ``(epoch, log end offset)``;
    * otherwise the largest epoch <= the requested one and the start offset of the first larger epoch;
      none smaller: ``(requested, start of the first larger epoch)``; none larger: ``(-1, -1)``.

    :func:`epoch_at` is ``epochForOffset``: the epoch a batch at an offset was written in (a broker stamps
    each batch it appends with its leader epoch, which is what a consumer's position carries).

    kafkasim keeps one log per partition (no per-replica divergence), so one history per partition is
    every replica's cache.

Guarantee
    Pure functions of plain lists; the answers are those of Kafka's ``LeaderEpochFileCache`` for the same
    sequence of ``assign`` / ``truncateFromStart`` calls.

Cost
    :func:`assign` O(entries dropped); :func:`end_offset_for` O(log entries) (bisection);
    :func:`truncate_from_start` O(entries).  A history holds one entry per leader change still in the log.
"""

from __future__ import annotations

import bisect

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

EpochEntry = tuple[int, int]
"""``(leader epoch, start offset)``."""


def assign(history: list[EpochEntry], epoch: int, start_offset: int) -> bool:
    """Record that ``epoch`` starts at ``start_offset`` (in place); returns whether the history changed.

    Raises ValueError on a negative epoch or offset (Kafka refuses them too)."""
    if epoch < 0 or start_offset < 0:
        raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
    if history and history[-1][0] == epoch and start_offset >= history[-1][1]:
        return False  # already the latest epoch, from this offset or earlier
    while history and (history[-1][0] >= epoch or history[-1][1] >= start_offset):
        history.pop()
    history.append((epoch, start_offset))
    return True


def truncate_from_start(history: list[EpochEntry], log_start: int) -> list[EpochEntry]:
    """The history once the log starts at ``log_start`` (a new list): entries starting at or before it are
    dropped but the last of them, which now starts at ``log_start``."""
    keep = [e for e in history if e[1] > log_start]
    dropped = [e for e in history if e[1] <= log_start]
    return ([(dropped[-1][0], log_start)] if dropped else []) + keep


def end_offset_for(history: list[EpochEntry], requested: int, log_end: int) -> EpochEntry:
    """``(epoch, end offset)`` for ``requested``: see the module docstring; ``(-1, -1)`` when undefined."""
    if requested == UNDEFINED_EPOCH or not history:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if history[-1][0] == requested:
        return requested, log_end
    epochs = [e for e, _ in history]
    higher = bisect.bisect_right(epochs, requested)
    if higher == len(history):
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if higher == 0:
        return requested, history[0][1]
    return history[higher - 1][0], history[higher][1]


def epoch_at(history: list[EpochEntry], offset: int) -> tuple[int, int | None]:
    """The leader epoch ``offset`` was written in (Kafka's ``epochForOffset``: the entry with the largest start
    offset <= ``offset``; -1 before the first) and where the next epoch starts (None: ``offset`` is in the
    latest epoch).  A broker stamps every batch with its epoch, and no batch spans two epochs."""
    starts = [s for _, s in history]
    k = bisect.bisect_right(starts, offset)
    epoch = history[k - 1][0] if k > 0 else UNDEFINED_EPOCH
    return epoch, history[k][1] if k < len(history) else None
