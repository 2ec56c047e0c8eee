"""Independent clients against kafkasim: librdkafka (confluent-kafka) and kcat."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from kafkasim.broker.server import SimRunner
from tests.support.kafkasim_support import start_sim

KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(KCAT is None and not os.environ.get("CI"),
                                reason="kcat not installed (it is mandatory when CI is set)")


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRunner]:
    runner = start_sim(realistic=False)
    yield runner
    runner.stop()


def test_confluent_admin_lists_cluster(sim: SimRunner) -> None:
    ep = sim.endpoints["clusters"]["east"]
    a = AdminClient({"bootstrap.servers": ep["bootstrap_servers"]})
    md = a.list_topics(timeout=15)
    assert sorted(md.brokers) == [1, 2, 3, 4]
    assert {b.port for b in md.brokers.values()} == {b["port"] for b in ep["brokers"]}
    assert md.controller_id == 1
    assert sorted(md.topics["orders"].partitions) == [0, 1, 2, 3]
    p0 = md.topics["orders"].partitions[0]
    assert len(p0.replicas) == 3 and p0.leader == p0.replicas[0] and sorted(p0.isrs) == sorted(p0.replicas)
    assert md.cluster_id == sim.server.fed.clusters["east"].cluster_id


def _kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert KCAT is not None, "kcat is required in CI"
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False)


@needs_kcat
def test_kcat_lists_cluster(sim: SimRunner) -> None:
    ep = sim.endpoints["clusters"]["west"]
    out = _kcat("-b", ep["bootstrap_servers"], "-L", "-J")
    assert out.returncode == 0, out.stderr
    md = json.loads(out.stdout)
    assert sorted(b["id"] for b in md["brokers"]) == [1, 2, 3]
    assert md["controllerid"] == 1
    assert md["topics"] == []


@needs_kcat
def test_kcat_produce_consume_round_trip(sim: SimRunner) -> None:
    bs = sim.endpoints["clusters"]["east"]["bootstrap_servers"]
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        admin.create_topics([NewTopic("kcat-rt", 2, 2)])
    finally:
        admin.close()
    lines = [f"line-{i}" for i in range(20)]
    out = _kcat("-b", bs, "-P", "-t", "kcat-rt", "-p", "1", stdin="\n".join(lines) + "\n")
    assert out.returncode == 0, out.stderr
    out = _kcat("-b", bs, "-C", "-t", "kcat-rt", "-p", "1", "-o", "beginning", "-e", "-q", "-f", "%o %s\n")
    assert out.returncode == 0, out.stderr
    got = out.stdout.splitlines()
    assert got == [f"{i} line-{i}" for i in range(20)]
    out = _kcat("-b", bs, "-C", "-t", "kcat-rt", "-p", "0", "-o", "beginning", "-e", "-q")
    assert out.returncode == 0 and out.stdout == ""
