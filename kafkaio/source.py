"""Bulk reads of one cluster for the collectors: topology, log dirs, reassignments, throttles, quotas,
consumer groups' committed offsets.

Goal: everything a collection round needs from Kafka in one call per round, at a cost that stays
flat as the cluster grows (100,000 partitions, 1,000 brokers).

Method: :class:`KafkaSource` is a thin view over the cluster's :class:`~kafkaio.connection.KafkaConnection`
(the one admin client it shares with the executor and the levers). Metadata comes through the
connection's :class:`~kafkaio.connection.MetadataReader` (decoded only when the response bytes
changed). Per-broker requests (DescribeLogDirs, broker DescribeConfigs) are sent to every alive broker
at once on the client's network loop and awaited with a deadline, so one slow or dead broker costs
at most the timeout. Client quotas go through the protocol layer (``DescribeClientQuotasRequest``):
``KafkaAdminClient`` has no quota methods. A partial round (``full=False``) re-reads only what
changed or is due and carries the rest over. Consumer positions come from Kafka itself, as
``kafka-consumer-groups.sh --describe`` gets them, every ``groups_every`` rounds (carried over in
between): ListGroups on every alive broker (every ``groups_list_every`` reads; consumer-protocol
groups, at most ``groups_max``, sorted by name), FindCoordinator for groups without a known
coordinator (batched, v4+), then one OffsetFetch per coordinator (all its groups in one v8+ request,
else one per group), all in flight at once; a v8 answer comes back undecoded and is read into columns
by :mod:`kafkaio.offset_fetch` (no object per partition), in the caller's thread. KIP-932 share groups (ListGroups'
``GroupType`` ``share``) are read in the same pass, while the OffsetFetch requests are in flight: ShareGroupDescribe
and DescribeShareGroupOffsets at their coordinators (:mod:`kafkaio.share_groups`).

Guarantee: every failure is recorded in :attr:`KafkaState.errors` (``what -> message``); a round
only fails as a whole (:class:`KafkaSourceError`) when cluster metadata itself cannot be read, and
then the connection's client is dropped so the next round reconnects. A refused login is a
:class:`~kafkaio.errors.KafkaAuthError` (a :class:`KafkaSourceError` too).
Cost: one Metadata request, one ListPartitionReassignments, one DescribeClientQuotas, and
DescribeLogDirs + DescribeConfigs of the brokers due this round (all brokers when ``full``); every
``groups_every`` rounds one OffsetFetch per group coordinator, plus ShareGroupDescribe + DescribeShareGroupOffsets
per coordinator of a share group (and, every ``groups_list_every`` reads, one ListGroups per broker).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from domain.throttles import BROKER_THROTTLE_KEYS, CAPABILITY_KEYS, TOPIC_THROTTLE_KEYS
from kafkaio.connection import KafkaConnection, _RawBody, know_brokers
from kafkaio.endpoints import ClusterEndpoints
from kafkaio.errors import KafkaAuthError, KafkaSourceError
from kafkaio.group_types import GroupOffsets
from kafkaio.offset_fetch import RawOffsetFetchRequest, decode_offset_fetch, offsets_of_response
from kafkaio.refresh import carry_over, details_age, details_to_read
from kafkaio.share_groups import SHARE_GROUP_TYPE, read_share_groups
from kafkaio.types import NO_LEADER, BrokerMeta, KafkaState, LogDirMeta, PartitionMeta, Reassignment, ReplicaDir

log = logging.getLogger("guardian.collectors.kafka")

@dataclass
class KafkaSourceOptions:
    """Timeouts and what to fetch each round."""

    request_timeout_ms: int = 30_000
    bootstrap_timeout_ms: int = 30_000
    describe_log_dirs: bool = True
    describe_configs: bool = True
    describe_quotas: bool = True
    client_id: str = "guardian-collector"
    consumer_offsets: bool = True
    """Read consumer groups' committed offsets (the page-cache estimate needs positions)."""
    groups_every: int = 1
    """Rounds between reads of the committed offsets after the first two. 1 (every round) by default: a
    consumer that starts replaying must be seen within one round (the throttle protection acts on it);
    above 1 the offsets are carried over in between, marked not fresh, and the collector moves them on
    at their last rates (cheaper for thousands of groups, blind to a rate change until the next read)."""
    groups_list_every: int = 6
    """Reads of the committed offsets between ListGroups (a new group is seen within this many reads)."""
    groups_max: int = 2000
    """At most this many groups' offsets are read (the first by name)."""
    share_groups: bool = True
    """Read KIP-932 share groups too (ShareGroupDescribe + DescribeShareGroupOffsets at their coordinators, with the
    consumer groups' offsets; brokers that do not offer them cost nothing)."""
    share_groups_max: int = 500
    """At most this many share groups are read (the first by name)."""


_COORDINATOR_MOVED = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def _unset(value: str | None) -> bool:
    """True for config values that mean 'not set' (Kafka reports Long.MAX_VALUE for unset rates)."""
    return value is None or value == "" or value == str(2**63 - 1)


class KafkaSource:
    """Bulk reads of one cluster over its :class:`KafkaConnection`; :meth:`fetch` reads a :class:`KafkaState`.

    Given bootstrap servers instead of a connection, the source opens (and owns) a PLAINTEXT
    connection of its own; given a connection, it shares it and :meth:`close` leaves it open.
    """

    def __init__(self, connection: KafkaConnection | str, options: KafkaSourceOptions | None = None,
                 owns: bool | None = None) -> None:
        self.options = options or KafkaSourceOptions()
        if isinstance(connection, str):
            connection = KafkaConnection(connection, client_id=self.options.client_id,
                                         request_timeout_ms=self.options.request_timeout_ms,
                                         bootstrap_timeout_ms=self.options.bootstrap_timeout_ms)
            owns = True if owns is None else owns
        self.connection = connection
        self.owns = bool(owns)
        self.bootstrap_servers = connection.bootstrap_servers
        self._meta_parts: tuple[Any, dict[tuple[str, int], PartitionMeta], set[str], dict[str, str]] | None = None
        self._groups: list[str] = []
        self._share_groups: list[str] = []
        self._coordinators: dict[str, int] = {}
        self._rounds = 0
        self._reads = 0

    @classmethod
    def for_endpoints(cls, endpoints: ClusterEndpoints, options: KafkaSourceOptions | None = None) -> KafkaSource:
        """A source owning a new connection to the cluster of ``endpoints`` (its bootstrap servers and security)."""
        opts = options or KafkaSourceOptions()
        conn = KafkaConnection.for_endpoints(endpoints, client_id=opts.client_id,
                                             request_timeout_ms=opts.request_timeout_ms,
                                             bootstrap_timeout_ms=opts.bootstrap_timeout_ms)
        return cls(conn, opts, owns=True)

    def _client(self) -> Any:
        try:
            return self.connection.client()
        except KafkaAuthError:
            raise
        except Exception as exc:
            raise KafkaSourceError(f"cannot connect to {self.bootstrap_servers}: {exc}") from None

    def close(self) -> None:
        """Close the connection if this source owns it (a later :meth:`fetch` reconnects)."""
        if self.owns:
            self.connection.close()

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
        (new partitions, new reassignments) or whose replicas went offline or back (a failed log dir),
        topic configs only of ``refresh_topics`` and new topics; everything
        else is carried over from ``previous`` (each broker's listing keeps its
        read time; ``details_age_s`` is the oldest).  A caller rotating ``refresh_brokers`` over
        the cluster bounds every round's cost instead of paying for every broker in one round.
        """
        t0 = time.perf_counter()
        conn = self.connection
        admin = self._client()
        try:
            meta = conn.read_metadata(self.options.request_timeout_ms)
        except Exception as exc:
            conn.drop(admin)  # reconnect from scratch next round
            auth = conn.auth_error(exc)
            if auth is not None:
                raise auth from None
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
                        name, pi, tuple(p.replica_nodes), leader if leader is not None and leader >= 0 else NO_LEADER,
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
        plan = details_to_read(state, previous, full, refresh_brokers, refresh_topics)
        if not plan.full:
            assert previous is not None
            carry_over(state, previous, plan)
        dir_brokers, cfg_brokers, topics = plan.dir_brokers, plan.cfg_brokers, plan.topics
        if self.options.describe_log_dirs and dir_brokers:
            self._log_dirs(state, list(dir_brokers))
        if self.options.describe_configs and (cfg_brokers or topics):
            self._configs(state, list(cfg_brokers), list(topics), fallback_node=alive[0] if alive else None)
        if self.options.describe_quotas:
            self._quotas(state)
        if self.options.consumer_offsets and alive:
            # the first two rounds read (a rate needs two), then every ``groups_every``-th round
            if previous is None or self._rounds < 2 or self._rounds % max(self.options.groups_every, 1) == 0:
                self._group_offsets(state, alive)
            else:
                state.group_offsets, state.groups_listed = previous.group_offsets, previous.groups_listed
                state.share_groups = previous.share_groups
        self._rounds += 1
        state.details_age_s = details_age(state)
        state.duration_s = time.perf_counter() - t0
        return state

    def _send_all(self, requests: dict[int, Any]) -> tuple[dict[int, Any], dict[int, str]]:
        """Send one request per node concurrently; wait for each with the request timeout."""
        return self.connection.send_all(requests, self.options.request_timeout_ms)

    def _log_dirs(self, state: KafkaState, nodes: list[int]) -> None:
        try:
            resps, errs = self._send_all({n: DescribeLogDirsRequest(topics=None) for n in nodes})
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
                        reps[key] = ReplicaDir(d.path, int(p.partition_size), int(p.offset_lag), fut)
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

    def _configs(self, state: KafkaState, nodes: list[int], topic_names: list[str],
                 fallback_node: int | None = None) -> None:
        res_cls = DescribeConfigsRequest.DescribeConfigsResource
        reqs = {n: DescribeConfigsRequest(resources=[res_cls(resource_type=4, resource_name=str(n),
                                                             configuration_keys=None)],
                                          include_synonyms=False, include_documentation=False)
                for n in nodes}
        try:
            resps, errs = self._send_all(reqs)
            for n, e in errs.items():
                state.errors[f"describe_configs broker {n}"] = e
            for n, resp in resps.items():
                for r in resp.results:
                    if r.error_code:
                        state.errors[f"describe_configs broker {n}"] = f"error code {r.error_code}: {r.error_message}"
                        continue
                    state.broker_configs[n] = {c.name: c.value for c in r.configs
                                               if (c.name in BROKER_THROTTLE_KEYS or c.name in CAPABILITY_KEYS)
                                               and not _unset(c.value)}
            if topic_names:
                treq = DescribeConfigsRequest(
                    resources=[res_cls(resource_type=2, resource_name=t, configuration_keys=list(TOPIC_THROTTLE_KEYS))
                               for t in topic_names], include_synonyms=False, include_documentation=False)
                node = nodes[0] if nodes else fallback_node
                if node is not None:
                    tresps, terrs = self._send_all({node: treq})
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

    def _quotas(self, state: KafkaState) -> None:
        try:
            resp = self.connection.send(DescribeClientQuotasRequest(components=[], strict=False),
                                        timeout_ms=self.options.request_timeout_ms)
            if resp.error_code:
                state.errors["describe_client_quotas"] = f"error code {resp.error_code}: {resp.error_message}"
                return
            for e in resp.entries or []:
                state.quotas.append({
                    "entity": {x.entity_type: x.entity_name for x in e.entity},
                    "values": {v.key: float(v.value) for v in e.values}})
        except Exception as exc:
            state.errors["describe_client_quotas"] = f"{type(exc).__name__}: {exc}"

    # ------------------------------------------------------------------ consumer groups
    def _group_offsets(self, state: KafkaState, alive: list[int]) -> None:
        """Committed offsets of every consumer group (up to ``groups_max``) into ``state``."""
        opts = self.options
        timeout = opts.request_timeout_ms
        relist = self._reads % max(opts.groups_list_every, 1) == 0 or not self._groups
        self._reads += 1

        async def go(client: Any) -> tuple[list[tuple[int, str | None, Any]], dict[str, str], int | None]:
            mgr = client._manager
            errors: dict[str, str] = {}
            listed: int | None = None
            shares: set[str] = set()
            await know_brokers(mgr, alive, timeout)
            if relist:
                futs = {b: mgr.send(ListGroupsRequest(min_version=0), node_id=b, request_timeout_ms=timeout)
                        for b in alive}
                names: set[str] = set()
                for b, fut in futs.items():
                    try:
                        resp = await mgr.wait_for(fut, timeout)
                    except Exception as exc:
                        errors[f"list_groups broker {b}"] = f"{type(exc).__name__}: {exc}"
                        continue
                    if resp.error_code:
                        errors[f"list_groups broker {b}"] = f"error code {resp.error_code}"
                        continue
                    names.update(g.group_id for g in resp.groups if g.protocol_type in ("consumer", "")
                                 and getattr(g, "group_type", None) != SHARE_GROUP_TYPE)
                    shares.update(g.group_id for g in resp.groups
                                  if getattr(g, "group_type", None) == SHARE_GROUP_TYPE)
                listed = len(names)
                self._groups = sorted(names)[: max(opts.groups_max, 0)]
                self._share_groups = sorted(shares)[: max(opts.share_groups_max, 0)] if opts.share_groups else []
                self._coordinators = {g: c for g, c in self._coordinators.items() if g in names or g in shares}
            unknown = [g for g in (*self._groups, *self._share_groups) if g not in self._coordinators]
            if unknown:
                await self._find_coordinators(mgr, unknown, timeout, errors)
            by_coord: dict[int, list[str]] = {}
            for g in self._groups:
                c = self._coordinators.get(g)
                if c is not None:
                    by_coord.setdefault(c, []).append(g)
            batched = mgr.broker_version_data.api_version(OffsetFetchRequest) >= 8
            sends: list[tuple[int, str | None, Any]] = []
            for c, groups in by_coord.items():
                if batched:
                    grp = OffsetFetchRequest.OffsetFetchRequestGroup
                    req = RawOffsetFetchRequest(groups=[grp(group_id=g, topics=None) for g in groups],
                                                min_version=8, max_version=8)
                    sends.append((c, None, mgr.send(req, node_id=c, request_timeout_ms=timeout)))
                else:
                    for g in groups:
                        req = OffsetFetchRequest(group_id=g, topics=None, min_version=2, max_version=7)
                        sends.append((c, g, mgr.send(req, node_id=c, request_timeout_ms=timeout)))
            share_coord: dict[int, list[str]] = {}
            for g in self._share_groups:
                c = self._coordinators.get(g)
                if c is not None:
                    share_coord.setdefault(c, []).append(g)
            # the OffsetFetch requests are in flight while the share groups are read
            share_read, share_failed = await read_share_groups(mgr, share_coord, timeout, errors)
            for c in share_failed:
                for g in share_coord.get(c, []):
                    self._coordinators.pop(g, None)
            for gid, sg in share_read.items():
                if sg.error_code in _COORDINATOR_MOVED:
                    self._coordinators.pop(gid, None)
            state.share_groups = share_read
            answers: list[tuple[int, str | None, Any]] = []
            for c, single, fut in sends:
                try:
                    answers.append((c, single, await mgr.wait_for(fut, timeout)))
                except Exception as exc:
                    errors[f"offset_fetch coordinator {c}"] = f"{type(exc).__name__}: {exc}"
                    for g in by_coord.get(c, []) if single is None else [single]:
                        self._coordinators.pop(g, None)
            return answers, errors, listed

        try:
            answers, errors, listed = self.connection.run(go)
        except Exception as exc:
            state.errors["consumer_offsets"] = f"{type(exc).__name__}: {exc}"
            return
        tables: list[GroupOffsets] = []
        singles: dict[str, dict[tuple[str, int], int]] = {}
        for c, single, resp in answers:
            if single is None:  # batched (v8+): raw bytes unless the hook was bypassed
                try:
                    group_errors, table = (decode_offset_fetch(resp.body, resp.version) if isinstance(resp, _RawBody)
                                           else offsets_of_response(resp))
                except Exception as exc:
                    errors[f"offset_fetch coordinator {c}"] = f"{type(exc).__name__}: {exc}"
                    self._coordinators = {g: cc for g, cc in self._coordinators.items() if cc != c}
                    continue
                tables.append(table)
            else:
                group_errors = [(single, int(resp.error_code))]
                if not resp.error_code:
                    singles[single] = {(str(t.name), int(p.partition_index)): int(p.committed_offset)
                                       for t in resp.topics for p in t.partitions
                                       if not p.error_code and p.committed_offset >= 0}
            for gid, code in group_errors:
                if code:
                    if code in _COORDINATOR_MOVED:
                        self._coordinators.pop(gid, None)
                    errors[f"offset_fetch group {gid}"] = f"error code {code}"
        if singles:
            tables.append(GroupOffsets.from_mapping(singles))
        state.group_offsets = GroupOffsets.concat(tables)
        state.group_offsets_fresh = True
        state.groups_listed = listed if listed is not None else len(self._groups)
        state.errors.update(errors)

    async def _find_coordinators(self, mgr: Any, groups: list[str], timeout: int, errors: dict[str, str]) -> None:
        """Learn the coordinators of ``groups`` (one batched FindCoordinator v4+, else one request per group)."""
        reqs: list[tuple[str | None, Any]]
        if mgr.broker_version_data.api_version(FindCoordinatorRequest) >= 4:
            reqs = [(None, FindCoordinatorRequest(key_type=0, coordinator_keys=groups, min_version=4))]
        else:
            reqs = [(g, FindCoordinatorRequest(key=g, key_type=0, max_version=3)) for g in groups]
        futs = [(g, mgr.send(r, request_timeout_ms=timeout)) for g, r in reqs]
        for g, fut in futs:
            try:
                resp = await mgr.wait_for(fut, timeout)
            except Exception as exc:
                errors["find_coordinator"] = f"{type(exc).__name__}: {exc}"
                continue
            rows = [(c.key, c) for c in resp.coordinators] if g is None else [(g, resp)]
            for key, row in rows:
                if row.error_code:
                    errors[f"find_coordinator group {key}"] = f"error code {row.error_code}"
                elif row.node_id >= 0:
                    self._coordinators[key] = int(row.node_id)
