"""Contract: the collectors' bulk read (:class:`kafkaio.port.BulkReader`) — topology, each replica's log dir and
size, the throttle configs and client quotas set through the port, and a partial read that re-reads only what it
is asked (and what changed) and carries the rest over. The fake (:class:`kafkaio.fake_source.FakeBulkReader`) and
the real reader (:class:`kafkaio.source.KafkaSource`) on kafkasim and Kafka answer alike."""

from __future__ import annotations

from domain.throttles import FOLLOWER_REPLICAS, LEADER_RATE
from kafkaio.types import KafkaState
from tests.contract.backends import Backend, unique


def test_a_bulk_read_and_a_partial_one(backend: Backend) -> None:
    t, cid = unique("bulk"), unique("bulk-client")
    backend.create_topic(t, {0: [1, 2], 1: [2, 3]})
    reader = backend.bulk_reader()
    try:
        backend.produce(t, 0, 1 << 20)
        backend.port.set_broker_configs({1: {LEADER_RATE: "7000000"}})
        backend.port.alter_topic_lists(t, FOLLOWER_REPLICAS, append=["0:2"])
        backend.port.set_client_quotas(cid, {"consumer_byte_rate": 3_000_000.0})

        def read() -> KafkaState | None:
            s = reader.fetch()
            r = s.log_dirs.get(1, {}).get(s.replica_dir(1, t, 0) or "")
            done = (r is not None and r.replicas[(t, 0)].size >= 1 << 20
                    and s.throttles()["brokers"].get("1", {}).get(LEADER_RATE) == "7000000"
                    and any(q["entity"] == {"client-id": cid} for q in s.quotas))
            return s if done else None

        state = backend.wait("the bulk read to see the data, the throttle and the quota", read)
        assert set(backend.brokers) <= set(state.brokers) and state.full
        assert state.partitions[(t, 0)].replicas == (1, 2) and state.partitions[(t, 1)].replicas == (2, 3)
        assert state.replica_dir(2, t, 1) in backend.log_dirs[2]
        assert state.throttles()["topics"][t] == {FOLLOWER_REPLICAS: "0:2"}
        assert [q["values"] for q in state.quotas if q["entity"] == {"client-id": cid}] == \
            [{"consumer_byte_rate": 3_000_000.0}]

        partial = reader.fetch(full=False, previous=state, refresh_brokers=[2], refresh_topics=[t])
        assert not partial.full and partial.log_dirs_fresh == {2}
        assert partial.log_dirs[1] is state.log_dirs[1] and partial.log_dirs_at[1] == state.log_dirs_at[1]
        assert partial.throttles() == state.throttles()
    finally:
        backend.port.set_client_quotas(cid, {"consumer_byte_rate": None})
        backend.port.set_broker_configs({1: {LEADER_RATE: None}})
        backend.delete_topic(t)
        reader.close()
