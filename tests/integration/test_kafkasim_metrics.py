"""The legacy single /metrics endpoint per broker (on request: ``MetricsConfig(realistic=False)``) over HTTP:
names, monotonic counters, device → log dir mapping."""

from __future__ import annotations

import json
import re
import time
import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer

from kafkasim.broker.server import SimRunner
from kafkasim.observe.exporters import MetricsConfig
from tests.support.kafkasim_support import http_json, http_text, start_sim

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = LINE.match(ln)
        assert m, f"bad exposition line {ln!r}"
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def pick(series: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    vals = [v for (n, lab), v in series.items() if n == name and want <= set(lab)]
    assert vals, f"no series {name}{labels}"
    return sum(vals)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRunner]:
    runner = start_sim(realistic=False, speed=20.0, metrics=MetricsConfig(realistic=False))
    yield runner
    runner.stop()


def test_metrics_names_and_monotonic_counters(sim: SimRunner) -> None:
    urls = sim.endpoints["clusters"]["east"]["metrics_urls"]
    first = [parse(http_text(u)) for u in urls]
    time.sleep(1.0)
    second = [parse(http_text(u)) for u in urls]
    total_in = 0.0
    for a, b in zip(first, second, strict=True):
        for key, v in a.items():
            if key[0].endswith("_total"):
                assert b[key] >= v, f"counter {key} went backwards"
        total_in += pick(b, "kafka_server_brokertopicmetrics_bytesin_total", topic="orders")
        for name in ("node_disk_io_time_seconds_total", "node_disk_read_bytes_total",
                     "node_disk_written_bytes_total", "node_memory_MemAvailable_bytes", "node_memory_Cached_bytes",
                     "kafka_server_replicamanager_underreplicatedpartitions", "kafka_log_log_size",
                     "kafka_log_log_logendoffset", "kafka_network_requestmetrics_totaltimems"):
            pick(b, name)
        # device -> log dir mapping
        info = {dict(lab)["device"]: dict(lab)["log_dir"] for (n, lab) in b if n == "kafkasim_log_dir_info"}
        assert sorted(info.values()) == ["/data1", "/data2", "/data3"]
        fs = {dict(lab)["mountpoint"]: dict(lab)["device"] for (n, lab) in b if n == "node_filesystem_size_bytes"}
        assert {m: d.removeprefix("/dev/") for m, d in fs.items()} == {v: k for k, v in info.items()}
    assert total_in > 0
    # written bytes grow while producers run
    w1 = sum(pick(s, "node_disk_written_bytes_total") for s in first)
    w2 = sum(pick(s, "node_disk_written_bytes_total") for s in second)
    assert w2 > w1


def test_per_partition_series_follow_real_produce(sim: SimRunner) -> None:
    ep = sim.endpoints["clusters"]["west"]
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=ep["bootstrap_servers"])
    try:
        admin.create_topics([NewTopic("m", -1, -1, replica_assignments={0: [2, 3]})])
    finally:
        admin.close()
    prod = KafkaProducer(bootstrap_servers=ep["bootstrap_servers"])
    try:
        for _i in range(30):
            prod.send("m", value=b"x" * 1000, partition=0)
        prod.flush(10)
    finally:
        prod.close()
    time.sleep(0.5)
    leader = parse(http_text(ep["brokers"][1]["metrics_url"]))
    follower = parse(http_text(ep["brokers"][2]["metrics_url"]))
    other = parse(http_text(ep["brokers"][0]["metrics_url"]))
    assert pick(leader, "kafka_log_log_logendoffset", topic="m", partition="0") == 30
    assert pick(follower, "kafka_log_log_logendoffset", topic="m", partition="0") == 30
    assert pick(leader, "kafka_log_log_size", topic="m", partition="0") > 30_000
    assert pick(leader, "kafka_server_brokertopicmetrics_bytesin_total", topic="m") > 30_000
    assert pick(leader, "kafka_server_brokertopicpartitionmetrics_bytesin_total", topic="m", partition="0") > 30_000
    assert pick(leader, "kafka_network_requestmetrics_requests_total", request="Produce") >= 1
    assert not [k for k in other if dict(k[1]).get("topic") == "m"]


def test_dead_broker_metrics_and_urp(sim: SimRunner) -> None:
    ep = sim.endpoints["clusters"]["east"]
    ctl = sim.endpoints["control_url"]
    http_json(ctl + "/fault/kill-broker", {"cluster": "east", "broker": 4})
    try:
        time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError):
            http_text(ep["brokers"][3]["metrics_url"])
        urp = sum(pick(parse(http_text(ep["brokers"][i]["metrics_url"])),
                       "kafka_server_replicamanager_underreplicatedpartitions") for i in range(3))
        assert urp >= 1
    finally:
        http_json(ctl + "/fault/revive-broker", {"cluster": "east", "broker": 4})
    st = http_json(ctl + "/state")
    assert st["clusters"]["east"]["brokers"]["4"]["alive"] is True


def test_ground_truth_snapshot_is_a_valid_guardian_snapshot(sim: SimRunner) -> None:
    from domain.snapshot_file import parse_snapshot
    from kafkasim.scenarios.scenario import build_federation

    ctl = sim.endpoints["control_url"]
    doc = http_json(ctl + "/snapshot?cluster=east")
    snap = parse_snapshot(json.dumps(doc))
    assert snap.cluster == "east" and len(snap.brokers) == 4
    orders = next(t for t in doc["topics"] if t["name"] == "orders")
    assert len(orders["partitions"]) == 4
    assert sum(p["bytes_in_per_s"] for p in orders["partitions"]) > 0
    ports = {b["id"]: b["port"] for b in sim.endpoints["clusters"]["east"]["brokers"]}
    assert {b["id"]: b["port"] for b in doc["brokers"]} == ports
    # the ground truth seeds another simulator
    fed = build_federation({"clusters": [{"snapshot": doc}]})
    assert sorted(fed.clusters["east"].topics) == sorted(t["name"] for t in doc["topics"])
    with pytest.raises(urllib.error.HTTPError) as e:
        http_json(ctl + "/snapshot?cluster=nope")
    assert e.value.code == 404


def test_lagging_consumer_shows_lag_and_disk_reads(sim: SimRunner) -> None:
    ctl = sim.endpoints["control_url"]
    cl = sim.server.fed.clusters["east"]
    leader = sim.call(lambda: cl.topics["orders"].partitions[1].leader)
    url = next(b["metrics_url"] for b in sim.endpoints["clusters"]["east"]["brokers"] if b["id"] == leader)
    before = pick(parse(http_text(url)), "node_disk_read_bytes_total")
    http_json(ctl + "/fault/lagging-consumer", {"cluster": "east", "topic": "orders", "partition": 1,
                                                "lag_bytes": 40e9, "rate_bytes_per_s": 30e6})
    time.sleep(0.5)
    series = parse(http_text(url))
    lag = pick(series, "kafka_consumergroup_lag", topic="orders", partition="1")
    assert 30e6 < lag < 40e6  # messages of 1 KiB
    assert pick(series, "node_disk_read_bytes_total") > before + 30e6


def test_control_api_rejects_bad_input(sim: SimRunner) -> None:
    ctl = sim.endpoints["control_url"]
    bad: list[tuple[str, dict[str, Any]]] = [("/advance", {"seconds": 1e7, "dt": 0.001}), ("/speed", {"speed": -1}),
           ("/fault/kill-broker", {"cluster": "nope", "broker": 1}),
           ("/fault/kill-broker", {"cluster": "east", "broker": "x"}),
           ("/fault/slow-disk", {"cluster": "east", "broker": 1, "log_dir": "/data1", "factor": 0.5}),
           ("/fault/traffic-spike", {"cluster": "east"})]
    for path, body in bad:
        with pytest.raises(urllib.error.HTTPError) as e:
            http_json(ctl + path, body)
        assert e.value.code == 400, path
        assert "error" in json.loads(e.value.read())
    with pytest.raises(urllib.error.HTTPError) as e:
        http_json(ctl + "/nope")
    assert e.value.code == 404
    assert http_json(ctl + "/health") == {"ok": True}
