"""Helpers for the collectors' integration tests: a kafkasim federation on real 127.0.0.1 ports whose
clock only moves when the test advances it (laid out as ``sim up --realistic``: SASL_SSL + SCRAM, two
https exporters per broker with basic auth), ground truth read from the simulator, and a small
fault-injecting HTTP proxy in front of a broker's metrics endpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kafkaio.endpoints import BrokerInfo, ClusterEndpoints, MetricsEndpoint, parse_endpoints
from tests.support.kafkasim_support import client_kwargs, scrape_text, start_sim

SCENARIO: dict[str, Any] = {
    "seed": 11,
    "speed": 1e-6,  # frozen: time moves only through Sim.advance
    "tick_seconds": 1.0,
    "clusters": [
        {"name": "east", "partition_throttle": True,
         "brokers": [{"count": 4, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 2, "memory_gb": 4,
                      "disks": [{"count": 2, "kind": "hdd"}, {"count": 1, "kind": "nvme"}]}],
         "topics": [{"name": "orders", "partitions": 4, "rf": 3, "bytes_in_per_s": 500_000, "skew": 0.5,
                     "size_gb": 2, "tail_groups": 1, "msg_size": 1000},
                    {"prefix": "events", "count": 2, "partitions": 3, "rf": 2, "bytes_in_per_s": 200_000,
                     "size_gb": 0.05, "tail_groups": 2, "msg_size": 500}]},
    ],
}


class Sim:
    """A started kafkasim federation plus ground-truth accessors (``realistic=False``: PLAINTEXT, http)."""

    def __init__(self, spec: dict[str, Any] | None = None, realistic: bool = True) -> None:
        self.runner = start_sim(spec or SCENARIO, realistic=realistic)
        self.endpoints_doc = self.runner.endpoints
        self.fed = self.runner.server.fed
        self.eng = self.fed.engine
        self._marks: dict[str, Any] = {}

    def endpoints(self, cluster: str = "east") -> ClusterEndpoints:
        return parse_endpoints(self.endpoints_doc, cluster)

    def endpoint(self, broker: int, kind: str = "jmx", cluster: str = "east") -> MetricsEndpoint:
        """Broker ``broker``'s endpoint of ``kind`` (``jmx`` or ``node``) as registered: URL, CA and credentials
        (see :meth:`~tests.support.kafkasim_support.Sim.metrics_kinds`)."""
        kinds = self.runner.metrics_kinds()
        info = next(b for b in self.endpoints(cluster).brokers if b.id == broker)
        return next(m for m in info.metrics_endpoints if kinds[m.url] == kind)

    def client_kwargs(self, cluster: str = "east") -> dict[str, Any]:
        """kafka-python keyword arguments (bootstrap servers and security) to reach ``cluster``."""
        return client_kwargs(self.endpoints_doc["clusters"][cluster])

    def advance(self, seconds: float) -> None:
        self.runner.call(lambda: self.eng.advance(seconds, 1.0))

    def call(self, fn: Any) -> Any:
        return self.runner.call(fn)

    def stop(self) -> None:
        self.runner.stop()

    # ---------------- ground truth
    def counters(self) -> dict[str, Any]:
        """Copy of the counters rates are checked against, at the current simulated time."""
        def grab() -> dict[str, Any]:
            return {"t": self.eng.t, "bytes_in": self.eng.f["bytes_in_total"].copy(),
                    "io_time": self.eng.d_io_time_total.copy(), "disk_read": self.eng.f["disk_read"].copy()}
        return self.call(grab)

    def topology(self, cluster: str = "east") -> dict[tuple[str, int], dict[str, Any]]:
        def grab() -> dict[tuple[str, int], dict[str, Any]]:
            cl = self.fed.clusters[cluster]
            out = {}
            for t in cl.topics.values():
                for p in t.partitions:
                    out[(t.name, p.index)] = {
                        "replicas": tuple(p.replicas), "leader": p.leader if p.leader >= 0 else None,
                        "isr": tuple(p.isr), "log_dirs": tuple(self.eng.disks[p.log_dirs[b]].path for b in p.replicas),
                        "slot": p.slot}
            return out
        return self.call(grab)

    def brokers(self, cluster: str = "east") -> dict[int, dict[str, Any]]:
        def grab() -> dict[int, dict[str, Any]]:
            cl = self.fed.clusters[cluster]
            return {b.id: {"rack": b.rack, "idc": b.idc, "alive": b.alive, "disks": [d.path for d in b.disks],
                           "gidx": {d.path: d.gidx for d in b.disks}} for b in cl.brokers.values()}
        return self.call(grab)


def rate_truth(before: dict[str, Any], after: dict[str, Any], what: str) -> Any:
    """Mean rate of a ground-truth counter between two captures."""
    return (after[what] - before[what]) / (after["t"] - before["t"])


class TextServer:
    """A plain-http server on a free loopback port answering every GET with ``render()`` (None: no answer,
    the connection is dropped); ``url`` is its ``/metrics`` URL; ``close()`` when done."""

    def __init__(self, render: Callable[[], bytes | None]) -> None:
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = render()
                if body is None:
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FaultProxy(TextServer):
    """Plain-http proxy in front of one metrics endpoint (scraped with its CA and credentials): mode
    ``pass``, ``garbage``, ``stall`` or ``reset``; ``rewrite`` (when set) edits what ``pass`` and ``reset`` serve.

    ``reset`` serves every counter (``*_total``) minus its value at the moment reset was armed,
    as a restarted exporter would (counters start again from zero).
    """

    def __init__(self, target: MetricsEndpoint) -> None:
        self.target = target
        self.mode = "pass"
        self.base: dict[str, float] = {}
        self.stall_s = 5.0
        self.rewrite: Callable[[str], str] | None = None
        super().__init__(self._render)

    def _render(self) -> bytes | None:
        if self.mode == "stall":
            time.sleep(self.stall_s)
            return None
        if self.mode == "garbage":
            return b"<html><body>502 Bad Gateway \x00\x01 {{{ not prometheus</body></html>\n" * 20
        text = scrape_text(self.target)
        if self.mode == "reset":
            text = self._rebase(text)
        if self.rewrite is not None:
            text = self.rewrite(text)
        return text.encode()

    @staticmethod
    def _split(line: str) -> tuple[str, str, str]:
        """(series, value, " timestamp" or "") of a sample line."""
        cut = line.rfind("}") + 1 or line.find(" ")
        value, _, stamp = line[cut:].strip().partition(" ")
        return line[:cut], value, f" {stamp}" if stamp else ""

    def arm_reset(self) -> None:
        text = scrape_text(self.target)
        self.base = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, val, _ = self._split(line)
                if key.split("{")[0].endswith("_total"):
                    self.base[key] = float(val)
        self.mode = "reset"

    def _rebase(self, text: str) -> str:
        out = []
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, val, stamp = self._split(line)
                if key in self.base:
                    line = f"{key} {max(float(val) - self.base[key], 0.0)!r}{stamp}"
            out.append(line)
        return "\n".join(out) + "\n"


def with_proxy(eps: ClusterEndpoints, target: MetricsEndpoint, url: str) -> ClusterEndpoints:
    """The same endpoints with ``target`` served from ``url`` (a test's plain-http proxy: no CA, no credentials)."""
    def swap(b: BrokerInfo) -> BrokerInfo:
        return replace(b, metrics=tuple(MetricsEndpoint(url, kind=m.kind) if m == target else m for m in b.metrics))
    return replace(eps, brokers=tuple(swap(b) for b in eps.brokers))


class OffsetExporter(TextServer):
    """A kafka_exporter stand-in (an operator's optional exporter URL): serves
    ``kafka_consumergroup_current_offset`` of a tailing group ``tail`` (a group Kafka does not know)
    at the log end of every partition of ``topic``, stamped with the simulated time."""

    def __init__(self, sim: Sim, topic: str, cluster: str = "east") -> None:
        def render() -> str:
            eng = sim.eng
            cl = sim.fed.clusters[cluster]
            lines = ["# TYPE kafka_consumergroup_current_offset gauge"]
            stamp = int(eng.t * 1000)
            for p in cl.topics[topic].partitions:
                s = p.slot
                leo = float(eng.f["leo"][s])
                lab = f'topic="{topic}",partition="{p.index}"'
                lines.append(f'kafka_consumergroup_current_offset{{consumergroup="tail",{lab}}} {int(leo)} {stamp}')
            return "\n".join(lines) + "\n"

        super().__init__(lambda: sim.call(render).encode())


__all__ = ["BrokerInfo", "FaultProxy", "OffsetExporter", "Sim", "TextServer", "rate_truth", "with_proxy"]
