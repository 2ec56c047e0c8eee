"""``make demo``: Guardian end to end on embedded defaults, with no step by hand.

1. kafkasim: a simulated cluster seeded from a generated skewed snapshot (mixed HDD/NVMe disks, two
   IDCs, heavy-tailed traffic, hot disks, consumers lagging far enough to read from disk), running
   faster than real time on 127.0.0.1, laid out like a real deployment (``sim up --realistic``): SASL_SSL
   listeners (SCRAM-SHA-512, a CA it generates), a JMX exporter and a node_exporter per broker over https
   with basic auth, stock names only, some log dirs on LVM volumes; secrets in 0600 files.
2. A one-node Guardian controller (Raft journal + chdb under ``out/demo/state``) with its REST API on
   a free loopback port; the cluster is registered the way an operator registers one (both endpoints
   of every broker, the Kafka client security settings by file reference, the rack→IDC rule, the hardware
   profile) and opted into auto-rebalance through the API. Its dashboard (``/ui``, token printed) is up
   while the demo runs; ``--keep`` (``make demo DEMO_ARGS=--keep``) keeps it up afterwards until Ctrl-C.
3. The leader's loops act on their own: collection (rollups into chdb), auto-rebalance (plan, approve,
   execute with an adaptive migration throttle) and throttle protection.
4. The before/after of disk load is printed and drawn to ``out/demo/disk-load.png`` (one mean per pool in
   both: total load over total disk throughput); the figures go to ``out/demo/summary.json``.
5. "3 a.m.": a consumer starts replaying a week of a partition led from an HDD; the throttle protection
   throttles that partition's fetches until the disk is back near its target, and releases the throttle
   once the consumer has caught up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from rich.console import Console
from rich.table import Table

from controlplane.bootstrap import Service, build_service
from controlplane.config import ClickHouseConf, IntervalsConf, RaftConf, Settings, TokenConf, hash_token
from controlplane.logs import setup_logging
from controlplane.picture import disk_utils, measured_utils, plot_before_after
from controlplane.report import snapshot_table
from controlplane.state.state import ACTIVE_EXECUTION
from domain import ClusterSnapshot, DiskKind, pool_stats, snapshot_to_dict
from domain.execution import ExecutionStatus
from kafkasim.broker.server import SimRunner
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from kafkasim.scenarios.realistic import operator_endpoints, prepare
from kafkasim.scenarios.scenario import build_federation
from planners.disk_balance import BalanceOptions

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "demo"
TOKEN = "demo-admin-token"  # loopback-only demo
SPEED = 30.0
THRESHOLD = 1.3  # peak/mean estimated disk load within a pool that counts as balanced
FLOOR = BalanceOptions().floor
"""The planner's floor: a pool whose hottest disk is at or under it is idle, its peak/mean noise that Guardian,
auto-rebalance included, leaves alone."""
MOVES_PER_ROUND = 40
SETTLE_ROUNDS = 3  # collection rounds after the last move whose median must be within the threshold
MAX_PARTITION_BYTES = 200 * 10**6


def free_port() -> int:
    """A TCP port free on 127.0.0.1 a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed_snapshot() -> dict[str, Any]:
    """A skewed cluster whose partitions are small enough to move in a demo (≤ 200 MB each)."""
    snap = generate_snapshot(GeneratorSpec(brokers=12, disks_per_broker=3, partitions=240, seed=11,
                                           idcs=("idc-a", "idc-b"), racks_per_idc=3, nvme_fraction=0.25,
                                           target_mean_util=0.15, lagging_fraction=0.02, cluster=CLUSTER))
    largest = max(p.size_bytes for t in snap.topics for p in t.partitions) or 1
    scale = min(1.0, MAX_PARTITION_BYTES / largest)
    topics = tuple(replace(t, partitions=tuple(replace(p, size_bytes=int(p.size_bytes * scale)) for p in t.partitions))
                   for t in snap.topics)
    return snapshot_to_dict(replace(snap, topics=topics))


def settings_for(state: Path) -> Settings:
    """One node, chdb embedded, short loop intervals (the simulator runs 30x real time)."""
    return Settings(data_dir=state, raft=RaftConf(self_addr=f"127.0.0.1:{free_port()}"),
                    tokens=[TokenConf(name="demo", role="admin", sha256=hash_token(TOKEN))],
                    intervals=IntervalsConf(collect_s=2.0, throttle_s=2.0, executor_s=1.0,
                                            auto_rebalance_check_s=3.0),
                    clickhouse=ClickHouseConf(mode="chdb"), max_snapshot_age_s=30.0)


def wait_for(what: str, check: Any, timeout: float, console: Console) -> Any:
    """Poll ``check()`` until it returns something truthy; fail clearly after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    console.print(f"[red]gave up waiting for {what} after {timeout:.0f} s[/]")
    raise SystemExit(1)


def progress_line(api: httpx.Client) -> tuple[str, bool, int]:
    """One status line, whether an execution is still active, and how many have completed."""
    executions = api.get("/api/v1/executions", params={"cluster": CLUSTER}).json()
    kinds: dict[str, int] = {}
    for t in api.get("/api/v1/throttles", params={"cluster": CLUSTER}).json():
        kinds[t["kind"]] = kinds.get(t["kind"], 0) + 1
    in_force = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"
    completed = sum(1 for e in executions if e["status"] == ExecutionStatus.COMPLETED)
    if not executions:
        return f"no execution yet; throttles in force: {in_force}", False, 0
    latest = executions[0]
    states = ", ".join(f"{k} {v}" for k, v in sorted(latest["task_states"].items()))
    line = (f"round {len(executions)}: execution {latest['id']} ({latest['started_by']}) {latest['status']} — "
            f"{states}; throttles: {in_force}")
    return line, latest["status"] in ACTIVE_EXECUTION, completed


def worst_peak_to_mean(snapshot: ClusterSnapshot | None) -> float:
    """The highest peak/mean estimated disk load over the cluster's pools (inf without a snapshot)."""
    if snapshot is None:
        return float("inf")
    return max((s.peak_to_mean for s in pool_stats(snapshot).values()), default=0.0)


def replay_act(sim: SimRunner, service: Service, api: httpx.Client, snapshot: ClusterSnapshot,
               console: Console, timeout_s: float = 90.0) -> dict[str, Any]:
    """3 a.m.: a consumer starts replaying a week of the busiest partition led from an HDD. Returns what the
    throttle protection did: the disk's measured util before / at its worst / once throttled, the
    seconds until a throttle was in force, and whether it was released after the replay stopped."""
    index = snapshot.index
    led = [(p.bytes_in_per_s, t.name, p.partition, (p.leader, p.log_dirs[p.replicas.index(p.leader)]))
           for t in snapshot.topics for p in t.partitions if p.leader is not None and p.leader in p.replicas]
    hdd_led = [c for c in led if index.disk_by_id[c[3]].kind == DiskKind.HDD]
    if not hdd_led:
        return {"skipped": "no partition is led from an HDD"}
    _, topic, partition, disk = max(hdd_led)
    console.rule("3 a.m.: a consumer replays a week of data")
    console.print(f"a consumer of {topic}-{partition} falls ~1 TB behind and catches up at 400 MB/s from "
                  f"broker {disk[0]} {disk[1]} (HDD); auto-rebalance is paused so only the throttle acts",
                  markup=False)
    api.put(f"/api/v1/clusters/{CLUSTER}/auto-rebalance", json={"enabled": False}).raise_for_status()

    def disk_util() -> float:
        snap = service.ctx.snapshots.get(CLUSTER)
        found = snap.index.disk_by_id.get(disk) if snap is not None else None
        return found.util if found is not None else float("nan")

    def fetch_throttles() -> list[dict[str, Any]]:
        return [t for t in api.get("/api/v1/throttles", params={"cluster": CLUSTER}).json()
                if t["kind"] == "partition_fetch" and f"{topic}:{partition}" in str(t.get("key", ""))]

    before = disk_util()
    start = time.monotonic()
    sim.call(lambda: sim.server.lagging_consumer(CLUSTER, topic, partition, 1e12, 400e6))
    worst: float = before
    throttled_after: float | None = None
    utils_throttled: list[float] = []
    while time.monotonic() - start < timeout_s and len(utils_throttled) < 4:
        time.sleep(2.0)
        util = disk_util()
        worst = max(worst, util)
        if fetch_throttles():
            throttled_after = throttled_after or time.monotonic() - start
            utils_throttled.append(util)
        console.print(f"[{time.strftime('%H:%M:%S')}] disk util {util:.2f}; fetch throttle on {topic}-{partition}: "
                      f"{'in force' if throttled_after else 'none yet'}", markup=False)
    sim.call(lambda: sim.server.lagging_consumer(CLUSTER, topic, partition, 0.0, 0.0))  # caught up
    released = wait_released(fetch_throttles, 60.0)
    settled = sorted(utils_throttled[1:]) or [float("nan")]
    result = {"partition": f"{topic}-{partition}", "disk": f"{disk[0]}:{disk[1]}", "util_before": before,
              "util_worst": worst, "util_throttled_median": settled[len(settled) // 2],
              "throttled_after_s": throttled_after, "released_after_replay": released}
    console.print(f"disk util {before:.2f} before, {worst:.2f} at worst, {result['util_throttled_median']:.2f} "
                  f"while throttled; throttle in force {throttled_after or float('nan'):.0f} s after the replay "
                  f"began; {'released' if released else 'NOT released'} once the consumer caught up", markup=False)
    return result


def wait_released(in_force: Any, timeout_s: float) -> bool:
    """Poll until ``in_force()`` is empty; False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not in_force():
            return True
        time.sleep(1.0)
    return False


def wait_balanced(service: Service, api: httpx.Client, console: Console, timeout_s: float,
                  every_s: float, floor: float = FLOOR) -> list[ClusterSnapshot]:
    """Print each round's progress until auto-rebalance has :func:`balanced` the cluster or ``timeout_s``; returns
    the distinct snapshots taken since the last execution ended."""
    deadline = time.monotonic() + timeout_s
    settled: list[ClusterSnapshot] = []
    last = ""
    while time.monotonic() < deadline and not balanced(settled, floor):
        line, active, completed = progress_line(api)
        snap = service.ctx.snapshots.get(CLUSTER)
        if active or not completed or snap is None:
            settled.clear()
        elif not settled or settled[-1] is not snap:
            settled.append(snap)
        line += f"; peak/mean now {worst_peak_to_mean(snap):.2f}"
        if line != last:
            console.print(f"[{time.strftime('%H:%M:%S')}] {line}", markup=False)
            last = line
        time.sleep(every_s)
    return settled


def worst_busy_peak_to_mean(snapshot: ClusterSnapshot, floor: float = FLOOR) -> float:
    """The highest peak/mean over the pools whose hottest disk is above ``floor`` (0 when none)."""
    return max((s.peak_to_mean for s in pool_stats(snapshot).values() if s.max_util > floor), default=0.0)


def balanced(settled: list[ClusterSnapshot], floor: float = FLOOR) -> bool:
    """Balanced: the median peak/mean of the last ``SETTLE_ROUNDS`` snapshots, all taken after the last
    execution ended, is within the threshold in every pool above ``floor`` (one round's noise neither ends nor
    prolongs the demo)."""
    recent = sorted(worst_busy_peak_to_mean(s, floor) for s in settled[-SETTLE_ROUNDS:])
    return len(recent) == SETTLE_ROUNDS and recent[len(recent) // 2] <= THRESHOLD


def representative(settled: list[ClusterSnapshot]) -> ClusterSnapshot:
    """The snapshot with the median peak/mean among the last ``SETTLE_ROUNDS``."""
    recent = sorted(settled[-SETTLE_ROUNDS:], key=worst_peak_to_mean)
    return recent[len(recent) // 2]


def figures(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """Per-pool estimated utilisation figures and the disks' measured util."""
    return {"pools": {p: {"max_util": s.max_util, "mean_util": s.mean_util, "peak_to_mean": s.peak_to_mean}
                      for p, s in pool_stats(snapshot).items()},
            "measured_max_util": max(d.util for b in snapshot.brokers for d in b.disks)}


def before_after_table(before: dict[str, Any], after: dict[str, Any], measured_by: str = "simulated") -> Table:
    table = Table(title="disk load before and after Guardian acted")
    for col in ("pool", "max util before", "max util after", "mean util after", "peak/mean before",
                "peak/mean after"):
        table.add_column(col, justify="left" if col == "pool" else "right")
    for pool, b in before["pools"].items():
        a = after["pools"].get(pool, b)
        table.add_row(pool, f"{b['max_util']:.2f}", f"{a['max_util']:.2f}", f"{a['mean_util']:.2f}",
                      f"{b['peak_to_mean']:.2f}", f"{a['peak_to_mean']:.2f}")
    table.caption = (f"measured ({measured_by}) disk util, hottest disk: {before['measured_max_util']:.2f} -> "
                     f"{after['measured_max_util']:.2f}")
    return table


def real_kafka_note() -> str:
    """The act on real Kafka brokers (``make demo-kafka``) is not part of ``make demo``: what it needs, and
    how to get it when Java is missing."""
    if shutil.which("java") is None:
        return ("skipped: the same acts on real Apache Kafka brokers (make demo-kafka) need Java, which is not on "
                "PATH: install a JRE 17+ (as root: apt-get install default-jre-headless), then run make demo-kafka "
                "(as root, for the brokers' loop-device disks)")
    return "next: make demo-kafka runs the auto-rebalance act on real Apache Kafka brokers (as root: loop devices)"


def table_means(after: dict[str, Any]) -> dict[str, float]:
    """Pool -> the "mean util" :func:`before_after_table` prints (the picture draws these, and no other)."""
    return {pool: float(f["mean_util"]) for pool, f in after["pools"].items()}


def registration(cluster: dict[str, Any]) -> dict[str, Any]:
    """What an operator registers for the simulated cluster: one cluster of ``sim up --realistic``'s endpoints
    document (bootstrap servers, security settings by file reference, both metrics endpoints of every broker,
    the rack→IDC rule and the hardware profile)."""
    return {"name": CLUSTER, **cluster, "bootstrap_servers": cluster["bootstrap_servers"].split(",")}


def main(out_dir: Path = ROOT / "out" / "demo", timeout_s: float = 300.0, keep: bool = False) -> int:
    """Run the demo; returns the exit code: 0 when auto-rebalance brought every pool's peak/mean disk load
    within the threshold before ``timeout_s`` and the throttle protection acted on the replay. ``keep``
    (``--keep``): the controller and its dashboard stay up after the demo until Ctrl-C."""
    console = Console(width=max(120, Console().width))
    setup_logging("WARNING")
    for noisy in ("asyncio", "kafka"):  # client reconnects and the simulator's shutdown are not news here
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = out_dir / "state"
    if state.exists():  # every demo run starts from an empty controller
        shutil.rmtree(state)
    console.rule("Guardian demo")
    fed = build_federation({"seed": 11, "speed": SPEED, "tick_seconds": 1.0,
                            "clusters": [{"snapshot": seed_snapshot(), "partition_throttle": True,
                                          "topic_configs": {"retention.bytes": str(MAX_PARTITION_BYTES)}}]})
    setup = prepare(out_dir / "sim", "demo")
    sim = SimRunner(fed, security=setup.security, metrics=setup.metrics)
    endpoints = operator_endpoints(sim.start(), fed, setup)["clusters"][CLUSTER]
    sec = endpoints["security"]
    console.print(f"kafkasim: cluster {CLUSTER!r} on {endpoints['bootstrap_servers'].split(',')[0]} ... "
                  f"({len(endpoints['brokers'])} brokers, {SPEED:.0f}x real time; {sec['protocol']} "
                  f"{sec.get('sasl_mechanism', '')}, metrics over https with basic auth)", markup=False)
    service: Service | None = None
    server: uvicorn.Server | None = None
    try:
        service = build_service(settings_for(state))
        service.store.node.wait_ready(10)
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(service.app, host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=server.run, name="demo-http", daemon=True).start()
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}",
                                                                         "X-Guardian-Reason": "make demo"})
        wait_for("the API", lambda: _up(api), 20, console)
        console.print(f"dashboard: http://127.0.0.1:{port}/ui  (paste the token {TOKEN!r}; API docs at /docs) — "
                      f"up while the demo runs{'' if keep else ', it stops when the demo ends (--keep keeps it)'}",
                      markup=False)
        api.post("/api/v1/clusters", json=registration(endpoints)).raise_for_status()
        service.scheduler.start()
        before = wait_for("the first usable snapshot", lambda: service.ctx.snapshots.get(CLUSTER), 60, console)
        console.print(snapshot_table(before))
        console.print(f"opting the cluster into auto-rebalance (window: now, threshold peak/mean {THRESHOLD}, "
                      f"at most {MOVES_PER_ROUND} partitions per round)", markup=False)
        api.put(f"/api/v1/clusters/{CLUSTER}/auto-rebalance",
                json={"enabled": True, "window_cron": "* * * * *", "window_minutes": 30,
                      "threshold": THRESHOLD, "max_partitions": MOVES_PER_ROUND}).raise_for_status()
        settled = wait_balanced(service, api, console, timeout_s, every_s=1.0)
        if not balanced(settled):
            console.print(f"[red]not balanced within {timeout_s:.0f} s[/]")
            service.collection(service.ctx)  # the figures below are then of the latest assignment
            settled = [s for s in (service.ctx.snapshots.get(CLUSTER),) if s is not None]
        after = representative(settled)
        console.print("peak/mean of the last rounds after the final move: "
                      + ", ".join(f"{worst_peak_to_mean(s):.2f}" for s in settled[-SETTLE_ROUNDS:]), markup=False)
        summary = {"balanced": balanced(settled), "threshold": THRESHOLD,
                   "settled_peak_to_mean": [worst_peak_to_mean(s) for s in settled[-SETTLE_ROUNDS:]],
                   "before": figures(before), "after": figures(after),
                   "executions": api.get("/api/v1/executions").json()}
        console.print(before_after_table(summary["before"], summary["after"]))
        idle = [p for p, f in summary["after"]["pools"].items()
                if f["max_util"] <= FLOOR and f["peak_to_mean"] > THRESHOLD]
        if idle:
            console.print(f"pools {', '.join(idle)}: hottest disk at or under the {FLOOR:.2f} util floor — idle, their "
                          "peak/mean is noise Guardian leaves alone", markup=False)
        picture = plot_before_after(disk_utils(before), disk_utils(after), out_dir / "disk-load.png",
                                    f"cluster {CLUSTER}: estimated disk utilisation before / after",
                                    means=table_means(summary["after"]),
                                    measured=(measured_utils(before), measured_utils(after)))
        summary["replay"] = replay_act(sim, service, api, after, console)
        throttles = [a for a in api.get("/api/v1/actions", params={"limit": 5000}).json()
                     if a["who"] == "throttle-protection"]
        summary["throttle_actions"] = throttles
        console.print(f"throttle protection: {len(throttles)} action(s) recorded in the whole run"
                      + (f", e.g. {throttles[-1]['type']} {throttles[-1]['subject']}" if throttles else ""),
                      markup=False)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        console.print(f"picture: {picture}\nsummary: {out_dir / 'summary.json'}", markup=False)
        protected = summary["replay"].get("throttled_after_s") is not None or "skipped" in summary["replay"]
        code = 0 if balanced(settled) and protected else 1
        console.print(real_kafka_note(), markup=False)
        if keep:
            console.print(f"demo done (exit code {code}); the dashboard stays at http://127.0.0.1:{port}/ui until "
                          "Ctrl-C", markup=False)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(1.0)
        else:
            console.print("the demo's controller has stopped (to look around afterwards: make demo DEMO_ARGS=--keep)",
                          markup=False)
        return code
    finally:
        if server is not None:
            server.should_exit = True
        if service is not None:
            service.close()
        sim.stop()


def _up(api: httpx.Client) -> bool:
    try:
        return api.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main(keep="--keep" in sys.argv[1:]))
