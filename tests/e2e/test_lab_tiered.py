"""KIP-405 tiered storage on a real Kafka broker with Guardian's RemoteLogMetadataManager (issue 37).

``guardian lab up --tiered``: one Kafka 4.2 broker whose remote-log metadata goes to Guardian's tiered-metadata
service (three ``guardian serve`` nodes, a Raft group, TLS and an operator token) through the Java plug-in
(tiered/rlmm-plugin), its segments to Kafka's own ``LocalTieredStorage``.

1. Round trip: records produced to a topic with 1 MiB segments and ``local.retention.bytes=1`` are copied to
   remote storage and deleted locally (the broker's first local segment no longer starts at 0); the service
   holds Kafka's segment uuids with their leader-epoch maps; a consumer from offset 0 reads every record back,
   identical, through the broker (the deleted ones from remote storage).
2. ``kill -9`` of the service's Raft leader while the broker copies: no segment is lost (the copied segments
   cover 0..n without a gap) and none is duplicated (no two overlap, each Kafka uuid once, none left in
   COPY_STARTED), and every record reads back identical.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.admin import NewTopic
from typer.testing import CliRunner

from controlplane.cli.app import app
from kafkalab import lab as kafka_lab
from kafkalab import tiered as tiered_service
from tests.support.lab_support import Lab, running_lab, wait_for
from tiered.client import COPY_FINISHED, COPY_STARTED, TieredClient

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

RECORD = 1024
SEGMENT = 1 << 20


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("tiered-lab"), brokers=1, log_dirs=1, disks="dir", tiered=True) as lab_:
        yield lab_


@pytest.fixture(scope="module")
def service(lab: Lab) -> Iterator[TieredClient]:
    state = lab.doc["tiered"]
    client = TieredClient(state["grpc"], Path(state["token_file"]).read_text().strip(), 10.0,
                          ca_file=state["ca_file"])
    yield client
    client.close()


def make_topic(lab: Lab, name: str) -> None:
    admin = lab.admin()
    try:
        admin.create_topics([NewTopic(name, 1, 1, topic_configs={
            "remote.storage.enable": "true", "segment.bytes": str(SEGMENT), "local.retention.bytes": "1",
            "retention.bytes": "-1", "retention.ms": "-1"})])
    finally:
        admin.close()


def value(topic: str, i: int) -> bytes:
    head = f"{topic}:{i:08d}:".encode()
    return head + bytes((i * 7 + k) % 251 for k in range(RECORD - len(head)))


def produce(lab: Lab, topic: str, first: int, n: int, pause_every: int = 0) -> None:
    p = lab.producer(acks="all", linger_ms=20, max_in_flight_requests_per_connection=1)
    try:
        for i in range(first, first + n):
            p.send(topic, value(topic, i), partition=0)
            if pause_every and i % pause_every == pause_every - 1:
                p.flush()
                time.sleep(0.2)  # spread the segments over time: copies go on across the kill
        p.flush()
    finally:
        p.close()


def local_start(lab: Lab, topic: str) -> int:
    """Base offset of the broker's first local segment of partition 0."""
    segs = sorted(Path(lab.log_dirs(1)[0], f"{topic}-0").glob("*.log"))
    return int(segs[0].stem) if segs else 0


def read_all(lab: Lab, topic: str, n: int) -> list[bytes]:
    c = lab.consumer(client_id="test-tiered-read", enable_auto_commit=False, fetch_max_bytes=4 << 20)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            for recs in c.poll(1000).values():
                got.extend(r.value for r in recs)
        return got
    finally:
        c.close()


def segments_of(service: TieredClient, cluster: str, topic: str) -> list[Any]:
    """The service's live segments of ``topic``-0 (found by the topic name Kafka gave with each segment)."""
    for part in service.list_partitions(cluster):
        if part.partition.partition != 0:
            continue
        st = service.current_state(cluster, part.partition.topic_id, 0)
        if st.found and st.segments and st.segments[0].kafka.topic == topic:
            return list(st.segments)
    return []


def assert_contiguous(segs: list[Any], upto: int) -> None:
    """Copied segments cover 0..upto-1 without gap or overlap, each Kafka uuid once."""
    ordered = sorted(segs, key=lambda s: s.start_offset)
    assert ordered and ordered[0].start_offset == 0, [(s.start_offset, s.end_offset) for s in ordered]
    for a, b in itertools.pairwise(ordered):
        assert b.start_offset == a.end_offset + 1, f"gap or overlap: {a.start_offset}-{a.end_offset} then " \
                                                   f"{b.start_offset}-{b.end_offset}"
    assert ordered[-1].end_offset >= upto - 1
    uuids = [s.kafka.segment_uuid for s in segs]
    assert len(set(uuids)) == len(uuids) and all(uuids)


def test_round_trip_through_remote_storage(lab: Lab, service: TieredClient) -> None:
    topic = "tiered-roundtrip"
    n = 4000  # ~4 MiB: four segments roll, three or four go to remote storage
    make_topic(lab, topic)
    produce(lab, topic, 0, n)
    start = wait_for("local segments deleted after their copy", lambda: local_start(lab, topic), 60)
    segs = [s for s in segments_of(service, lab.cluster, topic) if s.state == COPY_FINISHED]
    assert_contiguous(segs, start)
    for s in segs:  # Kafka's description, as the broker gave it
        assert dict(s.kafka.leader_epochs) == {0: s.start_offset}
        assert s.kafka.broker_id == 1 and s.size_bytes > SEGMENT // 2
    # KIP-405's lookup, answered by the service: the segment holding an offset below the local log start
    topic_id = next(p.partition.topic_id for p in service.list_partitions(lab.cluster)
                    if service.current_state(lab.cluster, p.partition.topic_id, 0).segments[0].kafka.topic == topic)
    hit = service.find_segment(lab.cluster, topic_id, 0, 0, start - 1)
    assert hit.found and hit.segment.start_offset <= start - 1 <= hit.segment.end_offset
    assert not service.find_segment(lab.cluster, topic_id, 0, 1, 0).found  # no epoch 1 yet
    got = read_all(lab, topic, n)
    assert len(got) == n and got == [value(topic, i) for i in range(n)]
    # the operator's question, by topic name: which segment holds this offset (at this epoch)?
    state = lab.doc["tiered"]
    base = ["tiered", "segment", "--topic", topic, "--partition", "0", "--url", state["nodes"][0]["http"],
            "--token", Path(state["token_file"]).read_text().strip()]
    res = CliRunner().invoke(app, [*base, "--offset", str(start - 1), "--epoch", "0", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["segment"]["kafka"]["uuid"] == hit.segment.kafka.segment_uuid
    res = CliRunner().invoke(app, [*base, "--offset", str(start - 1), "--epoch", "3"])
    assert res.exit_code == 1 and "no copied segment holds offset" in res.output


def test_kill_leader_during_copies_loses_and_duplicates_nothing(lab: Lab, service: TieredClient) -> None:
    topic = "tiered-failover"
    n = 7000
    make_topic(lab, topic)
    state = lab.doc["tiered"]
    producer = threading.Thread(target=produce, args=(lab, topic, 0, n, 500), daemon=True)
    producer.start()
    wait_for("a first segment copied", lambda: any(s.state == COPY_FINISHED
                                                    for s in segments_of(service, lab.cluster, topic)), 60)
    victim = tiered_service.leader(state, 15)
    copied_before = sum(s.state == COPY_FINISHED for s in segments_of(service, lab.cluster, topic))
    tiered_service.kill_node(state, victim)
    producer.join(120)
    assert not producer.is_alive()
    new_leader = tiered_service.leader(state, 30)
    assert new_leader != victim

    def settled() -> int:
        segs = segments_of(service, lab.cluster, topic)
        start = local_start(lab, topic)
        done = [s for s in segs if s.state == COPY_FINISHED]
        if not done or any(s.state == COPY_STARTED for s in segs) or max(s.end_offset for s in done) + 1 < start:
            return 0
        return start if start >= n - 2 * SEGMENT // RECORD else 0

    start = wait_for("every rolled segment copied and deleted locally", settled, 90)
    segs = segments_of(service, lab.cluster, topic)
    assert all(s.state == COPY_FINISHED for s in segs), [s.state for s in segs]
    assert_contiguous(segs, start)
    assert len(segs) > copied_before, "no copy went through the new leader: the kill was not during copies"
    got = read_all(lab, topic, n)
    assert len(got) == n and got == [value(topic, i) for i in range(n)]
    kafka_lab.start_tiered_node(lab.directory, victim)  # recorded in the lab's state: lab down stops it
