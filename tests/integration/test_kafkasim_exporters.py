"""kafkasim's realistic metrics layout: a JMX exporter and a node_exporter per broker, https + basic auth,
stock names only, simulated-time sample timestamps, LVM log dirs mapped through node_disk_device_mapper_info."""

from __future__ import annotations

import base64
import re
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkasim.broker.server import SimRunner
from kafkasim.observe.exporters import MetricsConfig
from kafkasim.scenarios.realistic import METRICS_USER, Realistic, prepare
from tests.support.kafkasim_support import http_json, start_sim

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+) (-?\d+)$')


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Realistic:
    return prepare(tmp_path_factory.mktemp("realistic"), "sim")


@pytest.fixture(scope="module")
def sim(setup: Realistic) -> Iterator[SimRunner]:
    r = start_sim(realistic=False, security=setup.security, metrics=setup.metrics)
    yield r
    r.stop()


def _ctx(setup: Realistic) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(setup.tls_files.ca_file))


def _auth(setup: Realistic, password: str | None = None) -> dict[str, str]:
    pw = password if password is not None else setup.metrics_password_file.read_text().strip()
    return {"Authorization": "Basic " + base64.b64encode(f"{METRICS_USER}:{pw}".encode()).decode()}


def scrape(setup: Realistic, url: str, headers: dict[str, str] | None = None) -> str:
    req = urllib.request.Request(url, headers=_auth(setup) if headers is None else headers)
    with urllib.request.urlopen(req, context=_ctx(setup), timeout=10) as resp:
        return str(resp.read().decode())


def samples(text: str) -> list[tuple[str, dict[str, str], float, int]]:
    out = []
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = SAMPLE.match(ln)
        assert m, f"sample without a timestamp or malformed: {ln!r}"
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out.append((m.group(1), labels, float(m.group(4)), int(m.group(5))))
    return out


def _urls(sim: SimRunner, cluster: str = "east") -> dict[int, dict[str, str]]:
    return {b["id"]: {m["kind"]: m["url"] for m in b["metrics"]}
            for b in sim.endpoints["clusters"][cluster]["brokers"]}


def test_two_https_endpoints_per_broker_with_basic_auth(sim: SimRunner, setup: Realistic) -> None:
    urls = _urls(sim)
    assert len(urls) == 4
    for kinds in urls.values():
        assert sorted(kinds) == ["jmx", "node"]
        assert all(u.startswith("https://127.0.0.1:") for u in kinds.values())
        assert len(set(kinds.values())) == 2
    url = urls[1]["jmx"]
    for headers in ({}, _auth(setup, "wrong")):
        with pytest.raises(urllib.error.HTTPError) as e:
            scrape(setup, url, headers)
        assert e.value.code == 401
        assert "Basic" in (e.value.headers.get("WWW-Authenticate") or "")
    assert "kafka_server_brokertopicmetrics_bytesin_total" in scrape(setup, url)
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):  # plain http to the https port
        urllib.request.urlopen(url.replace("https://", "http://"), timeout=5).read()


def test_only_stock_names_with_simulated_timestamps(sim: SimRunner, setup: Realistic) -> None:
    for kinds in _urls(sim).values():
        jmx, node = samples(scrape(setup, kinds["jmx"])), samples(scrape(setup, kinds["node"]))
        names = {n for n, *_ in jmx + node}
        assert not [n for n in names if n.startswith("kafkasim_")]
        assert not [n for n in names if "brokertopicpartitionmetrics" in n or n == "kafka_consumergroup_lag"]
        assert all(n.startswith(("kafka_", "jmx_")) for n, *_ in jmx)
        assert all(n.startswith("node_") for n, *_ in node)
        for name in ("kafka_server_brokertopicmetrics_bytesin_total", "kafka_log_log_size",
                     "kafka_log_log_logendoffset", "kafka_cluster_partition_underreplicated",
                     "kafka_server_replicamanager_underreplicatedpartitions",
                     "kafka_controller_kafkacontroller_activecontrollercount"):
            assert name in names, name
        sim_ms = {ts for *_, ts in node}
        assert len(sim_ms) == 1
        node_time = next(v for n, _, v, _ in node if n == "node_time_seconds")
        assert abs(sim_ms.pop() - node_time * 1000) < 1
    state = http_json(sim.endpoints["control_url"] + "/state")
    assert all(abs(ts / 1000 - state["sim_time"]) < 60 for *_, ts in jmx)


def test_timestamps_follow_the_simulated_clock(sim: SimRunner, setup: Realistic) -> None:
    url = _urls(sim)[2]["node"]
    first = samples(scrape(setup, url))[0][3]
    http_json(sim.endpoints["control_url"] + "/advance", {"seconds": 600})
    second = samples(scrape(setup, url))[0][3]
    assert second - first >= 600_000


def test_log_dirs_on_lvm_map_from_filesystem_to_dm_device(sim: SimRunner, setup: Realistic) -> None:
    snap = http_json(sim.endpoints["control_url"] + "/snapshot?cluster=east")
    lvm = plain = 0
    for b in snap["brokers"]:
        node = samples(scrape(setup, _urls(sim)[b["id"]]["node"]))
        fs = {lab["mountpoint"]: lab["device"] for n, lab, _, _ in node if n == "node_filesystem_size_bytes"}
        dm = {lab["name"]: lab["device"] for n, lab, _, _ in node if n == "node_disk_device_mapper_info"}
        written = {lab["device"]: v for n, lab, v, _ in node if n == "node_disk_written_bytes_total"}
        for d in b["disks"]:
            device = fs[d["path"]]
            if device.startswith("/dev/mapper/"):
                lvm += 1
                kernel = dm[device.removeprefix("/dev/mapper/")]
                assert re.fullmatch(r"dm-\d+", kernel)
            else:
                plain += 1
                kernel = device.removeprefix("/dev/")
                assert kernel not in dm.values()
            assert kernel in written, (d["path"], device, kernel)
        assert fs["/"] == "/dev/sda1"
    assert lvm and plain


def test_jmx_series_cover_every_replica(sim: SimRunner, setup: Realistic) -> None:
    snap = http_json(sim.endpoints["control_url"] + "/snapshot?cluster=east")
    for b in snap["brokers"]:
        jmx = samples(scrape(setup, _urls(sim)[b["id"]]["jmx"]))
        have = {(lab["topic"], int(lab["partition"])) for n, lab, _, _ in jmx if n == "kafka_log_log_logendoffset"}
        want = {(t["name"], p["partition"]) for t in snap["topics"] for p in t["partitions"]
                if b["id"] in p["replicas"]}
        assert have == want


def test_scrape_counts_per_endpoint(sim: SimRunner, setup: Realistic) -> None:
    ctl = sim.endpoints["control_url"]
    before = http_json(ctl + "/scrapes")["east"]["3"]
    url = _urls(sim)[3]["node"]
    scrape(setup, url)
    scrape(setup, url)
    with pytest.raises(urllib.error.HTTPError):
        scrape(setup, url, {})
    after = http_json(ctl + "/scrapes")["east"]["3"]
    assert after["node"]["url"] == url
    assert after["node"]["requests"] - before["node"]["requests"] == 3
    assert after["node"]["unauthorized"] - before["node"]["unauthorized"] == 1
    assert after["jmx"]["requests"] == before["jmx"]["requests"]


def test_jmx_exporter_dies_with_its_broker_node_exporter_does_not(sim: SimRunner, setup: Realistic) -> None:
    ctl = sim.endpoints["control_url"]
    urls = _urls(sim)[4]
    http_json(ctl + "/fault/kill-broker", {"cluster": "east", "broker": 4})
    try:
        port = int(urls["jmx"].rsplit(":", 1)[1].split("/")[0])
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        assert "node_disk_io_time_seconds_total" in scrape(setup, urls["node"])
    finally:
        http_json(ctl + "/fault/revive-broker", {"cluster": "east", "broker": 4})
    deadline = time.monotonic() + 10
    while True:
        try:
            assert "kafka_log_log_size" in scrape(setup, urls["jmx"])
            break
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise


def test_sim_series_only_on_request(tmp_path: Path) -> None:
    setup = prepare(tmp_path, "opt", protocol="PLAINTEXT", sim_series=True)
    r = start_sim(realistic=False, security=setup.security, metrics=setup.metrics)
    try:
        url = r.endpoints["clusters"]["west"]["brokers"][0]["metrics"][0]["url"]
        names = {n for n, *_ in samples(scrape(setup, url))}
        assert {"kafkasim_broker_info", "kafkasim_log_dir_info", "kafkasim_disk_max_bytes_per_second"} <= names
    finally:
        r.stop()


def test_two_exporters_are_the_default_and_the_legacy_layout_is_on_request() -> None:
    r = start_sim(realistic=False)
    try:
        c: dict[str, Any] = r.endpoints["clusters"]["east"]
        b = c["brokers"][0]
        assert [m["kind"] for m in b["metrics"]] == ["jmx", "node"] and "metrics_url" not in b
        assert set(c) >= {"rack_to_idc", "hardware"} and "idc" not in b
        for m in b["metrics"]:
            assert m["url"].startswith("http://")
            with urllib.request.urlopen(m["url"], timeout=10) as resp:
                assert "kafkasim_" not in resp.read().decode()
    finally:
        r.stop()
    r = start_sim(realistic=False, metrics=MetricsConfig(realistic=False))
    try:
        b = r.endpoints["clusters"]["east"]["brokers"][0]
        assert b["metrics_url"].startswith("http://") and "metrics" not in b
        with urllib.request.urlopen(b["metrics_url"], timeout=10) as resp:
            assert "kafkasim_broker_info" in resp.read().decode()
    finally:
        r.stop()
