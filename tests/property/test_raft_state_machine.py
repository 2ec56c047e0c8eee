"""Determinism of the demo state machine: replicas fed the same log agree, snapshots are exact."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raft.demo import DemoStateMachine
from raft.protocol import CommandRejected, decode_command, encode_command, state_hash

keys = st.sampled_from(["a", "b", "c", "d"])
values = st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3))
commands = st.one_of(
    st.builds(lambda k, v: {"type": "put", "key": k, "value": v}, keys, values),
    st.builds(lambda k: {"type": "delete", "key": k}, keys),
    st.builds(
        lambda k, e, v: {"type": "cas", "key": k, "expected_version": e, "value": v},
        keys,
        st.integers(0, 3),
        values,
    ),
    st.builds(
        lambda n, ns: {"type": "allocate_ids", "count": n, "namespace": ns},
        st.integers(1, 50),
        st.sampled_from(["default", "topics"]),
    ),
)


def run(sm: DemoStateMachine, log: list[str]) -> list[Any]:
    out: list[Any] = []
    for entry in log:
        try:
            out.append(sm.apply(decode_command(entry)))
        except CommandRejected as exc:
            out.append(("rejected", str(exc)))
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(commands, max_size=40), st.integers(0, 40))
def test_replicas_agree_and_snapshot_restore_is_exact(cmds: list[dict[str, Any]], cut: int) -> None:
    log = [encode_command(c) for c in cmds]
    a, b = DemoStateMachine(), DemoStateMachine()
    results_a = run(a, log)
    assert run(b, log) == results_a
    assert state_hash(a.snapshot()) == state_hash(b.snapshot())
    # a replica restored from a snapshot taken mid-log ends in the same state with the same results
    cut = min(cut, len(log))
    c = DemoStateMachine()
    run(c, log[:cut])
    d = DemoStateMachine()
    d.restore(c.snapshot())
    assert run(d, log[cut:]) == results_a[cut:]
    assert d.snapshot() == a.snapshot()
    # allocated id blocks never overlap within a namespace
    blocks: dict[str, list[tuple[int, int]]] = {}
    for r in results_a:
        if isinstance(r, dict) and "first" in r:
            blocks.setdefault(r["namespace"], []).append((r["first"], r["last"]))
    for bl in blocks.values():
        assert all(l1 < f2 for (_, l1), (f2, _) in itertools.pairwise(bl))
