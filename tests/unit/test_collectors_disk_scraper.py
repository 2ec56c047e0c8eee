"""The executor bench's :class:`~collectors.disk_rates.DiskScraper` on the collectors' HTTP client: rates from
two endpoints per broker over kept connections, and every failure (dead endpoint, TLS, credentials, garbage)
as a recorded error for that broker only, its last good rates kept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.disk_rates import DiskRate, DiskScraper
from kafkaio.endpoints import MetricsEndpoint, parse_endpoints
from kafkasim.broker.httpd import BasicAuth
from kafkasim.broker.tls import TlsMaterial
from tests.support.metrics_server import MetricsServer

HW = parse_endpoints({"clusters": {"c": {"bootstrap_servers": "h:1", "hardware": [
    {"brokers": "*", "log_dirs": "/data*", "kind": "hdd", "max_bytes_per_s": 2e8}]}}}, "c").hardware


def node_text(io_s: float, written: float, at_ms: int) -> str:
    return (f'node_disk_io_time_seconds_total{{device="sdb"}} {io_s} {at_ms}\n'
            f'node_disk_read_bytes_total{{device="sdb"}} 0 {at_ms}\n'
            f'node_disk_written_bytes_total{{device="sdb"}} {written} {at_ms}\n'
            f'node_filesystem_size_bytes{{device="/dev/sdb",fstype="xfs",mountpoint="/data1"}} 1e12 {at_ms}\n'
            f'node_memory_MemTotal_bytes 1e10 {at_ms}\n')


def jmx_text(p99: float, at_ms: int) -> str:
    return (f'kafka_network_requestmetrics_totaltimems{{request="Produce",quantile="0.99"}} {p99} {at_ms}\n'
            f'jvm_threads_current 80 {at_ms}\n')


@pytest.fixture
def exporter() -> Iterator[MetricsServer]:
    srv = MetricsServer()
    yield srv
    srv.close()


def test_rates_from_two_endpoints_per_broker_over_kept_connections(exporter: MetricsServer) -> None:
    urls: dict[int, Any] = {b: [f"{exporter.base}/jmx{b}", f"{exporter.base}/node{b}"] for b in (1, 2)}
    with DiskScraper(urls, HW) as scraper:
        for b in (1, 2):
            exporter.bodies[f"/jmx{b}"] = jmx_text(12.5, 1_795_000_000_000).encode()
            exporter.bodies[f"/node{b}"] = node_text(10.0, 0.0, 1_795_000_000_000).encode()
        assert scraper.scrape() == {} and scraper.errors == {}  # the first sample is only a base
        assert scraper.produce_p99_ms == {1: 12.5, 2: 12.5}
        for b in (1, 2):
            exporter.bodies[f"/node{b}"] = node_text(15.0, 1e9 * b, 1_795_000_010_000).encode()
        rates = scraper.scrape()
        # the samples' own clock (10 s apart), whatever the wall clock did
        assert rates == {(1, "/data1"): DiskRate(0.5, 1e8, 2e8), (2, "/data1"): DiskRate(0.5, 2e8, 2e8)}
        assert scraper.clock == 1_795_000_010.0
        connections = exporter.connections
        scraper.scrape()
        assert exporter.connections == connections  # no new handshake for the third round
        exporter.bodies["/node2"] = node_text(16.0, 3e9, 1_795_000_020_000).encode()
        assert scraper.scrape({2})[(2, "/data1")] == DiskRate(0.1, 1e8, 2e8)  # only the broker asked for


def test_failures_are_recorded_per_broker_and_the_last_good_rate_stays(exporter: MetricsServer) -> None:
    good, gone = f"{exporter.base}/node1", "http://127.0.0.1:1/metrics"
    urls: dict[int, Any] = {1: good, 2: [f"{exporter.base}/jmx2", f"{exporter.base}/node2"], 3: gone,
                            4: "ftp://127.0.0.1/metrics"}
    with DiskScraper(urls, HW, timeout_s=2.0) as scraper:
        for b, t in ((1, 0), (2, 0)):
            exporter.bodies[f"/node{b}"] = node_text(10.0, 0.0, 1_795_000_000_000 + t).encode()
        exporter.bodies["/jmx2"] = jmx_text(3.0, 1_795_000_000_000).encode()
        scraper.scrape()
        for b in (1, 2):
            exporter.bodies[f"/node{b}"] = node_text(15.0, 1e9, 1_795_000_010_000).encode()
        scraper.scrape()
        assert set(scraper.rates) == {(1, "/data1"), (2, "/data1")}
        assert scraper.errors[3].startswith(gone + ": ") and "Connect" in scraper.errors[3]
        assert "unsupported URL" in scraper.errors[4]
        # broker 2's JMX exporter serves garbage: no sample for broker 2 this round, its rate stays
        exporter.bodies["/jmx2"] = b"<html><body>502 Bad Gateway {{{ not prometheus</body></html>\n" * 20
        exporter.bodies["/node2"] = node_text(99.0, 9e9, 1_795_000_020_000).encode()
        exporter.bodies["/node1"] = node_text(17.0, 2e9, 1_795_000_020_000).encode()
        rates = scraper.scrape()
        assert "/jmx2: " in scraper.errors[2] and "not Prometheus samples" in scraper.errors[2]
        assert rates[(2, "/data1")] == DiskRate(0.5, 1e8, 2e8)
        assert rates[(1, "/data1")] == DiskRate(0.2, 1e8, 2e8)  # the others are read as usual
        exporter.bodies["/jmx2"] = b""  # an empty body is no sample either
        scraper.scrape({2})
        assert "empty payload" in scraper.errors[2]
        exporter.bodies["/jmx2"] = b"jvm_threads_current 80\n"  # none of the wanted families: no error
        scraper.scrape({2})
        assert 2 not in scraper.errors
        assert set(scraper.errors) == {3, 4}  # the brokers not scraped this round keep their last error
        del exporter.bodies["/node2"]
        scraper.scrape({2})
        assert "HTTP 404" in scraper.errors[2]


def test_tls_and_credentials_failures_name_the_endpoint_never_the_secret(tmp_path: Path) -> None:
    material = TlsMaterial()
    files = material.write(tmp_path / "tls")
    pw = tmp_path / "metrics.password"
    pw.write_text("s3cret-one\n")
    srv = MetricsServer(material, BasicAuth({"prometheus": "s3cret-one"}))
    srv.bodies["/metrics"] = node_text(10.0, 0.0, 1_795_000_000_000).encode()
    url = f"{srv.base}/metrics"
    ok = MetricsEndpoint(url, ca_file=str(files.ca_file), username="prometheus", password_file=str(pw))
    try:
        with DiskScraper({1: ok, 2: MetricsEndpoint(url, username="prometheus", password_file=str(pw)),
                          3: MetricsEndpoint(url, ca_file=str(files.ca_file), username="prometheus",
                                             password_file=str(tmp_path / "nope"))}, HW, timeout_s=5.0) as scraper:
            scraper.scrape({1})
            assert scraper.errors == {}
            pw.write_text("rotated-two\n")  # the next round reads the file again: refused
            scraper.scrape({1})
            assert "HTTP 401" in scraper.errors[1] and "rotated" not in scraper.errors[1]
        with DiskScraper({2: MetricsEndpoint(url, username="prometheus", password_file=str(pw)),
                          3: MetricsEndpoint(url + "?x", ca_file=str(files.ca_file), username="prometheus",
                                             password_file=str(tmp_path / "nope"))}, HW, timeout_s=5.0) as scraper:
            scraper.scrape()
            assert "CERTIFICATE_VERIFY_FAILED" in scraper.errors[2]  # no CA file: the system's CAs refuse it
            assert "credentials: cannot read" in scraper.errors[3] and "s3cret" not in str(scraper.errors)
    finally:
        srv.close()
