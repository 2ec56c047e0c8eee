"""Shared helpers for kafkasim integration tests: a federation on real 127.0.0.1 ports, laid out by default
the way ``sim up --realistic`` lays it out (SASL_SSL listeners with SCRAM-SHA-512, a JMX exporter and a
node_exporter per broker over https with basic auth, stock names only, secrets in 0600 files), and what a
test needs to talk to it as an operator's client would: the operator's endpoints document, kafka-python
client keyword arguments from its ``security`` object, an authenticated scrape of one metrics endpoint."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from collectors.scrape import Scraper
from domain.lease import LEASE_TOPIC
from kafkaio.endpoints import MetricsEndpoint
from kafkaio.security import parse_security
from kafkasim.broker.server import SimRunner
from kafkasim.scenarios.realistic import Realistic, operator_endpoints, prepare
from kafkasim.scenarios.scenario import Federation, build_federation

SMALL: dict[str, Any] = {
    "seed": 3,
    "speed": 1.0,
    "tick_seconds": 1.0,
    "clusters": [
        {"name": "east", "partition_throttle": True,
         "broker_configs": {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"},
         "brokers": [{"count": 4, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 2, "memory_gb": 16,
                      "disks": [{"count": 2, "kind": "hdd"}, {"count": 1, "kind": "nvme"}]}],
         "topics": [{"name": "orders", "partitions": 4, "rf": 3, "bytes_in_per_s": 500_000, "size_gb": 1,
                     "tail_groups": 1, "producer": {"client_id": "orders-svc", "user": "orders"}}]},
        {"name": "west", "partition_throttle": False,
         "brokers": [{"count": 3, "idcs": ["idc-c"], "racks_per_idc": 3, "memory_gb": 8,
                      "disks": [{"count": 2, "kind": "ssd"}]}],
         "topics": []},
    ],
}


class Sim(SimRunner):
    """A :class:`SimRunner` whose ``endpoints`` are what an operator registers: with ``setup`` (see
    :func:`kafkasim.scenarios.realistic.prepare`) the server runs SASL_SSL + https metrics with basic auth and
    ``endpoints`` is the operator's document (:func:`kafkasim.scenarios.realistic.operator_endpoints`); without, the
    server's own (PLAINTEXT, http). A context manager that stops it (and removes the secrets it made)."""

    def __init__(self, fed: Federation, setup: Realistic | None = None, owned_dir: Path | None = None,
                 **kw: Any) -> None:
        if setup is not None:
            kw.setdefault("security", setup.security)
            kw.setdefault("metrics", setup.metrics)
        super().__init__(fed, **kw)
        self.setup = setup
        self._owned_dir = owned_dir

    def start(self) -> dict[str, Any]:
        doc = super().start()
        if self.setup is not None:
            self.endpoints = operator_endpoints(doc, self.server.fed, self.setup)
        return self.endpoints

    def cluster(self, name: str) -> dict[str, Any]:
        """The endpoints document's entry of cluster ``name``."""
        out: dict[str, Any] = self.endpoints["clusters"][name]
        return out

    def bootstrap(self, name: str) -> str:
        """Cluster ``name``'s bootstrap servers (``h:p,...``)."""
        return str(self.cluster(name)["bootstrap_servers"])

    def metrics_kinds(self) -> dict[str, str]:
        """URL -> what serves it (``jmx`` or ``node``) of every metrics endpoint: the operator's document does
        not label its endpoints; the simulator knows which port serves what."""
        def grab() -> dict[str, str]:
            return {url: kind for cl in self.server.fed.clusters.values() for b in cl.brokers.values()
                    for kind, url in self.server.metrics_urls(b)}
        out: dict[str, str] = self.call(grab)
        return out

    def client_kwargs(self, name: str) -> dict[str, Any]:
        """kafka-python keyword arguments to reach cluster ``name`` (see :func:`client_kwargs`)."""
        return client_kwargs(self.cluster(name))

    def stop(self) -> None:
        super().stop()
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)

    def __enter__(self) -> Sim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_sim(spec: dict[str, Any] | None = None, realistic: bool = True, directory: Path | None = None,
              **kw: Any) -> Sim:
    """Build and start a federation of ``spec`` (default :data:`SMALL`); see :func:`start_federation`."""
    return start_federation(build_federation(json.loads(json.dumps(spec or SMALL))), realistic, directory, **kw)


def start_federation(fed: Federation, realistic: bool = True, directory: Path | None = None, **kw: Any) -> Sim:
    """Start ``fed`` on 127.0.0.1; the caller must ``stop()`` it (or use ``with``); ``kw`` go to the server.

    ``realistic`` (the default): as ``sim up --realistic`` — certificates and credentials are generated
    into ``directory`` (a fresh temporary one, removed on stop, when None) and ``endpoints`` is the
    operator's document. ``realistic=False``: PLAINTEXT listeners and plain-http metrics, or whatever
    ``security=`` / ``metrics=`` the caller passes to the server."""
    setup, owned = None, None
    if realistic:
        if directory is None:
            directory = owned = Path(tempfile.mkdtemp(prefix="kafkasim-"))
        setup = prepare(directory)
    sim = Sim(fed, setup, owned, **kw)
    try:
        sim.start()
    except BaseException:
        sim.stop()
        raise
    return sim


class SimProcess:
    """``python -m kafkasim up --realistic`` with ``spec`` in its own process group (for tests with real
    controller processes): the operator's endpoints document it wrote, its control API, ground truth and
    reassignment log. Secrets and logs go to ``tmp``."""

    def __init__(self, spec: dict[str, Any], tmp: Path, cluster: str = "c1") -> None:
        scenario_file, self.endpoints_file = tmp / "sim.json", tmp / "sim-endpoints.json"
        scenario_file.write_text(json.dumps(spec))
        self.cluster = cluster
        self.log = (tmp / "sim.log").open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "kafkasim", "up", "--realistic", "--exit-with-parent",
                                      "--scenario", str(scenario_file), "--endpoints-file", str(self.endpoints_file)],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while not self.endpoints_file.exists():
                assert self.proc.poll() is None, "kafkasim exited at start"
                assert time.monotonic() < deadline, "kafkasim did not write its endpoints"
                time.sleep(0.1)
            self.endpoints = json.loads(self.endpoints_file.read_text())
        except BaseException:
            self.stop()
            raise
        self.control_url = self.endpoints["control_url"]
        self.c1: dict[str, Any] = self.endpoints["clusters"][cluster]

    def control(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return http_json(self.control_url + path, body)

    def sim_time(self) -> float:
        return float(self.control("/state")["sim_time"])

    def truth(self) -> dict[str, Any]:
        """The simulator's ground truth of the cluster (``guardian.snapshot/v1``)."""
        return dict(self.control(f"/snapshot?cluster={self.cluster}"))

    def replicas(self) -> dict[tuple[str, int], list[int]]:
        """Replica lists per partition, as the simulated brokers hold them now (without Guardian's own lease
        log, created by the first execution)."""
        snap = self.truth()
        return {(t["name"], p["partition"]): list(p["replicas"]) for t in snap["topics"] for p in t["partitions"]
                if t["name"] != LEASE_TOPIC}

    def reassignments(self) -> dict[str, Any]:
        return dict(self.control(f"/reassignments?cluster={self.cluster}"))

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.log.close()


@contextlib.contextmanager
def sim_process(spec: dict[str, Any], tmp: Path) -> Iterator[SimProcess]:
    """A :class:`SimProcess` for the ``with`` block (a fixture body: ``with sim_process(...) as s: yield s``)."""
    s = SimProcess(spec, tmp)
    try:
        yield s
    finally:
        s.stop()


def client_kwargs(cluster: dict[str, Any]) -> dict[str, Any]:
    """kafka-python client keyword arguments (``bootstrap_servers`` and the ``security`` object's settings,
    secrets resolved now through :mod:`kafkaio.security`) for a cluster entry of an endpoints document."""
    return {"bootstrap_servers": cluster["bootstrap_servers"],
            **parse_security(cluster.get("security")).client_kwargs()}


def metrics_endpoint(doc: dict[str, Any] | MetricsEndpoint) -> MetricsEndpoint:
    """A metrics endpoint record of an endpoints document (``{"url", "ca_file", ...}``) as the collector's."""
    if isinstance(doc, MetricsEndpoint):
        return doc
    return MetricsEndpoint(**{k: v for k, v in doc.items() if k in MetricsEndpoint.__dataclass_fields__})


def scrape_text(endpoint: dict[str, Any] | MetricsEndpoint | str, timeout: float = 10) -> str:
    """GET one metrics endpoint as Prometheus scrapes it (its CA, its basic auth); fails unless HTTP 200."""
    ep = MetricsEndpoint(endpoint) if isinstance(endpoint, str) else metrics_endpoint(endpoint)
    with Scraper(1) as scraper:
        status, body = scraper.fetch(ep, timeout)
    assert status == 200, f"{ep.url}: HTTP {status}"
    return body.decode()


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 10) -> Any:
    """GET (or POST when ``body`` is given) a JSON endpoint."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def http_text(url: str, timeout: float = 10) -> str:
    """GET a text endpoint."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


BROKER_KEYS = ("id", "metrics", "metrics_url", "idc", "rack")


def register_fields(cluster: dict[str, Any]) -> dict[str, Any]:
    """What an operator registers for a cluster of kafkasim's endpoints document (``POST /api/v1/clusters``
    fields): bootstrap servers, every broker's metrics endpoints, the security object, the rack→IDC rule and
    the hardware profile."""
    brokers = [{k: b[k] for k in BROKER_KEYS if b.get(k) is not None} for b in cluster["brokers"]]
    out: dict[str, Any] = {"bootstrap_servers": cluster["bootstrap_servers"].split(","), "brokers": brokers}
    for key in ("security", "rack_to_idc", "hardware"):
        if cluster.get(key):
            out[key] = cluster[key]
    return out
