"""API read latency at 200 requests/s and replicated writes/s through the API, on loopback.

Starts real `guardian serve` processes (1 node, then 3 nodes), registers a cluster with a
1,000-partition snapshot, then:
- paces GET requests at 200/s for 10 s over four read endpoints (open-loop: requests are sent on
  schedule even when earlier ones are slow) and reports p50/p99/max latency; the baseline in the same
  run is `/healthz` (no auth, no state) at the same rate;
- measures sequential acknowledged writes/s (POST /api/v1/ids) on 1 node and 3 nodes.
DESIGN target: read p99 <= 50 ms under 200 requests/s.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx

from benchmarks.common import write_result
from controlplane.launcher import ServiceCluster
from domain import dump_snapshot
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

HEADERS: dict[str, str] = {}  # the group's admin token, set when the group starts (fresh per group)
READS = ["/api/v1/clusters/c1", "/api/v1/plans", "/api/v1/clusters/c1/brokers", "/api/v1/throttles"]


def paced_latencies(base: str, paths: list[str], rate: float, seconds: float) -> list[float]:
    """Open-loop load: one request every 1/rate s, round-robin over ``paths``; latencies in ms."""
    latencies: list[float] = []
    lock = threading.Lock()
    client = httpx.Client(base_url=base, headers=HEADERS, timeout=5.0,
                          limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))

    def one(path: str) -> None:
        start = time.perf_counter()
        r = client.get(path)
        elapsed = (time.perf_counter() - start) * 1000
        assert r.status_code == 200, (path, r.status_code, r.text[:200])
        with lock:
            latencies.append(elapsed)

    with ThreadPoolExecutor(max_workers=32) as pool:
        t0 = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            pool.submit(one, paths[i % len(paths)])
    client.close()
    return latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def writes_per_second(cluster: ServiceCluster, seconds: float = 5.0) -> float:
    leader = cluster.leader()
    base = f"http://127.0.0.1:{cluster.http_ports[leader - 1]}"
    with httpx.Client(base_url=base, headers=HEADERS, timeout=5.0) as client:
        done = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            assert client.post("/api/v1/ids", json={"count": 1}).status_code == 200
            done += 1
        return done / (time.perf_counter() - t0)


def main() -> None:
    snap = generate_snapshot(GeneratorSpec(brokers=30, disks_per_broker=4, partitions=1000, cluster="c1"))
    text = dump_snapshot(replace(snap, taken_at=datetime.now(UTC)))
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in (1, 3):
            root = Path(tmp) / f"n{size}"
            root.mkdir()
            cluster = ServiceCluster(root, size=size)
            HEADERS["Authorization"] = f"Bearer {cluster.token}"
            cluster.start_all()
            try:
                leader = cluster.leader(timeout=30)
                base = f"http://127.0.0.1:{cluster.http_ports[leader - 1]}"
                with httpx.Client(base_url=base, headers=HEADERS) as c:
                    assert c.post("/api/v1/clusters?probe=false",
                                  json={"name": "c1", "bootstrap_servers": ["h:1"]}).is_success
                    assert c.put("/api/v1/clusters/c1/snapshot", content=text.encode()).is_success
                results[f"writes/s {size} node(s)"] = {"value": writes_per_second(cluster)}
                if size == 1:
                    for name, paths in (("healthz (baseline)", ["/healthz"]), ("api reads", READS)):
                        lat = paced_latencies(base, paths, rate=200, seconds=10)
                        results[name] = {"p50_ms": statistics.median(lat), "p99_ms": pct(lat, 0.99),
                                         "max_ms": max(lat), "requests": len(lat)}
            finally:
                cluster.close()
    print(f"{'measurement':<24}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for name in ("healthz (baseline)", "api reads"):
        r = results[name]
        print(f"{name:<24}{r['p50_ms']:>10.1f}{r['p99_ms']:>10.1f}{r['max_ms']:>10.1f}")
    for name, r in results.items():
        if name.startswith("writes"):
            print(f"{name:<24}{r['value']:>10.0f}  acknowledged sequential writes per second through the API")
    ok = results["api reads"]["p99_ms"] <= 50
    print(f"read p99 <= 50 ms at 200 requests/s: {'met' if ok else 'MISSED'}")
    write_result("api", {"results": results, "target_met": ok})


if __name__ == "__main__":
    main()
