"""`python -m kafkasim up/fault` as real processes, scenario files, and audit records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from typer.testing import CliRunner

from tests.support.kafkasim_support import http_json

SCENARIO = """
seed: 11
speed: 30
tick_seconds: 1
audit: {enabled: true, interval_s: 10, topic: __guardian_audit}
clusters:
  - name: alpha
    partition_throttle: true
    brokers:
      - {count: 3, idcs: [idc-a, idc-b], racks_per_idc: 2, memory_gb: 4,
         disks: [{count: 2, kind: hdd, max_mb_s: 100}]}
    topics:
      - {name: logs, partitions: 3, rf: 2, bytes_in_per_s: 2000000, size_gb: 100, tail_groups: 1,
         producer: {client_id: shipper, user: ops, idc: idc-a}, consumer: {client_id: indexer, user: search}}
"""


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Path]]:
    d = tmp_path_factory.mktemp("sim")
    scen = d / "scenario.yaml"
    scen.write_text(SCENARIO)
    ep_file = d / "endpoints.json"
    audit = d / "audit.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "kafkasim", "up", "--scenario", str(scen), "--endpoints-file",
                             str(ep_file), "--audit-jsonl", str(audit)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        ep = json.loads(first)
        yield ep, d
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait(5)
        assert rc == 0, proc.stderr.read() if proc.stderr else ""


def test_up_prints_endpoints_and_writes_file(up: tuple[dict[str, Any], Path]) -> None:
    ep, d = up
    assert json.loads((d / "endpoints.json").read_text()) == ep
    alpha = ep["clusters"]["alpha"]
    assert len(alpha["bootstrap_servers"].split(",")) == 3
    assert len(alpha["brokers"]) == 3 and alpha["partition_throttle"] is True
    assert all([m["kind"] for m in b["metrics"]] == ["jmx", "node"] for b in alpha["brokers"])
    assert http_json(ep["control_url"] + "/health") == {"ok": True}


def _disk_util(ep: dict[str, Any]) -> float:
    st = http_json(ep["control_url"] + "/state")
    return max(d["util"] for b in st["clusters"]["alpha"]["brokers"].values() for d in b["disks"].values())


def test_fault_commands_through_the_cli(up: tuple[dict[str, Any], Path]) -> None:
    ep, d = up
    env = {**os.environ, "GUARDIAN_SIM_CONTROL_URL": ep["control_url"]}
    base = _disk_util(ep)
    r = subprocess.run([sys.executable, "-m", "kafkasim", "fault", "lagging-consumer", "--endpoints-file",
                        str(d / "endpoints.json"), "--cluster", "alpha", "--topic", "logs", "--lag-bytes", "50e9",
                        "--rate", "60e6"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    time.sleep(1.0)
    assert _disk_util(ep) > base + 0.2
    import typer

    from kafkasim.cli import register

    app = typer.Typer()
    register(app)
    runner = CliRunner()
    res = runner.invoke(app, ["fault", "kill-broker", "--cluster", "alpha", "--broker", "2",
                              "--control-url", ep["control_url"]])
    assert res.exit_code == 0, res.output
    st = http_json(ep["control_url"] + "/state")
    assert st["clusters"]["alpha"]["brokers"]["2"]["alive"] is False
    res = runner.invoke(app, ["fault", "revive-broker", "--cluster", "alpha", "--broker", "2",
                              "--control-url", ep["control_url"]])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["fault", "slow-disk", "--cluster", "alpha", "--broker", "1", "--log-dir", "/nope",
                              "--control-url", ep["control_url"]])
    assert res.exit_code == 1 and "no log dir" in res.output
    res = runner.invoke(app, ["fault", "traffic-spike", "--cluster", "alpha", "--topic", "nope",
                              "--control-url", ep["control_url"]])
    assert res.exit_code == 1 and "unknown topic" in res.output
    res = runner.invoke(app, ["fault", "traffic-spike", "--cluster", "alpha", "--topic", "logs", "--factor", "2",
                              "--control-url", ep["control_url"]])
    assert res.exit_code == 0, res.output


def test_audit_records_on_the_audit_topic_and_jsonl(up: tuple[dict[str, Any], Path]) -> None:
    ep, d = up
    bs = ep["clusters"]["alpha"]["bootstrap_servers"]
    prod = KafkaProducer(bootstrap_servers=bs, client_id="real-writer")
    try:
        for _ in range(5):
            prod.send("logs", value=b"y" * 500, partition=0)
        prod.flush(10)
    finally:
        prod.close()
    time.sleep(1.5)  # > one 10 s audit interval at speed 30
    cons = KafkaConsumer(bootstrap_servers=bs, auto_offset_reset="earliest",
                         enable_auto_commit=False)
    try:
        cons.assign([TopicPartition("__guardian_audit", i) for i in range(3)])
        recs: list[dict[str, Any]] = []
        deadline = time.time() + 8  # audit keeps flowing: poll until the real client shows up
        while time.time() < deadline:
            for batch in cons.poll(timeout_ms=300).values():
                recs += [json.loads(m.value) for m in batch]
            if any(r["client_id"] == "real-writer" for r in recs) and len(recs) > 10:
                break
    finally:
        cons.close()
    assert recs, "no audit records published"
    kinds = {(r["kind"], r["client_id"]) for r in recs}
    assert ("produce", "shipper") in kinds and ("fetch", "indexer") in kinds
    assert ("produce", "real-writer") in kinds
    real = [r for r in recs if r["client_id"] == "real-writer"]
    assert sum(r["records"] for r in real) == 5 and real[0]["client_ip"] == "127.0.0.1"
    for r in recs:
        assert set(r) >= {"ts", "kind", "cluster", "client_id", "user", "client_ip", "client_idc", "topic",
                          "partition", "broker", "bytes", "records", "latency_ms"}
    lines = [json.loads(x) for x in (d / "audit.jsonl").read_text().splitlines()]
    assert len(lines) >= len(recs) - 5


def test_bad_scenario_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters:\n  - name: x\n    brokers: [{count: 1, disks: [{kind: floppy}]}]\n")
    r = subprocess.run([sys.executable, "-m", "kafkasim", "up", "--scenario", str(bad)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert "$.clusters[0].brokers[0].disks[0].kind" in r.stderr


def _first_line_then_exit(args: list[str]) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-m", "kafkasim", "up", "--duration", "1.5", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ep = json.loads(proc.stdout.readline())
        assert proc.wait(30) == 0
        return dict(ep)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_default_federation_and_snapshot_seed() -> None:
    ep = _first_line_then_exit([])
    assert set(ep["clusters"]) == {"east", "west"}
    assert all("rack_to_idc" in c and c["hardware"] for c in ep["clusters"].values())
    ep = _first_line_then_exit(["--legacy-metrics"])  # the old document names each broker's IDC
    idcs = {b["idc"] for c in ep["clusters"].values() for b in c["brokers"]}
    assert idcs == {"idc-a", "idc-b", "idc-c"}
    assert ep["control_url"].startswith("http://127.0.0.1:")
    example = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "small.json"
    if example.exists():
        name = json.loads(example.read_text())["cluster"]
        ep = _first_line_then_exit(["--snapshot", str(example)])
        assert list(ep["clusters"]) == [name]
