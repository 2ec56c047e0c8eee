"""A Raft node (pysyncobj) that replicates a :class:`raft.protocol.StateMachine`.

Usage::

    node = RaftNode("127.0.0.1:7001", ["127.0.0.1:7002", "127.0.0.1:7003"], MyStateMachine(),
                    data_dir="var/raft1", validator=validate)
    node.wait_ready(10)
    result = node.propose({"type": "allocate_ids", "count": 10})   # blocks until committed
    node.close()

Guarantees
----------
* ``propose`` returns only after the command is committed by a majority *and* applied on this
  node; its return value is the state machine's result.  On a follower it raises
  :class:`~raft.errors.NotLeaderError` carrying the leader's address (if known) without
  proposing anything.
* Every node applies the same commands in the same order; state is persisted as pysyncobj's
  journal (every entry, memory-mapped, survives a ``kill -9``) plus full snapshots at log
  compaction, so a restarted node recovers and then catches up from the leader.  A snapshot streamed
  by the leader is installed only when it arrives whole (:mod:`raft.transfer`), else sent again.
* ``on_leader_gained(term)`` runs (on a helper thread, never on the Raft thread) only after this
  node, as leader, has committed a barrier entry of its term, so the state it sees is caught up;
  ``on_leader_lost()`` runs when it stops being leader (a leader cut off from the majority steps
  down after ``leader_fallback`` seconds, one election timeout by default).
* A committed entry the state machine cannot apply with this code (:class:`~raft.protocol.EntryTooNew`:
  it needs a newer state version) is never skipped: the node *holds* — it applies nothing more, takes
  no snapshot, leaves the group (no vote, no lead) and reports not ready with the reason — until it is
  restarted on code that can apply it, when it replays the entry from its journal (docs/upgrading.md).
* A node whose journal's disk is below ``min_free_bytes`` is not ready; as leader it hands leadership
  to a caught-up follower within about a second (writes then succeed through the new leader); both
  recover by themselves once space is back.

The Raft thread runs until :meth:`RaftNode.close` or until the main thread exits.  Never call
``propose`` from inside ``apply`` (it would wait for itself); keep the leadership callbacks
short (start or stop background work, do not block in them).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

from raft.auth import AuthenticatingTransport, LoggingEncryptor, local_key
from raft.errors import (
    NodeClosed,
    NotLeaderError,
    ProposalFailed,
    ProposalTimeout,
    RaftError,
    StartupRefused,
    StorageDamaged,
    StorageFull,
)
from raft.journal import ChecksummedJournal
from raft.protocol import (
    CommandConflict,
    CommandRejected,
    EntryTooNew,
    JsonDict,
    StateMachine,
    Validator,
    canonical_json,
    check_command_shape,
    decode_command,
    encode_command,
)
from raft.storage import DataDir, SnapshotCodec, check_snapshot, verify_snapshot_file
from raft.transfer import install_verifying_receiver

log = logging.getLogger(__name__)

T = TypeVar("T")

_ROLE_NAMES = {0: "follower", 1: "candidate", 2: "leader"}
_FAIL_NAMES = {
    value: name
    for name, value in vars(FAIL_REASON).items()
    if not name.startswith("_") and isinstance(value, int)
}
#: pysyncobj failures after which the command may still have been committed.
_MAYBE_APPLIED = {FAIL_REASON.LEADER_CHANGED, FAIL_REASON.UNKNOWN_OUTCOME, FAIL_REASON.NOT_LEADER}
#: How often the monitor checks that the journal can append (a leader that cannot steps down).
STORAGE_CHECK_S = 1.0
#: Command types reserved for the Raft layer itself (never reach the state machine).
INTERNAL_PREFIX = "raft."


class _TruncationCounter(logging.Filter):
    """Counts pysyncobj's 'truncating already-applied log entries' records (process-wide).

    A filter, not a handler: it lets every record through, and a logger with a handler of its own
    would stop Python's last-resort handler from printing pysyncobj's errors when the application
    configured no logging (that is how this counter once swallowed every pysyncobj error).
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "truncating already-applied" in record.getMessage():
            self.count += 1
        return True


_TRUNCATIONS = _TruncationCounter()
logging.getLogger("pysyncobj.syncobj").addFilter(_TRUNCATIONS)


@dataclass(frozen=True)
class RaftSettings:
    """Timing and storage knobs. Defaults favour fast synchronous commits and ~0.5 s failover."""

    election_timeout_min: float = 0.2
    election_timeout_max: float = 0.5
    heartbeat_period: float = 0.05
    #: pysyncobj's appendEntriesUseBatch. False sends each entry at once (fast sync commits);
    #: True waits for the next heartbeat tick to batch entries (pysyncobj's default).
    batch_append_entries: bool = False
    #: Leader steps down when it has not heard from a majority for this long (None: max timeout).
    leader_fallback: float | None = None
    connection_timeout: float = 2.0
    connection_retry: float = 0.3
    tick_period: float = 0.05
    compaction_min_entries: int = 5000
    compaction_min_time: float = 300.0
    bind_retries: int = 15
    bind_retry_time: float = 0.2
    #: How often the leadership monitor polls (it is also woken on every role change).
    monitor_period: float = 0.05
    #: Proposals are refused (StorageFull) while the journal's file system has less free space.
    min_free_bytes: int = 1 << 20
    #: A restarting node must finish replaying its snapshot and journal within this many seconds.
    replay_timeout: float = 300.0

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_period * 3 < self.election_timeout_min < self.election_timeout_max:
            raise ValueError("need 0 < 3*heartbeat_period < election_timeout_min < election_timeout_max")
        if self.compaction_min_entries < 2 or self.compaction_min_time <= 0:
            raise ValueError("compaction_min_entries must be >= 2 and compaction_min_time > 0")
        if self.connection_timeout < self.election_timeout_max:
            raise ValueError("connection_timeout must be >= election_timeout_max")

    @classmethod
    def pysyncobj_defaults(cls, **overrides: Any) -> RaftSettings:
        """pysyncobj's own defaults (batched appends, 0.4-1.4 s elections): the benchmark baseline."""
        values: dict[str, Any] = dict(
            election_timeout_min=0.4,
            election_timeout_max=1.4,
            heartbeat_period=0.1,
            batch_append_entries=True,
            leader_fallback=30.0,
            connection_timeout=3.5,
            connection_retry=5.0,
        )
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class Committed:
    """A committed command: the state machine's result and the Raft log index it was applied at."""

    result: Any
    index: int


@dataclass
class _Waiter:
    event: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: int | None = None

    def done(self, result: Any, error: int) -> None:
        self.result = result
        self.error = error
        self.event.set()


class _Replica(SyncObj):
    """The pysyncobj object; its only replicated method hands the log entry to the owner."""

    def __init__(
        self,
        apply_entry: Callable[[str, int], JsonDict],
        self_addr: str,
        peers: Sequence[str],
        conf: SyncObjConf,
    ) -> None:
        self._guardian_apply_entry = apply_entry
        self._guardian_encryptor: LoggingEncryptor | None = None
        super().__init__(self_addr, list(peers), conf, transportClass=AuthenticatingTransport)

    @property
    def encryptor(self) -> LoggingEncryptor | None:
        """pysyncobj's Fernet object wrapped so that frames failing authentication are logged."""
        if self._guardian_encryptor is None:
            inner = self._getEncryptor()
            if inner is not None:
                self._guardian_encryptor = LoggingEncryptor(inner)
        return self._guardian_encryptor

    @replicated
    def guardian_apply(self, payload: str) -> JsonDict:
        return self._guardian_apply_entry(payload, self.raftLastApplied + 1)


class RaftNode:
    """One member of a Raft group replicating ``state_machine``; see the module docstring."""

    def __init__(
        self,
        self_addr: str,
        peers: Sequence[str],
        state_machine: StateMachine,
        data_dir: str | Path,
        *,
        validator: Validator | None = None,
        settings: RaftSettings | None = None,
        on_leader_gained: Callable[[int], None] | None = None,
        on_leader_lost: Callable[[], None] | None = None,
        key: bytes | None = None,
        journal_fault: Callable[[str], None] | None = None,
    ) -> None:
        _check_addr(self_addr)
        for peer in peers:
            _check_addr(peer)
        self.self_addr = self_addr
        self.peers = sorted({p for p in peers if p != self_addr})
        self.settings = settings or RaftSettings()
        self.data_dir = DataDir(Path(data_dir)).ensure()
        if key is None:
            if self.peers:
                raise StartupRefused("a multi-node Raft group needs a shared key (the same secret file on "
                                     "every node); none was given")
            key = local_key(self.data_dir.root)
        self._fatal: str | None = None
        self._held: str | None = None  # why this node stopped applying (an entry newer than its code)
        self.journal = ChecksummedJournal(self.data_dir.journal, fault=journal_fault)
        try:
            snap_index = self._check_files()
        except StartupRefused:
            self.journal._destroy()
            raise
        self._sm = state_machine
        self._validator = validator
        self._on_leader_gained = on_leader_gained
        self._on_leader_lost = on_leader_lost
        self._lock = threading.RLock()
        self._applied_index = 0
        self._hash_lock = threading.Lock()
        self._hash_cache: tuple[str, int] | None = None
        self._closed = False
        self._leader_term: int | None = None  # term in which we are a caught-up leader
        self._wake = threading.Event()
        self._stop = threading.Event()

        attach = getattr(state_machine, "write_attachment", None)
        codec = SnapshotCodec(self._take_snapshot, self._install_snapshot, self._on_storage_damage,
                              attach=attach if callable(attach) else None)
        s = self.settings
        conf = SyncObjConf(
            autoTick=True,
            autoTickPeriod=s.tick_period,
            raftMinTimeout=s.election_timeout_min,
            raftMaxTimeout=s.election_timeout_max,
            appendEntriesPeriod=s.heartbeat_period,
            appendEntriesUseBatch=s.batch_append_entries,
            leaderFallbackTimeout=s.leader_fallback or s.election_timeout_max,
            connectionTimeout=s.connection_timeout,
            connectionRetryTime=s.connection_retry,
            commandsWaitLeader=False,
            dynamicMembershipChange=False,
            bindAddress=self_addr,
            bindRetryTime=s.bind_retry_time,
            maxBindRetries=s.bind_retries,
            journalFile=self.journal,
            fullDumpFile=str(self.data_dir.snapshot),
            logCompactionMinEntries=s.compaction_min_entries,
            logCompactionMinTime=s.compaction_min_time,
            serializer=codec.serialize,
            deserializer=codec.deserialize,
            onStateChanged=self._on_state_changed,
            password=key,
        )
        self._obj = _Replica(self._apply_entry, self_addr, self.peers, conf)
        self._transfers = install_verifying_receiver(self._obj, verify_snapshot_file)
        # pysyncobj stops ticking when the thread that created it exits; tie it to the main
        # thread instead, so a node built on a short-lived thread keeps running until close().
        if hasattr(self._obj, "_SyncObj__mainThread"):
            self._obj._SyncObj__mainThread = threading.main_thread()
        try:
            self._obj.waitBinded()
        except Exception as exc:
            self._obj.destroy_synchronous()
            self._closed = True
            raise NodeClosed(f"cannot bind Raft port {self_addr}: {exc}") from exc
        self._inflight = 0
        self._inflight_lock = threading.Lock()
        # pysyncobj commits on the tick after an entry is logged and then sleeps in poll(); with
        # peers their replies wake it, alone nothing does, so each sync write would wait a whole
        # tick.  Wake the poller while proposals are in flight (unbatched mode only).
        self._notifier = getattr(self._obj, "_SyncObj__pipeNotifier", None)
        if not self.peers and self._notifier is not None:
            self._obj.addOnTickCallback(self._kick_single_node)
        self._on_raft_thread: list[Callable[[], None]] = []  # run by the next tick (list ops are atomic)
        self._obj.addOnTickCallback(self._run_on_raft_thread)
        self._wait_replayed(snap_index)
        self._storage_checked_at = 0.0
        self._storage_episode = False
        self._monitor = threading.Thread(
            target=self._monitor_loop, name=f"raft-monitor-{self_addr}", daemon=True
        )
        self._monitor.start()

    # ------------------------------------------------------------------ storage checks
    def _check_files(self) -> int | None:
        """Refuse to start on data files that do not fit together; return the snapshot's last index."""
        snap_index = check_snapshot(self.data_dir.snapshot)
        first = self.journal.first_index
        if self.journal.created and snap_index is not None:
            raise StorageDamaged(self.data_dir.journal, "missing (with its .meta) while snapshot.bin exists")
        if first is not None and first > 1 and (snap_index is None or snap_index < first):
            held = "is missing" if snap_index is None else f"covers entries up to {snap_index} only"
            raise StorageDamaged(self.data_dir.snapshot, f"{held}, but the compacted journal starts at entry {first}")
        return snap_index

    def _wait_replayed(self, snap_index: int | None) -> None:
        """Block until the snapshot is loaded and the committed journal entries are applied locally.

        Nothing reads this node's state before (the constructor has not returned); a node that cannot
        finish its replay does not start.
        """
        last = self.journal.last_index or 1
        target = max(snap_index or 0, min(self.journal.getRaftCommitIndex(), last))
        deadline = time.monotonic() + self.settings.replay_timeout
        while self._obj.raftLastApplied < target and self._fatal is None:
            if time.monotonic() > deadline:
                self._abort_start()
                raise StartupRefused(f"local replay of {self.data_dir.root} stopped at entry "
                                     f"{self._obj.raftLastApplied} of {target} within "
                                     f"{self.settings.replay_timeout:.0f}s")
            time.sleep(0.01)
        if self._fatal is not None:
            message = self._fatal
            self._abort_start()
            raise StartupRefused(message)

    def _abort_start(self) -> None:
        self._closed = True
        self._obj.destroy_synchronous()

    def _on_storage_damage(self, message: str) -> None:
        """A snapshot failed to load (Raft thread): stop this node so it neither votes nor serves."""
        if self._fatal is None:
            self._fatal = message
            log.critical("%s", message)
            self._stop.set()
            self._wake.set()
            self._obj.destroy()  # asynchronous: the Raft thread stops after this tick

    # ------------------------------------------------------------------ state machine side
    def _apply_entry(self, payload: str, index: int) -> JsonDict:
        """Apply one committed entry (Raft thread). Never raises: errors become results."""
        with self._lock:
            if self._held is not None:  # the state stays as it was before the held entry
                return {"ok": False, "error": f"not applied: this node holds ({self._held})", "index": index}
            self._applied_index = index
            try:
                command = decode_command(payload)
                if command["type"].startswith(INTERNAL_PREFIX):
                    return {"ok": True, "result": None, "index": index}
                apply_at = getattr(self._sm, "apply_at", None)
                result = apply_at(command, index) if callable(apply_at) else self._sm.apply(command)
                return {"ok": True, "result": result, "index": index}
            except CommandRejected as exc:
                return {"ok": False, "error": str(exc), "index": index}
            except EntryTooNew as exc:
                self._applied_index = index - 1
                self._hold(f"entry {index}: {exc}")
                return {"ok": False, "error": f"not applied on {self.self_addr}: {exc}", "index": index}
            except Exception as exc:  # a state machine bug must not wedge the Raft thread
                log.exception("state machine failed to apply entry %d: %s", index, payload[:200])
                return {"ok": False, "error": f"internal error applying command: {exc!r}", "index": index}

    def _hold(self, message: str) -> None:
        """Stop applying (Raft thread): leave the group so this node neither votes, leads nor compacts its
        journal past the entry it could not apply; it serves its status and reports not ready."""
        self._held = message
        self._fatal = f"holding: {message}"
        log.critical("Raft node %s holds: %s", self.self_addr, message)
        self._stop.set()
        self._wake.set()
        replica = getattr(self, "_obj", None)  # None while pysyncobj's constructor still runs: start-up aborts
        if replica is not None:
            replica.destroy()  # asynchronous: the Raft thread stops after this tick

    def _take_snapshot(self) -> JsonDict:
        if self._held is not None:
            raise RaftError(f"no snapshot while holding: {self._held}")
        with self._lock:
            return {"applied_index": self._applied_index, "state": self._sm.snapshot()}

    def _install_snapshot(self, snap: JsonDict, attachment: Path | None = None) -> None:
        with self._lock:
            restore_attached = getattr(self._sm, "restore_attachment", None)
            try:
                if attachment is not None and callable(restore_attached):
                    restore_attached(snap["state"], attachment)
                else:
                    self._sm.restore(snap["state"])
            except EntryTooNew as exc:  # a snapshot of a state newer than this code: hold, keep the old state
                self._hold(f"snapshot at entry {snap.get('applied_index')}: {exc}")
                raise
            self._applied_index = int(snap["applied_index"])

    # ------------------------------------------------------------------ proposing
    def propose(self, command: JsonDict, timeout: float = 5.0) -> Any:
        """Validate, replicate and apply ``command``; return the state machine's result.

        Raises CommandRejected (invalid: never proposed), CommandConflict (a CommandRejected:
        committed but refused by ``apply``, no state change), NotLeaderError (with the leader's
        address), ProposalTimeout (outcome unknown), ProposalFailed, NodeClosed.
        """
        return self.propose_committed(command, timeout).result

    def propose_committed(self, command: JsonDict, timeout: float = 5.0) -> Committed:
        """Like :meth:`propose` but also returns the log index the command was applied at."""
        cmd = check_command_shape(command)
        if cmd["type"].startswith(INTERNAL_PREFIX):
            raise CommandRejected(f"command types starting with {INTERNAL_PREFIX!r} are reserved")
        if self._validator is not None:
            try:
                cmd = check_command_shape(self._validator(cmd))
            except CommandRejected:
                raise
            except (ValueError, TypeError, KeyError) as exc:
                raise CommandRejected(f"invalid command: {exc}") from exc
        outcome = self._submit(encode_command(cmd), timeout)
        if not outcome["ok"]:
            raise CommandConflict(outcome["error"])
        return Committed(outcome["result"], outcome["index"])

    def _submit(self, payload: str, timeout: float) -> JsonDict:
        if self._closed or self._fatal is not None:
            raise NodeClosed(self._fatal or "node is closed")
        if not self.is_leader:
            raise NotLeaderError(self.leader)
        if not self.journal.has_space(self.settings.min_free_bytes):
            raise StorageFull(f"Raft journal {self.journal.path}: the disk is full ({self.journal.full_error}); "
                              "writes are refused until space is freed")
        waiter = _Waiter()
        full_before = self.journal.full_count
        deadline = time.monotonic() + timeout
        with self._inflight_lock:
            self._inflight += 1
        try:
            self._obj.guardian_apply(payload, callback=waiter.done)
            while not waiter.event.wait(0.05):
                if self.journal.full_count != full_before and not waiter.event.wait(0.5):
                    # the leader's journal refused a write meanwhile: this entry was not logged
                    raise StorageFull(f"Raft journal {self.journal.path}: no space left on the device; "
                                      "the command was not written (writes are refused until space is freed)")
                if time.monotonic() > deadline:
                    raise ProposalTimeout(f"not committed within {timeout:.2f}s (it may still commit)")
        finally:
            with self._inflight_lock:
                self._inflight -= 1
        if waiter.error != FAIL_REASON.SUCCESS:
            code = waiter.error if waiter.error is not None else -1
            name = _FAIL_NAMES.get(code, str(code))
            if code in (FAIL_REASON.MISSING_LEADER,) or (
                code == FAIL_REASON.NOT_LEADER and not self.is_leader
            ):
                raise NotLeaderError(self.leader, f"leadership lost while proposing ({name})")
            raise ProposalFailed(name, maybe_applied=code in _MAYBE_APPLIED)
        result: JsonDict = waiter.result
        return result

    def _run_on_raft_thread(self) -> None:
        while self._on_raft_thread:
            call = self._on_raft_thread.pop(0)
            try:
                call()
            except Exception:
                log.exception("call on the Raft thread failed")

    def step_down(self, reason: str, timeout: float = 2.0) -> bool:
        """Hand leadership to the most caught-up connected follower (Raft ``TimeoutNow``).

        pysyncobj has no plain step-down; its ``transferLeadership`` (run here on the Raft thread)
        asks a fully caught-up follower to start an election at once, which it wins, so no committed
        entry is at risk.  Returns whether the request was sent (False when this node does not lead,
        no follower is caught up, or this pysyncobj lacks the call); the role changes a moment later.
        """
        transfer = getattr(self._obj, "transferLeadership", None)
        if not self.is_leader or transfer is None:
            return False
        done = threading.Event()
        box: dict[str, Any] = {}

        def on_result(result: Any, error: int) -> None:
            box["error"] = error
            done.set()

        log.warning("stepping down as leader (term %s): %s", self._obj.raftCurrentTerm, reason)
        self._on_raft_thread.append(lambda: transfer(callback=on_result))
        if self._notifier is not None:
            self._notifier.notify()
        return done.wait(timeout) and box.get("error") == FAIL_REASON.SUCCESS

    def _kick_single_node(self) -> None:
        if self._inflight > 0 and self._notifier is not None:
            self._notifier.notify()

    # ------------------------------------------------------------------ reads
    def read(self, fn: Callable[[Any], T]) -> T:
        """Call ``fn(state_machine)`` under the state lock (no entry is applied meanwhile)."""
        with self._lock:
            return fn(self._sm)

    def state(self) -> tuple[JsonDict, int]:
        """A consistent (snapshot of the state, index of the last entry applied to it)."""
        with self._lock:
            return self._sm.snapshot(), self._applied_index

    def state_hash(self) -> tuple[str, int]:
        """(SHA-256 of the canonical state, applied index): equal on nodes that agree.

        Computed at most once per applied index (cached; concurrent callers wait for the one
        computing), so a burst of status reads costs one hash, not one per request.  The state lock
        is held only while the canonical JSON text is produced: with the state machine's optional
        ``canonical_json()`` (JSON text of its live state, no copy) that is one C-speed encoding,
        otherwise ``snapshot()`` + encoding.  Hashing runs outside the lock.
        """
        cached = self._hash_cache
        if cached is not None and cached[1] == self._applied_index:
            return cached
        with self._hash_lock:
            cached = self._hash_cache
            if cached is not None and cached[1] == self._applied_index:
                return cached
            canonical = getattr(self._sm, "canonical_json", None)
            with self._lock:
                index = self._applied_index
                text = canonical() if callable(canonical) else canonical_json(self._sm.snapshot())
            result = (hashlib.sha256(text.encode()).hexdigest(), index)
            self._hash_cache = result
            return result

    # ------------------------------------------------------------------ status
    @property
    def is_leader(self) -> bool:
        """Whether this node believes it is leader (there may briefly be a stale one elsewhere)."""
        return not self._closed and self._fatal is None and bool(self._obj._isLeader())

    @property
    def leader(self) -> str | None:
        """Raft address of the last known leader, or None."""
        node = self._obj._getLeader()
        return None if node is None else str(node.id)

    @property
    def ready(self) -> bool:
        """A leader is known, this node's state is caught up with it and its journal can append.

        Leader: it has committed its barrier of the current term.  Follower: it has applied
        everything the leader told it was committed.  Either: its journal's disk is above the reserve
        (``min_free_bytes``) — a leader below it hands leadership over (:meth:`_check_storage`).
        """
        if self._closed or self._fatal is not None:
            return False
        if self.storage_problem() is not None:
            return False  # it could not append what the leader sends next (and must not lead)
        if self.is_leader:
            return self._leader_term == self._obj.raftCurrentTerm
        st = self._raw_status()
        leader_commit = st.get("leader_commit_idx")
        return (
            st.get("leader") is not None and leader_commit is not None and st["last_applied"] >= leader_commit
        )

    @property
    def truncations(self) -> int:
        """How often pysyncobj truncated already-applied entries (process-wide counter)."""
        return _TRUNCATIONS.count

    def _raw_status(self) -> dict[str, Any]:
        for _ in range(5):
            try:
                status: dict[str, Any] = self._obj.getStatus()
                return status
            except RuntimeError:  # dict changed size while the Raft thread updated it
                time.sleep(0.001)
        raise RaftError("could not read Raft status")

    def status(self) -> dict[str, Any]:
        """Role, term, leader, commit index, applied index, readiness: for /status and metrics."""
        st = self._raw_status()
        leader = st.get("leader")
        return {
            "self": self.self_addr,
            "peers": self.peers,
            "role": _ROLE_NAMES.get(st["state"], str(st["state"])),
            "is_leader": st["state"] == 2,
            "term": st["raft_term"],
            "leader": None if leader is None else str(leader.id),
            "commit_index": st["commit_idx"],
            "last_applied": st["last_applied"],
            "leader_commit_index": st.get("leader_commit_idx"),
            "log_len": st["log_len"],
            "has_quorum": st["has_quorum"],
            "connected_peers": sorted(
                p for p in self.peers if st.get("partner_node_status_server_" + p) == 2
            ),
            "ready": self.ready,
            "truncations_of_applied": self.truncations,
            "storage_error": None if self._held else self._fatal or self.journal.full_error,
            "held": self._held,
            "snapshot_transfers_installed": self._transfers.installed,
            "snapshot_transfers_refused": self._transfers.refused,
        }

    def wait_ready(self, timeout: float) -> bool:
        """Block until :attr:`ready` (or the timeout); returns whether it is ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready:
                return True
            time.sleep(0.02)
        return self.ready

    def wait_leader(self, timeout: float) -> str | None:
        """Block until some leader is known; return its address (None on timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.leader
            if leader is not None:
                return leader
            time.sleep(0.02)
        return self.leader

    # ------------------------------------------------------------------ leadership monitor
    def _on_state_changed(self, old: int, new: int) -> None:
        self._wake.set()  # Raft thread: only wake the monitor, never block here

    def _monitor_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.settings.monitor_period)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self._check_leadership()
                self._check_storage()
            except Exception:  # keep monitoring whatever a callback does
                log.exception("leadership monitor step failed")
        if self._leader_term is not None:
            self._leader_term = None
            self._fire_lost()

    def _check_leadership(self) -> None:
        leading = self.is_leader
        term = int(self._obj.raftCurrentTerm)
        if self._leader_term is not None and (not leading or term != self._leader_term):
            self._leader_term = None
            self._fire_lost()
        if leading and self._leader_term is None:
            barrier = encode_command({"type": INTERNAL_PREFIX + "barrier", "term": term})
            try:
                self._submit(barrier, timeout=max(1.0, 4 * self.settings.election_timeout_max))
            except RaftError:
                return  # retried on the next poll if we are still leader
            if self.is_leader and int(self._obj.raftCurrentTerm) == term:
                self._leader_term = term
                if self._on_leader_gained is not None:
                    self._on_leader_gained(term)

    def storage_problem(self) -> str | None:
        """Why this node cannot append to its journal now (its disk is below ``min_free_bytes``, or a write
        just failed for space), None when it can."""
        if self.journal.has_space(self.settings.min_free_bytes):
            return None
        return self.journal.full_error or "no space for the journal"

    def _check_storage(self) -> None:
        """At most once a second: a leader that cannot append hands leadership to a caught-up follower (it
        could commit nothing: every write would be refused while healthy followers redirect to it)."""
        now = time.monotonic()
        if now - self._storage_checked_at < STORAGE_CHECK_S:
            return
        self._storage_checked_at = now
        problem = self.storage_problem()
        if problem is None:
            if self._storage_episode:
                log.warning("Raft journal %s: space is back; this node can append (and lead) again",
                            self.journal.path)
            self._storage_episode = False
            return
        if not self._storage_episode:
            log.error("Raft journal %s cannot append (%s): this node is not ready%s", self.journal.path, problem,
                      "; handing leadership over" if self.is_leader else "")
            self._storage_episode = True
        if self.is_leader and self.peers:
            self.step_down(f"journal cannot append: {problem}", timeout=1.0)

    def _fire_lost(self) -> None:
        if self._on_leader_lost is not None:
            try:
                self._on_leader_lost()
            except Exception:
                log.exception("on_leader_lost callback failed")

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Stop the monitor (firing on_leader_lost if leading), the Raft thread and sockets."""
        if self._closed:
            return
        self._stop.set()
        self._wake.set()
        if self._monitor is not threading.current_thread():
            self._monitor.join(timeout=10)
        self._closed = True
        self._obj.destroy_synchronous()

    def __enter__(self) -> RaftNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_addr(addr: str) -> None:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad Raft address {addr!r}: expected host:port")
