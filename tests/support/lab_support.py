"""Real Kafka brokers for tests: one ``guardian lab`` per test session (or module), and what a test needs to
talk to it as an operator's client does.

The lab needs Java, Maven (first run), node_exporter and, for loop devices, root. ``make test`` installs
them and sets ``GUARDIAN_REQUIRE_LAB=1``: there a missing prerequisite fails the test instead of skipping
it. Elsewhere (a developer's machine without Java) the lab's tests are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from kafkalab import credentials as creds
from kafkalab import lab as kl

T = TypeVar("T")


def lab_unavailable() -> str | None:
    """Why a lab cannot start here, or ``None``."""
    for tool in ("java", kl.NODE_EXPORTER):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    with contextlib.suppress(Exception):
        from kafkalab.jars import cache_dir

        if (cache_dir() / ".pom-sha256").exists():
            return None
    if shutil.which("mvn") is None:
        return "mvn is not installed and the lab's jars are not cached"
    return None


def require_lab() -> None:
    """Skip (or, under ``GUARDIAN_REQUIRE_LAB=1``, fail) when the lab cannot start here."""
    why = lab_unavailable()
    if why is None:
        return
    if os.environ.get("GUARDIAN_REQUIRE_LAB") == "1":
        pytest.fail(f"the real-Kafka lab is required (GUARDIAN_REQUIRE_LAB=1) but {why}")
    pytest.skip(f"real-Kafka lab unavailable: {why}")


@dataclass
class Lab:
    """A running lab: its state document, endpoints file and client settings."""

    doc: dict[str, Any]
    endpoints_file: Path

    @property
    def directory(self) -> Path:
        return Path(self.doc["dir"])

    @property
    def cluster(self) -> str:
        return str(self.doc["cluster"])

    @property
    def bootstrap(self) -> str:
        return str(self.doc["bootstrap_servers"])

    @property
    def broker_ids(self) -> list[int]:
        return [int(n["id"]) for n in self.doc["nodes"]]

    def client_config(self) -> dict[str, Any]:
        """kafka-python keyword arguments (SASL_SSL, SCRAM-SHA-512, the lab's CA)."""
        return kl.admin_config(self.doc)

    def admin(self, **kw: Any) -> KafkaAdminClient:
        return KafkaAdminClient(client_id=kw.pop("client_id", "test-admin"), **self.client_config(), **kw)

    def producer(self, **kw: Any) -> KafkaProducer:
        return KafkaProducer(**self.client_config(), **kw)

    def consumer(self, *topics: str, **kw: Any) -> KafkaConsumer:
        return KafkaConsumer(*topics, **self.client_config(), **kw)

    def node(self, node_id: int) -> dict[str, Any]:
        return next(n for n in self.doc["nodes"] if n["id"] == node_id)

    def log_dirs(self, node_id: int) -> list[str]:
        return list(self.node(node_id)["log_dirs"])

    def device_of(self, log_dir: str) -> str | None:
        """The loop device (``loopN``) under a log dir, from the lab's state."""
        for d in self.doc.get("log_dirs", []):
            if d["path"] == log_dir and d.get("device"):
                return str(d["device"]).rsplit("/", 1)[-1]
        return None

    def scrape(self, url: str) -> str:
        """One authenticated https scrape of an exporter of the lab."""
        s = creds.LabSecrets(self.directory)
        return kl.https_get(url, s.ca_file, creds.METRICS_USER, s.password(creds.METRICS_USER), timeout=10)

    def jmx_url(self, node_id: int) -> str:
        return str(self.node(node_id)["jmx_url"])

    @property
    def node_exporter_url(self) -> str:
        return str(self.doc["node_exporter"]["url"])

    def kill(self, node_id: int) -> None:
        kl.kill_node(self.directory, node_id)

    def start(self, node_id: int) -> None:
        kl.start_node(self.directory, node_id)
        self.doc = kl.load_state(self.directory)


def start_lab(base: Path, brokers: int = 4, log_dirs: int = 3, idcs: int = 1, **kw: Any) -> Lab:
    """Start a lab under ``base`` (its endpoints file beside it)."""
    require_lab()
    spec = kl.LabSpec(brokers=brokers, log_dirs=log_dirs, idcs=idcs, directory=base / "lab",
                      heap=kw.pop("heap", "384m"), log_dir_bytes=kw.pop("log_dir_bytes", 1 << 30), **kw)
    endpoints = base / "lab-endpoints.json"
    doc = kl.up(spec, endpoints)
    return Lab(doc, endpoints)


@contextlib.contextmanager
def running_lab(base: Path, **kw: Any) -> Iterator[Lab]:
    """A lab for the ``with`` block, stopped (devices released) afterwards. With ``GUARDIAN_TEST_LAB=DIR`` (a
    developer's lab already up in DIR) that lab is used and left running."""
    reuse = os.environ.get("GUARDIAN_TEST_LAB")
    if reuse:
        doc = kl.load_state(Path(reuse))
        endpoints = base / "lab-endpoints.json"
        endpoints.write_text(json.dumps(doc["endpoints"]))
        yield Lab(doc, endpoints)
        return
    lab = start_lab(base, **kw)
    try:
        yield lab
    finally:
        problems = kl.down(lab.directory)
        assert not problems, problems


def replica_sizes(lab: Lab, topic: str, admin: KafkaAdminClient | None = None) -> dict[tuple[int, int, str, bool], int]:
    """``(partition, broker, log dir, is future) -> bytes`` of every replica of ``topic`` (DescribeLogDirs,
    straight from Kafka through kafka-python, not through Guardian's port), through ``admin`` when given (a
    reader sampling a copy keeps one client: a SASL_SSL handshake per reading costs ~1 s on a loaded machine)."""
    client = admin or lab.admin(client_id="test-logdirs")
    try:
        out: dict[tuple[int, int, str, bool], int] = {}
        for broker in lab.broker_ids:
            with contextlib.suppress(Exception):  # a dead broker answers nothing
                for resp in client.describe_log_dirs([topic], brokers=[broker]):
                    for d in resp["log_dirs"]:
                        for t in d["topics"]:
                            if t["name"] != topic:
                                continue
                            for p in t["partitions"]:
                                key = (int(p["partition_index"]), broker, str(d["log_dir"]), bool(p["is_future_key"]))
                                out[key] = int(p["partition_size"])
        return out
    finally:
        if admin is None:
            client.close()


def throttle_configs(lab: Lab, topics: list[str]) -> dict[str, dict[str, str]]:
    """Every KIP-73/KIP-113 throttle override left on the lab's brokers and on ``topics`` (empty = clean)."""
    return kl.throttle_overrides(lab.doc, topics)


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 60.0, every_s: float = 0.5) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


def under_replicated(lab: Lab) -> list[str] | None:
    """Partitions whose ISR is not their replica set (``None`` when the metadata could not be read: the admin
    client can pick a dead broker)."""
    try:
        admin = lab.admin(client_id="test-urp")
        try:
            metas = admin.describe_topics()
        finally:
            admin.close()
    except Exception:
        return None
    return [f"{t['name']}-{p['partition_index']}" for t in metas for p in t["partitions"]
            if set(p["isr_nodes"]) != set(p["replica_nodes"])]


def alive_brokers(lab: Lab) -> set[int]:
    """Brokers registered and not fenced (empty when the cluster could not be asked)."""
    try:
        admin = lab.admin(client_id="test-alive")
        try:
            return {int(b["broker_id"]) for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")}
        finally:
            admin.close()
    except Exception:
        return set()


def endpoints_doc(lab: Lab) -> dict[str, Any]:
    return dict(json.loads(lab.endpoints_file.read_text()))
