"""Hypothesis: no sequence of named task transitions leaves the transition table."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.execution import TERMINAL_STATES, TRANSITIONS, IllegalTransition, Task, TaskState

NAMED: dict[str, Callable[[Task], Task]] = {
    "start": lambda t: t.start(),
    "complete": lambda t: t.complete("done"),
    "abort": lambda t: t.abort("cancel"),
    "aborted": lambda t: t.aborted(),
    "kill": lambda t: t.kill("gave up"),
}


def reachable(start: TaskState) -> set[TaskState]:
    """``start`` and every state the table reaches from it."""
    seen, frontier = {start}, [start]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()] - seen:
            seen.add(nxt)
            frontier.append(nxt)
    return seen


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(sorted(NAMED)), max_size=12), st.sampled_from(sorted(TaskState)))
def test_named_transitions_never_leave_the_table(names: list[str], start: TaskState) -> None:
    t = Task(key="t:0", topic="t", partition=0, action="reassign", source_replicas=(1,), target_replicas=(2,),
             state=start)
    allowed = reachable(start)
    for name in names:
        before = t
        try:
            t = NAMED[name](t)
        except IllegalTransition:
            assert t is before  # refused: nothing changed
            continue
        assert t.state in TRANSITIONS[before.state], f"{name}: {before.state} -> {t.state}"
        assert before.state not in TERMINAL_STATES
        assert t.state in allowed
