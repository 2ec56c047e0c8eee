"""One controller group, twenty clusters, some of them broken: leadership stays put, healthy rounds stay on time.

Goal (issue 32): a 3-node group governs 20 clusters for 10 minutes without a leader change while each healthy
cluster's collection round stays on time. The 20: 14 healthy kafkasim clusters; 3 whose bootstrap port is
closed; 2 whose connections hang (a listening socket that never accepts: the handshake's SYNs are dropped once
its backlog is full); 1 healthy cluster whose exporters answer only after 8 s (a proxy that sleeps).

Method: a kafkasim federation of 15 small clusters in this process (3 brokers, one 6-partition topic each,
PLAINTEXT), three ``guardian serve`` processes (real pysyncobj) with default intervals (collection 10 s,
executor and throttle 5 s, auto-rebalance checked every 60 s). Phase 1 (baseline, same run): only the 14
healthy clusters registered, for ``--baseline-s``. Phase 2: the other 6 registered, for ``--minutes``. Every
0.5 s each node's Raft status is read (leader changes: a different leader or term seen); every 2 s the
leader's ``/metrics`` gives each cluster's ``guardian_snapshot_age_seconds``. Reported per phase: leader
changes, the healthy clusters' snapshot age (median, p99, max over samples and clusters: the round period
plus the round's own time), the collection loop's pass time; at the end each broken cluster's ``last_error``
and the log lines the nodes wrote in phase 2 by level.

Run: ``python -m benchmarks bench_federation`` (10 minutes; ``--minutes 2`` for a quick look). Writes
``out/bench/federation.json``. Cost: ~12 minutes wall, three service processes plus this one.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import re
import socket
import statistics
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from controlplane.launcher import ServiceCluster, free_ports
from kafkasim.broker.server import SimRunner
from kafkasim.scenarios.scenario import build_federation

HEALTHY = 14
INTERVAL_S = 10.0
AGE_TARGET_S = 2 * INTERVAL_S
"""On time: a healthy cluster's snapshot is never older than two collection intervals."""


def federation_spec(count: int) -> dict[str, Any]:
    clusters = [{"name": f"h{i:02d}", "brokers": [{"count": 3, "idcs": ["idc-a"], "racks_per_idc": 3, "memory_gb": 8,
                                                   "disks": [{"count": 2, "kind": "ssd"}]}],
                 "topics": [{"name": "orders", "partitions": 6, "rf": 3, "bytes_in_per_s": 200_000, "size_gb": 1}]}
                for i in range(count)]
    return {"seed": 7, "speed": 1.0, "tick_seconds": 1.0, "clusters": clusters}


def registration(doc: dict[str, Any], metrics_via: str | None = None) -> dict[str, Any]:
    brokers = []
    for b in doc["brokers"]:
        metrics = [m["url"] if metrics_via is None else metrics_via + "/" + m["url"] for m in b["metrics"]]
        brokers.append({"id": b["id"], "metrics": metrics})
    return {"bootstrap_servers": doc["bootstrap_servers"].split(","), "brokers": brokers,
            "rack_to_idc": doc["rack_to_idc"], "hardware": doc["hardware"]}


class SlowProxy(http.server.ThreadingHTTPServer):
    """GET /<url> answers ``url``'s body after ``delay_s`` (an exporter that takes 8 s to answer)."""

    daemon_threads = True

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                time.sleep(proxy.delay_s)
                try:
                    with urllib.request.urlopen(self.path.lstrip("/"), timeout=10) as resp:
                        body = resp.read()
                except OSError:
                    self.send_error(502)
                    return
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the scraper gave up first

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def black_holes(count: int) -> list[socket.socket]:
    """Listening sockets that never accept: once their backlog is full, connection attempts hang."""
    out = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(0)
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # fill the backlog
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(s.getsockname())
        out += [s, filler]
    return out


class Watch:
    """Polls every node's Raft status (leader changes) and the leader's /metrics (snapshot ages)."""

    def __init__(self, cluster: ServiceCluster) -> None:
        self.cluster = cluster
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.leaders: list[tuple[float, str, int]] = []
        self.ages: dict[str, list[float]] = {}
        self.collect_pass_s: list[float] = []
        self.phase = "baseline"
        self.changes: Counter[str] = Counter()
        self.threads = [threading.Thread(target=self._raft, daemon=True),
                        threading.Thread(target=self._metrics, daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _raft(self) -> None:
        last: tuple[str, int] | None = None
        while not self.stop.wait(0.5):
            seen = [self.cluster.status(n) for n in list(self.cluster.procs)]
            leaders = {(str(s.get("leader")), int(s.get("term") or 0)) for s in seen if s and s.get("is_leader")}
            if len(leaders) != 1:
                continue
            now = next(iter(leaders))
            if last is not None and now != last:
                with self.lock:
                    self.changes[self.phase] += 1
                    self.leaders.append((time.time(), str(now[0]), now[1]))
            last = now

    def leader_node(self) -> int | None:
        for n in list(self.cluster.procs):
            st = self.cluster.status(n)
            if st and st.get("is_leader"):
                return n
        return None

    def _metrics(self) -> None:
        age = re.compile(r'^guardian_snapshot_age_seconds\{cluster="([^"]+)"\} (\S+)$', re.M)
        passes = re.compile(r'^guardian_loop_duration_seconds_(sum|count)\{loop="collect"\} (\S+)$', re.M)
        last_pass: tuple[float, float] | None = None
        while not self.stop.wait(2.0):
            node = self.leader_node()
            if node is None:
                continue
            try:
                with urllib.request.urlopen(self.cluster.url(node) + "/metrics", timeout=5) as resp:
                    text = resp.read().decode()
            except OSError:
                continue
            with self.lock:
                for name, value in age.findall(text):
                    self.ages.setdefault(f"{self.phase}:{name}", []).append(float(value))
                got = dict(passes.findall(text))
                if "sum" in got and "count" in got:
                    now = (float(got["sum"]), float(got["count"]))
                    if last_pass is not None and now[1] > last_pass[1]:
                        self.collect_pass_s.append((now[0] - last_pass[0]) / (now[1] - last_pass[1]))
                    last_pass = now


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def log_levels(root: Path, since: dict[int, int]) -> dict[str, int]:
    levels: Counter[str] = Counter()
    for node, offset in since.items():
        with (root / f"node{node}.log").open("rb") as f:
            f.seek(offset)
            for line in f.read().decode(errors="replace").splitlines():
                m = re.match(r"^\S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ", line)
                levels[m.group(1) if m else "other"] += 1
    return dict(levels)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--baseline-s", type=float, default=120.0)
    ap.add_argument("--keep", type=Path, default=None, help="keep the nodes' data and logs under this directory")
    args = ap.parse_args(argv)
    sim = SimRunner(build_federation(federation_spec(HEALTHY + 1)))
    doc = sim.start()
    proxy = SlowProxy(8.0)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    holes = black_holes(2)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        cluster = ServiceCluster(root, intervals={"auto_rebalance_check_s": 60.0})
        cluster.start_all()
        watch = Watch(cluster)
        try:
            leader = cluster.leader(timeout=60)
            clusters = doc["clusters"]
            for i in range(HEALTHY):
                name = f"h{i:02d}"
                code, body = cluster.request(leader, "POST", "/api/v1/clusters?probe=false",
                                             {"name": name, **registration(clusters[name])})
                assert code == 201, (code, body)
            watch.start()
            time.sleep(args.baseline_s)
            broken = {f"closed{i}": {"bootstrap_servers": [f"127.0.0.1:{p}"]} for i, p in enumerate(free_ports(3))}
            for i in range(2):
                host, port = holes[2 * i].getsockname()
                broken[f"dropped{i}"] = {"bootstrap_servers": [f"{host}:{port}"]}
            broken["slow-exporters"] = registration(clusters[f"h{HEALTHY:02d}"], metrics_via=proxy.base)
            offsets = {n: (root / f"node{n}.log").stat().st_size for n in cluster.procs}
            with watch.lock:
                watch.phase = "broken"
            leader = watch.leader_node() or leader
            for name, body in broken.items():
                code, answer = cluster.request(leader, "POST", "/api/v1/clusters?probe=false", {"name": name, **body})
                assert code == 201, (name, code, answer)
            time.sleep(args.minutes * 60)
            watch.stop.set()
            leader = watch.leader_node() or leader
            errors = {}
            for name in broken:
                code, body = cluster.request(leader, "GET", f"/api/v1/clusters/{name}")
                errors[name] = (body or {}).get("last_error") if code == 200 else f"HTTP {code}"
            levels = log_levels(root, offsets)
        finally:
            watch.stop.set()
            cluster.close()
            proxy.shutdown()
            sim.stop()
            for s in holes:
                s.close()
    results: dict[str, Any] = {"minutes": args.minutes, "baseline_s": args.baseline_s, "phases": {}}
    print(f"{'phase':<34}{'leader changes':>15}{'age p50 s':>11}{'age p99 s':>11}{'age max s':>11}")
    for phase, label in (("baseline", "14 healthy only (baseline)"), ("broken", "+ 3 closed, 2 hanging, 1 slow")):
        ages = [v for k, vs in watch.ages.items() if k.startswith(phase + ":h") for v in vs]
        row = {"leader_changes": watch.changes[phase], "age_p50_s": statistics.median(ages) if ages else None,
               "age_p99_s": pct(ages, 0.99), "age_max_s": max(ages, default=float("nan")), "samples": len(ages)}
        results["phases"][phase] = row
        print(f"{label:<34}{row['leader_changes']:>15}{row['age_p50_s'] or float('nan'):>11.1f}"
              f"{row['age_p99_s']:>11.1f}{row['age_max_s']:>11.1f}")
    results["collect_pass_s"] = {"median": statistics.median(watch.collect_pass_s) if watch.collect_pass_s else None,
                                 "max": max(watch.collect_pass_s, default=None)}
    results["broken_last_error"] = errors
    results["log_lines_phase2"] = levels
    results["leaders"] = watch.leaders
    for name, err in errors.items():
        print(f"  {name:<16} {err if isinstance(err, str) else (err or {}).get('kind')}: "
              f"{'' if isinstance(err, str) else ((err or {}).get('message') or '')[:100]}")
    print(f"collection pass: median {results['collect_pass_s']['median']}, max {results['collect_pass_s']['max']} s; "
          f"log lines in phase 2 (3 nodes): {levels}")
    broken_phase = results["phases"]["broken"]
    ok = broken_phase["leader_changes"] == 0 and broken_phase["age_max_s"] <= AGE_TARGET_S
    print(f"no leader change and every healthy snapshot younger than {AGE_TARGET_S:.0f} s: "
          f"{'met' if ok else 'MISSED'}")
    results["target_met"] = ok
    write_result("federation", json.loads(json.dumps(results, default=str)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
