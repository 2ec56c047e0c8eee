""":mod:`parentwatch`: a gone parent is noticed once, a live one never, and a cancelled watch stops."""

from __future__ import annotations

import asyncio
import os
import threading
import time

from parentwatch import parent_gone, wait_parent_gone, watch_parent

NOT_OUR_PARENT = -1  # what a re-parented child compares: its start-time parent's pid no longer matches


def test_the_parent_we_have_is_not_gone_and_another_pid_is() -> None:
    assert not parent_gone(os.getppid())
    assert parent_gone(NOT_OUR_PARENT)


def test_the_coroutine_returns_once_the_parent_is_gone_and_waits_while_it_lives() -> None:
    asyncio.run(asyncio.wait_for(wait_parent_gone(NOT_OUR_PARENT, every_s=0.01), 2.0))

    async def still_waiting() -> bool:
        task = asyncio.create_task(wait_parent_gone(os.getppid(), every_s=0.01))
        await asyncio.sleep(0.05)
        done = task.done()
        task.cancel()
        return not done

    assert asyncio.run(still_waiting())


def test_the_thread_calls_back_once_when_the_parent_is_gone_and_never_when_cancelled() -> None:
    called: list[int] = []
    fired = threading.Event()

    def on_gone() -> None:
        called.append(1)
        fired.set()

    watch_parent(NOT_OUR_PARENT, on_gone, every_s=0.01)
    assert fired.wait(2.0)
    time.sleep(0.05)  # several more periods: no second call
    live: list[int] = []
    stop = watch_parent(os.getppid(), lambda: live.append(1), every_s=0.01)
    stop.set()
    threads = [t for t in threading.enumerate() if t.name == "parent-watch"]
    for t in threads:
        t.join(2.0)
    assert called == [1] and live == [] and not any(t.is_alive() for t in threads)
