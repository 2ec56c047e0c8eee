"""deploy/ against the real tools: promtool checks and unit-tests the alert rules, amtool checks the Alertmanager
example, and a real Prometheus on loopback scrapes a kafkasim-backed controller and kafkasim's broker endpoints,
loads the rules, and answers every Grafana panel query and every alert expression of deploy/.

Goal: the dashboard and the alerts query series that exist under the names and labels they use, and an
alert about a disk reaches Guardian's webhook with the labels it acts on. Method: one module fixture —
kafkasim (two clusters), an in-process controller with both clusters registered, a round published, a
throttle in force and an execution started after Prometheus is up (1 s scrape and evaluation interval) —
then each panel target (``$cluster`` = ``.*``, ``$__rate_interval`` = 10 s) is evaluated by
``/api/v1/query_range`` over the test's window (an execution may end between two scrapes): no error, and
data except for :data:`EMPTY_OK`. Guarantee: a renamed metric or label, a query that no longer parses or a
rule Prometheus cannot evaluate fails here. Cost: ~30-60 s (Prometheus start, a few rounds of scrapes).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.bootstrap import Service
from controlplane.config import IntervalsConf, TokenConf, hash_token
from controlplane.state.commands import meta
from domain import ClusterSnapshot, PartitionMove, Plan, plan_to_dict
from raft.localcluster import free_ports
from tests.support.kafkasim_support import Sim, start_sim
from tests.support.service_support import register_and_observe, served_service, wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "guardian-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "guardian.json"
OPERATOR = "operator-token-0123456789"
RATE_WINDOW = "10s"
EMPTY_OK = {
    "Consumer lag (kafka_exporter)": "kafkasim's consumers here keep up: kafka_consumergroup_lag lists lagging "
                                     "groups only",
}
"""Panels that may legitimately return nothing in this fixture, and why."""
NAMES_ABSENT_OK = {"kafka_consumergroup_lag"} | {
    f"kafka_server_brokertopicmetrics_remotecopy{n}" for n in ("bytes_total", "errors_total", "lagbytes")}
"""Names the dashboard or rules read that this fixture may lack: the tiered-storage series exist only on brokers
with remote storage (its kafkasim runs without a tiered service; tests/integration/test_kafkasim_tiered_metrics.py
scrapes them from one that has)."""

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (make venv)")
needs_prometheus = pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed (make venv)")
needs_amtool = pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool not installed (make venv)")


def run(*cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def panel_targets() -> list[tuple[str, str]]:
    """(panel title, expr) of every target of the dashboard."""
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def concrete(expr: str) -> str:
    """A panel query as Grafana sends it with the defaults: every cluster, a fixed rate window."""
    return expr.replace("$cluster", ".*").replace("$__rate_interval", RATE_WINDOW)


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b((?:guardian|kafka|node)_[a-zA-Z0-9_]+)\b", expr))


# ------------------------------------------------------------------ offline checks (promtool, amtool)

@needs_promtool
def test_promtool_checks_and_unit_tests_the_rules() -> None:
    checked = run("promtool", "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
    tested = run("promtool", "test", "rules", "guardian-rules.test.yml", cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
    config = run("promtool", "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr


@needs_promtool
def test_every_rule_is_unit_tested_and_carries_severity_and_the_webhook_labels() -> None:
    tests = yaml.safe_load((RULES.parent / "guardian-rules.test.yml").read_text())["tests"]
    tested = {a["alertname"] for t in tests for a in t["alert_rule_test"]}
    for r in rules():
        assert r["alert"] in tested, f"{r['alert']} has no promtool unit test"
        assert r["labels"]["severity"] in {"warning", "critical"}, r["alert"]
        if r["labels"].get("guardian_webhook") == "true":
            # the series the alert comes from carry cluster, broker and disk: the webhook's three labels
            assert metric_names(r["expr"]) <= {"guardian_disk_util", "guardian_disk_await_seconds"}, r["alert"]


@needs_amtool
def test_amtool_accepts_the_alertmanager_example_and_it_routes_disk_alerts_to_guardian() -> None:
    path = DEPLOY / "alertmanager" / "alertmanager.yml"
    checked = run("amtool", "check-config", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    routed = run("amtool", "config", "routes", "test", "--config.file", str(path),
                 "guardian_webhook=true", "cluster=east", "broker=3", "disk=/data/d1")
    assert routed.stdout.split() == ["guardian"], routed.stdout + routed.stderr
    other = run("amtool", "config", "routes", "test", "--config.file", str(path), "alertname=GuardianLoopDead")
    assert other.stdout.split() == ["operators"], other.stdout + other.stderr


def test_dashboard_is_well_formed() -> None:
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "cluster"}
    targets = panel_targets()
    assert len(targets) >= 30
    for title, expr in targets:
        assert metric_names(expr), title
        # every federation series is filtered by the cluster variable (controller health is per node)
        if any(n.startswith(("kafka_", "node_")) or n.startswith(("guardian_pool", "guardian_disk"))
               for n in metric_names(expr)):
            assert 'cluster=~"$cluster"' in expr, title


# ------------------------------------------------------------------ a real Prometheus

@dataclass
class Live:
    service: Service
    base: str
    sim: Sim
    prom: str
    started: float


def propose_moves(svc: Service, snap: ClusterSnapshot, indexes: tuple[int, ...]) -> int:
    """Propose a plan moving one replica of each ``orders`` partition of ``indexes`` to a broker without one."""
    moves = []
    for index in indexes:
        p = snap.index.topic_by_name["orders"].partitions[index]
        target = min(b.id for b in snap.brokers if b.id not in p.replicas)
        moves.append(PartitionMove(p.topic, p.partition, (target, *p.replicas[1:]), (None,) * len(p.replicas)))
    plan = Plan("east", "rebalance", tuple(moves))
    return int(svc.ctx.store.propose({"type": "plan.propose", "meta": meta("alice"), "cluster": "east",
                                      "kind": plan.kind, "plan": plan_to_dict(plan),
                                      "snapshot_taken_at": snap.taken_at.isoformat()})["plan_id"])


def api_post(base: str, path: str, body: dict[str, Any] | None = None) -> Any:
    req = urllib.request.Request(base + path, data=json.dumps(body or {}).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {OPERATOR}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def prometheus_config(controller: str, sim: Sim) -> dict[str, Any]:
    """Prometheus scraping the controller and both exporters of every broker the way the operator's endpoints
    document declares them (https against its CA, basic auth with the password file)."""
    kinds = sim.metrics_kinds()
    endpoints = [(name, b["id"], m) for name, c in sim.endpoints["clusters"].items() for b in c["brokers"]
                 for m in b["metrics"]]
    brokers = [{"targets": [urllib.parse.urlsplit(m["url"]).netloc],
                "labels": {"cluster": name, "broker": str(broker), "exporter": kinds[m["url"]]}}
               for name, broker, m in endpoints]
    # kafkasim stamps samples with its simulated clock (it runs ahead of the wall clock); stock exporters
    # send no timestamps, so ignoring them changes nothing real
    kafka: dict[str, Any] = {"job_name": "kafka", "static_configs": brokers, "honor_timestamps": False}
    first = endpoints[0][2]  # every exporter has the same CA and credentials
    if first["url"].startswith("https://"):
        kafka |= {"scheme": "https", "tls_config": {"ca_file": first["ca_file"]}}
    if first.get("username"):
        kafka["basic_auth"] = {"username": first["username"], "password_file": first["password_file"]}
    return {"global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "guardian", "static_configs": [{"targets": [controller]}]}, kafka]}


def prom_get(prom: str, path: str, **params: Any) -> Any:
    url = f"{prom}{path}?{urllib.parse.urlencode(params)}" if params else prom + path
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read())
    assert body["status"] == "success", (params, body)
    return body["data"]


@contextlib.contextmanager
def prometheus(tmp: Path, config: dict[str, Any]) -> Iterator[str]:
    """A Prometheus process with ``config`` for the ``with`` block; yields its base URL."""
    (port,) = free_ports(1)
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(["prometheus", f"--config.file={path}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp / "prometheus.log").open("wb"))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def targets_up(prom: str) -> bool:
    try:
        active = prom_get(prom, "/api/v1/targets")["activeTargets"]
    except (OSError, ValueError):  # not listening yet, or its plain-text 503 while the TSDB opens
        return False
    return bool(active) and all(t["health"] == "up" for t in active)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (make venv)")
    tmp = tmp_path_factory.mktemp("prom")
    tokens = [TokenConf(name="olga", role="operator", sha256=hash_token(OPERATOR))]
    with start_sim() as sim, served_service(tmp / "guardian", tokens=tokens, intervals=IntervalsConf(
            collect_s=1.0, throttle_s=1.0, executor_s=0.5)) as (svc, base):
        snap = register_and_observe(svc, sim.endpoints, ("east", "west"))["east"]
        ctx = svc.ctx
        ctx.store.propose({"type": "throttle.set", "meta": meta("olga", "noisy consumer"), "cluster": "east",
                           "key": "broker-1-follower", "kind": "broker_follower", "target": {"broker": 1},
                           "rate_bytes_per_s": 20e6, "evidence": {"manual": True}})
        started = time.time()
        with prometheus(tmp, prometheus_config(urllib.parse.urlsplit(base).netloc, sim)) as prom:
            wait_for("Prometheus to scrape every target", lambda: targets_up(prom), 60)
            # an execution while Prometheus scrapes, approved and started through the API
            executed = propose_moves(svc, snap, (0, 1, 2))
            api_post(base, f"/api/v1/plans/{executed}/approve")
            api_post(base, f"/api/v1/plans/{executed}/execute")
            wait_for("the execution's first progress record with bytes copied",
                     lambda: ctx.store.read(lambda s: any((e.get("progress") or {}).get("bytes_done")
                                                          for e in s["executions"].values())), 60)
            time.sleep(12)  # rate windows of 10 s filled, the execution scraped a few times
            yield Live(svc, base, sim, prom, started)


def query_range(live: Live, expr: str) -> list[dict[str, Any]]:
    data = prom_get(live.prom, "/api/v1/query_range", query=expr, start=f"{live.started:.3f}",
                    end=f"{time.time():.3f}", step="1")
    return list(data["result"])


@needs_prometheus
def test_every_dashboard_query_answers_with_data(live: Live) -> None:
    empty = []
    for title, expr in panel_targets():
        result = query_range(live, concrete(expr))  # an error fails in prom_get, naming the query
        if not result:
            empty.append(title)
    assert set(empty) <= set(EMPTY_OK), f"panels without data: {sorted(set(empty) - set(EMPTY_OK))}"


@needs_prometheus
def test_every_series_name_of_the_dashboard_and_rules_exists(live: Live) -> None:
    names = set(prom_get(live.prom, "/api/v1/label/__name__/values"))
    wanted = set().union(*(metric_names(e) for _, e in panel_targets()), *(metric_names(r["expr"]) for r in rules()))
    missing = wanted - names - NAMES_ABSENT_OK
    assert not missing, sorted(missing)


@needs_prometheus
def test_prometheus_evaluates_every_alert_rule_without_error(live: Live) -> None:
    for r in rules():  # each expression answers through the query API (an error fails in prom_get)
        prom_get(live.prom, "/api/v1/query", query=r["expr"])

    def evaluated() -> list[dict[str, Any]]:
        loaded = [r for g in prom_get(live.prom, "/api/v1/rules")["groups"] for r in g["rules"]]
        return loaded if loaded and all(r.get("lastEvaluation", "").startswith("20") for r in loaded) else []

    loaded = wait_for("every rule evaluated once", evaluated, 20)
    assert {r["name"] for r in loaded} == {r["alert"] for r in rules()}
    assert all(r["health"] == "ok" for r in loaded), [(r["name"], r.get("lastError")) for r in loaded]
    # the inputs of the alerts that watch the federation have data (thresholds aside)
    for inputs in ("guardian_snapshot_age_seconds", "guardian_loop_last_run_timestamp_seconds",
                   "guardian_execution_running", "guardian_throttle_rate_bytes_per_second",
                   "guardian_pool_peak_to_mean", "guardian_open_anomalies", "guardian_dead_brokers",
                   "guardian_raft_is_leader", "guardian_disk_util", "guardian_disk_await_seconds"):
        assert query_range(live, inputs), inputs


@needs_prometheus
def test_a_disk_alert_built_from_prometheus_series_is_acted_on_by_the_webhook(live: Live) -> None:
    """What Alertmanager would post for GuardianDiskBusy on the busiest disk: Guardian evaluates that disk."""
    rule = next(r for r in rules() if r["alert"] == "GuardianDiskBusy")
    series = prom_get(live.prom, "/api/v1/query", query="topk(1, guardian_disk_util)")["result"]
    assert series
    labels = {**series[0]["metric"], **rule["labels"], "alertname": rule["alert"]}
    labels.pop("__name__", None)
    payload = {"version": "4", "status": "firing", "receiver": "guardian", "groupLabels": {},
               "alerts": [{"status": "firing", "labels": labels, "annotations": {},
                           "startsAt": "2025-01-01T00:00:00Z", "fingerprint": "deadbeef00000001"}]}
    req = urllib.request.Request(f"{live.base}/api/v1/alerts/alertmanager", data=json.dumps(payload).encode(),
                                 method="POST", headers={"Content-Type": "application/json",
                                                         "Authorization": f"Bearer {OPERATOR}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        answer = json.loads(resp.read())
    assert answer["received"] == 1 and answer["ignored"] == 0, answer
