"""The tiered-metadata store: one LMDB environment, keys ordered by (cluster, topic id, partition, id).

Goal
    Hold every partition's event groups, its live segments and its counters on disk, so that a range
    read of one partition (its groups after an id, its current state) touches only that partition's
    keys and memory stays bounded at millions of segments; apply a Raft entry atomically together
    with the applied-index watermark.

Method
    LMDB (``lmdb``), five named databases: ``groups`` (partition key + group id -> the group as JSON),
    ``segments`` (partition key + segment id -> the segment's latest state, removed at delete
    finished), ``parts`` (partition key -> counters and fencing mark), ``producers`` (partition key +
    producer id -> its last applied sequence and answer: idempotent appends, in the same transaction as
    the group, so they survive restarts, snapshots and failovers) and ``meta`` (watermark, id
    allocators, per-cluster totals).  Partition key = ``cluster NUL topic_id NUL partition(u32 BE)``,
    ids are u64 big-endian, so byte order = (cluster, topic id, partition, id) order and a partition
    is one contiguous key range.  Each Raft entry is one write transaction: it is applied whole (with
    the watermark) or not at all.  LMDB was chosen over RocksDB (``rocksdict``) by measurement on this
    machine at 1 M records in batches of 100: appends 194k vs 145k records/s, one partition's range
    read p99 20 us vs 1.8 ms (RocksDB's compactions), a single file whose consistent copy
    (``copyfd(compact=True)``, a read transaction, writers continue) is the Raft snapshot attachment.
    RocksDB compresses better on disk; LMDB's resident memory is page cache, reclaimable.

Guarantee
    Readers see only whole groups (MVCC snapshots).  After a crash of the process (``kill -9``) the
    last committed transaction survives (``sync=False`` writes go to the page cache, as the Raft
    journal's do); a lost tail after a machine crash is replayed from the journal because the
    watermark is stored in the same transaction as the data it covers.

Cost
    One write transaction per group (~20-50 us plus JSON); a range read is one B-tree seek plus one
    cursor step per record.  Disk: ~300 B per event plus ~200 B per live segment.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import lmdb

from tiered.model import MAX_PRODUCERS_PER_PARTITION as MAX_PRODUCERS
from tiered.model import (
    GroupOutcome,
    GroupRefused,
    PartitionKey,
    PartitionMeta,
    ProducerState,
    Segment,
    SegmentEvent,
    check_sequence,
    plan_group,
    request_digest,
)

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_WATERMARK = b"applied_index"
_NEXT_GROUP = b"next_group_id"
_NEXT_SEGMENT = b"next_segment_id"
_CLUSTER = b"cluster:"
PRUNE_AFTER_GROUPS = 256
"""A deleted segment's events are dropped from the history once its partition has appended this many groups
after its delete finished: a reader tailing the groups has that long to see the tombstone, and a bootstrap
replays at most live segments' events plus this many groups."""
MAP_SIZE = 64 << 30  # address space only (the file grows as needed)


def partition_prefix(key: PartitionKey) -> bytes:
    return key.cluster.encode() + b"\0" + key.topic_id.encode() + b"\0" + _U32.pack(key.partition)


def decode_prefix(raw: bytes) -> PartitionKey:
    cluster, topic, part = raw[:-4].split(b"\0")[0], raw[:-4].split(b"\0")[1], raw[-4:]
    return PartitionKey(cluster.decode(), topic.decode(), _U32.unpack(part)[0])


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class ClusterTotals:
    partitions: int = 0
    groups: int = 0
    events: int = 0
    live_segments: int = 0
    remote_bytes: int = 0


class TieredStore:
    """The LMDB-backed store; see the module docstring.  Thread-safe (one writer at a time: Raft)."""

    def __init__(self, path: Path, prune_after: int = PRUNE_AFTER_GROUPS) -> None:
        self.path = Path(path)
        self.prune_after = prune_after
        self.path.mkdir(parents=True, exist_ok=True)
        self._swap = threading.RLock()
        self._open()

    def _open(self) -> None:
        self.env = lmdb.open(str(self.path), map_size=MAP_SIZE, max_dbs=8, sync=False, metasync=False,
                             writemap=True, map_async=True, readahead=False, max_readers=256)
        self.groups = self.env.open_db(b"groups")
        self.segments = self.env.open_db(b"segments")
        self.parts = self.env.open_db(b"parts")
        self.meta = self.env.open_db(b"meta")
        self.producers = self.env.open_db(b"producers")
        self.kafka_ids = self.env.open_db(b"kafka_ids")
        self.seg_groups = self.env.open_db(b"seg_groups")
        self.tombs = self.env.open_db(b"tombs")

    def close(self) -> None:
        with self._swap:
            self.env.close()

    # ------------------------------------------------------------------ writes (Raft thread)
    def watermark(self) -> int:
        with self._swap, self.env.begin(db=self.meta) as tx:
            raw = tx.get(_WATERMARK)
            return 0 if raw is None else int(_U64.unpack(raw)[0])

    def append(self, key: PartitionKey, leader_epoch: int, events: list[SegmentEvent], index: int,
               producer: tuple[int, int] | None = None) -> dict[str, Any]:
        """Apply one group at Raft index ``index``; raises GroupRefused (nothing written).

        ``producer`` = (producer id, sequence) makes it idempotent: a retry of the producer's last applied
        request on this partition writes nothing but the watermark and returns the first answer with
        ``duplicate`` and ``raft_index`` (the index that applied it)."""
        key.check()
        prefix = partition_prefix(key)
        with self._swap, self.env.begin(write=True) as tx:
            if producer is not None:
                digest = request_digest(leader_epoch, events)
                raw_last = tx.get(prefix + _U64.pack(producer[0]), db=self.producers)
                last = None if raw_last is None else ProducerState.from_json(json.loads(raw_last))
                try:
                    again = check_sequence(last, producer[0], producer[1], digest)
                except GroupRefused:
                    tx.abort()
                    raise
                if again is not None:
                    tx.put(_WATERMARK, _U64.pack(index), db=self.meta)
                    return {"group_id": again.group_id, "segment_ids": list(again.segment_ids), "duplicate": True,
                            "raft_index": again.index}
            raw_meta = tx.get(prefix, db=self.parts)
            meta = PartitionMeta() if raw_meta is None else PartitionMeta.from_json(json.loads(raw_meta))
            group_id = _counter(tx, self.meta, _NEXT_GROUP)
            next_seg = _counter(tx, self.meta, _NEXT_SEGMENT)

            def lookup(segment_id: int) -> Segment | None:
                raw = tx.get(prefix + _U64.pack(segment_id), db=self.segments)
                return None if raw is None else Segment.from_json(json.loads(raw))

            def resolve(uuid: str) -> int | None:
                raw = tx.get(prefix + uuid.encode(), db=self.kafka_ids)
                return None if raw is None else int(_U64.unpack(raw)[0])

            try:
                out = plan_group(meta, leader_epoch, events, group_id, lookup, next_seg, resolve)
            except GroupRefused:
                tx.abort()
                raise
            self._write_group(tx, key, prefix, group_id, leader_epoch, out, new=raw_meta is None, before=meta)
            tx.put(_NEXT_GROUP, _U64.pack(group_id + 1), db=self.meta)
            tx.put(_NEXT_SEGMENT, _U64.pack(next_seg + len(out.segment_ids)), db=self.meta)
            tx.put(_WATERMARK, _U64.pack(index), db=self.meta)
            if producer is None:
                return {"group_id": group_id, "segment_ids": list(out.segment_ids)}
            state = ProducerState(producer[1], digest, group_id, out.segment_ids, index)
            self._remember(tx, prefix, producer[0], state, new=last is None)
        return {"group_id": group_id, "segment_ids": list(out.segment_ids), "duplicate": False, "raft_index": index}

    def _remember(self, tx: lmdb.Transaction, prefix: bytes, producer_id: int, state: ProducerState, *,
                  new: bool) -> None:
        """Keep ``state`` as the producer's last; a new producer past the cap evicts the least recent one."""
        tx.put(prefix + _U64.pack(producer_id), _dumps(state.to_json()), db=self.producers)
        if not new:
            return
        known = [(int(json.loads(v)["index"]), bytes(k)) for k, v in _range(tx.cursor(db=self.producers), prefix)]
        if len(known) > MAX_PRODUCERS:
            tx.delete(min(known)[1], db=self.producers)

    def producer(self, key: PartitionKey, producer_id: int) -> ProducerState | None:
        """A producer's last applied request on the partition (None when unknown or forgotten)."""
        with self._swap, self.env.begin(db=self.producers) as tx:
            raw = tx.get(partition_prefix(key) + _U64.pack(producer_id))
            return None if raw is None else ProducerState.from_json(json.loads(raw))

    def _write_group(self, tx: lmdb.Transaction, key: PartitionKey, prefix: bytes, group_id: int, epoch: int,
                     out: GroupOutcome, *, new: bool, before: PartitionMeta) -> None:
        group = {"group_id": group_id, "leader_epoch": epoch, "events": [e.to_json() for e in out.events]}
        tx.put(prefix + _U64.pack(group_id), _dumps(group), db=self.groups)
        for sid, seg in out.segments.items():
            k = prefix + _U64.pack(sid)
            if seg.live:
                tx.put(k, _dumps(seg.to_json()), db=self.segments)
            else:
                tx.delete(k, db=self.segments)
            if seg.kafka is not None:
                uk = prefix + seg.kafka.segment_uuid.encode()
                if seg.live:
                    tx.put(uk, _U64.pack(sid), db=self.kafka_ids)
                else:
                    tx.delete(uk, db=self.kafka_ids)
        for ev in out.events:  # which groups hold each segment's events (for pruning)
            sk = prefix + _U64.pack(ev.segment_id)
            raw = tx.get(sk, db=self.seg_groups)
            held = [] if raw is None else json.loads(bytes(raw))
            if not held or held[-1] != group_id:
                tx.put(sk, _dumps([*held, group_id]), db=self.seg_groups)
        dead = sorted(sid for sid, seg in out.segments.items() if not seg.live)
        if dead:
            tx.put(prefix + _U64.pack(group_id), _dumps(dead), db=self.tombs)
        pruned_groups, pruned_events = self._prune(tx, prefix, group_id)
        meta = replace(out.meta, groups=out.meta.groups - pruned_groups, events=out.meta.events - pruned_events)
        tx.put(prefix, _dumps(meta.to_json()), db=self.parts)
        _add_totals(tx, self.meta, key.cluster, partitions=1 if new else 0, groups=1 - pruned_groups,
                    events=len(out.events) - pruned_events,
                    live_segments=out.meta.live_segments - before.live_segments,
                    remote_bytes=out.meta.remote_bytes - before.remote_bytes)

    def _prune(self, tx: lmdb.Transaction, prefix: bytes, group_id: int) -> tuple[int, int]:
        """Drop the events of segments whose delete finished ``prune_after`` groups ago or more (a group left
        empty goes whole); returns (groups, events) removed."""
        if group_id <= self.prune_after:
            return 0, 0
        cur = tx.cursor(db=self.tombs)
        due: list[tuple[bytes, list[int]]] = []
        if cur.set_range(prefix):
            for k, v in cur:
                if k[: len(prefix)] != prefix or len(k) != len(prefix) + 8 \
                        or _U64.unpack(k[len(prefix):])[0] > group_id - self.prune_after:
                    break
                due.append((bytes(k), json.loads(bytes(v))))
        groups = events = 0
        for tomb, sids in due:
            for sid in sids:
                sk = prefix + _U64.pack(sid)
                raw = tx.get(sk, db=self.seg_groups)
                for gid in [] if raw is None else json.loads(bytes(raw)):
                    gk = prefix + _U64.pack(gid)
                    graw = tx.get(gk, db=self.groups)
                    if graw is None:
                        continue
                    group = json.loads(bytes(graw))
                    kept = [e for e in group["events"] if e["segment_id"] != sid]
                    events += len(group["events"]) - len(kept)
                    if kept:
                        tx.put(gk, _dumps({**group, "events": kept}), db=self.groups)
                    else:
                        tx.delete(gk, db=self.groups)
                        groups += 1
                tx.delete(sk, db=self.seg_groups)
            tx.delete(tomb, db=self.tombs)
        return groups, events

    def delete_partition(self, key: PartitionKey, index: int) -> dict[str, Any]:
        """Drop a partition's groups, segments and counters; returns what was removed."""
        key.check()
        prefix = partition_prefix(key)
        with self._swap, self.env.begin(write=True) as tx:
            raw_meta = tx.get(prefix, db=self.parts)
            removed = 0
            if raw_meta is not None:
                meta = PartitionMeta.from_json(json.loads(raw_meta))
                for db in (self.groups, self.segments, self.producers, self.seg_groups, self.tombs):
                    cur = tx.cursor(db=db)
                    if cur.set_range(prefix):
                        while cur.key()[: len(prefix)] == prefix and len(cur.key()) == len(prefix) + 8:
                            removed += 1
                            if not cur.delete():
                                break
                cur = tx.cursor(db=self.kafka_ids)
                if cur.set_range(prefix):
                    while cur.key()[: len(prefix)] == prefix:
                        if not cur.delete():
                            break
                tx.delete(prefix, db=self.parts)
                _add_totals(tx, self.meta, key.cluster, partitions=-1, groups=-meta.groups, events=-meta.events,
                            live_segments=-meta.live_segments, remote_bytes=-meta.remote_bytes)
            tx.put(_WATERMARK, _U64.pack(index), db=self.meta)
        return {"deleted": raw_meta is not None, "records": removed}

    def note_index(self, index: int) -> None:
        """Advance the watermark past an entry that changed nothing (a refused command)."""
        with self._swap, self.env.begin(write=True, db=self.meta) as tx:
            tx.put(_WATERMARK, _U64.pack(index))

    # ------------------------------------------------------------------ reads (any thread)
    def fetch_groups(self, key: PartitionKey, after_group_id: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``limit`` groups of the partition with id > ``after_group_id``, and whether more follow."""
        prefix = partition_prefix(key)
        out: list[dict[str, Any]] = []
        with self._swap, self.env.begin(db=self.groups) as tx:
            cur = tx.cursor()
            if not cur.set_range(prefix + _U64.pack(after_group_id + 1)):
                return out, False
            for k, v in cur:
                if k[: len(prefix)] != prefix or len(k) != len(prefix) + 8:
                    return out, False
                if len(out) >= limit:
                    return out, True
                out.append(json.loads(v))
        return out, False

    def current_state(self, key: PartitionKey) -> tuple[PartitionMeta | None, list[Segment]]:
        """The partition's counters (None when unknown) and its live segments in segment-id order."""
        prefix = partition_prefix(key)
        with self._swap, self.env.begin() as tx:
            raw = tx.get(prefix, db=self.parts)
            if raw is None:
                return None, []
            segs = [Segment.from_json(json.loads(v)) for _, v in _range(tx.cursor(db=self.segments), prefix)]
            return PartitionMeta.from_json(json.loads(raw)), segs

    def segment_by_uuid(self, key: PartitionKey, uuid: str) -> Segment | None:
        """The live segment registered under a Kafka segment uuid (None: unknown or delete-finished)."""
        prefix = partition_prefix(key)
        with self._swap, self.env.begin() as tx:
            raw = tx.get(prefix + uuid.encode(), db=self.kafka_ids)
            if raw is None:
                return None
            seg = tx.get(prefix + bytes(raw), db=self.segments)
            return None if seg is None else Segment.from_json(json.loads(seg))

    def find_topic(self, cluster: str | None, topic: str, partition: int,
                   limit: int = 100_000) -> list[PartitionKey]:
        """Partitions ``partition`` of ``topic`` (a topic id, or the topic name Kafka gave with its segments),
        in ``cluster`` or in every cluster.  By id: one lookup per cluster; by name: a scan of the partitions
        (first live segment of each with that partition number), at most ``limit`` of them."""
        found: list[PartitionKey] = []
        clusters = [cluster] if cluster else sorted(self.totals())
        with self._swap, self.env.begin() as tx:
            for c in clusters:
                key = PartitionKey(c, topic, partition)
                if tx.get(partition_prefix(key), db=self.parts) is not None:
                    found.append(key)
            if found:
                return found
            cur = tx.cursor(db=self.parts)
            start = cluster.encode() + b"\0" if cluster else b""
            if not cur.set_range(start):
                return found
            seen = 0
            for k, _ in cur:
                pk = decode_prefix(bytes(k))
                if (cluster is not None and pk.cluster != cluster) or seen >= limit:
                    break
                seen += 1
                if pk.partition != partition:
                    continue
                first = next(_range(tx.cursor(db=self.segments), bytes(k)), None)
                if first is not None and json.loads(first[1]).get("kafka", {}).get("topic") == topic:
                    found.append(pk)
        return found

    def partitions(self, cluster: str | None = None, limit: int = 1000,
                   after: PartitionKey | None = None) -> list[tuple[PartitionKey, PartitionMeta]]:
        """Partitions in key order (of one cluster when given), after ``after``, at most ``limit``."""
        start = partition_prefix(after) + b"\0" if after else (cluster.encode() + b"\0" if cluster else b"")
        out: list[tuple[PartitionKey, PartitionMeta]] = []
        with self._swap, self.env.begin(db=self.parts) as tx:
            cur = tx.cursor()
            if not cur.set_range(start):
                return out
            for k, v in cur:
                pk = decode_prefix(k)
                if cluster is not None and pk.cluster != cluster:
                    break
                out.append((pk, PartitionMeta.from_json(json.loads(v))))
                if len(out) >= limit:
                    break
        return out

    def totals(self) -> dict[str, ClusterTotals]:
        """Per-cluster totals (kept up to date by every write: O(clusters) to read)."""
        with self._swap, self.env.begin(db=self.meta) as tx:
            cur = tx.cursor()
            res: dict[str, ClusterTotals] = {}
            if cur.set_range(_CLUSTER):
                for k, v in cur:
                    if not k.startswith(_CLUSTER):
                        break
                    res[k[len(_CLUSTER):].decode()] = ClusterTotals(**json.loads(v))
            return res

    def digest(self) -> str:
        """SHA-256 over every record (tests: equal on nodes that agree).  O(store size)."""
        h = hashlib.sha256()
        with self._swap, self.env.begin() as tx:
            for db in (self.groups, self.segments, self.parts, self.meta, self.producers, self.kafka_ids,
                       self.seg_groups, self.tombs):
                for k, v in tx.cursor(db=db):
                    if k == _WATERMARK:
                        continue
                    h.update(_U32.pack(len(k)) + k + _U32.pack(len(v)) + v)
        return h.hexdigest()

    # ------------------------------------------------------------------ snapshot attachment
    def copy_to(self, path: Path) -> None:
        """A consistent compact copy of the store file (one read transaction; writers go on)."""
        with self._swap, open(path, "wb") as f:
            self.env.copyfd(f.fileno(), compact=True)
            f.flush()
            os.fsync(f.fileno())

    def replace_from(self, path: Path) -> None:
        """Replace the whole store with a copy made by :meth:`copy_to` (readers wait meanwhile)."""
        with self._swap:
            self.env.close()
            tmp = self.path / "data.mdb.new"
            shutil.copyfile(path, tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            (self.path / "lock.mdb").unlink(missing_ok=True)
            os.replace(tmp, self.path / "data.mdb")
            self._open()


def _range(cur: lmdb.Cursor, prefix: bytes) -> Iterator[tuple[Any, Any]]:
    if not cur.set_range(prefix):
        return
    for k, v in cur:
        if k[: len(prefix)] != prefix or len(k) != len(prefix) + 8:
            return
        yield k, v


def _counter(tx: lmdb.Transaction, db: Any, name: bytes) -> int:
    raw = tx.get(name, db=db)
    return 1 if raw is None else int(_U64.unpack(raw)[0])


def _add_totals(tx: lmdb.Transaction, db: Any, cluster: str, **delta: int) -> None:
    k = _CLUSTER + cluster.encode()
    raw = tx.get(k, db=db)
    cur = json.loads(bytes(raw)) if raw is not None else ClusterTotals().__dict__.copy()
    for name, d in delta.items():
        cur[name] = cur[name] + d
    tx.put(k, _dumps(cur), db=db)
