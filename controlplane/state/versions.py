"""The replicated state's version (like Kafka's ``metadata.version``): which command forms the group may use.

Goal: a rolling upgrade never lets the nodes of one Raft group apply the log differently. Method:

- the group's version lives in the replicated state (``state_version``; absent means 1, so a state written
  before versions existed reads as version 1 and hashes as before);
- every command type has a minimum version (:data:`COMMAND_VERSIONS`, 1 unless listed); a command whose form
  is newer than the group's version is refused when it is proposed (:class:`StateVersionTooLow`, naming the
  version it needs and how to raise it) and, should one reach the log, refused identically by every node
  when applied;
- a command of version > 1 carries its minimum version in its log entry (the ``min_version`` envelope,
  stripped before the command is parsed); a node whose code supports less (:func:`supported_version`) raises
  :class:`raft.protocol.EntryTooNew` instead of applying it, and its Raft node stops applying and reports
  not ready (it holds) rather than diverging; restarted on new code, it replays the entry and catches up;
- the version is raised by the ``state.version`` command (admin; API ``POST /api/v1/state/version``, CLI
  ``guardian state version raise``), itself stamped with the target version, so a node that cannot apply
  the target holds too. It never goes down.

Version-1 commands carry no envelope: their log entries are byte-for-byte what code from before this
module wrote, so such code and this code can share a group at version 1 (docs/upgrading.md).
``GUARDIAN_MAX_STATE_VERSION`` caps what this process supports (a canary, or a test's "old code").
Guarantee: pure (no I/O but the environment variable); every function is O(1).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from raft.protocol import CommandRejected, EntryTooNew, JsonDict

#: The highest state version this code can apply.
LATEST = 3
#: What each version adds (shown by ``guardian state version``).
VERSIONS: dict[int, str] = {
    1: "every command form of the releases before state versions existed",
    2: "cluster labels (cluster.labels: owner, team, tier ... per cluster)",
    3: "commands larger than one Raft entry, in chunks (upload.chunk, upload.commit, upload.abort): plans over 1 MiB",
}
#: Minimum state version of each command type introduced after version 1.
COMMAND_VERSIONS: dict[str, int] = {"cluster.labels": 2, "upload.chunk": 3, "upload.commit": 3, "upload.abort": 3}
#: The log-entry field carrying a command's minimum version (only when it is above 1).
ENVELOPE = "min_version"
ENV_CAP = "GUARDIAN_MAX_STATE_VERSION"
SET_VERSION = "state.version"


class StateVersionTooLow(CommandRejected):
    """The command's form needs a higher state version than the group (or this node) has."""


def supported_version(env: Mapping[str, str] | None = None) -> int:
    """The highest version this process applies: :data:`LATEST`, or lower when ``GUARDIAN_MAX_STATE_VERSION``
    says so. ValueError names a bad value."""
    raw = (os.environ if env is None else env).get(ENV_CAP, "").strip()
    if not raw:
        return LATEST
    try:
        cap = int(raw)
    except ValueError:
        raise ValueError(f"{ENV_CAP}={raw!r}: expected an integer from 1 to {LATEST}") from None
    if not 1 <= cap <= LATEST:
        raise ValueError(f"{ENV_CAP}={cap}: expected an integer from 1 to {LATEST}")
    return cap


def group_version(state: Mapping[str, Any]) -> int:
    """The group's state version as recorded in the replicated state (1 when never raised)."""
    return int(state.get("state_version", 1))


def required_version(command: Mapping[str, Any]) -> int:
    """The lowest state version under which ``command`` may be applied."""
    kind = str(command.get("type"))
    if kind == SET_VERSION:
        return int(command.get("version", 1))
    return COMMAND_VERSIONS.get(kind, 1)


def prepare(command: JsonDict, state: Mapping[str, Any], supported: int) -> JsonDict:
    """A validated command made ready to propose: refused when its form is newer than the group's version or
    this node's code (:class:`StateVersionTooLow`), a downgrade refused, the envelope added when needed."""
    need, group = required_version(command), group_version(state)
    if command.get("type") == SET_VERSION:
        if need < group:
            raise CommandRejected(f"state version {need} is below the group's version {group}: state versions "
                                  "never go down (docs/upgrading.md, 'Downgrades')")
        if need > supported:
            raise StateVersionTooLow(f"state version {need}: this node's code supports versions up to {supported}; "
                                     "upgrade every node first")
    elif need > group:
        raise StateVersionTooLow(
            f"{command.get('type')} needs state version {need}; the group runs version {group}. Once every node "
            f"runs code that supports it, raise it: guardian state version raise {need} (docs/upgrading.md)")
    return {**command, ENVELOPE: need} if need > 1 else command


def unwrap(entry: JsonDict, state: Mapping[str, Any], supported: int) -> JsonDict:
    """The command of a committed log entry, envelope removed. Raises :class:`EntryTooNew` when this code cannot
    apply it (the node must hold), :class:`StateVersionTooLow` (identically on every node) when its form is newer
    than the group's version."""
    stamped = entry.get(ENVELOPE, 1)
    if isinstance(stamped, bool) or not isinstance(stamped, int) or stamped < 1:
        raise CommandRejected(f"$.{ENVELOPE}: expected an integer >= 1, got {stamped!r}")
    command = {k: v for k, v in entry.items() if k != ENVELOPE}
    need = max(stamped, required_version(command))
    if need > supported:
        raise EntryTooNew(f"log entry {entry.get('type')!r} needs state version {need}; this node's code supports "
                          f"up to {supported}: upgrade this node (it holds until then; docs/upgrading.md)")
    if command.get("type") != SET_VERSION and need > group_version(state):
        raise StateVersionTooLow(f"{command.get('type')} needs state version {need}; the group runs version "
                                 f"{group_version(state)}")
    return command
