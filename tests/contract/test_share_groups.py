"""KIP-932 share groups on real Kafka (issue 31, item 7): three of Kafka's own console share consumers in one share
group on one partition, and Guardian's reading of them — members, SPSO, lag, the page-cache position estimate and
the attribution — checked against what the broker says.

The scenario: the group consumes 2,000 records (Kafka's share-partition lag, KIP-1226, drops to 0), its three members
are paused (SIGSTOP: they stay members until their session times out, 45 s), 3,000 more records arrive — the
group's lag is exactly 3,000: Kafka's own lag, and Guardian's log end offset minus the group's position. The
persisted SPSO DescribeShareGroupOffsets returns may stay behind the records already acknowledged (it is at most
2,000 here); the position is ``max(SPSO, LEO − lag)``. One collection round then reads the partition: one reader,
not three, at that position; the three members' client ids as its clients. Resumed, the group drains again.
Runs on the conformance suite's lab (Kafka only: kafkasim has no share groups)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kafka.admin import NewTopic
from kafka.protocol.metadata.api_versions import ApiVersionsRequest

from collectors.collector import ClusterCollector
from controlplane.service.share_lineage import with_round_share_members
from kafkaio.endpoints import load_endpoints_file
from kafkaio.group_types import ShareGroup
from kafkaio.source import KafkaSource
from kafkaio.types import KafkaState
from kafkalab.share_consumers import ShareConsumer
from planners.protection import Lineage
from tests.contract.backends import LabBackend
from tests.support.lab_support import Lab, wait_for

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]

MEMBERS = 3
FIRST, SECOND = 2000, 3000
PAYLOAD = b"r" * 200


@pytest.fixture()
def lab(kafka_backend: LabBackend) -> Lab:
    """The conformance suite's lab (3 brokers x 2 dirs; topics and groups here are named uniquely): starting one
    of its own cost ~45 s of CI."""
    return kafka_backend.lab


def log_end(lab: Lab, topic: str) -> int:
    from kafka import TopicPartition

    c = lab.consumer(client_id="test-leo")
    try:
        tp = TopicPartition(topic, 0)
        return int(c.end_offsets([tp])[tp])
    finally:
        c.close()


def produce(lab: Lab, topic: str, n: int) -> None:
    p = lab.producer(acks="all", linger_ms=20)
    try:
        for _ in range(n):
            p.send(topic, PAYLOAD, partition=0)
        p.flush(30)
    finally:
        p.close()


def share_group(source: KafkaSource, group: str) -> tuple[ShareGroup | None, KafkaState]:
    state = source.fetch()
    return state.share_groups.get(group), state


def test_a_share_group_with_three_members_on_one_partition(lab: Lab, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    topic, group = f"jobs-{suffix}", f"workers-{suffix}"
    tp = (topic, 0)
    eps = load_endpoints_file(lab.endpoints_file, lab.cluster)
    source = KafkaSource.for_endpoints(eps)
    admin = lab.admin()
    consumers = [ShareConsumer(lab.doc, group, topic, f"{group}-member-{k}", tmp_path / "consumers",
                               tmp_path / f"member-{k}.out") for k in range(MEMBERS)]
    collector: ClusterCollector | None = None
    try:
        # Kafka 4.2 formats its storage with share.version=1: share groups need no configuration on the lab
        features = {f.name: f.max_version_level for f in
                    source.connection.send(ApiVersionsRequest(client_software_name="guardian-test",
                                                              client_software_version="1")).finalized_features}
        assert features.get("share.version", 0) >= 1, features
        admin.create_topics([NewTopic(topic, 1, 3)])
        wait_for("the topic's leader", lambda: log_end(lab, topic) == 0 or None, 30)
        for c in consumers:
            c.start()

        def all_assigned() -> ShareGroup | None:
            g, _ = share_group(source, group)
            ok = g is not None and len(g.members) == MEMBERS and all(m.assignment == (tp,) for m in g.members)
            return g if ok else None

        g = wait_for("three members assigned partition 0", all_assigned, 60, 1.0)
        assert sorted(m.client_id for m in g.members) == [c.client_id for c in consumers]
        assert [m.client_id for m in g.members_of(tp)] == [c.client_id for c in consumers]  # one partition, 3 members

        produce(lab, topic, FIRST)

        def drained(end: int) -> ShareGroup | None:
            g_, _ = share_group(source, group)
            o = g_.offsets.get(tp) if g_ is not None else None
            ok = o is not None and o.start_offset is not None and o.start_offset <= end and o.lag == 0
            return g_ if ok else None

        drained_at = wait_for(f"every one of the first {FIRST} records delivered", lambda: drained(FIRST), 60, 1.0)
        spso = drained_at.offsets[tp].start_offset
        assert spso is not None
        for c in consumers:
            c.pause()
        produce(lab, topic, SECOND)
        leo = log_end(lab, topic)
        assert leo == FIRST + SECOND

        paused, state = share_group(source, group)
        assert paused is not None and len(paused.members) == MEMBERS  # still members while paused (session: 45 s)
        o = paused.offsets[tp]
        assert o.start_offset == spso  # nothing acknowledged while paused
        assert o.lag == SECOND  # Kafka's own share-partition lag (KIP-1226): the records that arrived while paused
        assert group not in state.group_offsets.groups  # not read as a consumer group

        # one collection round (two: rates need a pair), as the service takes it
        collector = ClusterCollector(eps)
        collector.collect_once()
        time.sleep(2.0)
        collected = collector.collect_once()
        detail = collected.partitions[tp]
        (reader,) = detail.share_groups
        assert reader.group == group and reader.start_offset == spso and reader.broker_lag == SECOND
        assert reader.members == tuple(c.client_id for c in consumers) and reader.member_count == MEMBERS
        assert detail.leo == leo  # the leader's LEO, from its JMX exporter
        assert reader.position == FIRST and reader.lag == SECOND
        # the page-cache position estimate: the group is one reader of the partition, at its SPSO
        readers = [*detail.disk_readers, *detail.cached_readers]
        assert readers.count(group) == 1, readers
        assert collected.coverage.consumer_offsets["share_groups"] >= 1
        assert not [k for k in collected.coverage.kafka_errors if "share" in k], collected.coverage.kafka_errors
        # attribution: every member assigned the partition is one of its clients
        lineage = with_round_share_members(Lineage(), collected)
        assert [s.client_id for s in lineage.fetch[tp]] == [c.client_id for c in consumers]

        for c in consumers:
            c.resume()
        wait_for(f"all {leo} records delivered", lambda: drained(leo), 60, 1.0)
    finally:
        for c in consumers:
            c.stop()
        if collector is not None:
            collector.close()
        source.close()
        admin.close()
    # every record was delivered to the group, spread over its members (several members read one partition)
    seen: dict[int, set[int]] = {}
    for k in range(MEMBERS):
        lines = (tmp_path / f"member-{k}.out").read_text(errors="replace").splitlines()
        seen[k] = {int(x.split("\t", 1)[0].removeprefix("Offset:")) for x in lines if x.startswith("Offset:")}
    assert set().union(*seen.values()) == set(range(FIRST + SECOND))
    assert sum(1 for s in seen.values() if s) >= 2, {k: len(s) for k, s in seen.items()}
