"""The replicated state's version: command forms gated by it, entries newer than the code held, never lowered."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.state.commands import meta, validate_command
from controlplane.state.state import GuardianState
from controlplane.state.store import LocalStateStore
from controlplane.state.versions import (
    ENVELOPE,
    LATEST,
    StateVersionTooLow,
    group_version,
    prepare,
    supported_version,
)
from raft.protocol import CommandConflict, CommandRejected, EntryTooNew, state_hash


def cmd(kind: str, **fields: Any) -> dict[str, Any]:
    return validate_command({"type": kind, "meta": meta("op"), **fields})


def register(name: str = "c1") -> dict[str, Any]:
    return cmd("cluster.register", name=name, bootstrap_servers=["127.0.0.1:9092"])


def test_supported_version_is_the_code_latest_unless_capped() -> None:
    assert supported_version({}) == LATEST >= 2
    assert supported_version({"GUARDIAN_MAX_STATE_VERSION": "1"}) == 1
    for bad in ("0", "x", str(LATEST + 1)):
        with pytest.raises(ValueError, match="GUARDIAN_MAX_STATE_VERSION"):
            supported_version({"GUARDIAN_MAX_STATE_VERSION": bad})


def test_version_one_commands_carry_no_envelope_and_a_fresh_state_has_no_version_key() -> None:
    sm = GuardianState(supported=LATEST)
    assert "state_version" not in sm.state and group_version(sm.state) == 1  # hashes as before versions existed
    c = prepare(register(), sm.state, LATEST)
    assert ENVELOPE not in c
    sm.apply(c)


def test_a_newer_form_is_refused_until_the_version_is_raised() -> None:
    store = LocalStateStore()
    store.propose(register())
    labels = {"type": "cluster.labels", "meta": meta("op"), "name": "c1", "labels": {"team": "payments"}}
    with pytest.raises(StateVersionTooLow, match=r"needs state version 2; the group runs version 1.*raise 2"):
        store.propose(dict(labels))
    assert store.propose({"type": "state.version", "meta": meta("admin"), "version": 2}) == {"version": 2,
                                                                                           "previous": 1}
    assert store.propose(dict(labels)) == {"name": "c1", "labels": {"team": "payments"}}
    assert store.read(lambda s: s["clusters"]["c1"]["labels"]) == {"team": "payments"}
    store.propose(register())  # re-registration keeps the labels
    assert store.read(lambda s: s["clusters"]["c1"]["labels"]) == {"team": "payments"}
    assert store.status()["state_version"] == {"group": 2, "supported": LATEST, "latest": LATEST}
    with pytest.raises(CommandRejected, match="never go down"):
        store.propose({"type": "state.version", "meta": meta("admin"), "version": 1})
    assert store.propose({"type": "state.version", "meta": meta("admin"), "version": 2})["previous"] == 2


def test_a_node_cannot_propose_a_version_its_code_lacks() -> None:
    sm = GuardianState(supported=1)
    with pytest.raises(StateVersionTooLow, match="supports versions up to 1"):
        prepare(cmd("state.version", version=2), sm.state, sm.supported)


def test_old_code_holds_on_a_newer_entry_instead_of_applying_it_differently() -> None:
    new, old = GuardianState(supported=2), GuardianState(supported=1)
    reg = register()
    for sm in (new, old):
        sm.apply(reg)
    raise_to_2 = prepare(cmd("state.version", version=2), new.state, 2)
    assert raise_to_2[ENVELOPE] == 2
    before = state_hash(old.snapshot())
    new.apply(raise_to_2)
    with pytest.raises(EntryTooNew, match="needs state version 2; this node's code supports up to 1"):
        old.apply(raise_to_2)
    assert state_hash(old.snapshot()) == before  # nothing changed on the node that holds
    labels = prepare(cmd("cluster.labels", name="c1", labels={"tier": "gold"}), new.state, 2)
    new.apply(labels)
    with pytest.raises(EntryTooNew):
        old.apply(labels)
    # the same code upgraded (no cap) replays both entries and ends where the others are
    upgraded = GuardianState(supported=2)
    for entry in (reg, raise_to_2, labels):
        upgraded.apply(entry)
    assert state_hash(upgraded.snapshot()) == state_hash(new.snapshot())


def test_an_entry_of_a_newer_form_below_the_group_version_is_refused_by_every_node_alike() -> None:
    nodes = [GuardianState(supported=2), GuardianState(supported=2)]
    entry = {**cmd("cluster.labels", name="c1", labels={"a": "b"}), ENVELOPE: 2}  # slipped past the proposer
    reg = register()
    for sm in nodes:
        sm.apply(reg)
        with pytest.raises(StateVersionTooLow):
            sm.apply(dict(entry))
    assert state_hash(nodes[0].snapshot()) == state_hash(nodes[1].snapshot())


def test_bad_envelope_and_bad_labels_are_named() -> None:
    sm = GuardianState(supported=2)
    sm.apply(register())
    with pytest.raises(CommandRejected, match=ENVELOPE):
        sm.apply({**register(), ENVELOPE: "2"})
    with pytest.raises(CommandRejected, match=r"labels"):
        validate_command({"type": "cluster.labels", "meta": meta("op"), "name": "c1", "labels": {"Bad Key": "x"}})
    store = LocalStateStore()
    with pytest.raises(CommandConflict, match="unknown cluster"):
        store.propose({"type": "state.version", "meta": meta("admin"), "version": 2})
        store.propose({"type": "cluster.labels", "meta": meta("op"), "name": "nope", "labels": {}})


def test_old_code_refuses_a_snapshot_of_a_newer_state() -> None:
    new = GuardianState(supported=2)
    new.apply(prepare(cmd("state.version", version=2), new.state, 2))
    old = GuardianState(supported=1)
    with pytest.raises(EntryTooNew, match="state version 2; this node's code supports up to 1"):
        old.restore(new.snapshot())
    assert group_version(old.state) == 1
    GuardianState(supported=2).restore(new.snapshot())
