"""The state-machine protocol helpers, snapshot storage and the demo state machine."""

from __future__ import annotations

import math

import pytest

from raft.demo import MAX_ID, DemoStateMachine, id_to_uuid, validate_demo_command
from raft.node import RaftSettings
from raft.protocol import (
    MAX_COMMAND_BYTES,
    CommandRejected,
    StateMachine,
    check_command_shape,
    decode_command,
    encode_command,
    state_hash,
)
from raft.storage import decode_snapshot, encode_snapshot


def test_encoding_is_canonical_and_round_trips() -> None:
    a = encode_command({"type": "put", "value": {"b": 1, "a": [1, 2]}, "key": "k"})
    b = encode_command({"key": "k", "type": "put", "value": {"a": [1, 2], "b": 1}})
    assert a == b == '{"key":"k","type":"put","value":{"a":[1,2],"b":1}}'
    assert decode_command(a) == {"key": "k", "type": "put", "value": {"a": [1, 2], "b": 1}}


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["type", "put"], "JSON object"),
        ({"key": "k"}, "'type'"),
        ({"type": ""}, "'type'"),
        ({"type": 3}, "'type'"),
        ({"type": "put", "value": math.nan}, "non-finite"),
        ({"type": "put", "value": [1.0, math.inf]}, "non-finite"),
        ({"type": "put", "value": {1: "x"}}, "keys must be strings"),
        ({"type": "put", "value": object()}, "not JSON"),
        ({"type": "put", "value": "x" * MAX_COMMAND_BYTES}, "larger than"),
    ],
)
def test_bad_commands_are_rejected_with_a_reason(command: object, message: str) -> None:
    with pytest.raises(CommandRejected, match=message):
        encode_command(check_command_shape(command))


def test_state_hash_depends_on_content_not_key_order() -> None:
    assert state_hash({"a": 1, "b": [1, 2]}) == state_hash({"b": [1, 2], "a": 1})
    assert state_hash({"a": 1}) != state_hash({"a": 2})


def test_snapshot_blob_round_trips_and_detects_corruption() -> None:
    meta = (("cmd", 10, 2), ("cmd", 9, 2), {"127.0.0.1:1"})
    blob = encode_snapshot({"applied_index": 10, "state": {"x": [1, 2]}}, meta)
    assert decode_snapshot(blob) == ({"applied_index": 10, "state": {"x": [1, 2]}}, meta)
    with pytest.raises(ValueError, match="magic"):
        decode_snapshot(b"garbage" + blob)
    tampered = bytearray(blob)
    tampered[9] ^= 0xFF  # inside the checksum
    with pytest.raises(ValueError, match="checksum"):
        decode_snapshot(bytes(tampered))


def test_demo_machine_satisfies_the_protocol() -> None:
    assert isinstance(DemoStateMachine(), StateMachine)


def test_put_delete_cas_versions() -> None:
    sm = DemoStateMachine()
    assert sm.apply({"type": "put", "key": "a", "value": 1}) == {"key": "a", "version": 1}
    assert sm.apply({"type": "put", "key": "a", "value": 2}) == {"key": "a", "version": 2}
    assert sm.apply({"type": "cas", "key": "a", "expected_version": 2, "value": 3}) == {
        "key": "a",
        "version": 3,
    }
    before = sm.snapshot()
    with pytest.raises(CommandRejected, match="version of 'a' is 3"):
        sm.apply({"type": "cas", "key": "a", "expected_version": 2, "value": 9})
    assert sm.snapshot() == before, "a refused command must not change state"
    assert sm.apply({"type": "cas", "key": "new", "expected_version": 0, "value": 0})["version"] == 1
    assert sm.apply({"type": "delete", "key": "a"}) == {"key": "a", "deleted": True}
    assert sm.apply({"type": "delete", "key": "a"}) == {"key": "a", "deleted": False}
    assert sm.snapshot()["kv"] == {"new": {"value": 0, "version": 1}}


def test_id_allocation_is_monotonic_unique_and_per_namespace() -> None:
    sm = DemoStateMachine()
    seen: set[int] = set()
    last = 0
    for count in (1, 5, 3, 1000):
        block = sm.apply({"type": "allocate_ids", "count": count})
        assert block["first"] == last + 1 and block["last"] == block["first"] + count - 1
        ids = set(range(block["first"], block["last"] + 1))
        assert not ids & seen
        seen |= ids
        last = block["last"]
    other = sm.apply({"type": "allocate_ids", "count": 2, "namespace": "segments", "uuids": True})
    assert (other["first"], other["last"]) == (1, 2)
    assert other["uuids"] == [id_to_uuid("segments", 1), id_to_uuid("segments", 2)]
    assert len(set(other["uuids"])) == 2 and id_to_uuid("default", 1) != id_to_uuid("segments", 1)


def test_id_allocation_refuses_to_overflow_64_bits() -> None:
    sm = DemoStateMachine()
    sm.restore({"kv": {}, "next_id": {"default": MAX_ID - 1}, "applied": 0})
    assert sm.apply({"type": "allocate_ids", "count": 2}) == {
        "namespace": "default",
        "first": MAX_ID - 1,
        "last": MAX_ID,
    }
    before = sm.snapshot()
    with pytest.raises(CommandRejected, match="exhausted"):
        sm.apply({"type": "allocate_ids", "count": 1})
    assert sm.snapshot() == before


@pytest.mark.parametrize(
    "command",
    [
        {"type": "nope"},
        {"type": "put", "key": "", "value": 1},
        {"type": "put", "key": "k"},
        {"type": "delete"},
        {"type": "cas", "key": "k", "value": 1},
        {"type": "cas", "key": "k", "expected_version": -1, "value": 1},
        {"type": "allocate_ids", "count": 0},
        {"type": "allocate_ids", "count": True},
        {"type": "allocate_ids", "count": 10**7},
        {"type": "allocate_ids", "count": 5000, "uuids": True},
    ],
)
def test_validator_rejects_bad_fields(command: dict[str, object]) -> None:
    with pytest.raises(CommandRejected):
        validate_demo_command(command)


def test_validator_normalises_and_drops_unknown_fields() -> None:
    assert validate_demo_command({"type": "allocate_ids", "extra": 1}) == {
        "type": "allocate_ids", "count": 1, "namespace": "default",
    }  # fmt: skip


def test_settings_refuse_inconsistent_timeouts() -> None:
    with pytest.raises(ValueError):
        RaftSettings(election_timeout_min=0.5, election_timeout_max=0.4)
    with pytest.raises(ValueError):
        RaftSettings(heartbeat_period=0.1, election_timeout_min=0.2)
    base = RaftSettings.pysyncobj_defaults()
    assert base.batch_append_entries and not RaftSettings().batch_append_entries
