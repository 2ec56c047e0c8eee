"""The replicated state's wire format holds: a fixed log touching every command type gives the results and
the canonical state JSON recorded (by the code before the state machine was split into per-aggregate
handlers), so a snapshot or log written by older code and by this code read and apply alike. The command forms
of later state versions have their own script and golden (``SCRIPT_UPLOADS``: version 3's staged uploads), so
adding them leaves the first golden byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

from controlplane.state.commands import COMMANDS
from raft.protocol import canonical_json
from tests.unit.state_script import SCRIPT, SCRIPT_UPLOADS, replay

GOLDEN = Path(__file__).parent / "data" / "state_wire_golden.json"
GOLDEN_UPLOADS = Path(__file__).parent / "data" / "state_wire_golden_uploads.json"


def test_every_command_type_is_in_the_script() -> None:
    assert {c["type"] for c in SCRIPT + SCRIPT_UPLOADS} == set(COMMANDS)


def test_staged_uploads_replay_as_recorded() -> None:
    golden = json.loads(GOLDEN_UPLOADS.read_text())
    results, state = replay(SCRIPT_UPLOADS)
    assert json.loads(json.dumps(results)) == golden["results"]
    assert state == canonical_json(golden["state"])


def test_results_and_state_are_byte_identical_to_the_recorded_ones() -> None:
    golden = json.loads(GOLDEN.read_text())
    results, state = replay()
    assert json.loads(json.dumps(results)) == golden["results"]
    assert state == canonical_json(golden["state"])  # the canonical text Raft hashes and snapshots
