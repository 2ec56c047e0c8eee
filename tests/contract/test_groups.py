"""Contract (wire backends): consumer groups' committed offsets, as a consumer commits them and as Guardian's
bulk reader (:class:`kafkaio.source.KafkaSource`, batched OffsetFetch) and kafka-python's admin read them back.
The fake models no groups (the port has no group call): kafkasim and Kafka only."""

from __future__ import annotations

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from kafkaio.source import KafkaSource, KafkaSourceOptions
from tests.contract.backends import Backend, unique


def test_committed_offsets(wire_backend: Backend) -> None:
    backend = wire_backend
    t, group = unique("grp"), unique("group")
    backend.create_topic(t, {0: [1, 2], 1: [2, 3]})
    try:
        backend.produce(t, 0, 64 * 1024)  # 4 records
        consumer = KafkaConsumer(group_id=group, enable_auto_commit=False, client_id="contract-consumer",
                                 **backend.client_config())
        try:
            consumer.assign([TopicPartition(t, 0), TopicPartition(t, 1)])
            consumer.commit({TopicPartition(t, 0): OffsetAndMetadata(3, "", -1),
                             TopicPartition(t, 1): OffsetAndMetadata(0, "", -1)})
            assert consumer.committed(TopicPartition(t, 0)) == 3
        finally:
            consumer.close()
        admin = backend.connection.client()
        listed = {(tp.topic, tp.partition): om.offset for tp, om in admin.list_group_offsets(group)[group].items()}
        assert listed == {(t, 0): 3, (t, 1): 0}
        source = KafkaSource(backend.connection, KafkaSourceOptions(describe_log_dirs=False, describe_configs=False,
                                                                    describe_quotas=False))

        def read() -> dict[tuple[str, int], int]:
            state = source.fetch()
            got = state.group_offsets.as_dict().get(group)
            if got is None:  # shown as the last value if it never comes
                raise LookupError(f"{group} not read; groups {state.group_offsets.groups}, errors {state.errors}")
            return got

        assert backend.wait("the group's offsets in a collection round", read) == {(t, 0): 3, (t, 1): 0}
    finally:
        backend.delete_topic(t)
