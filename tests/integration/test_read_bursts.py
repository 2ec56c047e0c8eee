"""Read bursts on the leader do not start elections: three real `guardian serve` processes, ~2 MB of state.

20 s of concurrent ``/metrics`` + ``/api/v1/status`` requests on the leader; the Raft term must not
change (no election) and the leader stays the leader.  Prints the requests per second served.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.launcher import ServiceCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

BURST_S = 20.0
THREADS = 8
CLUSTERS = 60
URLS_PER_CLUSTER = 300


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[ServiceCluster]:
    c = ServiceCluster(tmp_path, intervals={"collect_s": 3600, "throttle_s": 3600, "executor_s": 3600})
    c.start_all()
    try:
        yield c
    finally:
        c.close()


def test_a_20s_read_burst_on_the_leader_starts_no_election(cluster: ServiceCluster) -> None:
    cluster.wait_up()
    leader = cluster.leader()
    for i in range(CLUSTERS):  # ~2 MB of replicated state (clusters + the action log)
        urls = {str(b): f"http://broker-{i}-{b}.example.invalid:9404/metrics" for b in range(URLS_PER_CLUSTER)}
        for _ in range(5):  # setup on a loaded machine: follow a leader change
            code, body = cluster.request(leader, "POST", "/api/v1/clusters?probe=false", {
                "name": f"c{i}", "bootstrap_servers": [f"127.0.0.1:{40000 + i}"], "metrics_urls": urls}, timeout=10)
            if code in (201, 409):
                break
            leader = cluster.leader()
        assert code in (201, 409), body
    leader = cluster.leader()
    before = cluster.status(leader)
    assert before is not None
    term = before["term"]
    base = f"http://127.0.0.1:{cluster.http_ports[leader - 1]}"
    done = {"metrics": 0, "status": 0, "errors": 0}
    lock = threading.Lock()
    stop = time.monotonic() + BURST_S

    def reader(n: int) -> None:
        path, kind = ("/metrics", "metrics") if n % 2 else ("/api/v1/status", "status")
        req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {cluster.token}"})
        while time.monotonic() < stop:
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    resp.read()
                    ok = resp.status == 200
            except OSError:
                ok = False
            with lock:
                done[kind if ok else "errors"] += 1

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = cluster.status(leader)
    rate = (done["metrics"] + done["status"]) / BURST_S
    print(f"\nread burst {BURST_S:.0f} s x {THREADS} threads: {done['metrics'] / BURST_S:.1f} /metrics/s, "
          f"{done['status'] / BURST_S:.1f} /status/s, {rate:.1f} req/s in all, {done['errors']} errors; "
          f"term {term} -> {after and after['term']}")
    assert after is not None and after["term"] == term, "the read burst started an election"
    assert after["is_leader"]
    assert done["errors"] == 0
