"""Where the authoritative state lives: behind one small interface, in Raft or in a local file.

``StateStore.propose`` validates a command, replicates it (Raft) or applies it (local), and returns
the state machine's result; ``read`` runs a function over the current state under the state lock.
The executor and the API use only this interface, so ``guardian exec run`` (a local state file)
and the service (Raft) drive the same code.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from controlplane.state.commands import validate_command
from controlplane.state.state import GuardianState
from controlplane.state.versions import LATEST, group_version, prepare
from raft.protocol import CommandConflict, CommandRejected, JsonDict, canonical_json, state_hash

T = TypeVar("T")


class StateStore(Protocol):
    """The replicated state as the rest of the service sees it."""

    def propose(self, command: JsonDict, timeout: float = 5.0) -> Any:
        """Validate, commit and apply ``command``; return its result (raises CommandRejected)."""
        ...

    def read(self, fn: Callable[[JsonDict], T]) -> T:
        """Run ``fn`` over the current state (do not keep references to it)."""
        ...

    @property
    def is_leader(self) -> bool:
        """True when this store may act (always for a local store)."""
        ...

    def status(self) -> dict[str, Any]:
        """Role, term, leader, commit index and readiness, for /status, /readyz and metrics."""
        ...


class LocalStateStore:
    """Single-process store; with ``path`` the state is written atomically after every command, so a
    new process with the same path resumes where the last one stopped."""

    def __init__(self, path: Path | None = None) -> None:
        self._sm = GuardianState()
        self._lock = threading.RLock()
        self._path = path
        if path is not None and path.exists():
            self._sm.restore(json.loads(path.read_text()))

    @property
    def is_leader(self) -> bool:
        return True

    def status(self) -> dict[str, Any]:
        with self._lock:
            seq = int(self._sm.state["log_seq"])
            digest = state_hash(self._sm.state)
            group = group_version(self._sm.state)
        return {"role": "local", "is_leader": True, "leader": "local", "term": 0, "commit_index": seq,
                "last_applied": seq, "ready": True, "state_hash": digest,
                "state_version": {"group": group, "supported": self._sm.supported, "latest": LATEST}}

    def propose(self, command: JsonDict, timeout: float = 5.0) -> Any:
        cmd = validate_command(command)  # CommandRejected: invalid, nothing proposed
        with self._lock:
            cmd = prepare(cmd, self._sm.state, self._sm.supported)
            try:
                result = self._sm.apply(cmd)
            except CommandRejected as exc:  # preconditions failed; state untouched (as RaftNode reports it)
                raise CommandConflict(str(exc)) from None
            self._persist()
            return result

    def read(self, fn: Callable[[JsonDict], T]) -> T:
        with self._lock:
            return fn(self._sm.state)

    def _persist(self) -> None:
        if self._path is None:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(self._path.suffix + ".tmp")
        tmp.write_text(canonical_json(self._sm.state))
        tmp.replace(self._path)
