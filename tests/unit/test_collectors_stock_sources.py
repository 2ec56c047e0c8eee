"""Stock sources: sample timestamps, merged endpoints, device mapping (LVM, partitions, subdirectories),
authenticated scrapes, registered records, the deploy rules file, and the IDC placement refusal."""

from __future__ import annotations

import base64
import copy
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from collectors import scrape as scrape_module
from collectors.build.disks import map_devices, new_facts
from collectors.build.names import BROKER_METRICS, JMX_METRICS
from collectors.build.partition_rates import PartitionIndex
from collectors.build.reads import admin_positions
from collectors.build.records import ModelConfig
from collectors.build.state import GroupBook
from collectors.build.topology import Sources
from collectors.disk_rates import HOST_METRICS
from collectors.promtext import Payload, merge_payloads, parse_fast
from collectors.rates import VectorCounterTracker
from collectors.scrape import Scraper, authorization, scrape_all
from controlplane.service.planning import PlanRequestError, idc_refusal, make_plan
from controlplane.state.registration import endpoints_of
from domain import DiskKind, parse_snapshot
from kafkaio.endpoints import EndpointsError, MetricsEndpoint, parse_endpoints
from kafkaio.group_types import GroupOffsets
from kafkaio.types import KafkaState
from kafkasim.broker.httpd import BasicAuth
from kafkasim.broker.tls import TlsMaterial
from kafkasim.tiering.tiered_metrics import GAUGES, METERS, gauge_name, meter_name
from tests.support.metrics_server import MetricsServer
from tests.support.snapshots import dumps, small_doc

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------- timestamps and merging
def test_the_newest_sample_timestamp_is_the_payloads_clock_on_every_parse_path() -> None:
    text = ('a_total{x="1"} 1 1700000000000\na_total{x="2"} 2 1700000000500\n'  # fast path, stamped
            "b 3 1700000001000\n"  # an unlabelled line: the exact path
            'c{x="1"} 4\nc{x="2"} 5 1700000000900\n')  # stamped and unstamped in one run
    p = parse_fast(text)
    assert p.bad_lines == 0 and p.newest_ms == 1700000001000
    assert p.raw["a_total"] == (['x="1"', 'x="2"'], [1.0, 2.0]) and p.raw["c"][1] == [4.0, 5.0]
    assert parse_fast('a{x="1"} 1\n').newest_ms is None
    bad = parse_fast('a{x="1"} 1 12x\na{x="2"} 2 3\n')  # a timestamp that is not an integer is a bad line
    assert bad.bad_lines == 1 and bad.raw["a"] == (['x="2"'], [2.0])


def test_merged_endpoints_keep_the_first_family_and_each_familys_clock() -> None:
    jmx = parse_fast('kafka_log_log_size{topic="t",partition="0"} 5 2000\nshared 1 2000\n')
    node = parse_fast('node_disk_io_time_seconds_total{device="sdb"} 7\nshared 2\n')
    merged, clock, kind = merge_payloads([(jmx, 2.0, "ts"), (node, 99.0, "mono")])
    assert (clock, kind) == (2.0, "ts")  # a stamped endpoint's clock wins over receive times
    assert merged.raw["shared"][1] == [1.0]  # first endpoint wins a family
    assert merged.clocks["node_disk_io_time_seconds_total"] == (99.0, "mono")
    assert merged.clocks["kafka_log_log_size"] == (2.0, "ts")
    assert merged.samples == jmx.samples + node.samples
    assert merge_payloads([(jmx, 2.0, "ts")])[0] is jmx


# ---------------------------------------------------------------------- device mapping
HOST = """
node_disk_io_time_seconds_total{device="sda"} 1
node_disk_io_time_seconds_total{device="sdb"} 2
node_disk_io_time_seconds_total{device="sdc"} 3
node_disk_io_time_seconds_total{device="dm-0"} 4
node_disk_io_time_seconds_total{device="dm-1"} 4
node_disk_io_time_seconds_total{device="nvme0n1"} 5
node_disk_device_mapper_info{device="dm-0",lv_name="kafka",name="vg_data1-kafka",uuid="LVM-1",vg_name="vg_data1"} 1
node_disk_device_mapper_info{device="dm-1",lv_layer="",lv_name="logs",name="vg_os-logs",uuid="LVM-2",vg_name="vg_os"} 1
node_filesystem_size_bytes{device="/dev/sda1",fstype="ext4",mountpoint="/"} 1e11
node_filesystem_size_bytes{device="/dev/mapper/vg_data1-kafka",fstype="xfs",mountpoint="/data1"} 4e12
node_filesystem_size_bytes{device="/dev/sdb1",fstype="xfs",mountpoint="/data2"} 4e12
node_filesystem_size_bytes{device="/dev/sdc",fstype="xfs",mountpoint="/data3/"} 4e12
node_filesystem_size_bytes{device="/dev/nvme0n1p1",fstype="xfs",mountpoint="/nvme"} 2e12
node_filesystem_size_bytes{device="tmpfs",fstype="tmpfs",mountpoint="/run"} 1e9
"""


def test_log_dirs_map_to_devices_through_mountpoints_and_device_mapper() -> None:
    dirs = ["/data1/kafka", "/data2", "/data3/kafka-logs", "/nvme/kafka/logs", "/var/kafka", "/run/kafka",
            "/data10"]
    to_io, to_fs = map_devices(parse_fast(HOST), dirs)
    assert to_io == {"/data1/kafka": "dm-0",  # LVM: /dev/mapper/<name> -> dm-K
                     "/data2": "sdb",  # a partition's I/O is counted on its disk
                     "/data3/kafka-logs": "sdc",  # a subdirectory of the mountpoint (trailing slash too)
                     "/nvme/kafka/logs": "nvme0n1",
                     "/var/kafka": "sda",  # on the root filesystem
                     "/data10": "sda"}  # /data1 is no prefix of /data10
    assert "/run/kafka" not in to_io  # tmpfs: no block device, no figures
    assert to_fs["/data1/kafka"] == "/dev/mapper/vg_data1-kafka"
    # without device-mapper info an LVM log dir has no device (never a guessed one)
    no_dm = "\n".join(x for x in HOST.splitlines() if "device_mapper" not in x)
    assert "/data1/kafka" not in map_devices(parse_fast(no_dm), dirs)[0]


def test_disk_facts_come_from_the_hardware_profile_with_their_source() -> None:
    hw = parse_endpoints({"clusters": {"c": {"bootstrap_servers": "h:1", "hardware": {
        "rules": [{"brokers": [1], "log_dirs": "/nvme*", "kind": "nvme", "max_bytes_per_s": 3e9},
                  {"brokers": "*", "log_dirs": "/data*", "kind": "hdd"}],
        "default": {"kind": "ssd", "max_bytes_per_s": 6e8}}}}}, "c").hardware
    cfg = ModelConfig()
    f = new_facts(1, "/nvme1", cfg, hw)
    assert (f.kind, f.max_bytes_per_s, f.kind_source, f.max_source) == (DiskKind.NVME, 3e9, "declared", "declared")
    f = new_facts(2, "/data1", cfg, hw)  # kind declared, ceiling not: the built-in ceiling of that kind
    assert (f.kind, f.max_bytes_per_s, f.kind_source, f.max_source) == (DiskKind.HDD, 200e6, "declared", "assumed")
    f = new_facts(2, "/nvme1", cfg, hw)
    assert (f.kind, f.max_bytes_per_s, f.kind_source) == (DiskKind.SSD, 6e8, "default")
    f = new_facts(2, "/x", cfg, None)
    assert (f.kind, f.kind_source, f.max_source) == (cfg.default_disk_kind, "assumed", "assumed")


# ---------------------------------------------------------------------- authenticated scrapes
NODE_BODY = b"node_memory_MemTotal_bytes 1 1700000000000\n"


@pytest.fixture
def tls_files(tmp_path: Path) -> Iterator[tuple[TlsMaterial, Any]]:
    material = TlsMaterial()
    yield material, material.write(tmp_path / "tls")


def test_https_with_a_ca_file_and_basic_auth_read_from_a_file_each_round(tmp_path: Path,
                                                                        tls_files: tuple[TlsMaterial, Any]) -> None:
    material, files = tls_files
    pw = tmp_path / "metrics.password"
    pw.write_text("s3cret-one\n")
    auth = BasicAuth({"prometheus": "s3cret-one"})
    srv = MetricsServer(material, auth, {"/metrics": NODE_BODY})
    try:
        ep = MetricsEndpoint(srv.url, ca_file=str(files.ca_file), username="prometheus", password_file=str(pw))
        r = scrape_all([ep], timeout_s=5).results[srv.url]
        assert r.ok and r.payload is not None and r.payload.newest_ms == 1700000000000
        pw.write_text("rotated-two\n")  # the next round reads the file again
        r = scrape_all([ep], timeout_s=5).results[srv.url]
        assert r.error is not None and "HTTP 401" in r.error and "rotated-two" not in r.error
        auth.add("prometheus", "rotated-two")
        assert scrape_all([ep], timeout_s=5).results[srv.url].ok
        untrusted = scrape_all([MetricsEndpoint(srv.url, username="prometheus", password_file=str(pw))], timeout_s=5)
        assert "CERTIFICATE_VERIFY_FAILED" in (untrusted.results[srv.url].error or "")
        missing = MetricsEndpoint(srv.url, ca_file=str(files.ca_file), username="prometheus",
                                  password_file=str(tmp_path / "nope"))
        err = scrape_all([missing], timeout_s=5).results[srv.url].error or ""
        assert err.startswith("credentials: cannot read") and str(tmp_path / "nope") in err
    finally:
        srv.close()


def test_a_scraper_keeps_its_connection_between_rounds_and_recovers_when_it_is_closed(
        tmp_path: Path, tls_files: tuple[TlsMaterial, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    material, files = tls_files
    pw = tmp_path / "metrics.password"
    pw.write_text("s3cret-one\n")
    auth = BasicAuth({"prometheus": "s3cret-one"})
    srv = MetricsServer(material, auth, {"/metrics": NODE_BODY})
    ep = MetricsEndpoint(srv.url, ca_file=str(files.ca_file), username="prometheus", password_file=str(pw))
    try:
        with Scraper() as scraper:
            for _ in range(3):
                assert scraper.scrape([ep]).results[srv.url].ok
            assert srv.connections == 1  # one TCP + TLS handshake for three rounds
            pw.write_text("rotated-two\n")  # credentials are re-read each round, on the kept connection too
            assert "HTTP 401" in (scraper.scrape([ep]).results[srv.url].error or "")
            auth.add("prometheus", "rotated-two")
            srv.drop_connections()  # the exporter closed the kept connection meanwhile
            assert scraper.scrape([ep]).results[srv.url].ok
            assert srv.connections == 2
            os.utime(files.ca_file, ns=(0, 0))  # a changed CA file: a new client, a new connection
            assert scraper.scrape([ep]).results[srv.url].ok
            assert srv.connections == 3
            monkeypatch.setattr(scrape_module, "MAX_BODY", 16)  # a body over the cap is refused, not buffered
            assert "body larger than 64 MiB" in (scraper.scrape([ep]).results[srv.url].error or "")
            monkeypatch.undo()
            srv.drop_connections(listener_too=True)  # the exporter is gone: an error for this endpoint only
            err = scraper.scrape([ep], timeout_s=2).results[srv.url].error or ""
            assert err and "s3cret" not in err and "rotated" not in err
    finally:
        srv.close()


def test_bearer_tokens_and_basic_headers(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("abc.def\n")
    assert authorization(MetricsEndpoint("http://h/m", bearer_token_file=str(tok))) == "Bearer abc.def"
    pw = tmp_path / "pw"
    pw.write_text("p:w\n")
    header = authorization(MetricsEndpoint("http://h/m", username="u", password_file=str(pw)))
    assert header is not None and base64.b64decode(header.split()[1]) == b"u:p:w"
    assert authorization(MetricsEndpoint("http://h/m")) is None


# ---------------------------------------------------------------------- registered records
def test_a_registered_record_gives_several_endpoints_per_broker_and_the_declarations() -> None:
    eps = endpoints_of("c1", {
        "bootstrap_servers": ["h1:9092", "h2:9092"],
        "brokers": [{"id": 1, "metrics": [{"url": "http://h1:7071/metrics", "kind": "jmx"},
                                          {"url": "http://h1:9100/metrics", "kind": "node"}]}],
        "metrics_urls": {"2": "http://h2:7071/metrics", "exporter": "http://x:9308/metrics"},
        "rack_to_idc": {"regex": r"^(?P<idc>[a-z]+-[a-z])-r\d+$"},
        "hardware": [{"brokers": "*", "log_dirs": "/data*", "kind": "ssd", "max_bytes_per_s": 5e8}]})
    assert eps.bootstrap_servers == "h1:9092,h2:9092"
    b1 = eps.broker(1)
    assert b1 is not None and [m.url for m in b1.metrics_endpoints] == ["http://h1:7071/metrics",
                                                                         "http://h1:9100/metrics"]
    assert [m.kind for m in b1.metrics_endpoints] == ["jmx", "node"]
    assert eps.unmapped_metrics_urls == ("http://x:9308/metrics",)
    assert eps.idc_of(2, "idc-a-r3") == ("idc-a", "rack_to_idc")
    assert eps.hardware is not None and eps.hardware.lookup(7, "/data3") is not None
    with pytest.raises(EndpointsError, match="rack_to_idc"):
        endpoints_of("c1", {"bootstrap_servers": ["h:1"], "rack_to_idc": {"regex": "no-group"}})


# ---------------------------------------------------------------------- the deploy rules file
def _render(rules: list[dict[str, Any]], mbean: str, attr: str) -> tuple[str, dict[str, str]] | None:
    """What jmx_exporter makes of one MBean attribute: the first rule whose pattern matches
    ``domain<props><>attr: value`` (patterns are wrapped as ``^.*(?:pattern).*$``), lowercased."""
    domain, _, props = mbean.partition(":")
    line = f"{domain}<{', '.join(props.split(','))}><>{attr}: 1"
    for rule in rules:
        m = re.match(f"^.*(?:{rule['pattern']}).*$", line)
        if m is None:
            continue

        def sub(template: str, m: re.Match[str] = m) -> str:
            return re.sub(r"\$(\d+)", lambda g: m.group(int(g.group(1))) or "", template)

        return sub(rule["name"]).lower(), {k.lower(): sub(str(v)) for k, v in (rule.get("labels") or {}).items()}
    return None


STOCK_MBEANS = [
    *[(f"kafka.server:type=BrokerTopicMetrics,name={n}PerSec{t}", "Count")
      for n in ("BytesIn", "BytesOut", "MessagesIn") for t in (",topic=orders", "")],
    *[(f"kafka.server:type=BrokerTopicMetrics,name={n}PerSec", "Count")
      for n in ("ReplicationBytesIn", "ReplicationBytesOut", "ReassignmentBytesIn")],
    ("kafka.log:type=Log,name=Size,topic=orders,partition=3", "Value"),
    ("kafka.log:type=Log,name=LogEndOffset,topic=orders,partition=3", "Value"),
    ("kafka.log:type=Log,name=LogStartOffset,topic=orders,partition=3", "Value"),
    ("kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions", "Value"),
    ("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce", "99thPercentile"),
    ("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=FetchConsumer", "50thPercentile"),
    # tiered storage (KIP-405 RemoteStorageMetrics, KIP-963 gauges), per topic and over all topics
    *[(f"kafka.server:type=BrokerTopicMetrics,name={n}PerSec{t}", "Count") for n in METERS
      for t in (",topic=orders", "")],
    *[(f"kafka.server:type=BrokerTopicMetrics,name={n}{t}", "Value") for n in GAUGES for t in (",topic=orders", "")],
    # not read by Guardian: no rule may turn these into a series
    ("kafka.server:type=BrokerTopicMetrics,name=RemoteLogMetadataCount,topic=orders", "Value"),
    ("kafka.server:type=BrokerTopicMetrics,name=BuildRemoteLogAuxStateRequestsPerSec", "Count"),
    ("kafka.log:type=Log,name=NumLogSegments,topic=orders,partition=3", "Value"),
    ("kafka.server:type=BrokerTopicMetrics,name=TotalProduceRequestsPerSec,topic=orders", "Count"),
    ("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce", "Mean"),
]


def test_the_jmx_exporter_rules_yield_exactly_the_names_the_collectors_read() -> None:
    doc = yaml.safe_load((ROOT / "deploy" / "jmx_exporter" / "kafka-broker.yml").read_text())
    assert doc["lowercaseOutputName"] is True
    rendered = {(mb, attr): _render(doc["rules"], mb, attr) for mb, attr in STOCK_MBEANS}
    names = {r[0] for r in rendered.values() if r is not None}
    # the tiered-storage series: what kafkasim's brokers export, and every kafka_ name the alert rules read
    tiered = {meter_name(n) for n in METERS} | {gauge_name(n) for n in GAUGES}
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "guardian-rules.yml").read_text())["groups"]
    alerted = {n for g in alerts for r in g["rules"] for n in re.findall(r"\bkafka_[a-z0-9_]+", r["expr"])}
    assert alerted and alerted <= tiered
    read = set(JMX_METRICS) | {n for n in HOST_METRICS if n.startswith("kafka_")} | tiered
    assert names == read
    assert rendered[("kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec,topic=orders", "Count")] == (
        "kafka_server_brokertopicmetrics_remotecopybytes_total", {"topic": "orders"})
    assert rendered[("kafka.server:type=BrokerTopicMetrics,name=RemoteCopyErrorsPerSec", "Count")] == (
        "kafka_server_brokertopicmetrics_remotecopyerrors_total", {})
    assert rendered[("kafka.server:type=BrokerTopicMetrics,name=RemoteCopyLagBytes,topic=orders", "Value")] == (
        "kafka_server_brokertopicmetrics_remotecopylagbytes", {"topic": "orders"})
    assert rendered[("kafka.log:type=Log,name=LogEndOffset,topic=orders,partition=3", "Value")] == (
        "kafka_log_log_logendoffset", {"topic": "orders", "partition": "3"})
    assert rendered[("kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=orders", "Count")] == (
        "kafka_server_brokertopicmetrics_bytesin_total", {"topic": "orders"})
    assert rendered[("kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec", "Count")] == (
        "kafka_server_brokertopicmetrics_bytesin_total", {})
    assert rendered[("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce", "99thPercentile")] == (
        "kafka_network_requestmetrics_totaltimems", {"request": "Produce", "quantile": "0.99"})
    for mb, attr in STOCK_MBEANS[-5:]:
        assert rendered[(mb, attr)] is None, mb
    # every name the collector reads is a JMX rule's or a node_exporter name the deploy notes list
    node_doc = (ROOT / "deploy" / "node_exporter.md").read_text()
    for name in BROKER_METRICS - JMX_METRICS:
        assert name.startswith("node_")
        stem = name.removeprefix("node_").split("_")[0]
        assert stem in node_doc, name


# ---------------------------------------------------------------------- IDC placement on unknown IDCs
def test_an_idc_placement_is_refused_on_brokers_of_unknown_idc_naming_them() -> None:
    known = parse_snapshot(dumps(small_doc()))
    assert idc_refusal(known, {}) is None
    doc = copy.deepcopy(small_doc())
    for b in doc["brokers"][3:5]:
        b["idc"] = "unknown"
    unknown = parse_snapshot(dumps(doc))  # topic "orders" has placement idc-a:2 idc-b:1
    reason = idc_refusal(unknown, {})
    assert reason is not None and "broker(s) 4, 5" in reason and "rack_to_idc" in reason
    with pytest.raises(PlanRequestError, match=r"broker\(s\) 4, 5"):
        make_plan(unknown, "rebalance", {})
    doc["topics"][0].pop("placement")
    without = parse_snapshot(dumps(doc))
    assert idc_refusal(without, {}) is None  # no placement policy: nothing to refuse
    assert idc_refusal(without, {"placement": {"idc-a": 1}}) is not None


# ---------------------------------------------------------------------- consumer positions between reads
def test_committed_offsets_between_reads_move_on_at_their_last_rate_up_to_the_log_end() -> None:
    ix = PartitionIndex([("t", 0)], {("t", 0): 0}, [], np.array([1]), np.array([0]), {})
    tracker, book = VectorCounterTracker(0.5), GroupBook()

    def round_(clock: float, off: int, fresh: bool, leo: float, now: float) -> tuple[float, float | None]:
        state = KafkaState(None, None, {}, {}, group_offsets=GroupOffsets.from_mapping({"g": {("t", 0): off}}),
                           group_offsets_fresh=fresh)
        positions: dict[int, dict[str, float]] = {0: {}}
        rates: dict[tuple[int, str], float] = {}
        assert admin_positions(state, ix, np.array([leo]), Sources({1: (Payload(), clock, "ts")}, []), tracker, book,
                               now, 60.0, positions, rates) == 1
        tracker.end_round()
        return positions[0]["g"], rates.get((0, "g"))

    assert round_(1000.0, 100, True, 5000.0, 0.0) == (100.0, None)  # first read: a position, no rate yet
    assert round_(1010.0, 600, True, 5000.0, 10.0) == (600.0, 50.0)
    assert round_(1020.0, 600, False, 5000.0, 20.0) == (1100.0, 50.0)  # carried: moved on 10 s at 50/s
    assert round_(1050.0, 600, False, 2000.0, 50.0) == (2000.0, 50.0)  # never past the log end
    assert round_(1090.0, 600, False, 9000.0, 90.0) == (600.0, None)  # rates older than hold_s: dropped
