"""The pure rules of tiered metadata: fencing, the segment life cycle, live segments, local start offset;
and the LMDB store + state machine: atomic groups, watermark skip on replay, snapshot attachments."""

from __future__ import annotations

from pathlib import Path

import pytest

from raft.protocol import CommandRejected
from raft.storage import SnapshotCodec
from tiered.machine import STALE_PREFIX, TieredStateMachine, append_command, delete_command
from tiered.model import (
    EventKind,
    GroupRefused,
    PartitionKey,
    PartitionMeta,
    SegmentEvent,
    local_start_fetch_offset,
    plan_group,
)
from tiered.store import TieredStore

K = PartitionKey("c1", "topic", 3)


def ev(kind: EventKind, sid: int = 0, start: int = 0, end: int = 99, epoch: int = 1, size: int = 100) -> SegmentEvent:
    return SegmentEvent(kind, sid, start, end, epoch, size, f"/r/{start}" if kind == EventKind.COPY_STARTED else "")


def test_stale_epoch_is_refused_and_higher_epoch_raises_the_mark() -> None:
    meta = PartitionMeta(leader_epoch=5)
    with pytest.raises(GroupRefused) as exc:
        plan_group(meta, 4, [ev(EventKind.COPY_STARTED, epoch=4)], 1, lambda s: None, 1)
    assert exc.value.stale_epoch
    out = plan_group(meta, 6, [ev(EventKind.COPY_STARTED, epoch=6)], 1, lambda s: None, 10)
    assert out.meta.leader_epoch == 6 and out.segment_ids == (10,)


def test_life_cycle_is_enforced_and_a_bad_event_refuses_the_whole_group() -> None:
    meta = PartitionMeta()
    out = plan_group(meta, 1, [ev(EventKind.COPY_STARTED), ev(EventKind.COPY_STARTED, start=100, end=199)],
                     1, lambda s: None, 1)
    assert out.segment_ids == (1, 2) and out.meta.live_segments == 2
    segs = out.segments
    with pytest.raises(GroupRefused, match="DELETE_FINISHED not allowed after COPY_STARTED"):
        plan_group(out.meta, 1, [ev(EventKind.COPY_FINISHED, 1), ev(EventKind.DELETE_FINISHED, 2)], 2,
                   segs.get, 3)
    with pytest.raises(GroupRefused, match="unknown"):
        plan_group(out.meta, 1, [ev(EventKind.COPY_FINISHED, 99)], 2, segs.get, 3)
    with pytest.raises(GroupRefused, match="segment_id 0"):
        plan_group(out.meta, 1, [ev(EventKind.COPY_STARTED, 7)], 2, segs.get, 3)


def test_live_segments_and_remote_bytes_follow_the_events() -> None:
    out = plan_group(PartitionMeta(), 1, [ev(EventKind.COPY_STARTED, size=300)], 1, lambda s: None, 1)
    segs = dict(out.segments)
    out = plan_group(out.meta, 1, [ev(EventKind.COPY_FINISHED, 1, size=0)], 2, segs.get, 2)
    assert out.meta.remote_bytes == 300 and out.segments[1].start_offset == 0  # follow-up inherits the segment
    segs.update(out.segments)
    out = plan_group(out.meta, 1, [ev(EventKind.DELETE_STARTED, 1), ev(EventKind.DELETE_FINISHED, 1)], 3,
                     segs.get, 2)
    assert out.meta.live_segments == 0 and out.meta.remote_bytes == 0 and not out.segments[1].live


def test_local_start_fetch_offset() -> None:
    # max(log start, log end - ingress x threshold), capped by what remote storage holds
    assert local_start_fetch_offset(0, 10_000, 10.0, 100.0, remote_end=20_000) == 9_000
    assert local_start_fetch_offset(9_500, 10_000, 10.0, 100.0, remote_end=20_000) == 9_500
    assert local_start_fetch_offset(0, 10_000, 10.0, 100.0, remote_end=4_999) == 5_000
    assert local_start_fetch_offset(100, 10_000, 10.0, 100.0, remote_end=None) == 100
    assert local_start_fetch_offset(0, 10_000, 0.0, 100.0, remote_end=20_000) == 10_000
    with pytest.raises(ValueError):
        local_start_fetch_offset(10, 5, 1.0, 1.0, None)


def test_store_applies_groups_atomically_and_skips_replayed_entries(tmp_path: Path) -> None:
    store = TieredStore(tmp_path / "s")
    sm = TieredStateMachine(store)
    r = sm.apply_at(append_command(K, 1, [ev(EventKind.COPY_STARTED), ev(EventKind.COPY_STARTED)]), 5)
    assert r == {"group_id": 1, "segment_ids": [1, 2]}
    assert sm.apply_at(append_command(K, 1, [ev(EventKind.COPY_STARTED)]), 5) == {"replayed": True}
    with pytest.raises(CommandRejected) as stale:
        sm.apply_at(append_command(K, 0, [ev(EventKind.COPY_STARTED, epoch=0)]), 6)
    assert str(stale.value).startswith(STALE_PREFIX)
    before = store.digest()
    with pytest.raises(CommandRejected):  # the first event is fine, the second is not: nothing is written
        sm.apply_at(append_command(K, 1, [ev(EventKind.COPY_FINISHED, 1), ev(EventKind.DELETE_FINISHED, 2)]), 7)
    assert store.digest() == before and store.watermark() == 7
    sm.apply_at(append_command(K, 1, [ev(EventKind.COPY_FINISHED, 1)]), 8)
    meta, segs = store.current_state(K)
    assert meta is not None and meta.groups == 2 and [s.state for s in segs] == [EventKind.COPY_FINISHED,
                                                                                  EventKind.COPY_STARTED]
    groups, more = store.fetch_groups(K, 0, 1)
    assert [g["group_id"] for g in groups] == [1] and more
    groups, more = store.fetch_groups(K, 1, 10)
    assert [g["group_id"] for g in groups] == [2] and not more
    other = PartitionKey("c1", "topic", 4)
    sm.apply_at(append_command(other, 1, [ev(EventKind.COPY_STARTED)]), 9)
    assert store.fetch_groups(K, 2, 10) == ([], False)  # ranges do not leak into the next partition
    assert [k.partition for k, _ in store.partitions("c1")] == [3, 4]
    assert store.totals()["c1"].live_segments == 3
    assert sm.apply_at(delete_command(K), 10)["deleted"]
    assert store.current_state(K) == (None, []) and store.totals()["c1"].partitions == 1
    store.close()


def test_snapshot_attachment_carries_the_store_to_a_node_that_is_behind(tmp_path: Path) -> None:
    leader = TieredStateMachine(TieredStore(tmp_path / "a"))
    for i in range(1, 50):
        leader.apply_at(append_command(K, 1, [ev(EventKind.COPY_STARTED, start=100 * i, end=100 * i + 99)]), i)
    follower = TieredStateMachine(TieredStore(tmp_path / "b"))
    installed: list[Path | None] = []

    def install(state: dict, path: Path | None) -> None:
        installed.append(path)
        assert path is not None
        follower.restore_attachment(state, path)

    codec = SnapshotCodec(leader.snapshot, lambda s, p: None, attach=leader.write_attachment)
    codec.serialize(str(tmp_path / "snap.bin"), ((b"", 49, 1), None, {}))
    SnapshotCodec(follower.snapshot, install).deserialize(str(tmp_path / "snap.bin"))
    assert installed and follower.store.digest() == leader.store.digest() and follower.store.watermark() == 49
    # a corrupt attachment is refused, not installed
    blob = bytearray((tmp_path / "snap.bin").read_bytes())
    blob[-10] ^= 0xFF
    (tmp_path / "bad.bin").write_bytes(bytes(blob))
    damaged: list[str] = []
    with pytest.raises(ValueError):
        SnapshotCodec(follower.snapshot, install, on_damage=damaged.append).deserialize(str(tmp_path / "bad.bin"))
    assert damaged and "checksum" in damaged[0]
