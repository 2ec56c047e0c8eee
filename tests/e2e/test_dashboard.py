"""The dashboard in a real headless Chromium (Debian's ``chromium`` driven by Playwright, no ``playwright install``)
against a controller observing a kafkasim federation: every page renders the controller's data, the console
stays clean, no request goes to any host but the controller, and through the page (each button only for a role
that may use it, each confirmed with a reason that reaches the action log): an operator approves a plan,
executes one at a fixed rate and stops it (without, then with rollback) and removes a manual throttle; an
admin pauses and resumes auto-rebalance.

With ``GUARDIAN_SCREENSHOTS=docs/screenshots`` the screenshots are written there (README shows them);
otherwise under the test's temporary directory."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from controlplane.bootstrap import Service
from controlplane.config import IntervalsConf, TokenConf, hash_token
from controlplane.state.commands import meta
from domain import ClusterSnapshot, PartitionMove, Plan, plan_to_dict
from kafkasim.broker.server import SimRunner
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from tests.support.kafkasim_support import start_sim
from tests.support.service_ports import executor_of
from tests.support.service_support import register_and_observe, served_service, wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWER, OPERATOR, ADMIN = "viewer-token-0123456789", "operator-token-0123456789", "admin-token-0123456789"

sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (make venv installs it)", allow_module_level=True)


@dataclass
class Controller:
    service: Service
    base: str
    sim: SimRunner


def propose_move(svc: Service, snap: ClusterSnapshot, index: int) -> int:
    """Propose a plan moving one replica of ``orders`` partition ``index`` to a broker without one."""
    p = snap.index.topic_by_name["orders"].partitions[index]
    target = min(b.id for b in snap.brokers if b.id not in p.replicas)
    plan = Plan("east", "rebalance", (PartitionMove(p.topic, p.partition, (target, *p.replicas[1:]),
                                                    (None,) * len(p.replicas)),))
    return int(svc.ctx.store.propose({"type": "plan.propose", "meta": meta("alice"), "cluster": "east",
                                      "kind": plan.kind, "plan": plan_to_dict(plan),
                                      "snapshot_taken_at": snap.taken_at.isoformat()})["plan_id"])


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    tokens = [TokenConf(name="viewer", role="viewer", sha256=hash_token(VIEWER)),
              TokenConf(name="olga", role="operator", sha256=hash_token(OPERATOR)),
              TokenConf(name="ada", role="admin", sha256=hash_token(ADMIN))]
    with start_sim() as sim, served_service(tmp_path_factory.mktemp("ui"), tokens=tokens, intervals=IntervalsConf(
            collect_s=1.0, throttle_s=1.0, executor_s=0.5)) as (svc, base):
        snap = register_and_observe(svc, sim.endpoints, ("east", "west"))["east"]
        ctx = svc.ctx
        # an execution: approved by the API's rules, run by the service's executor
        executed = propose_move(svc, snap, 0)
        ctx.store.propose({"type": "plan.approve", "meta": meta("olga"), "plan_id": executed})
        executor_of(ctx).start_approved(executed)
        wait_for("the execution's first progress record",
                 lambda: ctx.store.read(lambda s: any(e.get("progress") for e in s["executions"].values())), 30)
        # a throttle in force with its reason, and a plan waiting for review
        ctx.store.propose({"type": "throttle.set", "meta": meta("olga", "noisy consumer during the copy"),
                           "cluster": "east", "key": "broker-1-follower", "kind": "broker_follower",
                           "target": {"broker": 1}, "rate_bytes_per_s": 20e6, "evidence": {"manual": True}})
        propose_move(svc, snap, 1)
        yield Controller(svc, base, sim)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("GUARDIAN_SCREENSHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Browser:
    page: Any
    console_errors: list[str]
    requests: list[str]


@pytest.fixture()
def browser(controller: Controller) -> Iterator[Browser]:
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = chromium.new_context(viewport={"width": 1400, "height": 900}).new_page()
            seen = Browser(page, [], [])
            page.on("console", lambda m: seen.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: seen.console_errors.append(str(e)))
            page.on("request", lambda r: seen.requests.append(r.url))
            yield seen
        finally:
            chromium.close()
    hosts = {urlsplit(u).netloc for u in seen.requests if not u.startswith(("data:", "blob:"))}
    assert hosts == {urlsplit(controller.base).netloc}, hosts
    assert seen.console_errors == [], seen.console_errors


def sign_in(b: Browser, base: str, token: str) -> None:
    b.page.goto(base + "/")  # redirects to /ui
    assert b.page.url.endswith("/ui")
    b.page.fill("#token", token)
    b.page.click("#login button[type=submit]")
    b.page.wait_for_selector("text=Federation")


def test_every_page_renders_the_controllers_data(controller: Controller, browser: Browser, shots: Path) -> None:
    page, base = browser.page, controller.base
    sign_in(browser, base, VIEWER)
    rows = page.locator("#view table").first.locator("tbody tr")  # the federation table (anomalies follow)
    assert rows.count() == 2
    east = rows.filter(has_text="east")
    assert "max " in east.inner_text() and "shared" in east.inner_text()  # imbalance per pool
    assert "disks" in east.inner_text() and "partitions" in east.inner_text()  # coverage
    page.screenshot(path=str(shots / "overview.png"), full_page=True)

    page.click("text=east")
    page.wait_for_selector("#heatmap .cell")
    cells = page.locator("#heatmap .cell")
    assert cells.count() == 4 * 3  # east: 4 brokers x 3 log dirs, hottest first
    kinds = page.locator("#heatmap .badge").all_inner_texts()
    assert "HDD" in kinds and "NVME" in kinds
    utils = [float(t.split("est ")[1].split("%")[0]) for t in cells.all_inner_texts()]
    assert utils == sorted(utils, reverse=True) and utils[0] > 0
    page.screenshot(path=str(shots / "heatmap.png"), full_page=True)

    page.click("#nav >> text=Executions")
    page.wait_for_selector("#view h1:text-is('Executions')")
    first = page.locator("#view table tbody tr").first
    assert "east" in first.inner_text()
    first.locator("a").first.click()
    page.wait_for_selector("text=copy rate")
    assert "orders:0" in page.locator("#view").inner_text()
    assert page.locator("#view .bar").count() >= 2  # the execution's bar and a task's
    page.screenshot(path=str(shots / "execution.png"), full_page=True)

    page.click("#nav >> text=Throttles")
    page.wait_for_selector("text=broker-1-follower")
    assert "noisy consumer during the copy" in page.locator("#view").inner_text()
    assert "20.0 MB/s" in page.locator("#view").inner_text()
    page.screenshot(path=str(shots / "throttles.png"), full_page=True)

    page.click("#nav >> text=Action log")
    page.wait_for_selector("text=plan.propose")
    assert "throttle.set" in page.locator("#view").inner_text()
    page.screenshot(path=str(shots / "actions.png"), full_page=True)

    page.goto(base + "/docs")
    assert "Guardian" in page.locator(".swagger-ui .info .title").inner_text()  # served offline
    page.wait_for_selector('.opblock-summary-path[data-path="/api/v1/overview"]')
    page.screenshot(path=str(shots / "docs.png"))


def test_an_operator_approves_a_plan_through_the_page(controller: Controller, browser: Browser,
                                                      shots: Path) -> None:
    page, base = browser.page, controller.base
    sign_in(browser, base, OPERATOR)
    page.click("#nav >> text=Plans")
    page.wait_for_selector("#view h1:text-is('Plans')")
    proposed = page.locator("#view table tbody tr", has_text="proposed")
    assert proposed.count() == 1
    proposed.locator("a").first.click()
    page.wait_for_selector("#approve")
    text = page.locator("#view").inner_text()
    assert "Before / after per pool" in text and "replicas now" in text and "orders:1" in text
    page.screenshot(path=str(shots / "plan.png"), full_page=True)
    page.once("dialog", lambda d: d.accept("reviewed on the dashboard"))
    page.click("#approve")
    page.wait_for_function("document.getElementById('plan-status')?.textContent === 'approved'")
    plans = controller.service.ctx.store.read(lambda s: [p for p in s["plans"].values() if p["status"] == "approved"
                                                          and p["decided_by"] == "olga"])
    assert any(p["plan"]["reassignment"]["partitions"][0]["partition"] == 1 for p in plans)
    approved = controller.service.ctx.store.read(
        lambda s: [a for a in s["actions"] if a["type"] == "plan.approve" and a["who"] == "olga"])
    assert approved[-1]["why"] == "reviewed on the dashboard"


def test_a_1000_broker_cluster_renders_its_hottest_log_dirs(controller: Controller, browser: Browser) -> None:
    ctx = controller.service.ctx
    big = generate_snapshot(GeneratorSpec(cluster="big", brokers=1000, disks_per_broker=4, partitions=6000, seed=7))
    ctx.store.propose({"type": "cluster.register", "meta": meta("admin"), "name": "big",
                       "bootstrap_servers": ["127.0.0.1:1"]})
    ctx.snapshots.put(big, observed_at=datetime.now(UTC))
    sign_in(browser, controller.base, VIEWER)
    assert browser.page.locator("#view table tbody tr", has_text="big").count() == 1
    start = time.monotonic()
    browser.page.goto(controller.base + "/ui#/cluster/big")
    browser.page.wait_for_selector("#heatmap .cell")
    elapsed = time.monotonic() - start
    assert browser.page.locator("#heatmap .cell").count() == 600
    assert "3400 cooler log dirs not drawn" in browser.page.locator("#view").inner_text()
    print(f"\nheat map of 1,000 brokers x 4 log dirs: {elapsed:.2f} s to first render")
    assert elapsed < 10


def actions_of(controller: Controller, kind: str, who: str) -> list[dict[str, Any]]:
    return list(controller.service.ctx.store.read(
        lambda s: [dict(a) for a in s["actions"] if a["type"] == kind and a["who"] == who]))


def execution_of(controller: Controller, eid: int) -> dict[str, Any]:
    return dict(controller.service.ctx.store.read(lambda s: dict(s["executions"][str(eid)])))


def no_execution_running(controller: Controller) -> bool:
    return bool(controller.service.ctx.store.read(lambda s: not any(
        e["status"] in ("pending", "running", "stopping") for e in s["executions"].values()
        if e["cluster"] == "east")))


def test_an_operator_executes_a_plan_and_stops_it_without_then_with_rollback(controller: Controller,
                                                                             browser: Browser, shots: Path) -> None:
    svc, page = controller.service, browser.page
    wait_for("the fixture's execution to end", lambda: no_execution_running(controller), 120)
    snap = svc.ctx.snapshots.get("east")
    assert snap is not None
    plan_id = propose_move(svc, snap, 2)
    svc.ctx.store.propose({"type": "plan.approve", "meta": meta("bob"), "plan_id": plan_id})
    sign_in(browser, controller.base, OPERATOR)
    page.goto(controller.base + f"/ui#/plans/{plan_id}")
    page.wait_for_selector("#execute")
    assert page.locator("#approve").count() == 0  # approved: only Execute is offered
    page.fill("#execute-rate", "1k")  # 1 kB/s: the copy stays in flight while the test stops it
    page.once("dialog", lambda d: d.accept("slow copy, to be stopped"))
    page.click("#execute")
    page.wait_for_selector("#stop")
    page.screenshot(path=str(shots / "execution-stop.png"), full_page=True)
    eid = int(page.url.rsplit("/", 1)[1])
    started = execution_of(controller, eid)
    assert started["plan_id"] == plan_id and started["started_by"] == "olga"
    assert started["options"]["throttle"]["mode"] == "fixed"

    page.once("dialog", lambda d: d.dismiss())  # cancelled: nothing is sent
    page.click("#stop")
    time.sleep(0.5)
    assert execution_of(controller, eid)["status"] == "running"
    assert actions_of(controller, "execution.stop", "olga") == []

    page.once("dialog", lambda d: d.accept("stop: no new moves"))
    page.click("#stop")
    page.wait_for_function("document.getElementById('execution-status')?.textContent === 'stopping'")
    assert execution_of(controller, eid)["rollback"] is False
    assert page.locator("#stop").count() == 0 and page.locator("#stop-rollback").count() == 1

    page.once("dialog", lambda d: d.accept("roll the copy back"))
    page.click("#stop-rollback")
    wait_for("the rollback to end the execution", lambda: execution_of(controller, eid)["status"] not in (
        "running", "stopping"), 90)
    ended = execution_of(controller, eid)
    assert ended["rollback"] is True and ended["status"] == "stopped", ended["status"]  # not completed: rolled back
    assert any(t["state"] == "ABORTED" for t in ended["tasks"].values()), ended["tasks"]
    stops = actions_of(controller, "execution.stop", "olga")
    assert [a["why"] for a in stops] == ["stop: no new moves", "roll the copy back"]
    page.wait_for_function("!['running', 'stopping'].includes("
                           "document.getElementById('execution-status')?.textContent.split(' ')[0])", timeout=20000)
    assert page.locator("#stop-rollback").count() == 0


def test_buttons_follow_the_role_and_an_operator_removes_a_manual_throttle(controller: Controller,
                                                                          browser: Browser) -> None:
    ctx, page = controller.service.ctx, browser.page
    ctx.store.propose({"type": "throttle.set", "meta": meta("olga", "manual, to be removed"), "cluster": "west",
                       "key": "broker-2-follower", "kind": "broker_follower", "target": {"broker": 2},
                       "rate_bytes_per_s": 10e6, "evidence": {"manual": True}})
    sign_in(browser, controller.base, VIEWER)
    page.click("#nav >> text=Throttles")
    page.wait_for_selector("text=broker-2-follower")
    assert page.locator("#view button").count() == 0  # a viewer sees no action
    page.click("#signout")
    sign_in(browser, controller.base, OPERATOR)
    page.click("#nav >> text=Throttles")
    page.wait_for_selector("#remove-west-broker-2-follower")
    page.once("dialog", lambda d: d.accept("the consumer is fixed"))
    page.click("#remove-west-broker-2-follower")
    page.wait_for_selector("#remove-west-broker-2-follower", state="detached")
    assert ctx.store.read(lambda s: "broker-2-follower" not in s["throttles"].get("west", {}))
    assert actions_of(controller, "throttle.clear", "olga")[-1]["why"] == "the consumer is fixed"
    page.goto(controller.base + "/ui#/")
    page.wait_for_selector("text=Federation")
    assert page.locator("#view button[id^=auto-]").count() == 0  # pausing auto-rebalance needs admin


def test_an_admin_pauses_and_resumes_auto_rebalance(controller: Controller, browser: Browser) -> None:
    ctx, page = controller.service.ctx, browser.page
    ctx.store.propose({"type": "cluster.auto_rebalance", "meta": meta("ada"), "name": "west", "enabled": True,
                       "window_cron": "0 3 * * *", "window_minutes": 120, "threshold": 1.4, "max_partitions": 20,
                       "load_basis": "window"})
    sign_in(browser, controller.base, ADMIN)
    page.wait_for_selector("#auto-west:text-is('Pause')")
    page.once("dialog", lambda d: d.accept("release freeze"))
    page.click("#auto-west")
    page.wait_for_selector("#auto-west:text-is('Resume')")
    policy = ctx.store.read(lambda s: dict(s["clusters"]["west"]["auto_rebalance"]))
    assert policy == {"enabled": False, "window_cron": "0 3 * * *", "window_minutes": 120, "threshold": 1.4,
                      "max_partitions": 20, "load_basis": "window"}  # only enabled changed
    page.once("dialog", lambda d: d.accept("freeze over"))
    page.click("#auto-west")
    page.wait_for_selector("#auto-west:text-is('Pause')")
    assert ctx.store.read(lambda s: s["clusters"]["west"]["auto_rebalance"]["enabled"]) is True
    assert [a["why"] for a in actions_of(controller, "cluster.auto_rebalance", "ada")][-2:] == [
        "release freeze", "freeze over"]
