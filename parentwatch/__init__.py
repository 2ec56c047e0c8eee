"""Exit with the parent: notice that the process which started us is gone, even when it was SIGKILLed.

Goal: a child started in its own session (``start_new_session=True``, so that its starter can kill its
whole process group) must not outlive a starter that dies without its teardown — a test runner killed
by a timeout or ``kill -9`` would otherwise leak simulators and Raft nodes. Used by ``kafkasim up
--exit-with-parent`` and ``guardian serve --exit-with-parent`` (which the local launcher passes).

Method: Linux's ``prctl(PR_SET_PDEATHSIG)`` is not reachable from the standard library, so the child
remembers its parent's pid at start (``os.getppid()``) and polls: once ``os.getppid()`` differs, it was
re-parented (to init or a subreaper) because the parent exited. :func:`wait_parent_gone` is the asyncio
form, :func:`watch_parent` a daemon thread for blocking programs; both only *notice* — the caller stops
itself in its usual orderly way.

Guarantee: the callback runs (once) or the coroutine returns within ``every_s`` of the parent's exit,
whatever killed it. Pids are not compared after re-use: a re-parented child's parent pid is that of the
reaper, never the old parent's. A parent that dies before the child reads ``os.getppid()`` is not
noticed (the child then records the reaper as its parent): the window is the child's start-up until that
read — its interpreter start and imports, about 2 s for ``guardian serve`` (read first thing in the
command), 0.5 s for ``kafkasim up``, 0.1 s for the Raft test node (measured with ``-X importtime``).

Cost: one ``getppid`` system call per ``every_s`` (0.5 s); the thread form holds one daemon thread.
Standard library only: this package imports nothing of Guardian (kafkasim may use it).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable

EVERY_S = 0.5
"""Default polling period: how late a parent's exit is noticed at most."""

__all__ = ["EVERY_S", "parent_gone", "wait_parent_gone", "watch_parent"]


def parent_gone(parent_pid: int) -> bool:
    """True once the process ``parent_pid`` (our parent at start) is no longer our parent."""
    return os.getppid() != parent_pid


async def wait_parent_gone(parent_pid: int, every_s: float = EVERY_S) -> None:
    """Return once the parent ``parent_pid`` has exited (cancel the task to stop watching)."""
    while not parent_gone(parent_pid):
        await asyncio.sleep(every_s)


def watch_parent(parent_pid: int, on_gone: Callable[[], None], every_s: float = EVERY_S) -> threading.Event:
    """Call ``on_gone()`` from a daemon thread once the parent ``parent_pid`` has exited.

    Returns an event: set it to stop watching (e.g. when the program ends on its own)."""
    cancelled = threading.Event()

    def run() -> None:
        while not cancelled.wait(every_s):
            if parent_gone(parent_pid):
                on_gone()
                return

    threading.Thread(target=run, name="parent-watch", daemon=True).start()
    return cancelled
