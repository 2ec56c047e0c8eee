"""The Raft-backed :class:`~controlplane.state.store.StateStore`: the service's authoritative state.

A command larger than one Raft entry (a big plan) is proposed in chunks (:mod:`controlplane.state.chunked`);
a node that gains leadership drops the chunks earlier leaders staged (``upload.abort``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from controlplane.state.chunked import propose_chunked
from controlplane.state.commands import meta, validate_command
from controlplane.state.handlers.uploads import UPLOADS
from controlplane.state.state import GuardianState
from controlplane.state.versions import LATEST, group_version, prepare
from raft.node import RaftNode, RaftSettings
from raft.protocol import CommandTooLarge, JsonDict

T = TypeVar("T")
log = logging.getLogger(__name__)


class RaftStateStore:
    """Replicates :class:`GuardianState` over a :class:`RaftNode`; only the leader's proposals commit."""

    def __init__(self, self_addr: str, peers: list[str], data_dir: Path, *,
                 on_leader_gained: Callable[[int], None] | None = None,
                 on_leader_lost: Callable[[], None] | None = None,
                 settings: RaftSettings | None = None, key: bytes | None = None) -> None:
        self._sm = GuardianState()
        self._on_gained = on_leader_gained
        self.node = RaftNode(self_addr, peers, self._sm, data_dir, validator=self._validate,
                             settings=settings, on_leader_gained=self._leader_gained, on_leader_lost=on_leader_lost,
                             key=key)

    def _leader_gained(self, term: int) -> None:
        threading.Thread(target=self._drop_stale_uploads, args=(term,), name="drop-stale-uploads",
                         daemon=True).start()
        if self._on_gained is not None:
            self._on_gained(term)

    def _drop_stale_uploads(self, term: int, patience_s: float = 10.0) -> None:
        """As the new leader of ``term``: drop the uploads earlier leaders staged and can no longer commit."""
        deadline = time.monotonic() + patience_s
        while time.monotonic() < deadline:
            try:
                stale = self.node.read(lambda sm: any(u["term"] < term for u in (sm.state.get(UPLOADS) or {}).values()))
                if stale and self.node.is_leader:
                    self.node.propose({"type": "upload.abort", "before_term": term,
                                       "meta": meta("guardian", f"leader of term {term}: uploads of earlier leaders "
                                                                "cannot complete")})
                return
            except Exception as exc:  # not ready yet (or deposed again): retry until the deadline
                log.debug("dropping stale uploads: %s", exc)
                time.sleep(0.2)

    def _validate(self, command: JsonDict) -> JsonDict:
        """Parse, then check the command's form against the group's state version (docs/upgrading.md)."""
        cmd = validate_command(command)
        return self.node.read(lambda sm: prepare(cmd, sm.state, sm.supported))

    @property
    def is_leader(self) -> bool:
        return self.node.is_leader

    def status(self) -> dict[str, Any]:
        digest, index = self.node.state_hash()
        group = self.node.read(lambda sm: group_version(sm.state))
        return {**self.node.status(), "state_hash": digest, "state_index": index,
                "state_version": {"group": group, "supported": self._sm.supported, "latest": LATEST}}

    def step_down(self, reason: str) -> bool:
        """Hand leadership to a caught-up follower (see :meth:`RaftNode.step_down`)."""
        return self.node.step_down(reason)

    def propose(self, command: JsonDict, timeout: float = 5.0) -> Any:
        try:
            return self.node.propose(command, timeout)
        except CommandTooLarge as exc:  # valid, but more than one entry holds: staged in chunks, then committed
            text = exc.text
        # outside the handler: its traceback's frames would keep the validated copy of the command alive meanwhile
        term = int(self.node.status()["term"])
        return propose_chunked(self.node.propose, text, dict(command.get("meta") or {}), term, timeout)

    def read(self, fn: Callable[[JsonDict], T]) -> T:
        return self.node.read(lambda sm: fn(sm.state))

    def close(self) -> None:
        self.node.close()
