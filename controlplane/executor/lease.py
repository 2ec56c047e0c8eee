"""The executor's side of the per-cluster execution lease: take it, keep it, hand it back, clean up after the dead.

Goal: two executors — ``guardian exec`` CLIs, a service execution, two controller groups — never act on one
cluster at once; the second refuses naming who holds the lease and until when; moves and throttles an
executor left behind when it died are undone by the next one.

Method: :class:`ExecutionLease` reads and appends the lease log on the cluster (:mod:`domain.lease` decides
who holds it; :mod:`kafkaio.topiclog` carries it). :meth:`~ExecutionLease.acquire` claims a free or expired
lease (or re-claims its own) and reports what the previous holder left: the partitions it had in flight and
the throttles it set, which the holder records on the cluster *before* it submits or sets them
(:meth:`~ExecutionLease.keep` with the moves at the write-ahead, with the throttles before they are
applied). :meth:`~ExecutionLease.keep` renews every TTL/3 or when what it records changed, and raises
:class:`LeaseLost` once someone else validly holds it. :func:`clean_leftovers` undoes what a dead holder
left: its reassignments still in flight are cancelled (they revert: a copy never runs unthrottled) and then
its throttles are removed — a broker rate only if it still has the value the dead holder set, a replica
list only the entries it added; targets the new holder itself owns (a resumed execution) are left alone. The
removal is handed to the one writer of throttle configs (:class:`~kafkaio.throttle_writer.ThrottleWriter`), and
only throttle keys are ever removed (a record naming anything else is ignored for it).

Identity: the token is derived from what makes two processes the same executor — a service's controller
group (the group's next leader renews the lease its previous leader held; the replicated store already
makes one leader act) or a CLI's state file on its host (a CLI run again after a crash resumes at once) —
while any other executor is refused until the lease is released or expires.

Guarantee: see :mod:`domain.lease` (exclusion on the log leader's clock, no fencing during a pause longer
than the TTL). Leftovers are cleaned only after the lease was validly claimed, so two successors never
clean at once. Cost: a renewal is one Produce plus one Fetch; a held lease costs nothing between renewals.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from controlplane.executor.conflicts import ExecutionConflict, ForeignReassignments
from domain.lease import CLAIM, LEASE_TOPIC, LEASE_TOPIC_CONFIGS, RELEASE, RENEW, LeaseRecord, child, fold
from domain.throttles import BROKER_THROTTLE_KEYS, FOLLOWER_REPLICAS, LEADER_REPLICAS
from kafkaio.errors import AdminError
from kafkaio.port import KafkaCluster
from kafkaio.throttle_writer import ThrottleWriter
from kafkaio.types import TP

log = logging.getLogger("guardian.executor")
KEY = b"lease"
LAGGING_METADATA_S = 5.0


@dataclass(frozen=True)
class LeaseOwner:
    """Who an executor is, as the lease records it."""

    kind: str
    """``cli`` or ``service``."""
    host: str
    pid: int
    client_id: str
    identity: str = ""
    """What makes two processes the same executor: a service's controller group (its nodes share the
    replicated state), a CLI's state file on its host (a resumed run is the run that died)."""

    @classmethod
    def this_process(cls, kind: str, client_id: str, identity: str = "") -> LeaseOwner:
        """This process on this host."""
        return cls(kind, socket.gethostname(), os.getpid(), client_id, identity)

    def token(self) -> str:
        """One token per executor identity (random when there is none)."""
        if self.identity:
            return hashlib.sha256(f"{self.kind}:{self.identity}".encode()).hexdigest()[:16]
        return secrets.token_hex(8)

    def as_json(self, execution: int | None) -> dict[str, Any]:
        """The ``owner`` member of a lease record."""
        where = "group" if self.kind == "service" else "state"
        return {"kind": self.kind, "host": self.host, "pid": self.pid, "client_id": self.client_id,
                where: self.identity, "execution": execution}


def client_id(kind: str) -> str:
    """A Kafka client id naming this executor instance (``guardian-exec-cli-HOST-PID``)."""
    return f"guardian-exec-{kind}-{socket.gethostname()}-{os.getpid()}"


def _iso(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LeaseHeld(ExecutionConflict):
    """Another executor holds the cluster's execution lease."""

    def __init__(self, cluster: str, holder: LeaseRecord, now_ms: float) -> None:
        left = max(holder.until_ms - now_ms, 0) / 1000
        super().__init__(f"cluster {cluster!r} is leased to {holder.describe()} until {_iso(holder.until_ms)} "
                         f"({left:.0f} s left unless renewed); nothing started — wait for it to finish, stop it, "
                         f"or let its lease expire")
        self.holder = holder


class LeaseLost(LeaseHeld):
    """This executor's lease expired and another executor claimed it."""


class ExecutionLease:
    """This executor's handle on one cluster's lease (see the module docstring)."""

    def __init__(self, admin: KafkaCluster, cluster: str, owner: LeaseOwner, ttl_s: float,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 topic: str = LEASE_TOPIC) -> None:
        self.admin = admin
        self.cluster = cluster
        self.owner = owner
        self.ttl_ms = int(ttl_s * 1000)
        self.clock = clock
        self.monotonic = monotonic
        self.topic = topic
        self.token = owner.token()
        self.tip: LeaseRecord | None = None
        self.held = False
        self.execution: int | None = None
        self.moves: tuple[str, ...] = ()
        self.throttles: dict[str, Any] = {}
        self.inherited: dict[str, Any] = {}
        self._next = 0
        self._read_once = False
        self._ready = False
        self._renewed_at = -1e18

    # ------------------------------------------------------------------ reading
    def _now_ms(self) -> float:
        return self.clock() * 1000

    def refresh(self) -> LeaseRecord | None:
        """Read the records appended since the last read and fold them into the tip. Once this executor made
        sure the log exists, a broker answering that it does not know the log is one whose metadata lags the
        creation (real Kafka, the first seconds after CreateTopics): asked again for up to
        :data:`LAGGING_METADATA_S`."""
        deadline = self.monotonic() + LAGGING_METADATA_S
        while True:
            try:
                got = self.admin.read_log(self.topic, self._next)
                break
            except AdminError as exc:
                if not (self._ready and "UnknownTopicOrPartition" in str(exc) and self.monotonic() < deadline):
                    raise
                time.sleep(0.2)
        records = [r for r in (LeaseRecord.from_bytes(x.value, x.offset, x.ts_ms) for x in got.records)
                   if r is not None]
        self.tip = fold(records, self.tip if self._read_once else None, got.first if not self._read_once else 0)
        self._read_once = True
        self._next = max(self._next, got.end)
        return self.tip

    def peek(self) -> LeaseRecord | None:
        """The current tip, or ``None`` when the cluster has no lease log yet (never creates it)."""
        try:
            return self.refresh()
        except AdminError as exc:
            if "UnknownTopicOrPartition" in str(exc):
                return None
            raise

    def holder(self) -> LeaseRecord | None:
        """The record of whoever holds the lease now (``None``: free)."""
        tip = self.peek()
        return tip if tip is not None and tip.holds_at(self._now_ms()) else None

    # ------------------------------------------------------------------ writing
    def _append(self, op: str, **extra: Any) -> bool:
        """Append ``op`` after the current tip; True when it became the tip (this executor holds / released)."""
        record = child(self.tip, op, self.token, self.ttl_ms, owner=self.owner.as_json(self.execution),
                       moves=self.moves, throttles=self.throttles, inherited=self.inherited, **extra)
        sent = self.monotonic()
        offset, _ = self.admin.append_log(self.topic, KEY, record.to_bytes())
        self.refresh()
        won = self.tip is not None and self.tip.offset == offset
        if won:
            self._renewed_at = sent
        return won

    def acquire(self) -> dict[str, Any]:
        """Claim the lease (idempotent while held). Returns what the previous holder left to clean
        (``{"moves": [...], "throttles": {...}}``, empty when nothing); raises :class:`LeaseHeld`."""
        if self.held:
            self.keep()
            return {}
        if not self._ready:
            self.admin.ensure_log(self.topic, LEASE_TOPIC_CONFIGS)
            self._ready = True
        tip = self.refresh()
        if tip is not None and tip.token != self.token and tip.holds_at(self._now_ms()):
            raise LeaseHeld(self.cluster, tip, self._now_ms())
        self.inherited = leftovers(tip) if tip is not None else {}
        if not self._append(CLAIM):
            assert self.tip is not None
            raise LeaseHeld(self.cluster, self.tip, self._now_ms())
        self.held = True
        log.info("execution lease of %s taken by %s (until %s)", self.cluster, self.owner.kind,
                 _iso(self.tip.until_ms if self.tip else 0))
        return dict(self.inherited)

    def keep(self, *, moves: Iterable[TP] | None = None, throttles: Mapping[str, Any] | None = None,
             inherited: Mapping[str, Any] | None = None, execution: int | None = None) -> None:
        """Record what this holder now has in flight / has set, and renew when due or changed (raises
        :class:`LeaseLost` when another executor took the lease after it expired)."""
        if not self.held:
            return
        changed = False
        if moves is not None:
            new = tuple(sorted(f"{t}:{p}" for t, p in set(moves)))
            changed |= new != self.moves
            self.moves = new
        if throttles is not None and dict(throttles) != self.throttles:
            self.throttles, changed = dict(throttles), True
        if inherited is not None and dict(inherited) != self.inherited:
            self.inherited, changed = dict(inherited), True
        if execution is not None and execution != self.execution:
            self.execution, changed = execution, True
        if not changed and self.monotonic() - self._renewed_at < self.ttl_ms / 3000:
            return
        if not self._append(RENEW):
            self.held = False
            assert self.tip is not None
            raise LeaseLost(self.cluster, self.tip, self._now_ms())

    def release(self) -> None:
        """Hand the lease back (what is still in flight or set stays recorded for the next holder)."""
        if not self.held:
            return
        self.held = False
        try:
            self._append(RELEASE)
        except AdminError as exc:  # it expires by itself
            log.warning("releasing the execution lease of %s failed: %s", self.cluster, exc)
        self.execution = None


class LeaseGuard:
    """How an executor uses its lease (``None``: it takes none): take it — cleaning what a dead holder left —
    before acting, refuse foreign reassignments at a start, record its moves and throttles, hand it back.

    ``own_tasks`` gives the partitions of the executor's active execution (all tasks, started ones);
    ``own_throttles`` its throttle record (:func:`throttle_record` of its store's records).
    """

    def __init__(self, lease: ExecutionLease | None, admin: KafkaCluster, cluster: str,
                 own_tasks: Callable[[bool], set[TP]], own_throttles: Callable[[], dict[str, Any]]) -> None:
        self.lease = lease
        self.admin = admin
        self.cluster = cluster
        self.own_tasks = own_tasks
        self.own_throttles = own_throttles
        self.inherited_moves: set[str] = set()
        """Partitions (``topic:partition``) whose moves the previous holder left (cancelled when taken over)."""

    @property
    def held(self) -> bool:
        """True while this executor holds the lease (always, without one)."""
        return self.lease is None or self.lease.held

    def take(self) -> None:
        """Hold the lease (renew when held; raises :class:`LeaseHeld`); on taking it over, undo what the previous
        holder left (:func:`clean_leftovers`) and keep what could not be undone yet in the record."""
        if self.lease is None:
            return
        if self.lease.held:
            self.lease.keep()
            return
        self.lease.throttles = self.own_throttles()
        left = self.lease.acquire()
        self.inherited_moves = set(left.get("moves", ()))
        if left:
            self.lease.keep(inherited=clean_leftovers(self.admin, left, self.own_tasks(True), self.lease.throttles))

    def refuse_foreign(self) -> None:
        """Cruise Control's rule: no start while reassignments this executor does not own are in flight (those a
        dead holder left were cancelled when the lease was taken over). Raises :class:`ForeignReassignments`."""
        own = self.own_tasks(False)
        foreign = {tp: ra for tp, ra in self.admin.live().reassignments.items()
                   if tp not in own and f"{tp[0]}:{tp[1]}" not in self.inherited_moves}
        if foreign:
            raise ForeignReassignments(self.cluster, foreign)

    def keep(self, **what: Any) -> None:
        """:meth:`ExecutionLease.keep` (nothing without a lease)."""
        if self.lease is not None:
            self.lease.keep(**what)

    def announce_throttles(self) -> None:
        """Record the executor's throttles (as its store now holds them, write-ahead) in the lease."""
        self.keep(throttles=self.own_throttles())

    def release(self) -> None:
        """Hand the lease back (what is still in flight or set stays listed for the next holder)."""
        if self.lease is not None:
            self.lease.release()

    def start(self, begin: Callable[[], int]) -> int:
        """Start an execution under the lease: take it (cleaning what a dead holder left), refuse while
        reassignments this executor does not own are in flight, then ``begin`` (returns the execution id,
        recorded in the lease). A refusal hands the lease back."""
        self.take()
        try:
            self.refuse_foreign()
            execution_id = begin()
        except BaseException:
            self.release()
            raise
        self.keep(execution=execution_id)
        return execution_id

    def clean_idle(self, owns_throttles: bool, remove_throttles: Callable[[], Any]) -> None:
        """No active execution: remove the executor's leftover throttles of an earlier run under the lease
        (``remove_throttles``; waits while another executor holds it), then hand the lease back."""
        if owns_throttles:
            try:
                self.take()
            except ExecutionConflict as exc:  # another executor acts now; clean once it is gone
                log.info("leftover throttles of %s wait: %s", self.cluster, exc)
                return
            remove_throttles()
            self.announce_throttles()
        self.release()

    def finished(self, owns_throttles: bool) -> None:
        """The execution finished: with no throttle of its own left, record nothing in flight and hand the
        lease back (else the next pass cleans them first, :meth:`clean_idle`)."""
        if not owns_throttles:
            self.keep(moves=[], throttles={})
            self.release()


def leftovers(record: LeaseRecord) -> dict[str, Any]:
    """What the writer of ``record`` (and holders before it) left: in-flight moves and throttles."""
    moves = sorted(set(record.moves) | set(record.inherited.get("moves", ())))
    throttles = merge_throttles(record.throttles, record.inherited.get("throttles") or {})
    return {"moves": moves, "throttles": throttles} if moves or _any(throttles) else {}


def _any(throttles: Mapping[str, Any]) -> bool:
    return bool(throttles.get("brokers")) or bool(throttles.get("topics"))


def merge_throttles(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Union of two throttle records (``{"brokers": {id: {config: value}}, "topics": {t: {config: [..]}}}``)."""
    brokers: dict[str, dict[str, str]] = {}
    topics: dict[str, dict[str, list[str]]] = {}
    for src in (b, a):
        for bid, cfg in (src.get("brokers") or {}).items():
            brokers.setdefault(str(bid), {}).update(cfg)
        for t, lists in (src.get("topics") or {}).items():
            for key, entries in lists.items():
                cur = topics.setdefault(t, {}).setdefault(key, [])
                cur.extend(e for e in entries if e not in cur)
    return {"brokers": brokers, "topics": topics}


def throttle_record(owned: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The lease's throttle record from the executor's own throttle records (store ``throttles`` entries)."""
    brokers: dict[str, dict[str, str]] = {}
    topics: dict[str, dict[str, list[str]]] = {}
    for rec in owned.values():
        target = rec.get("target") or {}
        if "broker" in target:
            brokers[str(target["broker"])] = {k: str(v) for k, v in (target.get("configs") or {}).items()}
        elif "topic" in target:
            lists = {k: list(target.get(k) or []) for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS) if target.get(k)}
            if lists:
                topics[str(target["topic"])] = lists
    return {"brokers": brokers, "topics": topics} if brokers or topics else {}


def clean_leftovers(admin: KafkaCluster, left: Mapping[str, Any], own_moves: Iterable[TP],
                    own_throttles: Mapping[str, Any]) -> dict[str, Any]:
    """Undo what a previous holder left (see the module docstring); returns what could not be cleaned yet
    (e.g. a throttle on a dead broker), to be kept in the lease record until it can."""
    live = admin.live()
    mine = set(own_moves)
    wanted = {tuple(m.rsplit(":", 1)) for m in left.get("moves", ())}
    orphans = {tp: None for tp in live.reassignments
               if (tp[0], str(tp[1])) in wanted and tp not in mine}
    if orphans:
        log.warning("cancelling %d reassignment(s) a previous executor left in flight: %s", len(orphans),
                    ", ".join(f"{t}-{p}" for t, p in sorted(orphans)[:20]))
        admin.alter_reassignments(orphans)
    throttles = left.get("throttles") or {}
    writer = ThrottleWriter(admin)  # the one writer of throttle configs
    own_b = set(own_throttles.get("brokers") or {})
    own_t = own_throttles.get("topics") or {}
    remaining: dict[str, Any] = {"brokers": {}, "topics": {}}
    brokers = {int(b): cfg for b, cfg in (throttles.get("brokers") or {}).items() if str(b) not in own_b}
    alive = [b for b in brokers if b in live.alive]
    current = admin.broker_configs(alive, sorted({k for cfg in brokers.values() for k in cfg})) if alive else {}
    for b, cfg in sorted(brokers.items()):
        if b not in live.alive:
            remaining["brokers"][str(b)] = cfg
            continue
        drop: dict[str, str | None] = {k: None for k, v in cfg.items()
                                       if k in BROKER_THROTTLE_KEYS and current.get(b, {}).get(k) == v}
        if drop:
            writer.set_migration_rates(b, drop)
    for topic, lists in sorted((throttles.get("topics") or {}).items()):
        if topic not in live.topic_sizes:
            continue
        for key, entries in lists.items():
            if key not in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
                continue  # a record names only these lists; anything else is not ours to touch
            mine_entries = set((own_t.get(topic) or {}).get(key, []))
            gone = [e for e in entries if e not in mine_entries]
            if gone:
                writer.change_throttled_replicas(topic, key, subtract=gone)
    if orphans or brokers or throttles.get("topics"):
        log.warning("removed the throttles a previous executor left on %d broker(s) and %d topic(s)",
                    len(brokers) - len(remaining["brokers"]), len(throttles.get("topics") or {}))
    return {"throttles": remaining} if remaining["brokers"] else {}


__all__ = ["RELEASE", "RENEW", "ExecutionLease", "LeaseGuard", "LeaseHeld", "LeaseLost", "LeaseOwner",
           "clean_leftovers", "client_id", "leftovers", "merge_throttles", "throttle_record"]
