"""Seeding kafkasim from guardian.snapshot/v1 documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kafkasim.scenarios.scenario import ScenarioError, build_federation

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "small.json"


def snapshot() -> dict:
    return json.loads(EXAMPLE.read_text())


@pytest.mark.skipif(not EXAMPLE.exists(), reason="example snapshot not present")
def test_seeded_cluster_matches_snapshot_and_physics_agrees() -> None:
    snap = snapshot()
    fed = build_federation({"seed": 1, "clusters": [{"snapshot": str(EXAMPLE), "partition_throttle": True}]})
    cl = fed.clusters[snap["cluster"]]
    assert sorted(cl.brokers) == sorted(b["id"] for b in snap["brokers"])
    for t in snap["topics"]:
        for ps in t["partitions"]:
            p = cl.topics[t["name"]].partitions[ps["partition"]]
            assert p.replicas == ps["replicas"] and p.leader == ps["leader"]
            paths = [next(d.path for d in cl.brokers[r].disks if d.gidx == p.log_dirs[r]) for r in p.replicas]
            assert paths == ps["log_dirs"]
            assert fed.engine.f["size"][p.slot] == pytest.approx(ps["size_bytes"])
    eng = fed.engine
    eng.burst_rate_per_hour = 0.0
    eng.advance(5, 1.0)
    sim_w, snap_w = [], []
    for b in snap["brokers"]:
        for d in b["disks"]:
            disk = cl.brokers[b["id"]].disk_by_path(d["path"])
            assert disk is not None
            sim_w.append(float(eng.d_write_rate[disk.gidx]))
            snap_w.append(d["write_bytes_per_s"])
    # the same replicas write the same bytes_in (up to the diurnal factor shared by all)
    assert np.corrcoef(sim_w, snap_w)[0, 1] > 0.95


def test_bad_snapshots_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"\$.clusters\[0\].snapshot.format"):
        build_federation({"clusters": [{"snapshot": {"format": "nope"}}]})
    snap: dict[str, Any] = {"format": "guardian.snapshot/v1", "cluster": "x",
            "brokers": [{"id": 1, "disks": [{"path": "/d1", "kind": "hdd"}]}],
            "topics": [{"name": "t", "partitions": [{"partition": 0, "replicas": [1], "log_dirs": ["/zz"]}]}]}
    with pytest.raises(ScenarioError, match=r"partitions\[0\].log_dirs: broker 1 has no log dir '/zz'"):
        build_federation({"clusters": [{"snapshot": snap}]})
    snap["topics"][0]["partitions"][0]["replicas"] = [7]
    with pytest.raises(ScenarioError, match="unknown brokers"):
        build_federation({"clusters": [{"snapshot": snap}]})
    snap["topics"][0]["partitions"][0] = {"partition": 0, "replicas": [1], "log_dirs": ["/d1"],
                                          "bytes_in_per_s": 1e6, "disk_read_bytes_per_s": 5e6}
    snap["brokers"][0]["state"] = "alive"
    fed = build_federation({"clusters": [{"snapshot": snap}]})
    fed.engine.advance(3, 1.0)
    d = fed.clusters["x"].brokers[1].disks[0].gidx
    assert fed.engine.d_read_rate[d] == pytest.approx(5e6)


def test_topic_configs_bound_seeded_logs_and_bad_ones_name_the_path() -> None:
    snap = {"format": "guardian.snapshot/v1", "cluster": "x",
            "brokers": [{"id": 1, "disks": [{"path": "/d1", "kind": "nvme"}]}],
            "topics": [{"name": "t", "partitions": [{"partition": 0, "replicas": [1], "log_dirs": ["/d1"],
                                                     "size_bytes": 50e6, "bytes_in_per_s": 10e6}]}]}
    sizes = {}
    for configs, check_ms in (({}, "10000"), ({"retention.bytes": "60000000"}, "10000"),
                              ({"retention.bytes": "60000000"}, None)):
        fed = build_federation({"clusters": [{"snapshot": snap, "topic_configs": configs, "broker_configs": (
            {"log.retention.check.interval.ms": check_ms} if check_ms else {})}]})
        fed.engine.burst_rate_per_hour = 0.0
        fed.engine.advance(30, 1.0)  # 300 MB more written
        sizes[bool(configs), check_ms] = float(fed.engine.f["size"][fed.clusters["x"].topics["t"].partitions[0].slot])
    assert sizes[False, "10000"] > 300e6  # the default 7-day retention keeps everything
    assert sizes[True, "10000"] <= 60e6 + 1  # retention.bytes caps the log at a check (every 10 s), as on a broker
    assert sizes[True, None] > 300e6  # Kafka's default interval (300 s): no check yet
    with pytest.raises(ScenarioError, match=r"\$.clusters\[0\].topic_configs: must be a mapping"):
        build_federation({"clusters": [{"snapshot": snap, "topic_configs": ["retention.bytes"]}]})
    with pytest.raises(ScenarioError, match=r"\$.clusters\[0\].snapshot.topics\[0\]"):
        build_federation({"clusters": [{"snapshot": snap, "topic_configs": {"no.such.config": "1"}}]})


def test_generated_snapshot_seeds_a_sim_whose_disk_load_agrees() -> None:
    from domain.snapshot_file import parse_snapshot, snapshot_to_dict
    from kafkasim.observe.truth import snapshot_of
    from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

    d = snapshot_to_dict(generate_snapshot(GeneratorSpec(brokers=12, disks_per_broker=4, partitions=600,
                                                         dead_brokers=1, seed=5)))
    fed = build_federation({"seed": 5, "clusters": [{"snapshot": d}]})
    fed.engine.burst_rate_per_hour = 0.0
    fed.engine.advance(60, 10.0)
    out = snapshot_of(fed, d["cluster"])
    parse_snapshot(json.dumps(out))  # the ground truth is a valid snapshot
    assert [b["state"] for b in out["brokers"]].count("dead") == 1
    gen = {(b["id"], x["path"]): x["util"] for b in d["brokers"] for x in b["disks"] if b["state"] != "dead"}
    sim = {(b["id"], x["path"]): x["util"] for b in out["brokers"] for x in b["disks"]}
    keys = sorted(gen)
    assert np.corrcoef([gen[k] for k in keys], [sim[k] for k in keys])[0, 1] > 0.9
