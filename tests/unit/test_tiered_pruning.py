"""History pruning of the tiered store (issue 37): a deleted segment's events leave the history once its
partition has appended ``prune_after`` more groups, so what a bootstrap replays (the stored groups) stays flat
as a partition ages, and replaying it still gives the partition's current state."""

from __future__ import annotations

import time
from pathlib import Path

from tiered.model import EventKind, KafkaSegment, PartitionKey, SegmentEvent
from tiered.store import TieredStore

K = PartitionKey("lab", "topic-id", 0)
KEEP_LIVE = 3


def _ev(kind: EventKind, i: int) -> SegmentEvent:
    uuid = f"seg-{i}"
    if kind == EventKind.COPY_STARTED:
        return SegmentEvent(kind, 0, i * 100, i * 100 + 99, 1, 1000, uuid, KafkaSegment(uuid, ((1, i * 100),)))
    return SegmentEvent(kind, 0, 0, 0, 0, 0, "", KafkaSegment(uuid))


def age(store: TieredStore, first: int, cycles: int, index: int) -> int:
    """``cycles`` copy/delete cycles (copy segment i, delete segment i - KEEP_LIVE); returns the next Raft index."""
    for i in range(first, first + cycles):
        store.append(K, 1, [_ev(EventKind.COPY_STARTED, i)], index)
        store.append(K, 1, [_ev(EventKind.COPY_FINISHED, i)], index + 1)
        index += 2
        if i >= KEEP_LIVE:
            store.append(K, 1, [_ev(EventKind.DELETE_STARTED, i - KEEP_LIVE)], index)
            store.append(K, 1, [_ev(EventKind.DELETE_FINISHED, i - KEEP_LIVE)], index + 1)
            index += 2
    return index


def bootstrap(store: TieredStore) -> tuple[dict[str, int], int, float]:
    """Replay every stored group as a new replica would: live segments (uuid -> last state), groups read, seconds."""
    t0 = time.perf_counter()
    state: dict[str, int] = {}
    after, read = 0, 0
    while True:
        groups, more = store.fetch_groups(K, after, 100)
        for g in groups:
            read += 1
            for e in g["events"]:
                if e["kind"] == EventKind.DELETE_FINISHED:
                    state.pop(e["kafka"]["uuid"], None)
                else:
                    state[e["kafka"]["uuid"]] = e["kind"]
            after = g["group_id"]
        if not more:
            return state, read, time.perf_counter() - t0


def test_stored_history_stays_flat_as_the_partition_ages(tmp_path: Path) -> None:
    store = TieredStore(tmp_path / "s", prune_after=20)
    try:
        index = age(store, 0, 50, 1)
        young_state, young_groups, young_s = bootstrap(store)
        index = age(store, 50, 450, index)
        old_state, old_groups, old_s = bootstrap(store)
        meta, live = store.current_state(K)
        assert meta is not None and meta.live_segments == KEEP_LIVE
        # what a replay of the stored history gives is the current state
        assert old_state == {s.kafka.segment_uuid: int(s.state) for s in live if s.kafka}
        assert young_state.keys() == {f"seg-{i}" for i in range(47, 50)}
        # flat: the same number of groups to replay after 50 and after 500 cycles (live segments + the window)
        assert young_groups == old_groups == meta.groups
        assert old_groups <= 2 * KEEP_LIVE + 20 + 2
        assert meta.events < 4 * (KEEP_LIVE + 20)
        totals = store.totals()["lab"]
        assert totals.groups == meta.groups and totals.events == meta.events
        print(f"bootstrap after 50 cycles: {young_groups} groups in {young_s * 1e3:.2f} ms; after 500: "
              f"{old_groups} groups in {old_s * 1e3:.2f} ms")
    finally:
        store.close()


def test_a_tombstone_stays_readable_for_the_window(tmp_path: Path) -> None:
    store = TieredStore(tmp_path / "s", prune_after=20)
    try:
        index = age(store, 0, KEEP_LIVE + 1, 1)  # segment 0 deleted in the last group
        groups, _ = store.fetch_groups(K, 0, 1000)
        kinds = [(e["kafka"]["uuid"], e["kind"]) for g in groups for e in g["events"]]
        assert ("seg-0", EventKind.COPY_STARTED) in kinds and ("seg-0", EventKind.DELETE_FINISHED) in kinds
        age(store, KEEP_LIVE + 1, 10, index)  # 40 more groups: past the window
        groups, _ = store.fetch_groups(K, 0, 1000)
        assert not any(e["kafka"]["uuid"] == "seg-0" for g in groups for e in g["events"])
        assert store.delete_partition(K, 10_000)["deleted"]
        assert store.fetch_groups(K, 0, 10) == ([], False)
    finally:
        store.close()
