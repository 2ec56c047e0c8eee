"""`guardian snapshot take` as an operator runs it: a real process against kafkasim over TCP."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from domain import parse_snapshot
from tests.support.collectors_support import SCENARIO, Sim
from tests.support.kafkasim_support import http_json

pytestmark = pytest.mark.timeout(120)

GUARDIAN = [sys.executable, "-c", "from controlplane.cli import main; main()"]


def test_snapshot_take_against_a_kafkasim_process(tmp_path: Path) -> None:
    """`python -m kafkasim up --endpoints-file E` (a real process), then `guardian snapshot take -e E`."""
    eps = tmp_path / "endpoints.json"
    sim = subprocess.Popen([sys.executable, "-m", "kafkasim", "up", "--endpoints-file", str(eps), "--speed", "20"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not eps.exists():
            assert sim.poll() is None, "kafkasim exited"
            assert time.monotonic() < deadline, "kafkasim did not write its endpoints"
            time.sleep(0.2)
        doc_eps = json.loads(eps.read_text())
        # kafkasim creates its audit topic at its first audit interval (3 wall-s at speed 20); a partition needs
        # two rounds that both saw it to have a rate, so the snapshot starts once the topic exists
        truth_url = doc_eps["control_url"] + "/snapshot?cluster=east"  # what `guardian sim truth` prints
        while "__guardian_audit" not in {t["name"] for t in http_json(truth_url)["topics"]}:
            assert time.monotonic() < deadline, "kafkasim did not create its audit topic"
            time.sleep(0.2)
        out = tmp_path / "s.json"
        r = subprocess.run([*GUARDIAN, "snapshot", "take", "-e", str(eps), "-c", "east", "-o", str(out),
                            "--rounds", "2", "--interval", "1"], capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        snap = parse_snapshot(out.read_text())
        doc = json.loads(out.read_text())
        truth = http_json(truth_url)
        assert {b.id for b in snap.brokers} == {b["id"] for b in truth["brokers"]}
        assert {(b.id, b.idc, b.rack) for b in snap.brokers} == {(b["id"], b["idc"], b["rack"])
                                                                 for b in truth["brokers"]}
        # every partition has rates, the audit topic's too (kafkasim counts its internal appends in
        # MessagesInPerSec/BytesInPerSec when they happen, as a broker counts a produce request)
        assert doc["coverage"]["partitions_without_rates"] == []
        assert sum(p.bytes_in_per_s for t in snap.topics for p in t.partitions) > 0
    finally:
        sim.terminate()
        sim.wait(20)


def test_snapshot_take_from_endpoints_file(tmp_path: Path) -> None:
    spec = json.loads(json.dumps(SCENARIO))
    spec["speed"] = 20.0  # 0.5 s between rounds = 10 simulated seconds
    sim = Sim(spec)
    try:
        eps = tmp_path / "endpoints.json"
        eps.write_text(json.dumps(sim.endpoints_doc))
        out = tmp_path / "s.json"
        r = subprocess.run([*GUARDIAN, "snapshot", "take", "--endpoints-file", str(eps), "--cluster", "east",
                            "--out", str(out), "--rounds", "2", "--interval", "0.5"],
                           capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        assert "round 1/2" in r.stderr and "round 2/2" in r.stderr
        doc = json.loads(out.read_text())
        snap = parse_snapshot(out.read_text())
        assert {b.id for b in snap.brokers} == {1, 2, 3, 4}
        assert sum(len(t.partitions) for t in snap.topics) == 10
        assert all(p.bytes_in_per_s > 0 for t in snap.topics for p in t.partitions)
        assert doc["coverage"]["broker_fraction"] == 1.0
        assert "behaviours" in doc["brokers"][0]["disks"][0]
    finally:
        sim.stop()


def test_snapshot_take_real_cluster_options_and_bad_input(tmp_path: Path) -> None:
    sim = Sim(realistic=False)  # --metrics-url ID=URL has no CA or credentials: plain-http exporters
    try:
        c = sim.endpoints_doc["clusters"]["east"]
        out = tmp_path / "s.json"
        args = [*GUARDIAN, "snapshot", "take", "--cluster", "east", "--out", str(out),
                "--bootstrap-servers", c["bootstrap_servers"], "--rounds", "1"]
        for b in c["brokers"]:
            for m in b["metrics"]:  # both exporters of each broker, as ID=URL
                args += ["--metrics-url", f"{b['id']}={m['url']}"]
        r = subprocess.run(args, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        snap = parse_snapshot(out.read_text())
        assert {b.id for b in snap.brokers} == {1, 2, 3, 4}
        # no rack->IDC rule given: the IDC is not guessed, and the coverage says so
        assert {b.idc for b in snap.brokers} == {"unknown"}
        doc = json.loads(out.read_text())
        assert doc["coverage"]["facts"]["idc"] == {"unknown": 4}
        assert doc["coverage"]["brokers_without_idc"] == [1, 2, 3, 4]
        # --strict refuses a snapshot whose metrics are missing
        r = subprocess.run([*GUARDIAN, "snapshot", "take", "--cluster", "east", "--out", str(tmp_path / "x.json"),
                            "--bootstrap-servers", c["bootstrap_servers"], "--metrics-url", "1=http://127.0.0.1:9/m",
                            "--rounds", "1", "--timeout", "0.5", "--strict"], capture_output=True, text=True,
                           timeout=90)
        assert r.returncode == 3, r.stderr
        assert "metrics of" in r.stderr
        assert not (tmp_path / "x.json").exists()
    finally:
        sim.stop()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run([*GUARDIAN, "snapshot", "take", "--endpoints-file", str(bad), "--cluster", "east",
                        "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "not valid JSON" in r.stderr
    r = subprocess.run([*GUARDIAN, "snapshot", "take", "--cluster", "east", "--out", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
