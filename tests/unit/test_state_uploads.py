"""Commands larger than one Raft entry: staged in chunks, applied whole (state version 3)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from controlplane.state.chunked import pieces, propose_chunked
from controlplane.state.commands import meta, validate_command
from controlplane.state.handlers.uploads import UPLOADS
from controlplane.state.state import GuardianState
from controlplane.state.versions import StateVersionTooLow, prepare
from raft.protocol import MAX_COMMAND_BYTES, CommandRejected, CommandTooLarge, JsonDict, canonical_json, encode_command


def big_plan(moves: int = 20_000) -> JsonDict:
    return {"format": "guardian.plan/v1", "moves": [
        {"topic": f"topic-{i % 300}", "partition": i, "source_replicas": [i % 97, (i + 1) % 97],
         "target_replicas": [(i + 5) % 97, (i + 1) % 97], "size_bytes": 1_000_003 * i} for i in range(moves)]}


def machine(version: int = 3) -> GuardianState:
    sm = GuardianState()
    for cmd in ({"type": "cluster.register", "meta": meta("t"), "name": "c1", "bootstrap_servers": ["h:9092"]},
                {"type": "state.version", "meta": meta("t"), "version": version}):
        sm.apply(prepare(validate_command(cmd), sm.state, sm.supported))
    return sm


def proposer(sm: GuardianState, seen: list[JsonDict] | None = None, fail_at: int | None = None) -> Any:
    def propose(command: JsonDict, timeout: float = 5.0) -> Any:
        if fail_at is not None and len(seen or []) == fail_at and command["type"] == "upload.chunk":
            raise ConnectionError("leader lost")
        entry = encode_command(prepare(validate_command(command), sm.state, sm.supported))  # the Raft node's checks
        if seen is not None:
            seen.append(command)
        return sm.apply(json.loads(entry))
    return propose


def big_entry(sm: GuardianState) -> str:
    cmd = {"type": "plan.propose", "meta": meta("alice", "big"), "cluster": "c1", "kind": "rebalance",
           "plan": big_plan()}
    with pytest.raises(CommandTooLarge) as caught:
        encode_command(prepare(validate_command(cmd), sm.state, sm.supported))
    return caught.value.text


def test_a_plan_over_one_entry_is_recorded_whole_and_identical() -> None:
    sm = machine()
    text = big_entry(sm)
    assert len(text) > 1.5 * MAX_COMMAND_BYTES
    seen: list[JsonDict] = []
    result = propose_chunked(proposer(sm, seen), text, {"who": "alice", "why": "big"}, term=0, chunk_chars=64 * 1024)
    assert result == {"plan_id": 1, "status": "proposed"}
    assert [c["type"] for c in seen] == ["upload.chunk"] * (len(seen) - 1) + ["upload.commit"] and len(seen) > 3
    assert all(len(encode_command(c)) <= MAX_COMMAND_BYTES for c in seen)
    record = sm.state["plans"]["1"]
    assert canonical_json(record["plan"]) == canonical_json(big_plan())
    assert record["proposed_by"] == "alice" and UPLOADS not in sm.state
    assert [a["type"] for a in sm.state["actions"][-2:]] == ["plan.propose", "upload.commit"]


def test_a_half_uploaded_plan_is_invisible_and_dropped_when_the_upload_fails() -> None:
    sm = machine()
    text = big_entry(sm)
    seen: list[JsonDict] = []
    plans_before = canonical_json(sm.state["plans"])
    with pytest.raises(ConnectionError):
        propose_chunked(proposer(sm, seen, fail_at=1), text, {"who": "alice"}, term=0, chunk_chars=64 * 1024)
    assert canonical_json(sm.state["plans"]) == plans_before
    assert UPLOADS not in sm.state  # the client's upload.abort dropped the staged chunk
    assert sm.state["actions"][-1]["type"] == "upload.abort"


def test_a_commit_is_all_or_nothing() -> None:
    sm = machine()
    text = big_entry(sm)
    parts = pieces(text, 64 * 1024)
    up = {"meta": meta("alice"), "upload_id": "u1234567", "term": 4}
    for seq, data in enumerate(parts):
        proposer(sm)({"type": "upload.chunk", **up, "seq": seq, "data": data})
    assert sm.state["plans"] == {} and len(sm.state[UPLOADS]["u1234567"]["chunks"]) == len(parts)
    sm.apply(prepare(validate_command({"type": "cluster.remove", "meta": meta("t"), "name": "c1"}),
                     sm.state, sm.supported))
    before = canonical_json(sm.state)
    commit = {"type": "upload.commit", **up, "chunks": len(parts), "size": len(text),
              "sha256": hashlib.sha256("".join(parts).encode()).hexdigest()}
    with pytest.raises(CommandRejected, match="unknown cluster 'c1'"):  # the assembled plan's own handler refuses
        proposer(sm)(commit)
    assert canonical_json(sm.state) == before  # nothing changed: the chunks stay staged, no plan, no id
    with pytest.raises(CommandRejected, match="began under term 4, not 5"):
        proposer(sm)({**commit, "term": 5})
    assert proposer(sm)({"type": "upload.abort", "meta": meta("t"), "before_term": 5}) == {"dropped": ["u1234567"]}
    assert UPLOADS not in sm.state


def test_an_upload_cannot_hold_another_upload_command() -> None:
    sm = machine()
    inner = canonical_json({"type": "upload.abort", "meta": meta("t"), "before_term": 9})
    (data,) = pieces(inner)
    proposer(sm)({"type": "upload.chunk", "meta": meta("t"), "upload_id": "nested00", "term": 0, "seq": 0,
                  "data": data})
    with pytest.raises(CommandRejected, match="cannot hold another upload"):
        proposer(sm)({"type": "upload.commit", "meta": meta("t"), "upload_id": "nested00", "term": 0, "chunks": 1,
                      "size": len(inner), "sha256": hashlib.sha256(data.encode()).hexdigest()})


def test_uploads_need_state_version_3_and_say_how_to_raise_it() -> None:
    sm = machine(version=2)
    with pytest.raises(StateVersionTooLow, match="guardian state version raise 3"):
        propose_chunked(proposer(sm), big_entry(sm), {"who": "alice"}, term=0)
    assert sm.state["plans"] == {} and UPLOADS not in sm.state
