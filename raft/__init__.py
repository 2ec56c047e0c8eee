"""Kafka-agnostic replicated state machine on pysyncobj.

* :mod:`raft.protocol` — the :class:`StateMachine` protocol (apply / snapshot / restore),
  command encoding and validation hooks.
* :mod:`raft.node` — :class:`RaftNode`: propose-and-wait, leadership callbacks, status.
* :mod:`raft.storage` — data-directory layout and the snapshot file format.
* :mod:`raft.demo`, :mod:`raft.node_main`, :mod:`raft.localcluster` — a demo state machine
  (key/value + ID allocator), a runnable HTTP node and a process launcher for tests/benchmarks.
"""

from raft.errors import NodeClosed, NotLeaderError, ProposalFailed, ProposalTimeout, RaftError
from raft.node import Committed, RaftNode, RaftSettings
from raft.protocol import CommandConflict, CommandRejected, StateMachine, Validator

__all__ = [
    "CommandConflict",
    "CommandRejected",
    "Committed",
    "NodeClosed",
    "NotLeaderError",
    "ProposalFailed",
    "ProposalTimeout",
    "RaftError",
    "RaftNode",
    "RaftSettings",
    "StateMachine",
    "Validator",
]
