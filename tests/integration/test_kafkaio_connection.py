"""One connection per cluster over real TCP (kafkasim): bulk reads and the port share one client."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from kafka.admin import NewTopic

from collectors.collector import ClusterCollector
from kafkaio.admin import KafkaAdmin
from kafkaio.connection import KafkaConnection
from kafkaio.endpoints import parse_endpoints
from kafkaio.source import KafkaSource
from kafkasim.broker.server import SimRunner
from tests.support.kafkasim_support import start_sim

logging.getLogger("kafka").setLevel(logging.CRITICAL)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRunner]:
    r = start_sim(realistic=False)  # PLAINTEXT: connection sharing, not security, is under test
    yield r
    r.stop()


def _boot(sim: SimRunner) -> str:
    return str(sim.endpoints["clusters"]["east"]["bootstrap_servers"])


def test_bulk_reads_and_the_port_share_one_client_and_one_set_of_records(sim: SimRunner) -> None:
    conn = KafkaConnection(_boot(sim), cluster="east")
    src, adm = KafkaSource(conn), KafkaAdmin(conn)
    try:
        state = src.fetch()
        live = adm.live()
        assert conn.connects == 1 and src.connection is adm.connection
        assert set(state.brokers) == set(live.alive) == {1, 2, 3, 4}
        for tp, p in live.partitions.items():
            assert state.partitions[tp] == p  # the same record type, the same values from both reads
        dirs = adm.log_dirs([1, 2, 3, 4], ["orders"])
        for (t, part, b), entries in dirs.items():
            listed = {(r.log_dir, r.is_future) for ld in state.log_dirs[b].values()
                      if (r := ld.replicas.get((t, part))) is not None}
            assert {(e.log_dir, e.is_future) for e in entries} == listed
        # views over a shared connection never close it
        client = conn.client()
        src.close()
        adm.close()
        assert conn.client() is client and conn.connects == 1
    finally:
        conn.close()


def test_unchanged_metadata_is_not_decoded_again(sim: SimRunner) -> None:
    conn = KafkaConnection(_boot(sim), cluster="east")
    src = KafkaSource(conn)
    try:
        first = src.fetch()
        second = src.fetch(full=False, previous=first)
        assert conn.metadata.decoded == 1 and conn.metadata.reused == 1
        assert second.partitions is first.partitions  # the cached partition map, not a rebuilt one
        conn.client().create_topics([NewTopic("fresh", 2, 2)])
        third = src.fetch(full=False, previous=second)
        assert conn.metadata.decoded == 2
        assert {("fresh", 0), ("fresh", 1)} <= set(third.partitions)
        assert len(third.partitions) == len(first.partitions) + 2
    finally:
        conn.close()


def test_a_dropped_client_reconnects_on_the_next_call(sim: SimRunner) -> None:
    conn = KafkaConnection(_boot(sim), cluster="east")
    adm = KafkaAdmin(conn)
    try:
        before = adm.live()
        conn.drop()
        conn.drop()  # idempotent
        assert adm.live().alive == before.alive and conn.connects == 2
        stale = conn.client()
        conn.drop(object())  # someone else's client: nothing happens
        assert conn.client() is stale
    finally:
        conn.close()
    owned = KafkaSource(_boot(sim))
    try:
        owned.fetch()
        owned.close()  # an owned connection is closed with its view (and reconnects when used again)
        assert owned.connection._client is None
        owned.fetch()
        assert owned.connection.connects == 2
    finally:
        owned.close()


def test_the_collector_opens_one_connection_from_its_endpoints(sim: SimRunner) -> None:
    eps = parse_endpoints(sim.endpoints, "east")
    col = ClusterCollector(eps)
    try:
        col.collect_once()
        col.collect_once()
        assert isinstance(col.source, KafkaSource)
        conn = col.source.connection
        assert conn.cluster == "east" and conn.security == eps.security and conn.connects == 1
        assert conn.metadata.reused >= 1
    finally:
        col.close()
