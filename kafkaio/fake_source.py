"""The collectors' bulk reader over the in-memory cluster: the :class:`kafkaio.port.BulkReader` port's fake.

Goal: the collectors (the round's builder, the collector's slicing of partial reads, its failure handling) are
tested in milliseconds against the same in-memory cluster the executor's tests drive
(:class:`kafkaio.fake.FakeKafkaCluster`): what the executor submits, the next bulk read sees.

Method: :class:`FakeBulkReader` answers :meth:`fetch` as :class:`kafkaio.source.KafkaSource` does, through the
cluster's own port reads: metadata and reassignments from ``live()`` (so the cluster's fault injection applies,
and a read counts towards ``complete_after`` as a Metadata request does), each broker's log dirs from
``log_dirs`` + ``disk_capacity`` (one broker at a time, so a broker that times out costs only its own listing),
broker configs (throttle and capability keys, whatever their source) from ``describe_broker_configs``, topic
throttle configs from ``topic_configs``, client quotas from ``quotas``, and groups' committed offsets from
:attr:`FakeBulkReader.offsets` (set by a test). Which details a partial read re-reads, and what it carries over,
is :mod:`kafkaio.refresh` — the real reader's rule. Give it ``cluster.view()`` to keep its calls and faults apart
from the executor's.

Fault injection: ``cluster.fail_next["fetch"]`` (or ``["live"]``) fails the next read as a metadata read fails
(:class:`KafkaSourceError`, nothing read); a broker in ``cluster.timeouts`` has its log dirs and configs recorded
as errors (``describe_log_dirs broker N``, ``describe_configs broker N``) and keeps its last listing.

Guarantee: the returned :class:`~kafkaio.types.KafkaState` holds fresh records (nothing the cluster mutates later).
Cost: O(partitions) per read, as the fake cluster's reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from domain.throttles import BROKER_THROTTLE_KEYS, CAPABILITY_KEYS, TOPIC_THROTTLE_KEYS
from kafkaio.errors import AdminError, KafkaSourceError
from kafkaio.fake import FakeKafkaCluster
from kafkaio.group_types import GroupOffsets
from kafkaio.port import BulkReader
from kafkaio.refresh import DetailsPlan, carry_over, details_age, details_to_read
from kafkaio.types import TP, BrokerMeta, KafkaState, LogDirMeta, ReplicaDir


class FakeBulkReader:
    """:class:`~kafkaio.port.BulkReader` over a :class:`FakeKafkaCluster` (see the module docstring)."""

    def __init__(self, cluster: FakeKafkaCluster, clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.bootstrap_servers = cluster.bootstrap_servers
        self.clock = clock
        """Wall clock of ``fetched_at`` and each listing's read time (a test may step it)."""
        self.offsets: dict[str, dict[TP, int]] = {}
        """group -> committed offsets, read by every fetch (a test moves them)."""
        self.internal_topics: set[str] = set()
        self.fetches: list[DetailsPlan] = []
        """What each fetch re-read besides metadata (:mod:`kafkaio.refresh`'s plan)."""
        self.closed = False

    def close(self) -> None:
        """Nothing to release (idempotent)."""
        self.closed = True

    def fetch(self, full: bool = True, previous: KafkaState | None = None, refresh_brokers: Iterable[int] = (),
              refresh_topics: Iterable[str] = ()) -> KafkaState:
        """One bulk read of the cluster (:meth:`kafkaio.source.KafkaSource.fetch`'s contract)."""
        t0 = time.perf_counter()
        c = self.cluster
        if c.fail_next["fetch"] > 0:
            c.fail_next["fetch"] -= 1
            raise KafkaSourceError("metadata request failed: injected failure")
        try:
            live = c.live()
        except AdminError as exc:
            raise KafkaSourceError(f"metadata request failed: {exc}") from None
        now = self.clock()
        state = KafkaState(cluster_id="fake", controller_id=min(live.alive) if live.alive else None,
                           brokers={b: BrokerMeta(b, f"broker-{b}", 9092, live.racks.get(b) or None)
                                    for b in sorted(live.alive)},
                           partitions=dict(live.partitions), internal_topics=set(self.internal_topics),
                           reassignments=dict(live.reassignments), fetched_at=now)
        plan = details_to_read(state, previous, full, refresh_brokers, refresh_topics)
        if not plan.full:
            assert previous is not None
            carry_over(state, previous, plan)
        self.fetches.append(plan)
        for b in plan.dir_brokers:
            self._log_dirs(state, b, now)
        for b in plan.cfg_brokers:
            try:
                entries = c.describe_broker_configs([b], (*BROKER_THROTTLE_KEYS, *CAPABILITY_KEYS)).get(b, {})
            except AdminError as exc:
                state.errors[f"describe_configs broker {b}"] = str(exc)
                continue
            state.broker_configs[b] = {k: e.value for k, e in entries.items() if e.value is not None}
        if plan.topics:
            try:
                got = c.topic_configs(plan.topics, TOPIC_THROTTLE_KEYS)
            except AdminError as exc:
                state.errors["describe_configs topics"] = str(exc)
            else:
                state.topic_configs.update({t: got.get(t, {}) for t in plan.topics})
        state.quotas = [{"entity": {"client-id": cid}, "values": dict(q)} for cid, q in sorted(c.quotas.items()) if q]
        state.group_offsets = GroupOffsets.from_mapping({g: dict(o) for g, o in sorted(self.offsets.items())})
        state.group_offsets_fresh = True
        state.groups_listed = len(self.offsets)
        state.details_age_s = details_age(state)
        state.duration_s = time.perf_counter() - t0
        return state

    def _log_dirs(self, state: KafkaState, broker: int, now: float) -> None:
        """One broker's DescribeLogDirs: its dirs with capacity and replicas (KIP-113 futures listed apart)."""
        try:
            replicas = self.cluster.log_dirs([broker])
            capacity = self.cluster.disk_capacity([broker])
        except AdminError as exc:
            state.errors[f"describe_log_dirs broker {broker}"] = str(exc)
            return
        dirs = {path: LogDirMeta(path, 0, *capacity.get((broker, path), (None, None)))
                for path in self.cluster.log_dir_paths.get(broker, [])}
        futures: list[tuple[int, str, TP, int]] = []
        for (topic, index, _b), entries in sorted(replicas.items()):
            for r in entries:
                dirs[r.log_dir].replicas[(topic, index)] = ReplicaDir(r.log_dir, r.size, r.offset_lag, r.is_future)
                if r.is_future:
                    futures.append((broker, r.log_dir, (topic, index), r.size))
        state.log_dirs[broker] = dirs
        state.log_dirs_at[broker] = now
        state.log_dirs_fresh.add(broker)
        if futures:
            state.futures_by_broker[broker] = futures
        else:
            state.futures_by_broker.pop(broker, None)

    def committed(self, group: str, offsets: Mapping[TP, int]) -> None:
        """Set ``group``'s committed offsets (read by every later fetch)."""
        self.offsets[group] = dict(offsets)


def _conforms(reader: FakeBulkReader) -> BulkReader:
    return reader  # mypy checks here that the fake implements the port
