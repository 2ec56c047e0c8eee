"""What one reconcile pass sends to the cluster, and how it is sent.

Goal: gather a pass's requests (KIP-455 reassignments and cancels, KIP-113 log-dir moves, KIP-460
preferred elections) in one :class:`Submission`, send them in a safe order, and never let a failed call
stop the pass.

Method: tasks add requests while the pass drives them (``owner`` remembers which task each request
serves). The pass sends the cancels first (:meth:`Submission.take_cancels`: a copy must never run
unthrottled between its throttle's removal and its cancel), drops the copies whose throttle could not be
set (:meth:`Submission.hold`), then :func:`send` sends log-dir moves before reassignments (a new
replica's dir must be known before the reassignment creates it) and elections last.

Guarantee: a call that fails as a whole is logged and left to the next pass: its tasks are already
IN_PROGRESS in the store (write-ahead), and the next pass, finding nothing in flight, sends them again.
Per-item refusals are returned (task key -> why) beside being logged; the expected answers (a
pre-placed dir ``ReplicaNotAvailable``, a cancel that found nothing in flight, an election not needed)
are not refusals — except for the elections of a follower read's leader change (``leader_steps``): there
every answer but success is returned, so that a task given up on names the cluster's last answer.

Cost: at most four admin calls per pass (three kinds; cancels go in their own call first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from domain.execution import Task, TaskState
from kafkaio.errors import AdminError
from kafkaio.port import KafkaCluster
from kafkaio.types import LiveCluster

log = logging.getLogger("guardian.executor")
ELECTION_ERRORS_OK = {0, 84}
ELECTION_ANSWERS = {80: "PREFERRED_LEADER_NOT_AVAILABLE", 84: "ELECTION_NOT_NEEDED"}
PREPLACE_ANSWERS = {"ReplicaNotAvailableError", "NotLeaderForPartitionError", "NotLeaderOrFollowerError"}


@dataclass
class Submission:
    """The requests of one pass, with the task each one serves."""

    reassign: dict[tuple[str, int], list[int] | None] = field(default_factory=dict)
    log_dirs: dict[tuple[str, int, int], str] = field(default_factory=dict)
    elect: list[tuple[str, int]] = field(default_factory=list)
    owner: dict[Any, str] = field(default_factory=dict)
    preplace: set[tuple[str, int, int]] = field(default_factory=set)
    """``log_dirs`` entries for replicas a reassignment is about to create (sent first; the broker answers
    ReplicaNotAvailable and creates the replica in that dir when it arrives, as Kafka's LogManager does)."""
    leader_steps: set[tuple[str, int]] = field(default_factory=set)
    """``elect`` entries of a follower read's leader change (:mod:`.read_source`): every answer but success
    is returned as a refusal (ELECTION_NOT_NEEDED there means the reorder has not landed yet)."""

    def _is_cancel(self, key: tuple[str, int, int], tasks: Mapping[str, Task]) -> bool:
        """True when a log-dir request cancels a future replica (its task is being aborted)."""
        owner = tasks.get(self.owner.get(key, ""))
        return owner is not None and owner.state == TaskState.ABORTING

    def take_cancels(self, tasks: Mapping[str, Task]) -> Submission:
        """Move the cancellations (reassignment cancels, log-dir moves back of aborting tasks) out of this
        submission into a new one."""
        cancels = Submission(reassign={tp: None for tp, r in self.reassign.items() if r is None},
                             log_dirs={k: d for k, d in self.log_dirs.items() if self._is_cancel(k, tasks)},
                             owner=self.owner)
        for tp in cancels.reassign:
            del self.reassign[tp]
        for k in cancels.log_dirs:
            del self.log_dirs[k]
        return cancels

    def hold(self, failed: Iterable[Any], live: LiveCluster) -> None:
        """Drop the copies that would run on a broker or topic whose throttle change failed (retried next
        pass): reassignments touching one (its topic, a replica, or the leader) and log-dir moves on one."""
        failed = set(failed)
        if not failed:
            return
        held = [tp for tp, r in self.reassign.items() if r is not None
                and (tp[0] in failed or failed & set(r) or (tp in live.partitions
                                                            and live.partitions[tp].leader in failed))]
        for tp in held:
            del self.reassign[tp]
        for key3 in [k for k in self.log_dirs if k[2] in failed]:
            del self.log_dirs[key3]


def _send(what: str, call: Callable[[Any], Mapping[Any, Any]], requests: Any,
          refused: Callable[[Any, Any], bool], owner: Mapping[Any, str], out: dict[str, str],
          describe: Callable[[Any], str] = str) -> None:
    """Send one kind of request if there is any; a call failing as a whole is only logged (see module)."""
    if not requests:
        return
    try:
        answers = call(requests)
    except AdminError as exc:
        log.warning("%s submission failed (will be retried next pass): %s", what, exc)
        return
    for key, err in answers.items():
        if refused(key, err):
            log.warning("%s of %s refused: %s", what, key, describe(err))
            if key in owner:
                out.setdefault(owner[key], f"{what} refused: {describe(err)}")


def send(admin: KafkaCluster, submission: Submission) -> dict[str, str]:
    """Send what the pass decided: log-dir moves first, then reassignments, then preferred elections.

    Returns task key -> why, for the tasks one of whose requests the cluster refused.
    """
    refused: dict[str, str] = {}
    _send("log dir move", admin.alter_log_dirs, submission.log_dirs,
          lambda k, err: bool(err) and not (k in submission.preplace and err in PREPLACE_ANSWERS),
          submission.owner, refused)
    _send("reassignment", admin.alter_reassignments, submission.reassign,
          lambda tp, err: bool(err) and err != "NoReassignmentInProgressError", submission.owner, refused)
    _send("preferred election", admin.elect_preferred, submission.elect,
          lambda tp, code: code != 0 and (tp in submission.leader_steps or code not in ELECTION_ERRORS_OK | {80}),
          submission.owner, refused, election_answer)
    return refused


def election_answer(code: int) -> str:
    """A KIP-460 election error code as the task's reason shows it (``ELECTION_NOT_NEEDED (84)``)."""
    return f"{ELECTION_ANSWERS.get(code, 'error')} ({code})"
