"""Kafka admin source: topology, log dirs, reassignments, throttles, quotas, controller.

One :class:`KafkaSource` per cluster wraps one ``KafkaAdminClient`` and reuses it across rounds.
Per-broker requests (DescribeLogDirs, broker DescribeConfigs) are sent to every alive broker at
once on the client's own network loop and awaited with a deadline, so one slow or dead broker
costs at most the timeout.  Client quotas go through the protocol layer
(``DescribeClientQuotasRequest``): ``KafkaAdminClient`` has no quota methods.

Every failure is recorded in :attr:`KafkaState.errors` (``what -> message``); a round only fails
as a whole (:class:`KafkaSourceError`) when cluster metadata itself cannot be read.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from domain.throttles import BROKER_THROTTLE_KEYS, CAPABILITY_KEYS, TOPIC_THROTTLE_KEYS

log = logging.getLogger("guardian.collectors.kafka")

THROTTLE_BROKER_KEYS = BROKER_THROTTLE_KEYS
THROTTLE_TOPIC_KEYS = TOPIC_THROTTLE_KEYS


class KafkaSourceError(Exception):
    """Cluster metadata could not be read (the round has no topology)."""


@dataclass(frozen=True, slots=True)
class BrokerMeta:
    """An alive broker as the metadata reports it."""

    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    """A partition's assignment as the metadata reports it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int | None
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicaDir:
    """One replica (or future replica) in a log dir (DescribeLogDirs)."""

    size: int
    offset_lag: int
    is_future: bool


@dataclass
class LogDirMeta:
    """One log dir of a broker (DescribeLogDirs)."""

    path: str
    error_code: int
    total_bytes: int | None
    usable_bytes: int | None
    replicas: dict[tuple[str, int], ReplicaDir] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reassignment:
    """An in-flight reassignment (ListPartitionReassignments)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass
class KafkaState:
    """Everything one admin round learned about a cluster."""

    cluster_id: str | None
    controller_id: int | None
    brokers: dict[int, BrokerMeta]
    partitions: dict[tuple[str, int], PartitionMeta]
    internal_topics: set[str] = field(default_factory=set)
    log_dirs: dict[int, dict[str, LogDirMeta]] = field(default_factory=dict)
    reassignments: dict[tuple[str, int], Reassignment] = field(default_factory=dict)
    broker_configs: dict[int, dict[str, str]] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    quotas: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    fetched_at: float = 0.0  # time.time()
    duration_s: float = 0.0
    full: bool = True
    """False when some log dirs or configs were carried over from earlier rounds."""
    details_age_s: float = 0.0
    """Age of the oldest log-dir listing of an alive broker (0 when every one was read this round)."""
    log_dirs_at: dict[int, float] = field(default_factory=dict)
    """broker -> time.time() its log dirs and broker configs were read."""
    log_dirs_fresh: set[int] = field(default_factory=set)
    """Brokers whose log dirs were read in this round."""
    futures_by_broker: dict[int, list[tuple[int, str, tuple[str, int], int]]] = field(default_factory=dict)

    @property
    def futures(self) -> list[tuple[int, str, tuple[str, int], int]]:
        """In-flight intra-broker moves: (broker, destination log dir, partition, bytes copied)."""
        return [f for b in sorted(self.futures_by_broker) for f in self.futures_by_broker[b]]

    @property
    def topics(self) -> list[str]:
        """Topic names, sorted."""
        return sorted({t for t, _ in self.partitions})

    def replica_dir(self, broker: int, topic: str, partition: int) -> str | None:
        """The (non-future) log dir of a replica, or None when unknown."""
        for path, d in self.log_dirs.get(broker, {}).items():
            r = d.replicas.get((topic, partition))
            if r is not None and not r.is_future:
                return path
        return None

    def throttles(self) -> dict[str, Any]:
        """Throttle configs currently set: broker rates and topic throttled-replica lists."""
        return {
            "brokers": {str(b): {k: v for k, v in cfg.items() if k in THROTTLE_BROKER_KEYS}
                        for b, cfg in sorted(self.broker_configs.items())
                        if any(k in THROTTLE_BROKER_KEYS for k in cfg)},
            "topics": {t: {k: v for k, v in cfg.items() if k in THROTTLE_TOPIC_KEYS and v}
                       for t, cfg in sorted(self.topic_configs.items())
                       if any(k in THROTTLE_TOPIC_KEYS and v for k, v in cfg.items())},
        }


@dataclass
class KafkaSourceOptions:
    """Timeouts and what to fetch each round."""

    request_timeout_ms: int = 30_000
    bootstrap_timeout_ms: int = 30_000
    describe_log_dirs: bool = True
    describe_configs: bool = True
    describe_quotas: bool = True
    client_id: str = "guardian-collector"


class MetadataReader:
    """All-topics Metadata over one connection of its own, decoded only when the response changed.

    A full Metadata response of a 100,000-partition cluster is ~4 MB and costs kafka-python most of
    a second to decode into objects; between two collection rounds it is almost always byte-for-byte
    the same (leaders and ISRs change rarely).  This reader keeps the last response's bytes (after
    the correlation id) and its decoded form, and returns the decoded form again while the bytes are
    equal.  The version is the highest both sides support (ApiVersions on connect).  Any failure
    raises; the caller falls back to the admin client's own path.
    """

    def __init__(self, bootstrap_servers: str, client_id: str, timeout_s: float) -> None:
        self.servers = [hp.strip() for hp in bootstrap_servers.split(",") if hp.strip()]
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._version = 0
        self._cid = 0
        self._last: tuple[bytes, Any] | None = None
        self.decoded = 0
        self.reused = 0

    def close(self) -> None:
        """Close the connection (the next :meth:`fetch` reconnects)."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _roundtrip(self, req: Any) -> bytes:
        assert self._sock is not None
        self._cid = (self._cid + 1) & 0x7FFFFFFF
        req.with_header(correlation_id=self._cid, client_id=self.client_id)
        self._sock.sendall(bytes(req.encode(header=True, framed=True)))
        size = struct.unpack(">i", self._recv(4))[0]
        if not 4 <= size <= 512 * 1024 * 1024:
            raise OSError(f"bad response size {size}")
        frame = self._recv(size)
        if struct.unpack(">i", frame[:4])[0] != self._cid:
            raise OSError("correlation id mismatch")
        return frame

    def _recv(self, n: int) -> bytes:
        assert self._sock is not None
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise OSError("connection closed by the broker")
            got += k
        return bytes(buf)

    def _connect(self) -> None:
        from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

        last: Exception | None = None
        for hp in self.servers:
            host, _, port = hp.rpartition(":")
            try:
                self._sock = socket.create_connection((host.strip("[]") or "localhost", int(port)),
                                                      min(self.timeout_s, 3.0))
                self._sock.settimeout(self.timeout_s)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                frame = self._roundtrip(ApiVersionsRequest(version=0))
                resp = ApiVersionsResponse.decode(frame, version=0, header=True)
                if resp.error_code:
                    raise OSError(f"ApiVersions error {resp.error_code}")
                mx = max((k.max_version for k in resp.api_keys if k.api_key == MetadataRequest.API_KEY), default=-1)
                self._version = min(int(mx), MetadataRequest.max_version)
                if self._version < 1:
                    raise OSError("broker has no all-topics Metadata version")
                return
            except (OSError, ValueError, struct.error) as exc:
                last = exc
                self.close()
        raise OSError(f"no bootstrap server answered: {last}")

    def fetch(self) -> Any:
        """The decoded all-topics ``MetadataResponse`` (the previous object while bytes are unchanged)."""
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse

        if self._sock is None:
            self._connect()
        try:
            req = MetadataRequest(version=self._version, topics=None, allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)
            frame = self._roundtrip(req)
        except (OSError, ValueError, struct.error):
            self.close()
            raise
        body = frame[4:]
        if self._last is not None and self._last[0] == body:
            self.reused += 1
            return self._last[1]
        resp = MetadataResponse.decode(frame, version=self._version, header=True)
        self._last = (body, resp)
        self.decoded += 1
        return resp


def _unset(value: str | None) -> bool:
    """True for config values that mean 'not set' (Kafka reports Long.MAX_VALUE for unset rates)."""
    return value is None or value == "" or value == str(2**63 - 1)


class KafkaSource:
    """One reusable admin client per cluster; :meth:`fetch` reads a :class:`KafkaState`."""

    def __init__(self, bootstrap_servers: str, options: KafkaSourceOptions | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.options = options or KafkaSourceOptions()
        self._admin: Any = None
        self._meta_reader = MetadataReader(bootstrap_servers, self.options.client_id,
                                           self.options.request_timeout_ms / 1000.0)
        self._meta_parts: tuple[Any, dict[tuple[str, int], PartitionMeta], set[str], dict[str, str]] | None = None

    def _client(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            try:
                self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers,
                                               client_id=self.options.client_id,
                                               request_timeout_ms=self.options.request_timeout_ms,
                                               bootstrap_timeout_ms=self.options.bootstrap_timeout_ms)
            except Exception as exc:
                raise KafkaSourceError(f"cannot connect to {self.bootstrap_servers}: {exc}") from None
        return self._admin

    def close(self) -> None:
        """Close the admin client (a later :meth:`fetch` reconnects)."""
        self._meta_reader.close()
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:  # closing must never fail a caller
                log.debug("closing admin client failed", exc_info=True)
            self._admin = None

    def __enter__(self) -> KafkaSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ round
    def fetch(self, full: bool = True, previous: KafkaState | None = None, refresh_brokers: Iterable[int] = (),
              refresh_topics: Iterable[str] = ()) -> KafkaState:
        """Read the cluster's current state. Raises :class:`KafkaSourceError` without metadata.

        With ``full=False`` metadata, in-flight reassignments and client quotas are read; log dirs
        and broker configs only of ``refresh_brokers`` and of brokers that gained replicas
        (new partitions, new reassignments), topic configs only of ``refresh_topics`` and new
        topics; everything else is carried over from ``previous`` (each broker's listing keeps its
        read time; ``details_age_s`` is the oldest).  A caller rotating ``refresh_brokers`` over
        the cluster bounds every round's cost instead of paying for every broker in one round.
        """
        t0 = time.perf_counter()
        admin = self._client()
        try:
            meta = self._metadata(admin)
        except Exception as exc:
            self.close()  # reconnect from scratch next round
            raise KafkaSourceError(f"metadata request failed: {type(exc).__name__}: {exc}") from None
        brokers = {int(b.node_id): BrokerMeta(int(b.node_id), str(b.host), int(b.port), b.rack)
                   for b in meta.brokers}
        ctrl = getattr(meta, "controller_id", None)
        state = KafkaState(cluster_id=getattr(meta, "cluster_id", None),
                           controller_id=int(ctrl) if ctrl is not None and int(ctrl) >= 0 else None,
                           brokers=brokers, partitions={}, fetched_at=time.time())
        cached = self._meta_parts
        if cached is not None and cached[0] is meta:
            # the same response as last round: the same partitions (shared, never mutated)
            state.partitions, state.internal_topics, errs = cached[1], set(cached[2]), cached[3]
            state.errors.update(errs)
        else:
            parts = state.partitions
            errs = {}
            for t in meta.topics:
                name = t.name
                if not name or t.error_code != 0:
                    errs[f"topic {name}"] = f"metadata error code {t.error_code}"
                    continue
                if t.is_internal:
                    state.internal_topics.add(name)
                for p in t.partitions:
                    leader = p.leader_id
                    pi = int(p.partition_index)
                    parts[(name, pi)] = PartitionMeta(
                        name, pi, tuple(p.replica_nodes), leader if leader is not None and leader >= 0 else None,
                        tuple(p.isr_nodes), tuple(p.offline_replicas or ()))
            state.errors.update(errs)
            self._meta_parts = (meta, parts, set(state.internal_topics), errs)
        alive = sorted(brokers)
        try:
            ra = admin.list_partition_reassignments(timeout_ms=self.options.request_timeout_ms)
            for tp, v in ra.items():
                state.reassignments[(tp.topic, tp.partition)] = Reassignment(
                    tuple(v["replicas"]), tuple(v["adding_replicas"]), tuple(v["removing_replicas"]))
        except Exception as exc:
            state.errors["list_partition_reassignments"] = f"{type(exc).__name__}: {exc}"
        if previous is None:
            full = True
        if full:
            dir_brokers, cfg_brokers, topics = alive, alive, state.topics
        else:
            assert previous is not None
            want = set(refresh_brokers)
            new_topics = set()
            if state.partitions is not previous.partitions:
                for key, pm in state.partitions.items():
                    old = previous.partitions.get(key)
                    if old is None or old.replicas != pm.replicas:
                        want.update(pm.replicas)  # new replicas: their log dirs must be read now
                        if old is None:
                            new_topics.add(key[0])
            for key, ra_ in state.reassignments.items():
                if key not in previous.reassignments:
                    want.update(ra_.adding)
            alive_set = set(alive)
            dir_brokers = sorted(want & alive_set)
            cfg_brokers = sorted(set(refresh_brokers) & alive_set)
            topics = sorted((set(refresh_topics) | new_topics) & {t for t, _ in state.partitions})
            state.full = False
            # carried over for alive brokers; a broker whose re-read fails keeps its last listing (and its age)
            state.log_dirs = {b: d for b, d in previous.log_dirs.items() if b in alive_set}
            state.log_dirs_at = {b: at for b, at in previous.log_dirs_at.items() if b in alive_set}
            state.futures_by_broker = {b: f for b, f in previous.futures_by_broker.items() if b in alive_set}
            state.broker_configs = {b: c for b, c in previous.broker_configs.items() if b in alive_set}
            live_topics = {t for t, _ in state.partitions}
            state.topic_configs = {t: c for t, c in previous.topic_configs.items() if t in live_topics}
            reread = {f" {b}" for b in dir_brokers}
            state.errors.update({k: v for k, v in previous.errors.items()
                                 if k.startswith(("describe_log_dirs broker", "describe_configs"))
                                 and not any(k.endswith(b) for b in reread)})
        if self.options.describe_log_dirs and dir_brokers:
            self._log_dirs(admin, state, list(dir_brokers))
        if self.options.describe_configs and (cfg_brokers or topics):
            self._configs(admin, state, list(cfg_brokers), list(topics), fallback_node=alive[0] if alive else None)
        if self.options.describe_quotas:
            self._quotas(admin, state)
        ages = [state.log_dirs_at[b] for b in alive if b in state.log_dirs_at]
        state.details_age_s = max(state.fetched_at - min(ages), 0.0) if ages and not state.full else 0.0
        state.duration_s = time.perf_counter() - t0
        return state

    def _metadata(self, admin: Any) -> Any:
        """One MetadataRequest for every topic, read straight from the response objects (no dict copy):
        through :class:`MetadataReader` (decoded only when changed), else through the admin client."""
        from kafka.protocol.metadata import MetadataRequest

        try:
            return self._meta_reader.fetch()
        except (OSError, ValueError, struct.error) as exc:
            log.debug("metadata reader failed (%s); using the admin client", exc)

        async def go() -> Any:
            req = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)
            return await admin._manager.wait_for(admin._manager.send(req), self.options.request_timeout_ms)

        return admin._manager.run(go)

    def _send_all(self, admin: Any, requests: dict[int, Any]) -> tuple[dict[int, Any], dict[int, str]]:
        """Send one request per node concurrently; wait for each with the request timeout."""
        timeout = self.options.request_timeout_ms

        async def go() -> tuple[dict[int, Any], dict[int, str]]:
            futs = {}
            errs: dict[int, str] = {}
            for node, req in requests.items():
                try:
                    futs[node] = admin._manager.send(req, node_id=node)
                except Exception as exc:
                    errs[node] = f"{type(exc).__name__}: {exc}"
            out: dict[int, Any] = {}
            for node, fut in futs.items():
                try:
                    out[node] = await admin._manager.wait_for(fut, timeout)
                except Exception as exc:
                    errs[node] = f"{type(exc).__name__}: {exc}"
            return out, errs

        result: tuple[dict[int, Any], dict[int, str]] = admin._manager.run(go)
        return result

    def _log_dirs(self, admin: Any, state: KafkaState, nodes: list[int]) -> None:
        from kafka.protocol.admin import DescribeLogDirsRequest

        try:
            resps, errs = self._send_all(admin, {n: DescribeLogDirsRequest(topics=None) for n in nodes})
        except Exception as exc:
            state.errors["describe_log_dirs"] = f"{type(exc).__name__}: {exc}"
            return
        for n, e in errs.items():
            state.errors[f"describe_log_dirs broker {n}"] = e
        now = time.time()
        for n, resp in resps.items():
            dirs: dict[str, LogDirMeta] = {}
            futures: list[tuple[int, str, tuple[str, int], int]] = []
            for r in resp.results:
                total = getattr(r, "total_bytes", -1)
                usable = getattr(r, "usable_bytes", -1)
                d = LogDirMeta(str(r.log_dir), int(r.error_code),
                               int(total) if total is not None and total >= 0 else None,
                               int(usable) if usable is not None and usable >= 0 else None)
                reps = d.replicas
                for t in r.topics:
                    tname = str(t.name)
                    for p in t.partitions:
                        key = (tname, int(p.partition_index))
                        fut = bool(p.is_future_key)
                        reps[key] = ReplicaDir(int(p.partition_size), int(p.offset_lag), fut)
                        if fut:
                            futures.append((n, d.path, key, int(p.partition_size)))
                dirs[d.path] = d
            state.log_dirs[n] = dirs
            state.log_dirs_at[n] = now
            state.log_dirs_fresh.add(n)
            if futures:
                state.futures_by_broker[n] = futures
            else:
                state.futures_by_broker.pop(n, None)

    def _configs(self, admin: Any, state: KafkaState, nodes: list[int], topic_names: list[str],
                 fallback_node: int | None = None) -> None:
        from kafka.protocol.admin import DescribeConfigsRequest

        res_cls = DescribeConfigsRequest.DescribeConfigsResource
        reqs = {n: DescribeConfigsRequest(resources=[res_cls(resource_type=4, resource_name=str(n),
                                                             configuration_keys=None)],
                                          include_synonyms=False, include_documentation=False)
                for n in nodes}
        try:
            resps, errs = self._send_all(admin, reqs)
            for n, e in errs.items():
                state.errors[f"describe_configs broker {n}"] = e
            for n, resp in resps.items():
                for r in resp.results:
                    if r.error_code:
                        state.errors[f"describe_configs broker {n}"] = f"error code {r.error_code}: {r.error_message}"
                        continue
                    state.broker_configs[n] = {c.name: c.value for c in r.configs
                                               if (c.name in THROTTLE_BROKER_KEYS or c.name in CAPABILITY_KEYS)
                                               and not _unset(c.value)}
            if topic_names:
                treq = DescribeConfigsRequest(
                    resources=[res_cls(resource_type=2, resource_name=t, configuration_keys=list(THROTTLE_TOPIC_KEYS))
                               for t in topic_names], include_synonyms=False, include_documentation=False)
                node = nodes[0] if nodes else fallback_node
                if node is not None:
                    tresps, terrs = self._send_all(admin, {node: treq})
                    for _, e in terrs.items():
                        state.errors["describe_configs topics"] = e
                    for resp in tresps.values():
                        for r in resp.results:
                            if r.error_code:
                                state.errors[f"describe_configs topic {r.resource_name}"] = (
                                    f"error code {r.error_code}: {r.error_message}")
                                continue
                            state.topic_configs[r.resource_name] = {c.name: c.value for c in r.configs
                                                                    if not _unset(c.value)}
        except Exception as exc:
            state.errors["describe_configs"] = f"{type(exc).__name__}: {exc}"

    def _quotas(self, admin: Any, state: KafkaState) -> None:
        from kafka.protocol.admin import DescribeClientQuotasRequest

        async def go() -> Any:
            req = DescribeClientQuotasRequest(components=[], strict=False)
            return await admin._manager.wait_for(admin._manager.send(req), self.options.request_timeout_ms)

        try:
            resp = admin._manager.run(go)
            if resp.error_code:
                state.errors["describe_client_quotas"] = f"error code {resp.error_code}: {resp.error_message}"
                return
            for e in resp.entries or []:
                state.quotas.append({
                    "entity": {x.entity_type: x.entity_name for x in e.entity},
                    "values": {v.key: float(v.value) for v in e.values}})
        except Exception as exc:
            state.errors["describe_client_quotas"] = f"{type(exc).__name__}: {exc}"
