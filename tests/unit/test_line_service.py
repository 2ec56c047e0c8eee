"""controlplane.service.leased_lines: one round's accounting and plan, /metrics, the API route and overview."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest

from controlplane.api.app import create_app
from controlplane.config import LeasedLineConf, LeasedLinesConf, Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.service.leased_lines import LineCollector, LineService, audit_flows_of, protection_config
from controlplane.service.protection import ProtectionService
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from kafkaio.audit import AuditShares
from planners.line_accounting import AuditFlow
from tests.support.line_support import MB, part, two_idc

CONF = LeasedLinesConf(lines=[LeasedLineConf(src_idc="idc-a", dst_idc="idc-b", capacity_bytes_per_s=20 * MB)],
                       fetch_priority={"batch": 1})
SNAP = two_idc([part("t", 0, (1, 3), 10 * MB, bytes_out=10 * MB), part("t", 1, (3, 4), 5 * MB)])
AUDIT = (AuditFlow("fetch", "t", 0, "batch", "idc-b", 10 * MB, 1),)


def test_both_directions_are_protected_unless_said_otherwise() -> None:
    assert set(protection_config(CONF).limits) == {("idc-a", "idc-b"), ("idc-b", "idc-a")}
    one_way = LeasedLinesConf(lines=[LeasedLineConf(src_idc="a", dst_idc="b", capacity_bytes_per_s=1.0,
                                                    both_directions=False)])
    assert set(protection_config(one_way).limits) == {("a", "b")}


def test_a_round_is_accounted_planned_and_reported() -> None:
    lines = LineService(CONF)
    for i in range(2):  # 20 MB/s on a 20 MB/s line, twice: hot
        plan = lines.evaluate("c", f"t{i}", SNAP, (), AUDIT, ())
    assert [d.key for d in plan.decisions] == ["consumer-quota:batch"]
    rep = lines.report("c")
    (ab,) = [x for x in rep["lines"] if (x["src_idc"], x["dst_idc"]) == ("idc-a", "idc-b")]
    assert ab["bytes_per_s"] == {"replication": 10 * MB, "migration": 0.0, "client_produce": 0.0,
                                 "client_fetch": 10 * MB}
    assert ab["util"] == 1.0 and ab["hot"] is True and ab["protected"] is True and ab["throttling"]
    assert lines.summary("c")[0]["hot"] in (True, False)
    text = generate_latest(_registry(lines)).decode()
    assert 'guardian_leased_line_bytes_per_second{cluster="c",dst_idc="idc-b",kind="client_fetch",src_idc="idc-a"} ' \
           "1e+07" in text
    assert 'guardian_leased_line_hot{cluster="c",dst_idc="idc-b",src_idc="idc-a"} 1.0' in text
    assert 'guardian_leased_line_capacity_bytes_per_second{dst_idc="idc-b",src_idc="idc-a"} 2e+07' in text
    # report only: the same round plans nothing
    quiet = LineService(CONF.model_copy(update={"protect": False}))
    for i in range(2):
        assert quiet.evaluate("c", f"t{i}", SNAP, (), AUDIT, ()).decisions == ()
    assert quiet.report("c")["lines"][0]["hot"] is True


def test_another_cluster_on_the_same_line_counts_towards_its_health() -> None:
    lines = LineService(CONF)
    lines.evaluate("other", "t0", SNAP, (), AUDIT, ())
    small = two_idc([part("u", 0, (1, 3), 2 * MB)])
    for i in range(2):
        plan = lines.evaluate("c", f"t{i}", small, (), (), ())
    assert plan.health[("idc-a", "idc-b")].hot  # 2 MB/s of its own, 20 MB/s from the other cluster


def _registry(lines: LineService) -> CollectorRegistry:
    reg = CollectorRegistry()
    reg.register(LineCollector(lines))
    return reg


def test_audit_rows_keep_client_idc_and_serving_broker() -> None:
    shares = AuditShares("127.0.0.1:1")
    for rec in ({"ts": "1", "interval_s": 10, "kind": "fetch", "topic": "t", "partition": 0, "bytes": 100,
                 "client_id": "x", "client_idc": "idc-b", "broker": 3},
                {"ts": "2", "interval_s": 10, "kind": "fetch", "topic": "t", "partition": 0, "bytes": 50,
                 "client_id": "x", "client_idc": "idc-b", "broker": 3},
                {"ts": "2", "interval_s": 10, "kind": "fetch", "topic": "t", "partition": 0, "bytes": 30,
                 "client_id": "y", "broker": "bad"}):
        shares._add(json.dumps(rec))
    assert shares.placed() == {("fetch", "t", 0): {("x", "idc-b", 3): 5.0, ("y", "", -1): 3.0}}
    assert audit_flows_of(shares.placed()) == (AuditFlow("fetch", "t", 0, "x", "idc-b", 5.0, 3),
                                               AuditFlow("fetch", "t", 0, "y", "", 3.0, None))


def test_the_api_route_and_the_overview(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, tokens=[TokenConf(name="v", role="viewer", sha256=hash_token("v"))])
    store = LocalStateStore()
    store.propose({"type": "cluster.register", "meta": meta("test"), "name": "c", "bootstrap_servers": ["h:1"]})
    lines = LineService(CONF)
    ctx = ServiceContext(settings=settings, store=store, throttle=ProtectionService(store, lines=lines))
    headers = {"Authorization": "Bearer v"}
    with TestClient(create_app(ctx)) as client:
        r = client.get("/api/v1/clusters/c/leased-lines", headers=headers)
        assert r.status_code == 200 and r.json()["evaluated"] is False
        assert client.get("/api/v1/clusters/nope/leased-lines", headers=headers).status_code == 404
        assert client.get("/api/v1/clusters/c/leased-lines").status_code == 401
        lines.evaluate("c", "t0", SNAP, (), AUDIT, ())
        body = client.get("/api/v1/clusters/c/leased-lines", headers=headers).json()
        assert body["evaluated"] is True and body["clients_known"] is True
        (entry,) = client.get("/api/v1/overview", headers=headers).json()["clusters"]
        assert {(x["src_idc"], x["dst_idc"]) for x in entry["leased_lines"]} >= {("idc-a", "idc-b")}
