"""An in-memory Kafka cluster behind the :class:`kafkaio.port.KafkaCluster` port, with fault injection.

Goal: let the loops that act on a cluster (the executor's reconcile above all) be unit tested against a
cluster that behaves like Kafka — including the ways Kafka misbehaves — in milliseconds, with no sockets.

Method: plain dictionaries hold brokers (alive or dead, racks, log dirs with capacities), partitions
(replica order, leader, ISR, each replica's log dir and size, KIP-113 future replicas), KIP-455
reassignments, dynamic broker configs and topic configs. The port's calls act on them as Kafka does
(and as kafkasim does, which the integration tests use):

* ``alter_reassignments``: a target starts a reassignment (replicas = target + removing, the adding
  replicas appear at once, empty, in the dir named earlier through ``alter_log_dirs`` — answered
  ``ReplicaNotAvailableError`` as Kafka's LogManager does — or else the broker's roomiest dir); the
  original replica set cancels it, ``None`` cancels it (``NoReassignmentInProgressError`` when none
  is in flight); unknown brokers give ``InvalidReplicationAssignmentError``, a dead broker is accepted
  (as KRaft accepts any registered broker: the move waits for it). A move completes when
  told (:meth:`finish`), when :meth:`copy` has filled every new replica, or after ``complete_after``
  metadata reads (``None``: never by itself); completion switches the replica set to the target,
  keeps the leader if it stays in sync and otherwise elects the first in-sync replica.
* ``alter_log_dirs``: a dir other than the replica's starts a future replica (completes like a move);
  its current dir cancels the future; an unknown dir gives ``LogDirNotFoundError``.
* ``elect_preferred``: error code 0, 84 (not needed) or 80 (preferred replica dead or out of sync).
* ``describe_groups`` answers as Kafka 4.x answers DescribeGroups v6 (what kafka-python 3.x sends it): a
  classic group set with :meth:`set_group` with its state, protocol type and members (client id, host,
  assignment); a KIP-848 ``consumer`` group (``classic=False``) with ``GroupIdNotFoundError`` "Group G is not a
  classic group." and no members; a group it does not know with ``GroupIdNotFoundError`` "Group G not found.",
  state ``Dead``.
* configs: incremental SET / DELETE on brokers, APPEND / SUBTRACT on topic list configs; read-only broker
  configs (``static_cfg``: server.properties, e.g. ``broker.rack``, ``replica.selector.class``) are
  described with ``read_only`` and refused by ``set_broker_configs`` as Kafka refuses them.

Fault injection (attributes a test sets): ``stale_reads`` (the next N metadata reads return the
previous read), ``fail_next`` (the next N calls of a named port method raise :class:`AdminError` and
change nothing — e.g. a failed config apply), ``refuse`` (per-item errors for chosen partitions or
replicas: a partial submission), ``timeouts`` (brokers whose requests time out: any call that needs
one of them raises :class:`AdminError`). Dead brokers cannot be asked anything either.

Guarantee: every write is recorded (``calls``; reassignment targets counted in ``submissions`` and
``cancels``), so a test can assert what was sent, how often, and in which order. Reads return fresh
records: nothing a caller holds changes behind its back.

Cost: O(partitions) per metadata or log-dir read; everything else O(items of the call).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.nearest_reads import READ_ONLY_KEYS as READ_ONLY_BROKER_KEYS
from domain.throttles import BROKER_THROTTLE_KEYS, FOLLOWER_REPLICAS, LEADER_REPLICAS
from kafkaio.errors import AdminError, TopicExists
from kafkaio.port import GroupReader, KafkaCluster
from kafkaio.types import (
    TP,
    ConfigEntry,
    GroupDescription,
    GroupMember,
    LiveCluster,
    LogRead,
    LogRecord,
    PartitionMeta,
    Reassignment,
    ReplicaDir,
)

NONE, UNKNOWN_TOPIC_OR_PARTITION, PREFERRED_LEADER_NOT_AVAILABLE, ELECTION_NOT_NEEDED = 0, 3, 80, 84
DEFAULT_CAPACITY = 4_000_000_000_000
QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"})


@dataclass
class _Move:
    """A reassignment or a future replica in flight; ``reads_left`` metadata reads until it completes."""

    reads_left: int | None


@dataclass
class _Reassignment(_Move):
    target: list[int] = field(default_factory=list)
    original: list[int] = field(default_factory=list)


@dataclass
class _Future(_Move):
    log_dir: str = ""
    size: int = 0


@dataclass
class _Partition:
    replicas: list[int]
    leader: int
    isr: list[int]
    size: int
    dirs: dict[int, str]
    """broker -> log dir of its (current) replica."""
    copied: dict[int, int] = field(default_factory=dict)
    """broker -> bytes of a replica still being created by a reassignment (absent: complete)."""
    futures: dict[int, _Future] = field(default_factory=dict)
    reassignment: _Reassignment | None = None


class FakeKafkaCluster:
    """An in-memory cluster implementing :class:`kafkaio.port.KafkaCluster` (see the module docstring).

    ``brokers`` maps each broker id to its log dirs; ``racks`` optionally names each broker's rack.
    Topics are added with :meth:`add_topic`.
    """

    def __init__(self, brokers: Mapping[int, Sequence[str]], racks: Mapping[int, str] | None = None,
                 capacity_bytes: int = DEFAULT_CAPACITY, complete_after: int | None = None,
                 bootstrap_servers: str = "fake:9092") -> None:
        self.bootstrap_servers = bootstrap_servers
        self.log_dir_paths: dict[int, list[str]] = {b: list(d) for b, d in sorted(brokers.items())}
        self.racks = {b: (racks or {}).get(b, f"r{b}") for b in self.log_dir_paths}
        self.capacity: dict[tuple[int, str], int] = {(b, d): capacity_bytes
                                                     for b, ds in self.log_dir_paths.items() for d in ds}
        self.alive: set[int] = set(self.log_dir_paths)
        self.topics: dict[str, list[_Partition]] = {}
        self.broker_cfg: dict[int, dict[str, str]] = {b: {} for b in self.log_dir_paths}
        self.static_cfg: dict[int, dict[str, str]] = {b: {"broker.rack": self.racks[b]} for b in self.log_dir_paths}
        """Read-only configs per broker (server.properties); a test sets e.g. ``replica.selector.class``."""
        self.topic_cfg: dict[str, dict[str, str]] = {}
        self.quotas: dict[str, dict[str, float]] = {}
        """client id -> quota key -> bytes/s (set_client_quotas)."""
        self.groups: dict[str, GroupDescription] = {}
        """group id -> what DescribeGroups answers for it (:meth:`set_group`)."""
        self.preferred_dirs: dict[tuple[str, int, int], str] = {}
        self.complete_after = complete_after
        """Metadata reads after which a new move completes by itself (``None``: only when told or copied)."""
        # fault injection
        self.stale_reads = 0
        self.fail_next: Counter[str] = Counter()
        self.refuse: dict[Any, str] = {}
        self.timeouts: set[int] = set()
        # what was asked
        self.calls: list[tuple[str, Any]] = []
        self.submissions: Counter[TP] = Counter()
        self.cancels: Counter[TP] = Counter()
        self.reads = 0
        self.closed = False
        self._last: LiveCluster | None = None
        self.logs: dict[str, list[LogRecord]] = {}
        """topic -> records of the small logs kept on the cluster (shared between views: :meth:`view`)."""
        self.log_start: dict[str, int] = {}
        self._clock = [1_000_000]
        """The log leader's clock (ms), shared with every :meth:`view`."""

    # ------------------------------------------------------------------ building the cluster
    def add_topic(self, name: str, assignments: Sequence[Sequence[int]], size_bytes: int = 0,
                  log_dirs: Sequence[Sequence[str]] | None = None) -> None:
        """A topic whose partition ``i`` has replicas ``assignments[i]`` (first = leader), each replica
        ``size_bytes`` big, in ``log_dirs[i][j]`` (default: its broker's first dir)."""
        self.topics[name] = [self._new_partition(list(r), size_bytes, log_dirs[i] if log_dirs else None)
                             for i, r in enumerate(assignments)]

    def add_partitions(self, name: str, assignments: Sequence[Sequence[int]], size_bytes: int = 0) -> None:
        """Grow a topic (a topic gaining partitions mid-move)."""
        self.topics[name].extend(self._new_partition(list(r), size_bytes, None) for r in assignments)

    def delete_topic(self, name: str) -> None:
        """Remove a topic and its configs."""
        del self.topics[name]
        self.topic_cfg.pop(name, None)
        self.logs.pop(name, None)
        self.log_start.pop(name, None)

    def _new_partition(self, replicas: list[int], size: int, dirs: Sequence[str] | None) -> _Partition:
        alive = [b for b in replicas if b in self.alive]
        return _Partition(replicas, alive[0] if alive else -1, alive, size,
                          {b: (dirs[i] if dirs else self.log_dir_paths[b][0]) for i, b in enumerate(replicas)})

    def kill(self, broker: int) -> None:
        """The broker dies: it leaves every ISR; partitions it led elect the first in-sync replica."""
        self.alive.discard(broker)
        for p in self._partitions():
            p.isr = [b for b in p.isr if b != broker]
            if p.leader == broker:
                p.leader = p.isr[0] if p.isr else -1

    def revive(self, broker: int) -> None:
        """The broker comes back (its complete replicas rejoin the ISR at once)."""
        self.alive.add(broker)
        for p in self._partitions():
            if broker in p.replicas and broker in p.dirs and broker not in p.copied and broker not in p.isr:
                p.isr = [b for b in p.replicas if b in p.isr or b == broker]
            if p.leader == -1 and broker in p.isr:
                p.leader = broker

    # ------------------------------------------------------------------ driving moves
    def copy(self, nbytes: int) -> None:
        """Copy ``nbytes`` more into every replica being created and every future replica; moves whose
        copies are complete finish (as a reassignment does once its new replicas are in sync)."""
        for p in self._partitions():
            for b in list(p.copied):
                p.copied[b] = min(p.copied[b] + nbytes, p.size)
            for fut in p.futures.values():
                fut.size = min(fut.size + nbytes, p.size)
            if p.reassignment is not None and all(p.copied.get(b, p.size) >= p.size for b in p.copied):
                self._complete_reassignment(p)
            for b, fut in list(p.futures.items()):
                if fut.size >= p.size:
                    self._complete_future(p, b)

    def finish(self, tps: Iterable[TP] | None = None) -> None:
        """Complete the reassignments and future replicas of ``tps`` (default: all) now."""
        wanted = set(tps) if tps is not None else None
        for topic, index, p in self._indexed():
            if wanted is not None and (topic, index) not in wanted:
                continue
            if p.reassignment is not None:
                self._complete_reassignment(p)
            for b in list(p.futures):
                self._complete_future(p, b)

    def _complete_reassignment(self, p: _Partition) -> None:
        ra = p.reassignment
        assert ra is not None
        p.replicas = list(ra.target)
        p.copied.clear()
        p.dirs = {b: d for b, d in p.dirs.items() if b in ra.target}
        p.futures = {b: f for b, f in p.futures.items() if b in ra.target}
        p.isr = [b for b in ra.target if b in self.alive]
        p.reassignment = None
        if p.leader not in p.isr:
            p.leader = p.isr[0] if p.isr else -1

    def _complete_future(self, p: _Partition, broker: int) -> None:
        fut = p.futures.pop(broker)
        p.dirs[broker] = fut.log_dir

    def _tick(self) -> None:
        """One metadata read: moves counting reads get one closer to completion."""
        for _topic, _index, p in self._indexed():
            ra = p.reassignment
            if ra is not None and ra.reads_left is not None:
                ra.reads_left -= 1
                if ra.reads_left <= 0:
                    self._complete_reassignment(p)
            for b, fut in list(p.futures.items()):
                if fut.reads_left is not None:
                    fut.reads_left -= 1
                    if fut.reads_left <= 0:
                        self._complete_future(p, b)

    # ------------------------------------------------------------------ plumbing
    def _partitions(self) -> Iterable[_Partition]:
        for parts in self.topics.values():
            yield from parts

    def _indexed(self) -> Iterable[tuple[str, int, _Partition]]:
        for topic, parts in sorted(self.topics.items()):
            for i, p in enumerate(parts):
                yield topic, i, p

    def _get(self, tp: TP) -> _Partition | None:
        parts = self.topics.get(tp[0])
        return parts[tp[1]] if parts is not None and 0 <= tp[1] < len(parts) else None

    def _enter(self, method: str, brokers: Iterable[int] = ()) -> None:
        """Raise as the real adapter would: an injected failure, a broker that times out or is dead."""
        if self.fail_next[method] > 0:
            self.fail_next[method] -= 1
            raise AdminError(f"{method} failed: injected failure")
        for b in sorted(set(brokers)):
            if b in self.timeouts:
                raise AdminError(f"{method} failed: KafkaTimeoutError: broker {b} did not answer in time")
            if b not in self.alive:
                raise AdminError(f"{method} failed: NodeNotReadyError: broker {b} is not available")

    def close(self) -> None:
        """Release the connection (idempotent; a later call reconnects, as the real adapter does)."""
        self.closed = True

    # ------------------------------------------------------------------ reads
    def live(self) -> LiveCluster:
        """Alive brokers, every partition's replicas / leader / ISR, in-flight reassignments."""
        self._enter("live")
        if self.stale_reads > 0 and self._last is not None:
            self.stale_reads -= 1
            return self._last
        self.reads += 1
        self._tick()
        parts: dict[TP, PartitionMeta] = {}
        ras: dict[TP, Reassignment] = {}
        for topic, index, p in self._indexed():
            parts[(topic, index)] = PartitionMeta(topic, index, tuple(p.replicas), p.leader, tuple(p.isr))
            if p.reassignment is not None:
                orig, target = p.reassignment.original, p.reassignment.target
                ras[(topic, index)] = Reassignment(tuple(p.replicas), tuple(b for b in target if b not in orig),
                                                   tuple(b for b in orig if b not in target))
        self._last = LiveCluster(frozenset(self.alive), parts, {t: len(ps) for t, ps in self.topics.items()}, ras,
                                 {b: self.racks[b] for b in sorted(self.alive)})
        return self._last

    def log_dirs(self, brokers: Iterable[int], topics: Iterable[str] | None = None
                 ) -> dict[tuple[str, int, int], list[ReplicaDir]]:
        """``(topic, partition, broker) -> [current dir, future dir]`` for the given brokers."""
        ids = set(brokers)
        if not ids:
            return {}
        self._enter("log_dirs", ids)
        wanted = set(topics) if topics is not None else None
        out: dict[tuple[str, int, int], list[ReplicaDir]] = {}
        for topic, index, p in self._indexed():
            if wanted is not None and topic not in wanted:
                continue
            leader_size = p.size
            for b, d in sorted(p.dirs.items()):
                if b not in ids:
                    continue
                size = p.copied.get(b, p.size)
                entries = [ReplicaDir(d, size, max(leader_size - size, 0), False)]
                fut = p.futures.get(b)
                if fut is not None:
                    entries.append(ReplicaDir(fut.log_dir, fut.size, max(leader_size - fut.size, 0), True))
                out[(topic, index, b)] = entries
        return out

    def disk_capacity(self, brokers: Iterable[int]) -> dict[tuple[int, str], tuple[int, int]]:
        """``(broker, log dir) -> (total bytes, usable bytes)``."""
        ids = set(brokers)
        if not ids:
            return {}
        self._enter("disk_capacity", ids)
        used: Counter[tuple[int, str]] = Counter()
        for p in self._partitions():
            for b, d in p.dirs.items():
                used[(b, d)] += p.copied.get(b, p.size)
            for b, fut in p.futures.items():
                used[(b, fut.log_dir)] += fut.size
        return {(b, d): (total, max(total - used[(b, d)], 0)) for (b, d), total in sorted(self.capacity.items())
                if b in ids}

    def broker_configs(self, brokers: Iterable[int], keys: Iterable[str] = BROKER_THROTTLE_KEYS
                       ) -> dict[int, dict[str, str]]:
        """Dynamically set values of ``keys`` per broker (keys at their default absent)."""
        ids = sorted(set(brokers))
        if not ids:
            return {}
        self._enter("broker_configs", ids)
        wanted = set(keys)
        return {b: {k: v for k, v in self.broker_cfg.get(b, {}).items() if k in wanted} for b in ids}

    def describe_broker_configs(self, brokers: Iterable[int], keys: Iterable[str]
                                ) -> dict[int, dict[str, ConfigEntry]]:
        """Every named config per broker: read-only ones (set or not), dynamic ones, else the default."""
        ids = sorted(set(brokers))
        wanted = sorted(set(keys))
        if not ids or not wanted:
            return {}
        self._enter("describe_broker_configs", ids)
        out: dict[int, dict[str, ConfigEntry]] = {}
        for b in ids:
            entries: dict[str, ConfigEntry] = {}
            for k in wanted:
                if k in READ_ONLY_BROKER_KEYS:
                    value = self.static_cfg.get(b, {}).get(k)
                    entries[k] = ConfigEntry(value, "STATIC_BROKER_CONFIG" if value is not None else "DEFAULT_CONFIG",
                                             True)
                elif k in self.broker_cfg.get(b, {}):
                    entries[k] = ConfigEntry(self.broker_cfg[b][k], "DYNAMIC_BROKER_CONFIG", k in BROKER_THROTTLE_KEYS)
                elif k not in BROKER_THROTTLE_KEYS:  # Kafka describes its quota-type rates only when set
                    entries[k] = ConfigEntry(None, "DEFAULT_CONFIG", False)
            out[b] = entries
        return out

    def topic_configs(self, topics: Iterable[str], keys: Iterable[str] = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
                      ) -> dict[str, dict[str, str]]:
        """Explicitly set values of ``keys`` per existing topic."""
        names = sorted(set(topics))
        if not names:
            return {}
        self._enter("topic_configs")
        wanted = set(keys)
        return {t: {k: v for k, v in self.topic_cfg.get(t, {}).items() if k in wanted and v}
                for t in names if t in self.topics}

    # ------------------------------------------------------------------ writes
    def alter_reassignments(self, targets: Mapping[TP, list[int] | None]) -> dict[TP, str | None]:
        """Submit (a replica list) or cancel (``None``) reassignments; per-partition error names."""
        if not targets:
            return {}
        self._enter("alter_reassignments")
        self.calls.append(("alter_reassignments", dict(targets)))
        out: dict[TP, str | None] = {}
        for tp, replicas in targets.items():
            out[tp] = self._reassign(tp, replicas)
            if out[tp] is None:
                (self.submissions if replicas is not None else self.cancels)[tp] += 1
        return out

    def _reassign(self, tp: TP, replicas: list[int] | None) -> str | None:
        if tp in self.refuse:
            return self.refuse[tp]
        p = self._get(tp)
        if p is None:
            return "UnknownTopicOrPartitionError"
        if replicas is None or (p.reassignment is not None and list(replicas) == p.reassignment.original):
            if p.reassignment is None:
                return "NoReassignmentInProgressError"
            self._cancel(p)
            return None
        if not replicas or len(set(replicas)) != len(replicas) or any(b not in self.log_dir_paths for b in replicas):
            return "InvalidReplicationAssignmentError"
        original = p.reassignment.original if p.reassignment is not None else list(p.replicas)
        if list(replicas) == original:
            return None  # nothing to do
        if p.reassignment is not None and list(replicas) == p.reassignment.target:
            return None  # the same target again: the move in flight goes on
        adding = [b for b in replicas if b not in original]
        for b in adding:
            if b not in p.dirs:
                preferred = self.preferred_dirs.pop((tp[0], tp[1], b), None)
                p.dirs[b] = preferred if preferred in self.log_dir_paths[b] else self._roomiest(b)
                p.copied[b] = 0
        for b in [b for b in p.dirs if b not in original and b not in adding]:
            del p.dirs[b]
            p.copied.pop(b, None)
        p.reassignment = _Reassignment(self.complete_after, list(replicas), original)
        p.replicas = list(replicas) + [b for b in original if b not in replicas]
        p.isr = [b for b in p.isr if b in original]
        if all(b in p.isr for b in replicas):  # nothing to copy (a reorder, a shrink): Kafka completes it at once
            self._complete_reassignment(p)
        return None

    def _cancel(self, p: _Partition) -> None:
        assert p.reassignment is not None
        orig = p.reassignment.original
        p.reassignment = None
        p.replicas = list(orig)
        p.isr = [b for b in orig if b in p.isr]
        for b in [b for b in p.dirs if b not in orig]:
            del p.dirs[b]
            p.copied.pop(b, None)
            p.futures.pop(b, None)
        if p.leader not in orig:
            alive = [b for b in p.isr if b in self.alive]
            p.leader = alive[0] if alive else -1

    def _roomiest(self, broker: int) -> str:
        usable = self.disk_capacity([broker]) if broker in self.alive and broker not in self.timeouts else {}
        return max(self.log_dir_paths[broker], key=lambda d: usable.get((broker, d), (0, 0))[1])

    def alter_log_dirs(self, moves: Mapping[tuple[str, int, int], str]) -> dict[tuple[str, int, int], str | None]:
        """KIP-113 moves ``(topic, partition, broker) -> log dir``; per-replica error names."""
        if not moves:
            return {}
        self._enter("alter_log_dirs", {k[2] for k in moves})
        self.calls.append(("alter_log_dirs", dict(moves)))
        out: dict[tuple[str, int, int], str | None] = {}
        for key, path in moves.items():
            out[key] = self._move_dir(key, path)
        return out

    def _move_dir(self, key: tuple[str, int, int], path: str) -> str | None:
        topic, index, broker = key
        if key in self.refuse:
            return self.refuse[key]
        if path not in self.log_dir_paths.get(broker, []):
            return "LogDirNotFoundError"
        p = self._get((topic, index))
        if p is None:
            return "UnknownTopicOrPartitionError"
        if broker not in p.dirs:
            self.preferred_dirs[key] = path  # as Kafka's LogManager: used when the replica is created
            return "ReplicaNotAvailableError"
        if p.dirs[broker] == path:
            p.futures.pop(broker, None)
        elif broker not in p.futures or p.futures[broker].log_dir != path:
            p.futures[broker] = _Future(self.complete_after, path, 0)
        return None

    def elect_preferred(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """KIP-460 preferred-leader elections; per-partition error codes."""
        tps = list(partitions)
        if not tps:
            return {}
        self._enter("elect_preferred")
        self.calls.append(("elect_preferred", tps))
        out: dict[TP, int] = {}
        for tp in tps:
            p = self._get(tp)
            if p is None:
                out[tp] = UNKNOWN_TOPIC_OR_PARTITION
            elif p.leader == p.replicas[0]:
                out[tp] = ELECTION_NOT_NEEDED
            elif p.replicas[0] not in self.alive or p.replicas[0] not in p.isr:
                out[tp] = PREFERRED_LEADER_NOT_AVAILABLE
            else:
                p.leader = p.replicas[0]
                out[tp] = NONE
        return out

    def set_broker_configs(self, changes: Mapping[int, Mapping[str, str | None]]) -> None:
        """Incremental SET (a value) / DELETE (``None``) of broker dynamic configs."""
        todo = {b: dict(cfg) for b, cfg in changes.items() if cfg}
        if not todo:
            return
        self._enter("set_broker_configs", todo)
        frozen = sorted({k for cfg in todo.values() for k in cfg} & READ_ONLY_BROKER_KEYS)
        if frozen:
            raise AdminError(f"setting broker configs failed: InvalidConfigurationError: "
                             f"Cannot update these configs dynamically: {frozen}")
        self.calls.append(("set_broker_configs", todo))
        for b, cfg in todo.items():
            current = self.broker_cfg.setdefault(b, {})
            for k, v in cfg.items():
                if v is None:
                    current.pop(k, None)
                else:
                    current[k] = v

    def alter_topic_lists(self, topic: str, key: str, append: Iterable[str] = (),
                          subtract: Iterable[str] = ()) -> None:
        """Incremental APPEND / SUBTRACT on a list-valued topic config (an emptied list is removed)."""
        add, sub = set(append), set(subtract)
        if not add and not sub:
            return
        self._enter("alter_topic_lists")
        if topic not in self.topics:
            raise AdminError(f"altering topic configs failed: UnknownTopicOrPartitionError: {topic}")
        _check_topic_config(key, ",".join(sorted(add)))
        self.calls.append(("alter_topic_lists", (topic, key, sorted(add), sorted(sub))))
        cfg = self.topic_cfg.setdefault(topic, {})
        entries = [e for e in cfg.get(key, "").split(",") if e and e not in sub]
        entries += sorted(e for e in add if e not in entries)
        if entries:
            cfg[key] = ",".join(entries)
        else:
            cfg.pop(key, None)

    def set_topic_configs(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """Incremental SET (a value) / DELETE (``None``) of topic configs."""
        todo = {t: dict(cfg) for t, cfg in changes.items() if cfg}
        if not todo:
            return
        self._enter("set_topic_configs")
        self.calls.append(("set_topic_configs", todo))
        for topic, cfg in todo.items():
            if topic not in self.topics:
                raise AdminError(f"altering topic configs failed: UnknownTopicOrPartitionError: {topic}")
            for k, v in cfg.items():
                if v is not None:
                    _check_topic_config(k, v)
        for topic, cfg in todo.items():
            current = self.topic_cfg.setdefault(topic, {})
            for k, v in cfg.items():
                if v is None:
                    current.pop(k, None)
                else:
                    current[k] = v

    def set_client_quotas(self, client_id: str, quotas: Mapping[str, float | None]) -> None:
        """Set (a rate) / remove (``None``) client-id quotas."""
        if not quotas:
            return
        self._enter("set_client_quotas")
        for k, v in quotas.items():  # AlterClientQuotas' refusals (INVALID_REQUEST, Kafka's messages)
            if k not in QUOTA_KEYS:
                raise AdminError(f"alter client quota {client_id}/{k}: Invalid configuration key {k}")
            if v is not None and not v > 0:
                raise AdminError(f"alter client quota {client_id}/{k}: Quota {k} must be greater than 0")
        self.calls.append(("set_client_quotas", (client_id, dict(quotas))))
        current = self.quotas.setdefault(client_id, {})
        for k, v in quotas.items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v


    # ------------------------------------------------------------------ consumer groups
    def set_group(self, group: str, members: Sequence[tuple[str, Sequence[TP]]] = (), classic: bool = True,
                  state: str | None = None, protocol_type: str = "consumer") -> None:
        """A consumer group: ``members`` as ``(client id, assigned partitions)`` (member ids ``<client>-<n>``,
        host ``/127.0.0.1``); ``classic=False`` makes it a KIP-848 group, which DescribeGroups does not describe.
        The state defaults to ``Stable`` with members and ``Empty`` without."""
        if not classic:
            self.groups[group] = GroupDescription(group, "Dead", "", (),
                                                  f"GroupIdNotFoundError: Group {group} is not a classic group.")
            return
        ms = tuple(GroupMember(f"{client}-{i}", client, "/127.0.0.1", tuple(sorted(tps)))
                   for i, (client, tps) in enumerate(members))
        self.groups[group] = GroupDescription(group, state or ("Stable" if ms else "Empty"), protocol_type, ms)

    def describe_groups(self, groups: Iterable[str]) -> dict[str, GroupDescription]:
        """DescribeGroups v6 of ``groups`` (see the module docstring)."""
        wanted = sorted(set(groups))
        self._enter("describe_groups")
        self.calls.append(("describe_groups", tuple(wanted)))
        return {g: self.groups.get(g) or GroupDescription(g, "Dead", "", (),
                                                          f"GroupIdNotFoundError: Group {g} not found.")
                for g in wanted}

    # ------------------------------------------------------------------ a small log on the cluster
    @property
    def clock_ms(self) -> int:
        """The log leader's clock (ms) stamped on appended records (a test moves it)."""
        return self._clock[0]

    @clock_ms.setter
    def clock_ms(self, value: int) -> None:
        self._clock[0] = int(value)

    def create_topic(self, topic: str, assignment: Mapping[int, Sequence[int]],
                     configs: Mapping[str, str] | None = None) -> None:
        """A new topic with exactly ``assignment`` (partition -> replicas); ``TopicExists`` if it exists, an
        ``AdminError`` (nothing created) for partitions not numbered 0..n-1 or an unknown or dead broker."""
        self._enter("create_topic")
        if topic in self.topics:
            raise TopicExists(f"topic {topic!r} already exists")
        parts = sorted(assignment)
        if parts != list(range(len(parts))) or not parts:
            raise AdminError(f"creating topic {topic} failed: InvalidReplicationAssignmentError (partitions {parts})")
        bad = sorted({b for r in assignment.values() for b in r if b not in self.alive})
        if bad or any(len(set(r)) != len(r) or not r for r in assignment.values()) \
                or len({len(r) for r in assignment.values()}) > 1:  # KRaft: one replication factor per topic
            raise AdminError(f"creating topic {topic} failed: InvalidReplicationAssignmentError (brokers {bad})")
        self.add_topic(topic, [list(assignment[p]) for p in parts])
        if configs:
            self.topic_cfg[topic] = dict(configs)
        self.calls.append(("create_topic", (topic, {p: list(r) for p, r in assignment.items()})))

    def ensure_log(self, topic: str, configs: Mapping[str, str]) -> None:
        """Create the one-partition ``topic`` with ``configs`` unless it exists: a topic like any other, as on
        Kafka (in the metadata, replicas on the first min(3, alive) brokers, its configs described)."""
        self._enter("ensure_log")
        if topic not in self.topics:
            self.add_topic(topic, [sorted(self.alive)[:3]])
            self.topic_cfg[topic] = dict(configs)
        self.logs.setdefault(topic, [])

    def append_log(self, topic: str, key: bytes, value: bytes) -> tuple[int, int]:
        """Append one record stamped with ``clock_ms``; (offset, time)."""
        self._enter("append_log")
        if topic not in self.logs:
            raise AdminError(f"appending to {topic} failed: UnknownTopicOrPartitionError")
        log = self.logs[topic]
        offset = log[-1].offset + 1 if log else self.log_start.get(topic, 0)
        log.append(LogRecord(offset, self.clock_ms, value))
        self.calls.append(("append_log", (topic, offset)))
        return offset, self.clock_ms

    def read_log(self, topic: str, start: int = 0) -> LogRead:
        """Records from ``start`` (or the log's start, if later) to the end."""
        self._enter("read_log")
        if topic not in self.logs:
            raise AdminError(f"reading {topic} failed: UnknownTopicOrPartitionError")
        first = self.log_start.get(topic, 0)
        begin = max(start, first)
        records = tuple(r for r in self.logs[topic] if r.offset >= begin)
        end = self.logs[topic][-1].offset + 1 if self.logs[topic] else first
        return LogRead(begin, end, records)

    def view(self) -> FakeKafkaCluster:
        """A second client of this same cluster (its own call log and fault injection, shared state)."""
        other = FakeKafkaCluster.__new__(FakeKafkaCluster)
        other.__dict__.update(self.__dict__)
        other.calls, other.fail_next, other.refuse = [], Counter(), {}
        other.submissions, other.cancels = Counter(), Counter()
        other.stale_reads, other._last = 0, None
        return other


def _check_topic_config(key: str, value: str) -> None:
    """Refuse what Kafka's topic config validation refuses for the keys Guardian sets (INVALID_CONFIG): a
    throttled-replica list that is not ``*`` or ``partition:broker,...``, a non-integer ``*.ms`` / ``*.bytes``."""
    if key in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
        entries = [e.strip() for e in value.split(",")]
        if value.strip() != "*" and not all(re.fullmatch(r"(\d+:\d+)?", e) for e in entries):
            raise AdminError(f"altering topic configs failed: InvalidConfigurationError: Invalid value {value} for "
                             f"configuration {key}: must be the format [partitionId]:[brokerId],... or *")
    elif key.endswith((".ms", ".bytes")) and not re.fullmatch(r"-?\d+", value.strip()):
        raise AdminError(f"altering topic configs failed: InvalidConfigurationError: Invalid value {value} for "
                         f"configuration {key}: Not a number of type LONG")


def _conforms(fake: FakeKafkaCluster) -> KafkaCluster:
    return fake  # mypy checks here that the fake implements the port


def _reads_groups(fake: FakeKafkaCluster) -> GroupReader:
    return fake  # ... and the consumer-group port
