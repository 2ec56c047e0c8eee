"""The executor- and lever-facing port implementation: plain-data reads and writes over the cluster's one client.

Goal: everything the executor needs from a live cluster behind :class:`kafkaio.port.KafkaCluster`:
metadata (brokers, replicas, leaders, ISR), KIP-455 reassignments (alter / list / cancel), KIP-113
log dirs (describe / alter), KIP-460 preferred elections and KIP-73 throttle configs (incremental
SET / DELETE on brokers, APPEND / SUBTRACT on topic lists so nobody else's entries are clobbered).

Method: :class:`KafkaAdmin` is a thin view over the cluster's :class:`~kafkaio.connection.KafkaConnection`
(the one admin client it shares with the collectors' bulk reads and the levers); each method is one
kafka-python admin call translated into the records of :mod:`kafkaio.types`, keyed by
``(topic, partition)``.

Guarantee: a failed call raises :class:`AdminError` (a refused login :class:`~kafkaio.errors.KafkaAuthError`)
and drops the connection's client so the next call reconnects (controller failover, dead bootstrap
broker); calls through one view are serialised (thread-safe).
Cost: one admin request per call (per-broker requests go out concurrently inside kafka-python).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from kafka import TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import (
    BrokerResponseError,
    NotControllerError,
    NotLeaderForPartitionError,
    TopicAlreadyExistsError,
    UnknownBrokerIdError,
)
from kafka.structs import TopicPartitionReplica

from domain.throttles import (
    BROKER_THROTTLE_KEYS,
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
)
from kafkaio import topiclog
from kafkaio.connection import KafkaConnection
from kafkaio.endpoints import ClusterEndpoints
from kafkaio.errors import AdminError, TopicExists
from kafkaio.security import PLAINTEXT, SecuritySettings
from kafkaio.types import (
    TP,
    ConfigEntry,
    GroupDescription,
    GroupMember,
    LiveCluster,
    LogRead,
    PartitionMeta,
    Reassignment,
    ReplicaDir,
)

T = TypeVar("T")


def _answered(exc: BaseException) -> bool:
    """True when ``exc`` is a broker's answer (e.g. unknown topic): the connection works, keep it. Stale
    controller/leader answers still reconnect (a new client reads fresh metadata)."""
    return isinstance(exc, BrokerResponseError) and not isinstance(exc, NotControllerError | NotLeaderForPartitionError)


def _alter_configs(admin: Any, resources: list[Any]) -> Any:
    """IncrementalAlterConfigs, validated by the broker only: kafka-python's own check
    (``raise_on_unknown``) refuses every key a broker does not list in DescribeConfigs, and a real
    Kafka broker lists the KIP-73 throttle rates only once they are set."""
    return admin.alter_configs(resources, incremental=True, raise_on_unknown=False)


class KafkaAdmin:
    """The :class:`~kafkaio.port.KafkaCluster` port over one :class:`KafkaConnection`; reconnects after any failure.

    Given bootstrap servers instead of a connection, the view opens (and owns) a connection of its
    own; given a connection, it shares it and :meth:`close` leaves it open.
    """

    def __init__(self, connection: KafkaConnection | str, client_id: str = "guardian-executor",
                 request_timeout_ms: int = 15000, security: SecuritySettings = PLAINTEXT,
                 owns: bool | None = None) -> None:
        if isinstance(connection, str):
            connection = KafkaConnection(connection, client_id=client_id, request_timeout_ms=request_timeout_ms,
                                         security=security)
            owns = True if owns is None else owns
        self.connection = connection
        self.owns = bool(owns)
        self.bootstrap_servers = connection.bootstrap_servers
        self.client_id = connection.client_id
        self.request_timeout_ms = connection.request_timeout_ms
        self._lock = threading.RLock()

    @classmethod
    def for_endpoints(cls, endpoints: ClusterEndpoints, client_id: str = "guardian-executor",
                      request_timeout_ms: int = 15000) -> KafkaAdmin:
        """A view owning a new connection to the cluster of ``endpoints`` (its bootstrap servers and security)."""
        conn = KafkaConnection.for_endpoints(endpoints, client_id=client_id, request_timeout_ms=request_timeout_ms)
        return cls(conn, owns=True)

    # ------------------------------------------------------------------ plumbing
    def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        with self._lock:
            client = None
            try:
                client = self.connection.client()
                try:
                    return fn(client)
                except UnknownBrokerIdError:
                    # the client's broker list predates a broker that (re)joined since (kafka-python refreshes it every
                    # 5 minutes): raised before anything was sent to that broker, so reconnect and try once more
                    self.connection.drop(client)
                    client = self.connection.client()
                    return fn(client)
            except Exception as exc:  # report; reconnect next time unless the broker answered
                if not _answered(exc):
                    self.connection.drop(client)
                auth = self.connection.auth_error(exc)
                if auth is not None:
                    raise auth from None
                raise AdminError(f"{what} failed: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        """Close the connection if this view owns it (a later call reconnects)."""
        if self.owns:
            with self._lock:
                self.connection.close()

    # ------------------------------------------------------------------ reads
    def live(self) -> LiveCluster:
        """Alive brokers, every partition's replicas / leader / ISR, in-flight reassignments."""

        def read(a: Any) -> LiveCluster:
            # reassignments first: one that completes between the two reads then looks in flight (safe),
            # never "gone but not applied" (which would invite a duplicate submission)
            ras = {(tp.topic, tp.partition): Reassignment(tuple(v["replicas"]), tuple(v["adding_replicas"]),
                                                          tuple(v["removing_replicas"]))
                   for tp, v in a.list_partition_reassignments().items()}
            cluster = a.describe_cluster()
            # kafka-python asks DescribeCluster v2+ to include fenced brokers (KRaft): a broker killed -9 is fenced
            # after its session times out and stays listed, flagged ``is_fenced`` — it is not alive
            up = [b for b in cluster["brokers"] if not b.get("is_fenced")]
            alive = frozenset(int(b["broker_id"]) for b in up)
            racks = {int(b["broker_id"]): str(b.get("rack") or "") for b in up}
            parts: dict[TP, PartitionMeta] = {}
            sizes: dict[str, int] = {}
            for t in a.describe_topics():
                if t.get("error_code", 0) != 0 or t.get("is_internal"):
                    continue
                name = str(t.get("name") or t.get("topic"))
                sizes[name] = len(t["partitions"])
                for p in t["partitions"]:
                    tp = (name, int(p["partition_index"]))
                    parts[tp] = PartitionMeta(name, tp[1], tuple(int(x) for x in p["replica_nodes"]),
                                              int(p["leader_id"]), tuple(int(x) for x in p["isr_nodes"]),
                                              tuple(int(x) for x in p.get("offline_replicas") or ()))
            return LiveCluster(alive, parts, sizes, ras, racks)

        return self._call("reading cluster metadata", read)

    def log_dirs(self, brokers: Iterable[int], topics: Iterable[str] | None = None) -> dict[tuple[str, int, int],
                                                                                          list[ReplicaDir]]:
        """``(topic, partition, broker) -> [ReplicaDir]`` (a future replica adds a second entry)."""
        ids = sorted(set(brokers))
        if not ids:
            return {}
        wanted = sorted(set(topics)) if topics is not None else None

        def read(a: Any) -> dict[tuple[str, int, int], list[ReplicaDir]]:
            out: dict[tuple[str, int, int], list[ReplicaDir]] = {}
            for broker in a.describe_log_dirs(topic_partitions=wanted, brokers=ids):
                bid = int(broker["broker"])
                for d in broker["log_dirs"]:
                    if d.get("error_code", 0) != 0:
                        continue
                    for t in d["topics"]:
                        for p in t["partitions"]:
                            out.setdefault((str(t["name"]), int(p["partition_index"]), bid), []).append(
                                ReplicaDir(str(d["log_dir"]), int(p["partition_size"]), int(p["offset_lag"]),
                                           bool(p["is_future_key"])))
            return out

        return self._call("describing log dirs", read)

    def disk_capacity(self, brokers: Iterable[int]) -> dict[tuple[int, str], tuple[int, int]]:
        """``(broker, log_dir) -> (total_bytes, usable_bytes)``."""
        ids = sorted(set(brokers))

        def read(a: Any) -> dict[tuple[int, str], tuple[int, int]]:
            out = {}
            for broker in a.describe_log_dirs(topic_partitions={}, brokers=ids):
                for d in broker["log_dirs"]:
                    if d.get("error_code", 0) == 0:
                        out[(int(broker["broker"]), str(d["log_dir"]))] = (int(d.get("total_bytes", -1)),
                                                                           int(d.get("usable_bytes", -1)))
            return out

        return self._call("describing log dirs", read) if ids else {}

    def broker_configs(self, brokers: Iterable[int], keys: Iterable[str] = BROKER_THROTTLE_KEYS) -> dict[int, dict[
            str, str]]:
        """Dynamically set values of ``keys`` per broker (keys at their default are absent)."""
        ids = sorted(set(brokers))
        wanted = set(keys)

        def read(a: Any) -> dict[int, dict[str, str]]:
            res = a.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(b)) for b in ids])
            out: dict[int, dict[str, str]] = {}
            for name, cfg in res.get("broker", {}).items():
                out[int(name)] = {k: str(v["value"]) for k, v in cfg.items()
                                  if k in wanted and v.get("value") is not None
                                  and str(v.get("config_source", "")).startswith("DYNAMIC")}
            return out

        return self._call("describing broker configs", read) if ids else {}

    def describe_broker_configs(self, brokers: Iterable[int], keys: Iterable[str]
                                ) -> dict[int, dict[str, ConfigEntry]]:
        """``keys`` of each broker whatever their source (DescribeConfigs with every source), read-only flags."""
        ids = sorted(set(brokers))
        wanted = sorted(set(keys))

        def read(a: Any) -> dict[int, dict[str, ConfigEntry]]:
            res = a.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(b), configs=dict.fromkeys(wanted))
                                      for b in ids], config_filter="all")
            return {int(name): {k: ConfigEntry(value=None if v.get("value") is None else str(v["value"]),
                                               source=str(v.get("config_source", "UNKNOWN")),
                                               read_only=bool(v.get("read_only", False)))
                                for k, v in cfg.items() if k in wanted}
                    for name, cfg in res.get("broker", {}).items()}

        return self._call("describing broker configs", read) if ids and wanted else {}

    def topic_configs(self, topics: Iterable[str], keys: Iterable[str] = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
                      ) -> dict[str, dict[str, str]]:
        """Explicitly set values of ``keys`` per topic."""
        names = sorted(set(topics))
        wanted = set(keys)

        def read(a: Any) -> dict[str, dict[str, str]]:
            res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in names])
            return {name: {k: str(v["value"]) for k, v in cfg.items() if k in wanted and v.get("value")}
                    for name, cfg in res.get("topic", {}).items()}

        return self._call("describing topic configs", read) if names else {}

    # ------------------------------------------------------------------ writes
    def alter_reassignments(self, targets: Mapping[TP, list[int] | None]) -> dict[TP, str | None]:
        """Submit (or with ``None`` cancel) reassignments; per-partition error name or ``None``."""
        if not targets:
            return {}
        def write(a: Any) -> dict[TP, str | None]:
            res = a.alter_partition_reassignments({TopicPartition(t, p): (list(r) if r is not None else None)
                                                   for (t, p), r in targets.items()})
            return {(tp.topic, tp.partition): (None if err is None or getattr(err, "errno", 0) == 0
                                               else getattr(err, "__name__", str(err)))
                    for tp, err in res.items()}

        return self._call("altering partition reassignments", write)

    def alter_log_dirs(self, moves: Mapping[tuple[str, int, int], str]) -> dict[tuple[str, int, int], str | None]:
        """Move replicas ``(topic, partition, broker)`` to log dir paths (KIP-113)."""
        if not moves:
            return {}
        def write(a: Any) -> dict[tuple[str, int, int], str | None]:
            res = a.alter_replica_log_dirs({TopicPartitionReplica(t, p, b): d for (t, p, b), d in moves.items()})
            return {(k.topic, k.partition, k.broker_id): (None if getattr(err, "errno", 0) == 0
                                                         else getattr(err, "__name__", str(err)))
                    for k, err in res.items()}

        return self._call("altering replica log dirs", write)

    def elect_preferred(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """Preferred-leader election; per-partition Kafka error code (0 ok, 84 not needed)."""
        wanted: dict[str, list[int]] = {}
        for t, p in partitions:
            wanted.setdefault(t, []).append(p)
        if not wanted:
            return {}

        def write(a: Any) -> dict[TP, int]:
            resp = a.elect_leaders(0, wanted, raise_errors=False)
            out: dict[TP, int] = {}
            for r in resp.replica_election_results:
                for pr in r.partition_result:
                    out[(r.topic, pr.partition_id)] = int(pr.error_code)
            return out

        return self._call("electing preferred leaders", write)

    def set_broker_configs(self, changes: Mapping[int, Mapping[str, str | None]]) -> None:
        """Incrementally SET (value) or DELETE (``None``) dynamic broker configs.

        Every ``alter_configs`` here passes ``raise_on_unknown=False``: kafka-python otherwise first describes the
        resource and refuses, client-side, any key the broker reports ``read_only`` — and Kafka reports the KIP-73
        and KIP-113 throttle rates read-only (they are not in its reconfigurable set, yet IncrementalAlterConfigs
        sets them), so no throttle could be set on a real broker. The broker validates the change itself."""
        resources = [ConfigResource(ConfigResourceType.BROKER, str(b),
                                    configs={k: (("SET", v) if v is not None else ("DELETE", None))
                                             for k, v in cfg.items()})
                     for b, cfg in sorted(changes.items()) if cfg]
        if resources:
            self._check_alter("setting broker throttles",
                              self._call("setting broker configs",
                                         lambda a: _alter_configs(a, resources)))

    def alter_topic_lists(self, topic: str, key: str, append: Iterable[str] = (), subtract: Iterable[str] = ()) -> None:
        """APPEND / SUBTRACT entries of a list-type topic config (e.g. throttled replicas); a list a SUBTRACT
        emptied is deleted. Kafka keeps an emptied list as an empty dynamic override, which ``kafka-configs
        --describe`` shows as a throttle config left behind; the read-back and DELETE close that (a writer
        appending in the milliseconds between them would lose its entry, and re-adds it on its next pass)."""
        add, sub = ",".join(sorted(set(append))), ",".join(sorted(set(subtract)))
        for op, value in (("SUBTRACT", sub), ("APPEND", add)):
            if not value:
                continue
            res = ConfigResource(ConfigResourceType.TOPIC, topic, configs={key: (op, value)})

            def alter(a: Any, r: Any = res) -> Any:
                return _alter_configs(a, [r])

            self._check_alter(f"{op} {key} on {topic}", self._call("altering topic configs", alter))
        if sub and not add:
            self._delete_if_emptied(topic, key, set(subtract))

    def _delete_if_emptied(self, topic: str, key: str, subtracted: set[str], tries: int = 15) -> None:
        """DELETE ``key`` of ``topic`` once a SUBTRACT left it empty. The read may reach a broker whose metadata
        does not show the SUBTRACT yet (the controller applied it; brokers learn it within milliseconds): while
        a subtracted entry is still listed, read again (up to ``tries`` times, 0.2 s apart)."""
        def read(a: Any) -> Any:
            cfg = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]).get("topic", {})
            return cfg.get(topic, {}).get(key, {}).get("value")

        for _ in range(tries):
            value = self._call("describing topic configs", read)
            if value is None:
                return
            entries = {e for e in str(value).split(",") if e}
            if not entries:
                self.set_topic_configs({topic: {key: None}})
                return
            if not entries & subtracted:
                return
            time.sleep(0.2)

    def set_topic_configs(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """Incrementally SET (value) or DELETE (``None``) topic configs."""
        from kafka.admin import ConfigResource, ConfigResourceType

        resources = [ConfigResource(ConfigResourceType.TOPIC, t,
                                    configs={k: (("SET", v) if v is not None else ("DELETE", None))
                                             for k, v in cfg.items()})
                     for t, cfg in sorted(changes.items()) if cfg]
        if resources:
            self._check_alter("setting topic configs",
                              self._call("setting topic configs",
                                         lambda a: _alter_configs(a, resources)))

    def set_client_quotas(self, client_id: str, quotas: Mapping[str, float | None]) -> None:
        """Set (a rate) or remove (``None``) client-id quotas such as ``consumer_byte_rate`` (AlterClientQuotas;
        kafka-python has no method for it, so the request goes through the client's protocol layer)."""
        from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest

        entry = AlterClientQuotasRequest.EntryData
        req = AlterClientQuotasRequest(entries=[entry(
            entity=[entry.EntityData(entity_type="client-id", entity_name=client_id)],
            ops=[entry.OpData(key=k, value=float(v or 0), remove=v is None) for k, v in sorted(quotas.items())])],
            validate_only=False)

        def write(a: Any) -> Any:
            async def go() -> Any:
                return await a._manager.send(req)

            return a._manager.run(go)

        resp = self._call("altering client quotas", write)
        errors = [(e.error_code, e.error_message) for e in resp.entries if e.error_code]
        if errors:
            raise AdminError(f"alter client quota {client_id}/{sorted(quotas)}: {errors}")

    def describe_groups(self, groups: Iterable[str]) -> dict[str, GroupDescription]:
        """DescribeGroups of ``groups``, one request per coordinator (FindCoordinator first), each member's
        assignment decoded as the consumer protocol's ``ConsumerProtocolAssignment`` when the group's protocol
        type is ``consumer`` (other protocol types, e.g. Connect's, carry no partition assignment: none is
        read). See :class:`~kafkaio.types.GroupDescription` for what Kafka answers for a KIP-848 group."""
        from kafka.protocol.admin import DescribeGroupsRequest

        wanted = sorted(set(groups))
        if not wanted:
            return {}

        def read(a: Any) -> list[Any]:
            async def go() -> list[Any]:
                coordinators = await a._find_coordinator_ids(wanted)
                by_node: dict[int, list[str]] = {}
                for g, node in sorted(coordinators.items()):
                    by_node.setdefault(int(node), []).append(g)
                return [await a._manager.send(DescribeGroupsRequest(groups=gs, include_authorized_operations=False),
                                              node_id=node) for node, gs in sorted(by_node.items())]

            return list(a._manager.run(go))

        out: dict[str, GroupDescription] = {}
        for resp in self._call("describing consumer groups", read):
            for g in resp.groups:
                out[g.group_id] = _group_description(g)
        return out

    def create_topic(self, topic: str, assignment: Mapping[int, Sequence[int]],
                     configs: Mapping[str, str] | None = None) -> None:
        """CreateTopics with an explicit replica assignment (``kafka-topics --create --replica-assignment``)."""
        spec = NewTopic(topic, -1, -1, replica_assignments={int(p): [int(b) for b in r] for p, r in assignment.items()},
                        topic_configs=dict(configs or {}))

        def write(a: Any) -> bool:
            try:
                a.create_topics([spec])
            except TopicAlreadyExistsError:
                return False
            return True

        if not self._call(f"creating topic {topic}", write):
            raise TopicExists(f"topic {topic!r} already exists")

    # ------------------------------------------------------------------ a small log on the cluster
    def ensure_log(self, topic: str, configs: Mapping[str, str]) -> None:
        """Create the one-partition ``topic`` with ``configs`` unless it exists (:mod:`kafkaio.topiclog`)."""
        self._call(f"creating topic {topic}", lambda a: topiclog.ensure_topic(a, topic, configs))

    def append_log(self, topic: str, key: bytes, value: bytes) -> tuple[int, int]:
        """Append one record to ``topic``-0; (offset, append time ms)."""
        return self._call(f"appending to {topic}",
                          lambda a: topiclog.append(a, topic, key, value, self.request_timeout_ms))

    def read_log(self, topic: str, start: int = 0) -> LogRead:
        """``topic``-0's records from ``start`` to its end."""
        return self._call(f"reading {topic}", lambda a: topiclog.read(a, topic, start))

    @staticmethod
    def _check_alter(what: str, result: Any) -> None:
        """Raise on any resource the broker refused. kafka-python 3 reports each resource as ``"OK"`` or as the
        error's text (``"[Error 42] InvalidRequestError: ..."``), not an error object: anything but ``"OK"`` (or an
        error object with errno 0) is a refusal."""
        for per_type in (result or {}).values():
            for name, status in per_type.items():
                if status in ("OK", None) or (not isinstance(status, str) and getattr(status, "errno", None) == 0):
                    continue
                raise AdminError(f"{what} ({name}) failed: {status}")


def _group_description(g: Any) -> GroupDescription:
    """One DescribeGroups answer as plain data (assignments decoded for the ``consumer`` protocol type)."""
    from kafka.errors import for_code
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    error = None
    if g.error_code:
        message = getattr(g, "error_message", None) or ""
        error = f"{for_code(g.error_code).__name__}" + (f": {message}" if message else "")
    members = []
    for m in g.members:
        tps: list[TP] = []
        if g.protocol_type == "consumer" and m.member_assignment:
            try:
                decoded = ConsumerProtocolAssignment.decode(bytes(m.member_assignment))
                tps = sorted((str(tp.topic), int(tp.partition)) for tp in decoded.partitions())
            except Exception:  # a client that wrote a foreign assignment: its member is kept without partitions
                tps = []
        members.append(GroupMember(str(m.member_id), str(m.client_id), str(m.client_host), tuple(tps)))
    return GroupDescription(str(g.group_id), str(g.group_state or ""), str(g.protocol_type or ""),
                            tuple(sorted(members, key=lambda x: x.member_id)), error)
