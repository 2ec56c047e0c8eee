"""Errors raised by :class:`raft.node.RaftNode` (CommandRejected lives in raft.protocol)."""

from __future__ import annotations

from pathlib import Path


class RaftError(Exception):
    """Base class of every replication error."""


class NotLeaderError(RaftError):
    """This node is not the leader; ``leader`` is the leader's Raft address if one is known."""

    def __init__(self, leader: str | None, message: str | None = None) -> None:
        self.leader = leader
        hint = f"the leader is {leader}" if leader else "no leader is known (election in progress?)"
        super().__init__(message or f"this node is not the leader: {hint}")


class ProposalTimeout(RaftError):
    """The command was not committed within the timeout; it may still commit later."""


class ProposalFailed(RaftError):
    """The command was not committed (``reason`` names pysyncobj's FAIL_REASON).

    ``maybe_applied`` tells whether it might still have been committed (leader changed while
    it was in flight), in which case a retry must be idempotent.
    """

    def __init__(self, reason: str, maybe_applied: bool) -> None:
        self.reason = reason
        self.maybe_applied = maybe_applied
        tail = "; it may still have been applied" if maybe_applied else "; it was not applied"
        super().__init__(f"proposal failed: {reason}{tail}")


class NodeClosed(RaftError):
    """The node was closed (or failed to start)."""


class StartupRefused(RaftError):
    """The node will not start; the message is one line naming the file or setting and the remedy.

    Raised for a missing Raft key in a multi-node group and for damaged data files.
    """


class StorageFull(RaftError):
    """A write to the journal failed for lack of space (ENOSPC/EDQUOT); nothing was proposed."""


class StorageDamaged(StartupRefused):
    """A journal, meta or snapshot file failed its checks; the message names it and the remedy."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        super().__init__(f"damaged Raft file {path}: {problem}; delete {path.parent} and restart this node to "
                         "resync it from its peers (a single-node group: restore that directory from a backup)")
