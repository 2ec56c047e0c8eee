"""kafkasim topology model: clusters, brokers, log dirs, topics, partitions, configs and quotas.

This is kafkasim's own, self-contained model (it does not import the control plane's domain).
Mutations go through :class:`Cluster` methods, which validate input and raise
:class:`SimError` carrying a Kafka error code, so the wire layer can turn any failure into a
proper Kafka error response.  Physics state (sizes, offsets, rates, counters) lives in
:mod:`kafkasim.physics.engine` arrays indexed by ``Partition.slot`` and ``Disk.gidx``; the config names,
defaults and throttle-value parsers are :mod:`kafkasim.cluster.configs`.  Guarantee: a mutation fails only with
a :class:`SimError` carrying a Kafka error code.  Cost: O(partitions touched) per call, O(partitions) for a broker's
death or a log dir's failure.

Partition-level throttle extension
----------------------------------
Clusters created with ``partition_throttle=True`` accept two extra *topic* configs that vanilla
Kafka rejects (``INVALID_CONFIG``):

* ``guardian.partition.throttle.produce.bytes.per.second``
* ``guardian.partition.throttle.fetch.bytes.per.second``

Each value is a comma-separated list of ``partition:bytes_per_second`` (``*`` as partition applies
to every partition), e.g. ``"0:1048576,3:524288"``.  The capability is advertised as the read-only
broker config ``guardian.partition.throttle.enable=true``; on other clusters that key is absent and
the topic keys are rejected.
"""

from __future__ import annotations

import math
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kafkasim.cluster.configs import (
    BROKER_DYNAMIC_KEYS,
    BROKER_STATIC_KEYS,
    PT_FETCH,
    PT_PRODUCE,
    RACK_AWARE_SELECTOR,
    REPLICA_SELECTOR,
    TOPIC_CONFIG_DEFAULTS,
    parse_partition_rates,
    parse_throttled_replicas,
)
from kafkasim.cluster.epochs import assign as assign_epoch
from kafkasim.cluster.epochs import truncate_from_start

REASSIGNMENT_LOG_MAX = 10_000
"""Entries of :attr:`Cluster.reassignment_log` kept (oldest dropped; the per-partition counts never are)."""

# Kafka error codes used by kafkasim
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
REPLICA_NOT_AVAILABLE = 9
COORDINATOR_NOT_AVAILABLE = 15
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
INVALID_REQUEST = 42
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
UNSUPPORTED_VERSION = 35
POLICY_VIOLATION = 44
KAFKA_STORAGE_ERROR = 56
LOG_DIR_NOT_FOUND = 57
UNKNOWN_SERVER_ERROR = -1
BROKER_NOT_AVAILABLE = 8
ELECTION_NOT_NEEDED = 84
PREFERRED_LEADER_NOT_AVAILABLE = 80
NO_REASSIGNMENT_IN_PROGRESS = 85
INVALID_RECORD = 87
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
# group coordinator errors (kafkasim.broker.groups)
OFFSET_METADATA_TOO_LARGE = 12
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81

class SimError(Exception):
    """A failure with the Kafka error code to report on the wire."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Disk:
    """One log dir of a broker; ``gidx`` indexes the engine's disk arrays."""

    gidx: int
    broker_id: int
    path: str
    device: str
    kind: str
    capacity_bytes: float
    max_bytes_per_s: float
    base_latency_ms: float
    offline: bool = False


@dataclass
class Broker:
    """A simulated broker; ``gidx`` indexes the engine's broker arrays."""

    gidx: int
    cluster: str
    id: int
    idc: str
    rack: str
    pool: str
    memory_bytes: float
    disks: list[Disk]
    host: str = "127.0.0.1"
    port: int = 0
    metrics_port: int = 0
    alive: bool = True
    configs: dict[str, str] = field(default_factory=dict)
    static_configs: dict[str, str] = field(default_factory=dict)
    """Read-only configs from the broker's server.properties (:data:`BROKER_STATIC_KEYS`)."""
    revivals: int = 0
    """Times the broker was brought back from the dead (a restart: its schedules start again)."""

    @property
    def rack_aware_reads(self) -> bool:
        """True when this broker, as a leader, names same-rack preferred read replicas (KIP-392)."""
        return self.static_configs.get(REPLICA_SELECTOR) == RACK_AWARE_SELECTOR

    def disk_by_path(self, path: str) -> Disk | None:
        """Return the log dir with this path, or None."""
        for d in self.disks:
            if d.path == path:
                return d
        return None


@dataclass
class Reassignment:
    """An in-flight KIP-455 reassignment of one partition."""

    target: list[int]
    original: list[int]
    adding: list[int]
    removing: list[int]
    copied: dict[int, float] = field(default_factory=dict)
    dest_disk: dict[int, int] = field(default_factory=dict)


@dataclass
class FutureReplica:
    """An in-flight KIP-113 intra-broker move of one replica to another log dir."""

    dest_disk: int
    copied: float = 0.0


@dataclass
class Partition:
    """A partition; its physics state lives in engine slot ``slot``."""

    topic: str
    index: int
    slot: int
    replicas: list[int]
    leader: int
    isr: list[int]
    log_dirs: dict[int, int]
    leader_epoch: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)])
    """Leader-epoch history ``(epoch, start offset)`` (:mod:`kafkasim.cluster.epochs`); only :meth:`Cluster.set_leader`
    changes it."""
    reassignment: Reassignment | None = None
    futures: dict[int, FutureReplica] = field(default_factory=dict)
    batches: deque[tuple[int, int, int, bytes]] = field(default_factory=deque)
    batch_bytes: int = 0
    evicted_early: int = 0
    catchup: dict[int, float] = field(default_factory=dict)  # revived follower -> bytes still to fetch
    down_mark: dict[int, float] = field(default_factory=dict)  # dead follower -> bytes_in_total at death


@dataclass
class Topic:
    """A topic with its configs (only non-default values are stored)."""

    name: str
    topic_id: uuid.UUID
    partitions: list[Partition]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False
    pool: str = "shared"
    placement: dict[str, int] | None = None


QuotaEntity = tuple[tuple[str, str | None], ...]


class Cluster:
    """One simulated Kafka cluster: brokers, topics, configs, quotas, reassignments."""

    def __init__(self, name: str, partition_throttle: bool = False, engine: Any = None) -> None:
        self.name = name
        self.cluster_id = uuid.uuid5(uuid.NAMESPACE_DNS, f"kafkasim.{name}").hex[:22]
        self.partition_throttle = partition_throttle
        self.brokers: dict[int, Broker] = {}
        self.topics: dict[str, Topic] = {}
        self.quotas: dict[QuotaEntity, dict[str, float]] = {}
        self.engine: Any = engine
        self.next_producer_id = 1000
        self.topics_created = 0
        self.max_batch_bytes_per_partition = 4 * 1024 * 1024
        self.reassignment_log: deque[dict[str, Any]] = deque(maxlen=REASSIGNMENT_LOG_MAX)
        self.reassignment_counts: dict[str, dict[str, int]] = {}
        self.reassignment_seq = 0
        self.remote_storage = False
        """``remote.log.storage.system.enable``: a remote log manager runs (:mod:`kafkasim.tiering.tiered`)."""
        self.preferred_dirs: dict[tuple[str, int, int], int] = {}
        """``(topic, partition, broker) -> disk``: where a replica not hosted yet will be created (KIP-113)."""

    # ---------------------------------------------------------------- queries
    def alive_brokers(self) -> list[Broker]:
        """Alive brokers sorted by id."""
        return [b for _, b in sorted(self.brokers.items()) if b.alive]

    def controller_id(self) -> int:
        """Lowest alive broker id (-1 when all are dead)."""
        alive = self.alive_brokers()
        return alive[0].id if alive else -1

    def partition(self, topic: str, index: int) -> Partition:
        """Look a partition up or raise UNKNOWN_TOPIC_OR_PARTITION."""
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            raise SimError(UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{index}")
        return t.partitions[index]

    def topic_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        """Find a topic by its id."""
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def topic_config(self, topic: str, key: str) -> str:
        """Effective topic config value (explicit or default)."""
        t = self.topics[topic]
        return t.configs.get(key, TOPIC_CONFIG_DEFAULTS.get(key, ""))

    def broker_rate(self, broker_id: int, key: str) -> float:
        """A broker's dynamic rate config in bytes/s (inf when unset)."""
        b = self.brokers.get(broker_id)
        if b is None or key not in b.configs:
            return math.inf
        try:
            v = float(b.configs[key])
        except ValueError:
            return math.inf
        return v if v >= 0 else math.inf

    def replica_offline(self, p: Partition, broker_id: int) -> bool:
        """True when ``broker_id``'s replica of ``p`` lives on an offline log dir (KIP-112: the broker runs on,
        the replica is offline until the broker restarts without that dir)."""
        dg = p.log_dirs.get(broker_id)
        return dg is not None and any(d.gidx == dg and d.offline for d in self.brokers[broker_id].disks)

    def offline_replicas(self, p: Partition) -> list[int]:
        """Replicas Metadata lists as offline: on a dead broker or on an offline log dir."""
        return [r for r in p.replicas if not self.brokers[r].alive or self.replica_offline(p, r)]

    # ---------------------------------------------------------------- topics
    def _pick_disk(self, broker_id: int, slot_hint: int) -> int:
        b = self.brokers[broker_id]
        online = [d for d in b.disks if not d.offline] or b.disks
        if self.engine is not None:
            best = min(online, key=lambda d: (self.engine.d_parts[d.gidx], d.gidx))
            self.engine.d_parts[best.gidx] += 1
            return best.gidx
        return online[slot_hint % len(online)].gidx

    def _auto_assign(self, n: int, rf: int, start: int) -> list[list[int]]:
        ids = [b.id for b in self.alive_brokers()]
        if rf < 1 or rf > len(ids):
            raise SimError(INVALID_REPLICATION_FACTOR,
                           f"Replication factor: {rf} larger than available brokers: {len(ids)}.")
        out = []
        for i in range(n):
            first = (start + i) % len(ids)
            out.append([ids[(first + k) % len(ids)] for k in range(rf)])
        return out

    def validate_assignment(self, replicas: list[int]) -> None:
        """Raise INVALID_REPLICA_ASSIGNMENT for duplicates, unknown brokers or empty lists."""
        if not replicas:
            raise SimError(INVALID_REPLICA_ASSIGNMENT, "empty replica list")
        if len(set(replicas)) != len(replicas):
            raise SimError(INVALID_REPLICA_ASSIGNMENT, f"duplicate brokers in {replicas}")
        unknown = [r for r in replicas if r not in self.brokers]
        if unknown:
            raise SimError(INVALID_REPLICA_ASSIGNMENT, f"unknown brokers {unknown}")

    def validate_topic_configs(self, configs: dict[str, str | None]) -> None:
        """Reject unknown keys and malformed values with INVALID_CONFIG."""
        for k, v in configs.items():
            if k in (PT_PRODUCE, PT_FETCH):
                if not self.partition_throttle:
                    raise SimError(INVALID_CONFIG, f"Unknown topic config name: {k}")
                try:
                    parse_partition_rates(v or "")
                except ValueError as e:
                    raise SimError(INVALID_CONFIG, f"Invalid value {v!r} for {k}: {e}") from e
                continue
            if k not in TOPIC_CONFIG_DEFAULTS:
                raise SimError(INVALID_CONFIG, f"Unknown topic config name: {k}")
            if k.endswith("throttled.replicas") and v is not None:
                try:
                    parse_throttled_replicas(v)
                except ValueError as e:
                    raise SimError(INVALID_CONFIG, f"Invalid value {v!r} for {k}") from e
            if k == "message.timestamp.type" and v is not None and v not in ("CreateTime", "LogAppendTime"):
                raise SimError(INVALID_CONFIG, f"Invalid value {v!r} for {k}")
            if k == "remote.storage.enable" and v is not None:
                if v not in ("true", "false"):
                    raise SimError(INVALID_CONFIG, f"Invalid value {v!r} for {k}")
                if v == "true" and not self.remote_storage:
                    raise SimError(INVALID_CONFIG, "Tiered Storage functionality is disabled in the broker. "
                                                   "Topic cannot be configured with remote log storage.")
            if k in ("retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "min.insync.replicas",
                     "local.retention.ms", "local.retention.bytes") and v:
                try:
                    int(v)
                except ValueError as e:
                    raise SimError(INVALID_CONFIG, f"Invalid value {v!r} for {k}") from e

    def create_topic(self, name: str, num_partitions: int, rf: int,
                     assignments: dict[int, list[int]] | None = None,
                     configs: dict[str, str | None] | None = None, validate_only: bool = False,
                     internal: bool = False) -> Topic:
        """Create a topic; explicit ``assignments`` win over ``num_partitions``/``rf``."""
        if not name or len(name) > 249 or any(not (c.isalnum() or c in "._-") for c in name):
            raise SimError(INVALID_TOPIC_EXCEPTION, f"invalid topic name {name!r}")
        if name in self.topics:
            raise SimError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        configs = dict(configs or {})
        self.validate_topic_configs(configs)
        if assignments:
            idx = sorted(assignments)
            if idx != list(range(len(idx))):
                raise SimError(INVALID_REPLICA_ASSIGNMENT, "partition indexes must be 0..n-1")
            plan = [assignments[i] for i in idx]
            for reps in plan:
                self.validate_assignment(reps)
            if len({len(reps) for reps in plan}) > 1:  # as KRaft's controller: one replication factor per topic
                raise SimError(INVALID_REPLICA_ASSIGNMENT,
                               f"The manual partition assignment includes a partition with {len(plan[-1])} "
                               f"replica(s), but this is not consistent with previous partitions, which have "
                               f"{len(plan[0])} replica(s).")
        else:
            if num_partitions == -1:
                num_partitions = 1
            if rf == -1:
                rf = min(3, len(self.alive_brokers()))
            if num_partitions < 1:
                raise SimError(INVALID_PARTITIONS, f"Number of partitions must be positive: {num_partitions}")
            plan = self._auto_assign(num_partitions, rf, start=len(self.topics))
        if validate_only:
            return Topic(name, uuid.uuid4(), [], {k: v for k, v in configs.items() if v is not None})
        self.topics_created += 1
        t = Topic(name, uuid.uuid5(uuid.NAMESPACE_URL, f"{self.name}/{name}/{self.topics_created}"), [],
                  {k: v for k, v in configs.items() if v is not None}, internal)
        self.topics[name] = t
        for reps in plan:
            self._add_partition(t, reps)
        if self.engine is not None:
            self.engine.mark_dirty()
        return t

    def _add_partition(self, t: Topic, reps: list[int]) -> Partition:
        slot = self.engine.alloc_slot(self.name) if self.engine is not None else len(t.partitions)
        dirs = {b: self._pick_disk(b, slot + i) for i, b in enumerate(reps)}
        alive = [b for b in reps if self.brokers[b].alive]
        p = Partition(t.name, len(t.partitions), slot, list(reps), alive[0] if alive else -1,
                      alive, dirs)
        t.partitions.append(p)
        return p

    def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None,
                          validate_only: bool = False) -> None:
        """Grow a topic to ``count`` partitions."""
        t = self.topics.get(name)
        if t is None:
            raise SimError(UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}")
        add = count - len(t.partitions)
        if add <= 0:
            raise SimError(INVALID_PARTITIONS,
                           f"Topic currently has {len(t.partitions)} partitions, {count} must be greater")
        rf = len(t.partitions[0].replicas) if t.partitions else 1
        if assignments is not None:
            if len(assignments) != add:
                raise SimError(INVALID_REPLICA_ASSIGNMENT, f"expected {add} assignments")
            for reps in assignments:
                self.validate_assignment(reps)
            plan = assignments
        else:
            plan = self._auto_assign(add, rf, start=len(t.partitions))
        if validate_only:
            return
        for reps in plan:
            self._add_partition(t, reps)
        if self.engine is not None:
            self.engine.mark_dirty()

    def delete_topic(self, name: str) -> Topic:
        """Delete a topic and free its engine slots."""
        t = self.topics.pop(name, None)
        if t is None:
            raise SimError(UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}")
        if self.engine is not None:
            for p in t.partitions:
                self.engine.free_slot(p.slot)
                self.engine.batch_bytes -= p.batch_bytes
                p.batches.clear()
                p.batch_bytes = 0
            self.engine.mark_dirty()
        return t

    # ---------------------------------------------------------------- configs
    def alter_topic_configs(self, name: str, ops: list[tuple[str, int, str | None]],
                            validate_only: bool = False) -> None:
        """Apply (key, op, value) ops; op 0=SET 1=DELETE 2=APPEND 3=SUBTRACT, -1 = replace-all."""
        t = self.topics.get(name)
        if t is None:
            raise SimError(UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}")
        new = self._apply_ops(dict(t.configs), ops)
        self.validate_topic_configs(dict(new.items()))
        if t.configs.get("remote.storage.enable") == "true" and new.get("remote.storage.enable") != "true":
            raise SimError(INVALID_CONFIG, "It is invalid to disable remote storage without deleting remote data. "
                                           "If you want to keep the remote data and turn to read only, set "
                                           "`remote.storage.copy.disable=true`.")
        if not validate_only:
            t.configs = new
            if self.engine is not None:
                self.engine.mark_dirty()

    def alter_broker_configs(self, broker_name: str, ops: list[tuple[str, int, str | None]],
                             validate_only: bool = False) -> None:
        """Apply dynamic broker config ops to one broker (or all when the name is empty)."""
        targets = list(self.brokers.values())
        if broker_name:
            try:
                bid = int(broker_name)
            except ValueError as e:
                raise SimError(INVALID_REQUEST, f"bad broker id {broker_name!r}") from e
            if bid not in self.brokers:
                raise SimError(INVALID_REQUEST, f"unknown broker {bid}")
            targets = [self.brokers[bid]]
        frozen = sorted({k for k, _, _ in ops if k in BROKER_STATIC_KEYS or k in ("broker.rack", "broker.id",
                                                                                     "log.dirs")})
        if frozen:  # as Kafka's ConfigAdminManager: server.properties-only keys are refused, whatever the op
            raise SimError(INVALID_REQUEST, f"Cannot update these configs dynamically: Set({', '.join(frozen)})")
        for b in targets:
            new = self._apply_ops(dict(b.configs), ops)
            for k, v in new.items():
                if k not in BROKER_DYNAMIC_KEYS:
                    raise SimError(INVALID_CONFIG, f"Cannot update broker config {k} dynamically")
                if k in BROKER_DYNAMIC_KEYS:
                    try:
                        r = float(v)
                    except ValueError as e:
                        raise SimError(INVALID_CONFIG, f"Invalid value {v!r} for {k}") from e
                    if not math.isfinite(r) or r < 0:
                        raise SimError(INVALID_CONFIG, f"Invalid value {v!r} for {k}")
            if not validate_only:
                b.configs = new

    @staticmethod
    def _apply_ops(cur: dict[str, str], ops: list[tuple[str, int, str | None]]) -> dict[str, str]:
        if any(op == -1 for _, op, _ in ops):
            cur = {}
        for key, op, value in ops:
            if op in (-1, 0):
                if value is None:
                    cur.pop(key, None)
                else:
                    cur[key] = value
            elif op == 1:
                cur.pop(key, None)
            elif op in (2, 3):
                items = [x for x in cur.get(key, "").split(",") if x]
                vals = [x for x in (value or "").split(",") if x]
                if op == 2:
                    items += [v for v in vals if v not in items]
                else:
                    items = [i for i in items if i not in vals]
                cur[key] = ",".join(items)
            else:
                raise SimError(INVALID_REQUEST, f"unknown config operation {op}")
        return cur

    # ---------------------------------------------------------------- leadership
    def set_leader(self, p: Partition, leader: int) -> None:
        """Leadership of ``p`` moves to ``leader`` (-1: no leader): the leader epoch goes up by one, and a new
        leader starts its epoch at the log end offset (Kafka's ``Partition.makeLeader`` assigns the epoch's
        start offset in the leader-epoch cache; retention first trims entries before the log start)."""
        p.leader = leader
        p.leader_epoch += 1
        if leader < 0:
            return  # no broker becomes leader: no log records this epoch
        start, end = self.engine.partition_offsets(p.slot) if self.engine is not None else (0, 0)
        p.epochs = truncate_from_start(p.epochs, start)
        assign_epoch(p.epochs, p.leader_epoch, end)

    def elect_preferred(self, p: Partition) -> int:
        """Make the first alive in-sync replica of the assignment leader; returns an error code."""
        pref = p.replicas[0]
        if p.leader == pref:
            return ELECTION_NOT_NEEDED
        if not self.brokers[pref].alive or pref not in p.isr:
            return PREFERRED_LEADER_NOT_AVAILABLE
        self.set_leader(p, pref)
        if self.engine is not None:
            self.engine.mark_dirty()
        return NONE

    def set_broker_alive(self, broker_id: int, alive: bool) -> None:
        """Kill or revive a broker: ISR and leadership follow.

        A revived follower stays out of the ISR until it has fetched what was produced while it
        was down (the engine moves those bytes like any replica fetch, throttles included).
        """
        b = self.brokers[broker_id]
        if alive and not b.alive:
            b.revivals += 1
        b.alive = alive
        total_in = self.engine.f["bytes_in_total"] if self.engine is not None else None
        for t in self.topics.values():
            for p in t.partitions:
                if broker_id not in p.replicas:
                    continue
                if alive and self.replica_offline(p, broker_id):
                    continue  # its log dir is still failed: the replica stays offline
                adding = p.reassignment is not None and broker_id in p.reassignment.adding
                if not alive:
                    if broker_id in p.isr:
                        p.isr = [r for r in p.isr if r != broker_id]
                    if p.leader == broker_id:
                        self.set_leader(p, p.isr[0] if p.isr else -1)
                    if not adding and total_in is not None:
                        p.down_mark[broker_id] = float(total_in[p.slot]) - p.catchup.pop(broker_id, 0.0)
                else:
                    missed = 0.0
                    if broker_id in p.down_mark and total_in is not None:
                        missed = float(total_in[p.slot]) - p.down_mark.pop(broker_id)
                    if broker_id not in p.isr and p.leader != -1 and not adding:
                        if missed > 1.0:
                            p.catchup[broker_id] = missed
                        else:
                            p.isr = [r for r in p.replicas if r in p.isr or r == broker_id]
                    if p.leader == -1:
                        p.catchup.clear()
                        p.isr = [broker_id]
                        self.set_leader(p, broker_id)
        if self.engine is not None:
            self.engine.mark_dirty()

    def set_log_dir_offline(self, broker_id: int, path: str) -> list[Partition]:
        """A JBOD disk fails (KIP-112): the dir goes offline, its replicas leave the ISR, leadership moves to
        another in-sync replica, copies to or from the dir stop; the broker runs on. Returns the partitions
        that had a replica there. Idempotent. (Kafka brings a failed dir back only through a broker restart
        with the disk replaced, so there is no way back here either.)"""
        b = self.brokers[broker_id]
        d = b.disk_by_path(path)
        if d is None:
            raise SimError(LOG_DIR_NOT_FOUND, f"log dir {path} not found on broker {broker_id}")
        d.offline = True
        hit = []
        for t in self.topics.values():
            for p in t.partitions:
                fut = p.futures.get(broker_id)
                if fut is not None and (fut.dest_disk == d.gidx or p.log_dirs.get(broker_id) == d.gidx):
                    del p.futures[broker_id]
                if p.log_dirs.get(broker_id) != d.gidx:
                    continue
                hit.append(p)
                p.catchup.pop(broker_id, None)
                if broker_id in p.isr:
                    p.isr = [r for r in p.isr if r != broker_id]
                if p.leader == broker_id:
                    alive = [r for r in p.isr if self.brokers[r].alive]
                    self.set_leader(p, alive[0] if alive else -1)
        if self.engine is not None:
            self.engine.mark_dirty()
        return hit

    # ---------------------------------------------------------------- reassignment
    def alter_reassignment(self, topic: str, index: int, replicas: list[int] | None) -> None:
        """Start, change or (``replicas=None``) cancel a partition reassignment."""
        p = self.partition(topic, index)
        if replicas is None:
            if p.reassignment is None:
                raise SimError(NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment in progress for {topic}-{index}")
            orig = p.reassignment.original
            p.reassignment = None
            p.replicas = list(orig)
            p.isr = [r for r in orig if r in p.isr]
            for b in list(p.log_dirs):
                if b not in orig:
                    del p.log_dirs[b]
            if p.leader not in orig:
                alive = [r for r in p.isr if self.brokers[r].alive]
                self.set_leader(p, alive[0] if alive else -1)
        else:
            self.validate_assignment(replicas)
            orig = p.reassignment.original if p.reassignment else list(p.replicas)
            if replicas == orig:
                if p.reassignment is not None:
                    self.alter_reassignment(topic, index, None)
                return
            adding = [r for r in replicas if r not in orig]
            removing = [r for r in orig if r not in replicas]
            old = p.reassignment
            ra = Reassignment(list(replicas), list(orig), adding, removing)
            for b in adding:
                ra.copied[b] = old.copied.get(b, 0.0) if old else 0.0
                preferred = self.preferred_dirs.pop((topic, index, b), None)
                if old and b in old.dest_disk:
                    ra.dest_disk[b] = old.dest_disk[b]
                elif preferred is not None and any(d.gidx == preferred and not d.offline
                                                   for d in self.brokers[b].disks):
                    ra.dest_disk[b] = preferred
                else:
                    ra.dest_disk[b] = self._pick_disk(b, p.slot)
                p.log_dirs[b] = ra.dest_disk[b]
            for b in list(p.log_dirs):
                if b not in orig and b not in adding:
                    del p.log_dirs[b]
            p.reassignment = ra
            p.replicas = list(replicas) + [r for r in orig if r not in replicas]
            p.isr = [r for r in p.isr if r in orig]
        if self.engine is not None:
            self.engine.mark_dirty()

    def reassignment_effect(self, topic: str, index: int, replicas: list[int] | None) -> str:
        """What an AlterPartitionReassignments entry would do now (call it before applying the entry).

        ``start`` (none in flight), ``change`` (in flight to another target), ``same`` (the identical
        target is already in flight: a re-submission), ``noop`` (target = current replicas, none in
        flight), ``cancel`` (``replicas`` is None, or the original replicas while one is in flight).
        """
        p = self.partition(topic, index)
        ra = p.reassignment
        if replicas is None:
            return "cancel"
        if ra is None:
            return "noop" if list(replicas) == list(p.replicas) else "start"
        if list(replicas) == list(ra.original):
            return "cancel"
        return "same" if list(replicas) == list(ra.target) else "change"

    def log_reassignment(self, topic: str, index: int, replicas: list[int] | None, effect: str,
                         client_id: str, broker: int, sim_time: float) -> None:
        """Record one *accepted* AlterPartitionReassignments entry (the ``GET /reassignments`` log).

        Counts per ``topic:partition``: ``submitted`` (every accepted entry with replicas, whatever its
        effect), ``cancelled`` and one count per effect.
        """
        self.reassignment_seq += 1
        self.reassignment_log.append({"seq": self.reassignment_seq, "sim_time": sim_time, "topic": topic,
                                      "partition": index, "replicas": None if replicas is None else list(replicas),
                                      "effect": effect, "client_id": client_id, "broker": broker})
        counts = self.reassignment_counts.setdefault(f"{topic}:{index}", {"submitted": 0, "cancelled": 0})
        counts["submitted" if replicas is not None else "cancelled"] += 1
        counts[effect] = counts.get(effect, 0) + 1

    def complete_reassignment(self, p: Partition) -> None:
        """Switch the replica set to the target once every adding replica has caught up."""
        ra = p.reassignment
        assert ra is not None
        p.replicas = list(ra.target)
        p.isr = [r for r in ra.target if self.brokers[r].alive and r not in p.catchup
                 and not self.replica_offline(p, r)]
        p.catchup = {b: v for b, v in p.catchup.items() if b in ra.target}
        for b in list(p.log_dirs):
            if b not in ra.target:
                del p.log_dirs[b]
        p.futures = {b: f for b, f in p.futures.items() if b in ra.target}
        p.reassignment = None
        if p.leader not in p.isr:
            self.set_leader(p, p.isr[0] if p.isr else -1)
        if self.engine is not None:
            self.engine.mark_dirty()

    def alter_log_dir(self, broker_id: int, topic: str, index: int, path: str) -> None:
        """Start moving the replica of ``topic-index`` on ``broker_id`` to log dir ``path``."""
        b = self.brokers[broker_id]
        d = b.disk_by_path(path)
        if d is None:
            raise SimError(LOG_DIR_NOT_FOUND, f"log dir {path} not found on broker {broker_id}")
        if d.offline:
            raise SimError(KAFKA_STORAGE_ERROR, f"Log directory {path} is offline")
        p = self.partition(topic, index)
        if self.replica_offline(p, broker_id):
            raise SimError(KAFKA_STORAGE_ERROR, f"Partition {topic}-{index} is offline")
        if broker_id not in p.log_dirs:
            # as Kafka's LogManager.maybeUpdatePreferredLogDir: remember the dir for a replica created later
            self.preferred_dirs[(topic, index, broker_id)] = d.gidx
            raise SimError(REPLICA_NOT_AVAILABLE, f"broker {broker_id} has no replica of {topic}-{index}")
        if p.log_dirs[broker_id] == d.gidx:
            p.futures.pop(broker_id, None)
        else:
            fut = p.futures.get(broker_id)
            if fut is None or fut.dest_disk != d.gidx:
                p.futures[broker_id] = FutureReplica(d.gidx)
        if self.engine is not None:
            self.engine.mark_dirty()

    # ---------------------------------------------------------------- quotas
    def alter_quota(self, entity: QuotaEntity, key: str, value: float | None) -> None:
        """Set (or remove with ``None``) one quota value of an entity."""
        if key not in ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                       "controller_mutation_rate"):
            raise SimError(INVALID_REQUEST, f"unknown quota key {key}")
        for et, _ in entity:
            if et not in ("user", "client-id", "ip"):
                raise SimError(INVALID_REQUEST, f"unknown entity type {et}")
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise SimError(INVALID_REQUEST, f"Quota {key} must be greater than 0")
        cur = self.quotas.setdefault(entity, {})
        if value is None:
            cur.pop(key, None)
            if not cur:
                del self.quotas[entity]
        else:
            cur[key] = value
        if self.engine is not None:
            self.engine.mark_dirty()

    def quota_for(self, user: str, client_id: str, key: str) -> float:
        """The effective quota (Kafka precedence: user+client, user, client, defaults)."""
        order: list[QuotaEntity] = [
            (("client-id", client_id), ("user", user)),
            (("client-id", None), ("user", user)),
            (("user", user),),
            (("client-id", client_id), ("user", None)),
            (("client-id", None), ("user", None)),
            (("user", None),),
            (("client-id", client_id),),
            (("client-id", None),),
        ]
        for ent in order:
            key_ent = tuple(sorted(ent))
            q = self.quotas.get(key_ent)
            if q and key in q:
                return q[key]
        return math.inf
