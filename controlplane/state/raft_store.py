"""The Raft-backed :class:`~controlplane.state.store.StateStore`: the service's authoritative state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from controlplane.state.commands import validate_command
from controlplane.state.state import GuardianState
from controlplane.state.versions import LATEST, group_version, prepare
from raft.node import RaftNode, RaftSettings
from raft.protocol import JsonDict

T = TypeVar("T")


class RaftStateStore:
    """Replicates :class:`GuardianState` over a :class:`RaftNode`; only the leader's proposals commit."""

    def __init__(self, self_addr: str, peers: list[str], data_dir: Path, *,
                 on_leader_gained: Callable[[int], None] | None = None,
                 on_leader_lost: Callable[[], None] | None = None,
                 settings: RaftSettings | None = None, key: bytes | None = None) -> None:
        self._sm = GuardianState()
        self.node = RaftNode(self_addr, peers, self._sm, data_dir, validator=self._validate,
                             settings=settings, on_leader_gained=on_leader_gained, on_leader_lost=on_leader_lost,
                             key=key)

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
        return self.node.propose(command, timeout)

    def read(self, fn: Callable[[JsonDict], T]) -> T:
        return self.node.read(lambda sm: fn(sm.state))

    def close(self) -> None:
        self.node.close()
