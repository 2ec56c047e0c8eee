"""Guardian's authoritative state: a deterministic state machine that Raft replicates.

Holds clusters and their connection settings, IDC placement policies, pools, plans and executions
with per-partition task states, active throttles, maintenance flags, the operator action log and the
ID allocator. :meth:`GuardianState.apply` depends only on the state and the command (no clock, no
I/O): it parses the command (:mod:`controlplane.state.commands`), hands it to the handler of its type
(:mod:`controlplane.state.handlers`, one module per aggregate), which rejects a command whose
preconditions fail *before* changing anything, and records every applied command in the action log
(who / what / why / when). The state is JSON here and in the handlers only (the store boundary); readers
build typed records from it (:mod:`controlplane.state.reads`).
"""

from __future__ import annotations

import copy
from typing import Any

from controlplane.state.commands import parse_command
from controlplane.state.handlers import HANDLERS, Ledger, missing
from controlplane.state.versions import group_version, supported_version, unwrap
from domain.execution import ACTIVE_STATUSES
from domain.plan_record import LIVE_PLAN_STATUSES
from raft.protocol import EntryTooNew, JsonDict, canonical_json

ACTION_LOG_LIMIT = 5000
ACTIVE_EXECUTION = ACTIVE_STATUSES  # the domain's set, under the name the service and the demo import
LIVE_PLAN = LIVE_PLAN_STATUSES
if missing():  # every command type of the union has its handler (tests/unit/test_state_handlers.py too)
    raise ImportError(f"command types without a handler: {missing()}")


def empty_state() -> JsonDict:
    """The state of a new federation."""
    return {"next_id": 1, "log_seq": 0, "clusters": {}, "plans": {}, "executions": {}, "throttles": {},
            "maintenance": {}, "actions": []}


class GuardianState:
    """The replicated state machine (implements :class:`raft.protocol.StateMachine`)."""

    def __init__(self, supported: int | None = None) -> None:
        self.state: JsonDict = empty_state()
        self.supported = supported_version() if supported is None else supported
        """The highest state version this node's code applies (an entry needing more: EntryTooNew)."""

    # ------------------------------------------------------------------ protocol
    def snapshot(self) -> JsonDict:
        """A deep copy of the whole state."""
        return copy.deepcopy(self.state)

    def canonical_json(self) -> str:
        """Canonical JSON text of the live state (no copy): what :func:`raft.protocol.state_hash` hashes.
        Optional for :class:`raft.node.RaftNode`, which then hashes under its lock without a deep copy."""
        return canonical_json(self.state)

    def restore(self, snapshot: JsonDict) -> None:
        """Replace the state with one from :meth:`snapshot`; :class:`raft.protocol.EntryTooNew` (state untouched)
        when its state version is newer than this code supports."""
        if group_version(snapshot) > self.supported:
            raise EntryTooNew(f"the state is at state version {group_version(snapshot)}; this node's code supports "
                              f"up to {self.supported}: upgrade this node (docs/upgrading.md)")
        self.state = copy.deepcopy(snapshot)

    def apply(self, command: JsonDict) -> Any:
        """Apply one committed command; raise :class:`CommandRejected` (state untouched) to refuse it, and
        :class:`raft.protocol.EntryTooNew` when it needs a newer state version than this code supports."""
        command = unwrap(command, self.state, self.supported)
        cmd = parse_command(command)
        result = HANDLERS[command["type"]](Ledger(self.state, self.apply), cmd)
        self._record(command, result)
        return result

    # ------------------------------------------------------------------ action log
    def _record(self, command: JsonDict, result: Any) -> None:
        self.state["log_seq"] += 1
        meta = command["meta"]
        subject = {k: command[k] for k in ("name", "cluster", "plan_id", "execution_id", "key", "broker", "topic",
                                           "anomaly_id", "migration_id") if k in command}
        self.state["actions"].append({"seq": self.state["log_seq"], "at": meta["at"], "who": meta["who"],
                                      "why": meta.get("why", ""), "type": command["type"], "subject": subject,
                                      "result": result if isinstance(result, dict) else {"value": result}})
        if len(self.state["actions"]) > ACTION_LOG_LIMIT:
            del self.state["actions"][: len(self.state["actions"]) - ACTION_LOG_LIMIT]
