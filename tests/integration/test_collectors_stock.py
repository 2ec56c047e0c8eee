"""Guardian against kafkasim laid out like a production deployment, read only through stock sources.

SASL_SSL listeners with SCRAM-SHA-512; per broker a JMX exporter and a node_exporter over https with basic
auth, stock names only (no ``kafkasim_*`` series); some log dirs on LVM volumes; IDC, pool, disk kind and
ceiling declared the way an operator declares them (``broker.rack`` + the cluster's rack→IDC rule, the
replicated pool assignments, the hardware profile). The snapshot Guardian builds must agree with
``guardian sim truth`` (the simulator's ground truth) on every broker's IDC and pool, every disk's kind and
ceiling, and every partition's bytes-in within 5 %.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from collectors.builder import Collected
from collectors.collector import ClusterCollector
from collectors.scrape import scrape_all
from domain import parse_snapshot
from domain.policies import apply_policies
from kafkaio.endpoints import ClusterEndpoints, parse_endpoints
from kafkasim.broker.server import SimRunner
from kafkasim.scenarios.realistic import operator_endpoints, prepare
from kafkasim.scenarios.scenario import build_federation
from tests.support.kafkasim_support import http_json

pytestmark = pytest.mark.timeout(180)

SPEED = 20.0
POOLS = {"hot": [5, 6]}
"""The pool assignment an operator registers (``pool.assign``): brokers 5 and 6, the NVMe hosts."""
SPEC: dict[str, Any] = {
    "seed": 21, "speed": SPEED, "tick_seconds": 1.0,
    "clusters": [{
        "name": "east",
        "brokers": [
            {"count": 4, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 2, "memory_gb": 8, "pool": "shared",
             "disks": [{"count": 2, "kind": "hdd", "max_mb_s": 180}, {"count": 1, "kind": "ssd", "max_mb_s": 450}]},
            {"count": 2, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 1, "memory_gb": 16, "pool": "hot",
             "disks": [{"count": 2, "kind": "nvme", "max_mb_s": 1800}]},
        ],
        "topics": [
            {"name": "orders", "partitions": 6, "rf": 3, "bytes_in_per_s": 600_000, "skew": 0.5, "size_gb": 0.5,
             "tail_groups": 1, "msg_size": 1000},
            {"prefix": "events", "count": 2, "partitions": 4, "rf": 2, "bytes_in_per_s": 200_000, "size_gb": 0.1,
             "tail_groups": 2, "msg_size": 400},
        ],
    }],
}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimRunner, dict[str, Any]]]:
    """kafkasim as ``sim up --realistic`` starts it, and the operator's endpoints document."""
    where: Path = tmp_path_factory.mktemp("stock")
    setup = prepare(where, "sim")
    fed = build_federation(json.loads(json.dumps(SPEC)))
    fed.engine.burst_rate_per_hour = 0.0  # steady producers: a rate averaged over a round equals the last tick's
    runner = SimRunner(fed, security=setup.security, metrics=setup.metrics)
    doc = operator_endpoints(runner.start(), fed, setup)
    (where / "sim.json").write_text(json.dumps(doc))
    yield runner, doc
    runner.stop()


def endpoints(doc: dict[str, Any]) -> ClusterEndpoints:
    return parse_endpoints(doc, "east")


def truth(doc: dict[str, Any]) -> dict[str, Any]:
    """What ``guardian sim truth --endpoints-file E --cluster east`` prints."""
    out: dict[str, Any] = http_json(doc["control_url"] + "/snapshot?cluster=east")
    return out


def rounds(col: ClusterCollector, n: int, gap_s: float = 1.0) -> Collected:
    c = col.collect_once()
    for _ in range(n - 1):
        time.sleep(gap_s)
        c = col.collect_once()
    return c


def test_the_deployment_offers_only_stock_names_over_https_with_basic_auth(
        deployment: tuple[SimRunner, dict[str, Any]]) -> None:
    runner, doc = deployment
    eps = endpoints(doc)
    assert eps.security.protocol == "SASL_SSL" and eps.security.sasl_mechanism == "SCRAM-SHA-512"
    assert all(len(b.metrics_endpoints) == 2 for b in eps.brokers)
    targets = [m for b in eps.brokers for m in b.metrics_endpoints]
    assert all(m.url.startswith("https://") and m.ca_file and m.username and m.password_file for m in targets)
    got = scrape_all(targets, timeout_s=10)
    assert got.failed == {}
    names = {name for r in got.results.values() if r.payload is not None for name in r.payload.raw}
    assert not [n for n in names if n.startswith("kafkasim_")]
    assert "kafka_server_brokertopicpartitionmetrics_bytesin_total" not in names  # no per-partition counters
    assert {"node_disk_device_mapper_info", "kafka_log_log_logendoffset", "node_filesystem_size_bytes"} <= names
    # without the CA the server is not trusted; without credentials every endpoint answers 401
    untrusted = scrape_all([m.url for m in targets[:2]], timeout_s=10)
    assert all("CERTIFICATE_VERIFY_FAILED" in (r.error or "") for r in untrusted.results.values())
    anonymous = scrape_all([replace(m, username=None, password_file=None) for m in targets[:2]], timeout_s=10)
    assert all("HTTP 401" in (r.error or "") for r in anonymous.results.values())
    counts = runner.server.scrape_counts()["east"]
    assert sum(k["unauthorized"] for b in counts.values() for k in b.values()) >= 2


def test_snapshot_agrees_with_the_simulators_truth(deployment: tuple[SimRunner, dict[str, Any]]) -> None:
    _runner, doc = deployment
    col = ClusterCollector(endpoints(doc), scrape_timeout_s=10)
    try:
        c = rounds(col, 5)
        real = truth(doc)
    finally:
        col.close()
    text = json.dumps(c.to_dict())
    parse_snapshot(text)
    eps = endpoints(doc)
    secrets = {Path(str(eps.security.password_file)).read_text().strip(),
               Path(str(eps.brokers[0].metrics[0].password_file)).read_text().strip()}
    assert not [x for x in secrets if x in text]  # the snapshot file carries no secret
    cov = c.coverage
    assert cov.metrics_failed == {} and cov.endpoints_failed == {} and cov.kafka_errors == {}
    assert cov.broker_fraction == 1.0 and cov.partition_fraction == 1.0
    assert cov.disks_with_metrics == cov.disks_total == 16
    # every fact declared, none defaulted: IDC through the rack rule, disks through the hardware profile
    assert cov.facts == {"idc": {"rack": 6}, "disk_kind": {"declared": 16}, "max_bytes_per_s": {"declared": 16}}
    assert cov.brokers_without_idc == []
    assert cov.bytes_in_methods == {"leo_x_topic_ratio": cov.partitions_total}
    assert cov.consumer_offsets["source"] == "admin" and cov.consumer_offsets["groups"] == 5
    # pools are the replicated assignment the service overlays
    snap = apply_policies(c.snapshot, {"pools": POOLS}, {})
    want = {b["id"]: b for b in real["brokers"]}
    assert {b.id for b in snap.brokers} == set(want)
    for b in snap.brokers:
        t = want[b.id]
        assert (b.idc, b.rack, b.pool) == (t["idc"], t["rack"], t["pool"]), b.id
        assert [(d.path, d.kind.value, d.max_bytes_per_s) for d in b.disks] == [
            (d["path"], d["kind"], d["max_bytes_per_s"]) for d in t["disks"]], b.id
        for d, td in zip(b.disks, t["disks"], strict=True):
            assert d.capacity_bytes == td["capacity_bytes"]  # the filesystem's size, LVM volumes included
    parts = {(t["name"], p["partition"]): p for t in real["topics"] for p in t["partitions"]}
    checked = 0
    for t in snap.topics:
        for p in t.partitions:
            exp = parts[(t.name, p.partition)]["bytes_in_per_s"]
            assert p.bytes_in_per_s == pytest.approx(exp, rel=0.05), (t.name, p.partition)
            checked += exp > 0
    assert checked == 14


def test_device_mapper_log_dirs_map_to_their_dm_devices(deployment: tuple[SimRunner, dict[str, Any]]) -> None:
    """LVM log dirs: ``/dev/mapper/vg-lv`` in node_filesystem, ``dm-K`` in node_disk, linked by
    ``node_disk_device_mapper_info``; the disk's util is the dm device's."""
    runner, doc = deployment
    col = ClusterCollector(endpoints(doc), scrape_timeout_s=10)
    try:
        c = rounds(col, 3)
        facts = col.model.disks.facts
    finally:
        col.close()
    devices = {(b, path): f.device for b, per in facts.items() for path, f in per.items()}
    on_lvm = {k: d for k, d in devices.items() if d and d.startswith("dm-")}
    assert len(on_lvm) >= 4 and all(d for d in devices.values())
    nvme = {k: d for k, d in devices.items() if d and d.startswith("nvme")}
    assert {b for b, _ in nvme} == {5, 6}
    state = runner.call(lambda: {(b.id, d.path): float(runner.server.fed.engine.d_util[d.gidx])
                                 for b in runner.server.fed.clusters["east"].brokers.values() for d in b.disks})
    for b in c.snapshot.brokers:
        for d in b.disks:
            if (b.id, d.path) in on_lvm:
                assert d.util > 0.0 and d.util == pytest.approx(state[(b.id, d.path)], abs=0.05)
