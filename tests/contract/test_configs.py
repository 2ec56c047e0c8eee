"""Contract: incremental configs — KIP-73/KIP-113 broker rates (SET / DELETE), the throttled-replica topic lists
(APPEND / SUBTRACT), topic configs (SET / DELETE), the read-only static broker configs of KIP-392 and how
DescribeConfigs reports each config's source and read-only flag — as Kafka does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from domain.throttles import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS
from kafkaio.errors import AdminError
from tests.contract.backends import Backend, unique

DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
SELECTOR = "replica.selector.class"
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@pytest.fixture
def topic(backend: Backend) -> Iterator[str]:
    t = unique("cfg")
    backend.create_topic(t, {0: [1, 2], 1: [2, 3], 2: [3, 1]})
    yield t
    backend.delete_topic(t)


def test_broker_rates_set_and_delete(backend: Backend) -> None:
    port = backend.port
    try:
        port.set_broker_configs({1: {LEADER_RATE: "1000000", FOLLOWER_RATE: "2000000"}, 2: {DIR_RATE: "3000000"}})
        got = backend.wait("the rates in force", lambda: (c := port.broker_configs([1, 2, 3],
                                                                                     [LEADER_RATE, FOLLOWER_RATE,
                                                                                      DIR_RATE]))
                           and c[1].get(FOLLOWER_RATE) and c[2].get(DIR_RATE) and c)
        assert got == {1: {LEADER_RATE: "1000000", FOLLOWER_RATE: "2000000"}, 2: {DIR_RATE: "3000000"}, 3: {}}
        port.set_broker_configs({1: {LEADER_RATE: None}, 3: {FOLLOWER_RATE: None}})  # deleting an unset key is fine
        got = backend.wait("the rate deleted", lambda: (c := port.broker_configs([1, 2, 3], [LEADER_RATE,
                                                                                              FOLLOWER_RATE]))
                           and LEADER_RATE not in c[1] and c)
        assert got == {1: {FOLLOWER_RATE: "2000000"}, 2: {}, 3: {}}
    finally:
        port.set_broker_configs({1: {FOLLOWER_RATE: None, LEADER_RATE: None}, 2: {DIR_RATE: None}})
    backend.wait("every rate removed", lambda: port.broker_configs([1, 2], [LEADER_RATE, FOLLOWER_RATE, DIR_RATE])
                 == {1: {}, 2: {}})


def test_describe_sources_and_read_only_flags(backend: Backend) -> None:
    port = backend.port
    keys = [LEADER_RATE, FOLLOWER_RATE, DIR_RATE, "broker.rack", SELECTOR]
    try:
        port.set_broker_configs({2: {LEADER_RATE: "5000000", DIR_RATE: "6000000"}})
        d = backend.wait("the rates described", lambda: (x := port.describe_broker_configs([2], keys))
                         and DIR_RATE in x[2] and x[2][LEADER_RATE].value == "5000000" and x)[2]
        live = port.live()
        assert (d["broker.rack"].value, d["broker.rack"].source, d["broker.rack"].read_only) == \
            (live.racks[2], "STATIC_BROKER_CONFIG", True)
        assert (d[SELECTOR].value, d[SELECTOR].source, d[SELECTOR].read_only) == \
            (RACK_AWARE, "STATIC_BROKER_CONFIG", True)
        assert d[LEADER_RATE].source == d[DIR_RATE].source == "DYNAMIC_BROKER_CONFIG"
        # the rates are dynamic *quota* configs, not KafkaConfig keys: an unset one is not described at all
        assert FOLLOWER_RATE not in d
        # ... and a set one is flagged read-only (outside the broker's reconfigurable set), although
        # IncrementalAlterConfigs sets it: read_only does not mean "cannot be set" for these keys
        assert d[LEADER_RATE].read_only and d[DIR_RATE].read_only
    finally:
        port.set_broker_configs({2: {LEADER_RATE: None, DIR_RATE: None}})


@pytest.mark.parametrize("key,value", [("broker.rack", "elsewhere"), (SELECTOR, "x.Y")])
def test_read_only_static_configs_refused(backend: Backend, key: str, value: str) -> None:
    with pytest.raises(AdminError, match="dynamically"):
        backend.port.set_broker_configs({1: {key: value}})
    assert backend.port.describe_broker_configs([1], [key])[1][key].value != value


def test_throttled_replica_lists_append_and_subtract(backend: Backend, topic: str) -> None:
    port, t = backend.port, topic
    port.alter_topic_lists(t, LEADER_REPLICAS, append=["0:1", "1:2"])
    port.alter_topic_lists(t, FOLLOWER_REPLICAS, append=["0:2"])
    assert backend.wait("the lists", lambda: port.topic_configs([t]) == {
        t: {LEADER_REPLICAS: "0:1,1:2", FOLLOWER_REPLICAS: "0:2"}})
    # APPEND adds only what is missing, at the end; SUBTRACT removes only what is there
    port.alter_topic_lists(t, LEADER_REPLICAS, append=["0:1", "2:3"])
    port.alter_topic_lists(t, LEADER_REPLICAS, subtract=["1:2", "9:9"])
    assert backend.wait("the list edited", lambda: port.topic_configs([t])[t].get(LEADER_REPLICAS) == "0:1,2:3")
    # subtracting everything leaves no entry (the port reports the emptied list as unset)
    port.alter_topic_lists(t, LEADER_REPLICAS, subtract=["0:1", "2:3"])
    port.alter_topic_lists(t, FOLLOWER_REPLICAS, subtract=["0:2"])
    assert backend.wait("the lists emptied", lambda: port.topic_configs([t]) == {t: {}})
    port.alter_topic_lists(t, FOLLOWER_REPLICAS, append=["*"])
    assert backend.wait("the wildcard", lambda: port.topic_configs([t]) == {t: {FOLLOWER_REPLICAS: "*"}})
    port.alter_topic_lists(t, FOLLOWER_REPLICAS)  # nothing to do: no request
    port.set_topic_configs({t: {FOLLOWER_REPLICAS: None}})
    assert backend.wait("the wildcard deleted", lambda: port.topic_configs([t]) == {t: {}})


def test_topic_list_refusals(backend: Backend, topic: str) -> None:
    with pytest.raises(AdminError):  # UNKNOWN_TOPIC_OR_PARTITION
        backend.port.alter_topic_lists(unique("nosuch"), LEADER_REPLICAS, append=["0:1"])
    with pytest.raises(AdminError):  # INVALID_CONFIG: not partition:broker
        backend.port.alter_topic_lists(topic, LEADER_REPLICAS, append=["garbage"])
    assert backend.port.topic_configs([topic]) == {topic: {}}


def test_topic_configs_set_and_delete(backend: Backend, topic: str) -> None:
    port, t = backend.port, topic
    port.set_topic_configs({t: {"retention.ms": "3600000", "retention.bytes": "1000000"}})
    assert backend.wait("the topic configs", lambda: port.topic_configs([t], ["retention.ms", "retention.bytes"]) == {
        t: {"retention.ms": "3600000", "retention.bytes": "1000000"}})
    port.set_topic_configs({t: {"retention.bytes": None}})
    assert backend.wait("retention.bytes deleted", lambda: port.topic_configs([t], ["retention.ms", "retention.bytes"])
                        == {t: {"retention.ms": "3600000"}})
    with pytest.raises(AdminError):  # UNKNOWN_TOPIC_OR_PARTITION
        port.set_topic_configs({unique("nosuch"): {"retention.ms": "1"}})
    with pytest.raises(AdminError):  # INVALID_CONFIG
        port.set_topic_configs({t: {"retention.ms": "soon"}})
    assert port.topic_configs([t], ["retention.ms"]) == {t: {"retention.ms": "3600000"}}
