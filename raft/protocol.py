"""The contract between the Raft layer and the service's state machine.

A state machine is a deterministic function of its log: ``apply`` is called once per committed
command, in log order, on every node, and must give the same result and the same state on every
node.  ``snapshot``/``restore`` turn the whole state into a JSON-able dict and back, so that a node
can be restored from a full dump on disk or from a leader's snapshot instead of the whole log.

Commands are JSON-able dicts with a string ``type`` field.  They are validated *before* they are
proposed (a :data:`Validator` the caller supplies), encoded canonically (:func:`encode_command`)
and only then written to the replicated log.  ``apply`` may still refuse a command whose
preconditions no longer hold (e.g. compare-and-set on a changed value) by raising
:class:`CommandRejected` *before it changes any state*; every node then refuses it identically.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

#: The largest encoded command accepted (bytes of canonical JSON).
MAX_COMMAND_BYTES = 1 << 20

JsonDict = dict[str, Any]


class CommandRejected(Exception):
    """A command is invalid (raised by validators) or its preconditions fail (raised by ``apply``).

    ``apply`` must raise it before it mutates any state: a rejected command is a no-op on
    every node, and its message is returned to the proposer.
    """


class CommandTooLarge(CommandRejected):
    """A valid command whose encoding exceeds :data:`MAX_COMMAND_BYTES`: never proposed as one entry.

    ``text`` is its canonical encoding (what the log would have held), so a caller that can split it
    (:mod:`controlplane.state.chunked`) needs neither validate nor encode it again.
    """

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.text = text


class EntryTooNew(Exception):
    """A committed entry this node's code cannot apply (it needs a newer state version than the code supports).

    Raised by ``apply`` before it changes any state. The node must not skip the entry (the others apply it):
    :class:`raft.node.RaftNode` stops applying, leaves the group and reports not ready (*holds*) until it is
    restarted on code that can apply it, when it replays the entry from its journal.
    """


class CommandConflict(CommandRejected):
    """A committed command was refused by ``apply`` (its preconditions failed); nothing changed.

    Raised by ``RaftNode.propose``; a plain CommandRejected from ``propose`` means the command was
    invalid and was never proposed.
    """


@runtime_checkable
class StateMachine(Protocol):
    """What the service implements; :class:`raft.node.RaftNode` drives it.

    All three methods are called with the node's state lock held, never concurrently.
    """

    def apply(self, command: JsonDict) -> Any:
        """Apply one committed command and return its JSON-able result.

        Must be deterministic and depend only on the current state and ``command`` (no clock,
        no randomness, no I/O).  Raise :class:`CommandRejected` (with no state change) to
        refuse it.
        """
        ...

    def snapshot(self) -> JsonDict:
        """Return the whole state as a JSON-able dict (a copy or something not mutated later)."""
        ...

    def restore(self, snapshot: JsonDict) -> None:
        """Replace the whole state with one produced by :meth:`snapshot`."""
        ...

    # Optional, for a state machine that keeps its bulk state in an embedded store of its own:
    # ``apply_at(command, index)`` is called instead of ``apply`` with the entry's log index (so the
    # store can keep an applied-index watermark in the same transaction and skip entries it already
    # holds when the journal is replayed after a restart); ``write_attachment(path)`` writes a
    # consistent copy of the store's files to ``path`` when a snapshot is taken (``snapshot()`` then
    # holds only small metadata), and ``restore_attachment(state, path)`` is called instead of
    # ``restore`` when a snapshot with such a copy is installed (the file is verified; it is deleted
    # after the call, so move or copy it).
    # Optional: ``canonical_json() -> str``, the canonical JSON text of the live state (equal to
    # ``canonical_json(snapshot())``); RaftNode.state_hash then needs no deep copy under its lock.


#: Checks (and may normalise) a command before it is proposed; raises CommandRejected.
Validator = Callable[[JsonDict], JsonDict]


def _reject_non_finite(value: Any, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise CommandRejected(f"{path}: non-finite number {value!r} is not allowed")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CommandRejected(f"{path}: object keys must be strings, got {key!r}")
            _reject_non_finite(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _reject_non_finite(item, f"{path}[{i}]")


def check_command_shape(command: Any) -> JsonDict:
    """Return ``command`` as a dict if it is a JSON-able object with a non-empty string ``type``.

    Raises :class:`CommandRejected` naming the problem otherwise (never another exception).
    """
    if not isinstance(command, Mapping):
        raise CommandRejected(f"command must be a JSON object, got {type(command).__name__}")
    kind = command.get("type")
    if not isinstance(kind, str) or not kind:
        raise CommandRejected("command needs a non-empty string field 'type'")
    _reject_non_finite(command, "$")
    return dict(command)


def encode_command(command: JsonDict) -> str:
    """Canonical JSON of a command (sorted keys, no spaces): the bytes written to the log.

    Raises :class:`CommandRejected` if it is not JSON-able or larger than MAX_COMMAND_BYTES.
    """
    command = check_command_shape(command)
    try:
        text = json.dumps(command, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CommandRejected(f"command is not JSON-serialisable: {exc}") from exc
    if len(text) > MAX_COMMAND_BYTES or len(text.encode()) > MAX_COMMAND_BYTES:
        raise CommandTooLarge(f"command is larger than {MAX_COMMAND_BYTES} bytes", text)
    return text


def decode_command(text: str) -> JsonDict:
    """Inverse of :func:`encode_command`."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise CommandRejected("log entry is not a JSON object")
    return value


def canonical_json(value: Any) -> str:
    """Deterministic JSON text of a JSON-able value (used for state hashes and snapshots)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def state_hash(snapshot: JsonDict) -> str:
    """SHA-256 of the canonical JSON of a snapshot: equal states give equal hashes on every node."""
    return hashlib.sha256(canonical_json(snapshot).encode()).hexdigest()
