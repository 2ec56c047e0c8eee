"""Integration: the audit stream of a real kafkasim process → kafka-python → chdb, exactly once.

kafkasim runs as its own process on 127.0.0.1 ports and publishes audit records to
``__guardian_audit`` over the Kafka wire; the ingestor consumes them through kafka-python. It is
stopped and restarted mid-stream; afterwards every offset of every audit partition up to the
committed position is stored exactly once. Skipped when kafkasim is not installed yet
(KAFKASIM_PYTHON may name another interpreter that has it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analytics_spark.clickhouse import ClickHouse, connect
from analytics_spark.clickhouse.ingest import (
    AuditIngestor,
    ClickHouseIngestStore,
    KafkaAuditSource,
    broker_idc_from_snapshots,
    ingest_status,
)
from kafkaio.endpoints import ClusterEndpoints, load_endpoints_file
from tests.support.chdb_session import chdb_path, fresh_database

SIM_PYTHON = os.environ.get("KAFKASIM_PYTHON", sys.executable)
if sys.executable == SIM_PYTHON and importlib.util.find_spec("kafkasim.__main__") is None:
    pytest.skip("kafkasim is not available in this checkout", allow_module_level=True)

SCENARIO = """
seed: 5
speed: 30
tick_seconds: 1
audit: {enabled: true, interval_s: 10, topic: __guardian_audit}
clusters:
  - name: alpha
    brokers:
      - {count: 3, idcs: [idc-a, idc-b], racks_per_idc: 1, memory_gb: 4, disks: [{count: 1, kind: ssd}]}
    topics:
      - {name: logs, partitions: 4, rf: 2, bytes_in_per_s: 500000, size_gb: 1, tail_groups: 1,
         producer: {client_id: shipper, user: ops, idc: idc-a}, consumer: {client_id: indexer, user: search}}
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    d = tmp_path_factory.mktemp("sim")
    (d / "scenario.yaml").write_text(SCENARIO)
    proc = subprocess.Popen(
        [SIM_PYTHON, "-m", "kafkasim", "up", "--realistic", "--scenario", str(d / "scenario.yaml"),
         "--endpoints-file", str(d / "endpoints.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        ep = json.loads(proc.stdout.readline())
        yield {"endpoints": ep, "dir": d}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture()
def ch() -> Iterator[ClickHouse]:
    c = connect(data_path=chdb_path(), database=fresh_database("t_ingest"))
    yield c
    c.command(f"DROP DATABASE IF EXISTS {c.database}")
    c.close()


def _ingest_for(ch: ClickHouse, eps: ClusterEndpoints, seconds: float, lookup: Any) -> AuditIngestor:
    src = KafkaAuditSource(eps.bootstrap_servers, "__guardian_audit", **eps.security.client_kwargs())
    ing = AuditIngestor(src, ClickHouseIngestStore(ch), batch_size=50, poll_timeout_s=0.2, broker_idc=lookup)
    deadline = time.monotonic() + seconds
    try:
        ing.run(stop=lambda: time.monotonic() >= deadline)
    finally:
        src.close()
    return ing


def test_kafkasim_audit_stream_exactly_once_across_restart(sim: dict[str, Any], ch: ClickHouse) -> None:
    snap: Path = sim["dir"] / "snap.json"
    truth = json.loads(urllib.request.urlopen(sim["endpoints"]["control_url"] + "/state", timeout=10).read())
    brokers = [{"id": int(b), "idc": v["idc"]} for b, v in truth["clusters"]["alpha"]["brokers"].items()]
    snap.write_text(json.dumps({"cluster": "alpha", "brokers": brokers}))
    lookup = broker_idc_from_snapshots([snap])
    eps = load_endpoints_file(sim["dir"] / "endpoints.json", "alpha")
    assert eps.security.protocol == "SASL_SSL"
    first = _ingest_for(ch, eps, 4.0, lookup)
    assert first.stats.accepted > 0 and first.stats.rejected == 0
    second = _ingest_for(ch, eps, 3.0, lookup)
    assert second.stats.accepted > 0 and second.stats.duplicates_skipped == 0
    t = ch.table("audit_records")
    status = ingest_status(ch, "__guardian_audit")
    assert status and sum(s["rejected"] for s in status) == 0
    for s in status:  # offsets 0 .. next_offset-1 each stored exactly once: nothing lost, nothing twice
        n, distinct, lo, hi = ch.rows(
            f"SELECT count(), uniqExact(src_offset), min(src_offset), max(src_offset) FROM {t} "
            "WHERE src_partition = {p:Int32}", {"p": s["partition"]})[0]
        assert n == distinct == s["next_offset"] == s["accepted"]
        assert (lo, hi) == (0, s["next_offset"] - 1)
    rows = ch.rows(f"SELECT DISTINCT cluster, topic, api, client_id, broker_idc FROM {t} ORDER BY ALL")
    assert {(r[2], r[3]) for r in rows} >= {("produce", "shipper"), ("fetch", "indexer")}
    assert {r[4] for r in rows} <= {"idc-a", "idc-b"} and "" not in {r[4] for r in rows}
    # the minute rollup follows the ingested rows
    assert ch.scalar(f"SELECT sum(bytes) FROM {ch.table('audit_partition_minute')}") == ch.scalar(
        f"SELECT sum(bytes) FROM {t}")


def test_the_ingest_cli_reads_a_secured_cluster_from_its_endpoints_file(sim: dict[str, Any], tmp_path: Path) -> None:
    exe = shutil.which("guardian", path=str(Path(sys.executable).parent)) or "guardian"
    base = [exe, "analytics", "ingest", "--chdb-path", str(tmp_path / "chdb"), "--duration", "4"]
    ok = subprocess.run([*base, "--endpoints-file", str(sim["dir"] / "endpoints.json"), "--cluster", "alpha"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    accepted = int(ok.stdout.split("accepted ")[1].split(",")[0])
    assert accepted > 0
    both = subprocess.run([*base, "--endpoints-file", str(sim["dir"] / "endpoints.json")],
                          capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "--cluster" in both.stderr
