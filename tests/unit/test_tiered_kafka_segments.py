"""Kafka's segment description in the tiered service (issue 37): segments named by Kafka's uuid, their
leader-epoch maps, KIP-405's lookups (offset + epoch, per-epoch listing, highest offset of an epoch), and the
store's uuid index through the life cycle and a partition's deletion."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiered.model import (
    EventKind,
    GroupRefused,
    KafkaSegment,
    PartitionKey,
    PartitionMeta,
    Segment,
    SegmentEvent,
    find_segment,
    highest_offset_for_epoch,
    plan_group,
    segments_for_epoch,
)
from tiered.server import event_from_pb, event_to_pb, segment_to_pb
from tiered.store import TieredStore

K = PartitionKey("lab", "mpUgDmJcQVmQEekkkFDHZA", 0)


def started(uuid: str, start: int, end: int, epochs: tuple[tuple[int, int], ...], custom: str = "") -> SegmentEvent:
    return SegmentEvent(EventKind.COPY_STARTED, 0, start, end, epochs[-1][0], 1000, uuid,
                        KafkaSegment(uuid, epochs, max_timestamp_ms=123, broker_id=1, event_timestamp_ms=5,
                                     custom_metadata=custom, topic="t"))


def follow(kind: EventKind, uuid: str, custom: str = "", broker: int = 2) -> SegmentEvent:
    return SegmentEvent(kind, 0, 0, 0, 0, 0, "", KafkaSegment(uuid, broker_id=broker, event_timestamp_ms=9,
                                                              custom_metadata=custom))


def seg(sid: int, start: int, end: int, epochs: tuple[tuple[int, int], ...],
        state: EventKind = EventKind.COPY_FINISHED) -> Segment:
    return Segment(sid, state, start, end, epochs[-1][0], 10, "", True, KafkaSegment(f"u{sid}", epochs))


def test_follow_ups_name_their_segment_by_kafka_uuid_and_keep_its_description() -> None:
    out = plan_group(PartitionMeta(), 3, [started("A", 0, 99, ((2, 0), (3, 50))),
                                          follow(EventKind.COPY_FINISHED, "A", custom="Y3VzdG9t")],
                     1, lambda s: None, 7, lambda u: None)
    assert out.segment_ids == (7,)
    done = out.segments[7]
    assert done.state == EventKind.COPY_FINISHED and done.kafka is not None
    assert done.kafka.leader_epochs == ((2, 0), (3, 50)) and done.kafka.max_timestamp_ms == 123
    assert done.kafka.broker_id == 2 and done.kafka.custom_metadata == "Y3VzdG9t" and done.kafka.topic == "t"
    # a later group finds it through the store's index (resolve)
    later = plan_group(out.meta, 3, [follow(EventKind.DELETE_STARTED, "A")], 2, lambda s: done if s == 7 else None,
                       8, lambda u: 7 if u == "A" else None)
    assert later.segments[7].state == EventKind.DELETE_STARTED and later.segments[7].kafka == KafkaSegment(
        "A", ((2, 0), (3, 50)), 123, 2, 9, "Y3VzdG9t", False, "t")


def test_unknown_or_reused_kafka_uuids_and_bad_epoch_maps_are_refused() -> None:
    with pytest.raises(GroupRefused, match="unknown"):
        plan_group(PartitionMeta(), 1, [follow(EventKind.COPY_FINISHED, "X")], 1, lambda s: None, 1, lambda u: None)
    with pytest.raises(GroupRefused, match="already registered"):
        plan_group(PartitionMeta(), 1, [started("A", 0, 9, ((1, 0),))], 1, lambda s: None, 1, lambda u: 5)
    with pytest.raises(GroupRefused, match="already registered"):
        plan_group(PartitionMeta(), 1, [started("A", 0, 9, ((1, 0),)), started("A", 10, 19, ((1, 10),))], 1,
                   lambda s: None, 1, lambda u: None)
    with pytest.raises(GroupRefused, match="ascending"):
        plan_group(PartitionMeta(), 3, [started("B", 0, 9, ((3, 0), (2, 5)))], 1, lambda s: None, 1, lambda u: None)


def test_find_segment_follows_kafka_lookup_rules() -> None:
    segs = [seg(1, 0, 99, ((0, 0),)), seg(2, 100, 199, ((0, 100), (1, 150))), seg(3, 200, 299, ((2, 200),)),
            seg(4, 300, 399, ((2, 300),), EventKind.COPY_STARTED)]

    def hit(epoch: int, offset: int) -> int | None:
        found = find_segment(segs, epoch, offset)
        return None if found is None else found.segment_id

    assert hit(0, 0) == 1 and hit(0, 99) == 1 and hit(0, 120) == 2
    assert hit(0, 150) is None  # past epoch 0's end in segment 2 (epoch 1 starts at 150)
    assert hit(1, 150) == 2 and hit(1, 199) == 2 and hit(1, 200) is None
    assert hit(2, 250) == 3 and hit(2, 350) is None  # segment 4 is not copied yet
    assert hit(5, 10) is None
    assert [s.segment_id for s in segments_for_epoch(segs, 0)] == [1, 2]
    assert highest_offset_for_epoch(segs, 0) == 149 and highest_offset_for_epoch(segs, 1) == 199
    assert highest_offset_for_epoch(segs, 2) == 299 and highest_offset_for_epoch(segs, 7) is None


def test_protobuf_round_trip_keeps_kafka_fields() -> None:
    e = started("A", 0, 99, ((2, 0), (3, 50)), custom="AAEC")
    back = event_from_pb(event_to_pb(e.to_json()))
    assert back == e
    pb_seg = segment_to_pb(seg(1, 0, 9, ((4, 0),)))
    assert dict(pb_seg.kafka.leader_epochs) == {4: 0} and pb_seg.kafka.segment_uuid == "u1"


def test_store_indexes_kafka_uuids_until_delete_finished_and_partition_deletion(tmp_path: Path) -> None:
    store = TieredStore(tmp_path / "s")
    try:
        store.append(K, 1, [started("A", 0, 99, ((1, 0),)), started("B", 100, 199, ((1, 100),))], 1)
        store.append(K, 1, [follow(EventKind.COPY_FINISHED, "A"), follow(EventKind.COPY_FINISHED, "B")], 2)
        a = store.segment_by_uuid(K, "A")
        assert a is not None and a.state == EventKind.COPY_FINISHED and a.start_offset == 0
        store.append(K, 1, [follow(EventKind.DELETE_STARTED, "A"), follow(EventKind.DELETE_FINISHED, "A")], 3)
        assert store.segment_by_uuid(K, "A") is None
        with pytest.raises(GroupRefused, match="unknown"):
            store.append(K, 1, [follow(EventKind.DELETE_STARTED, "A")], 4)
        _, live = store.current_state(K)
        assert [s.kafka.segment_uuid for s in live if s.kafka] == ["B"]
        assert store.delete_partition(K, 5)["deleted"]
        assert store.segment_by_uuid(K, "B") is None
        store.append(K, 1, [started("B", 0, 9, ((1, 0),))], 6)  # the uuid is free again in a re-created partition
    finally:
        store.close()
