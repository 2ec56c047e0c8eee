"""kafkasim's failed log dir behaves as Kafka's (KIP-112), read over TCP by kafka-python and Guardian's edge:

* DescribeLogDirs answers ``KAFKA_STORAGE_ERROR`` (56) for the dir, with no replicas and no sizes; the other
  dirs answer as before;
* Metadata lists the dir's replicas in ``offline_replicas``, they leave the ISR, leadership moves to another
  in-sync replica, the broker stays in the metadata (alive);
* AlterReplicaLogDirs refuses an offline replica, and an offline destination, with 56
  (``ReplicaManager.alterReplicaLogDirs``); a reassignment replacing the offline replica completes;
* the collection round carries the offline dirs and replicas (its coverage), and a broker whose every dir
  failed halts (leaves the metadata).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collectors.collector import ClusterCollector
from kafkaio.admin import KafkaAdmin
from kafkaio.source import KafkaSource
from tests.support.collectors_support import Sim
from tests.support.kafkasim_support import http_json

STORAGE_ERROR = 56


@pytest.fixture()
def sim() -> Iterator[Sim]:
    s = Sim()
    try:
        yield s
    finally:
        s.stop()


def fail(sim: Sim, broker: int, path: str) -> None:
    http_json(sim.endpoints_doc["control_url"] + "/fault/offline-log-dir",
              {"cluster": "east", "broker": broker, "log_dir": path})


def test_offline_log_dir_is_reported_as_kafka_does(sim: Sim) -> None:
    ep = sim.endpoints()
    src = KafkaSource.for_endpoints(ep)
    admin = KafkaAdmin.for_endpoints(ep, client_id="offline-dir-test")
    try:
        before = src.fetch()
        broker = 2
        dirs = before.log_dirs[broker]
        path = max(sorted(dirs), key=lambda d: len(dirs[d].replicas))
        on_it = sorted(tp for tp in dirs[path].replicas)
        assert on_it, "the chosen dir holds replicas"
        fail(sim, broker, path)
        after = src.fetch()
        assert broker in after.brokers, "the broker runs on"
        d = after.log_dirs[broker][path]
        assert (d.error_code, d.replicas, d.total_bytes, d.usable_bytes) == (STORAGE_ERROR, {}, None, None)
        assert all(x.error_code == 0 for p, x in after.log_dirs[broker].items() if p != path)
        assert after.offline_log_dirs() == {broker: [path]}
        assert sorted(after.offline_replicas()) == sorted(f"{t}-{p}" for t, p in on_it)
        for tp in on_it:
            pm = after.partitions[tp]
            assert broker in pm.offline and broker not in pm.isr and pm.leader != broker and pm.leader >= 0, pm
        # no intra-broker move of an offline replica, nor to an offline dir
        other = next(p for p in sorted(after.log_dirs[broker]) if p != path)
        t, p = on_it[0]
        res = admin.alter_log_dirs({(t, p, broker): other})
        assert res[(t, p, broker)] == "KafkaStorageError", res
        healthy = next(tp for tp, pm in sorted(after.partitions.items()) if broker in pm.replicas and tp not in on_it)
        res = admin.alter_log_dirs({(healthy[0], healthy[1], broker): path})
        assert res[(healthy[0], healthy[1], broker)] == "KafkaStorageError", res
        # a reassignment replacing the offline replica completes and the partition is whole again
        pm = after.partitions[(t, p)]
        spare = next(b for b in sorted(after.brokers) if b not in pm.replicas)
        target = tuple(spare if r == broker else r for r in pm.replicas)
        assert admin.alter_reassignments({(t, p): list(target)}) == {(t, p): None}
        sim.advance(600)
        done = src.fetch()
        assert done.partitions[(t, p)].replicas == target and not done.reassignments
        assert set(done.partitions[(t, p)].isr) == set(target) and not done.partitions[(t, p)].offline
    finally:
        admin.close()
        src.close()


def test_the_round_carries_offline_dirs_and_a_broker_with_no_dir_left_halts(sim: Sim) -> None:
    col = ClusterCollector(sim.endpoints())
    try:
        col.collect_once()
        fail(sim, 3, "/data1")
        sim.advance(10)
        c = col.collect_once()
        assert c.coverage.offline_log_dirs == {3: ["/data1"]}
        assert c.coverage.offline_replicas and all(v == [3] for v in c.coverage.offline_replicas.values())
        assert 3 in c.coverage.brokers_alive
        for path in ("/data2", "/data3"):
            fail(sim, 3, path)
        sim.advance(10)
        c = col.collect_once()
        assert 3 in c.coverage.brokers_dead and 3 not in c.coverage.offline_log_dirs
    finally:
        col.close()
