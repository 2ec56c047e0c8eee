"""A 30-minute simulated soak raises no anomaly.

kafkasim at 40x (30 simulated minutes in ~45 s wall) with its normal traffic noise (diurnal curve, random
x3 bursts), lagging consumers that read from disk while they catch up (staggered, so some disks read hard
while their peers do not) and a short traffic spike; the service's own loops run with self-healing on.
Asserted: not one anomaly recorded, no self-healing plan, and the detectors evaluated a round at least every
~2 simulated minutes. The detector counters are printed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.bootstrap import Service
from tests.support.executor_support import Sim, scenario
from tests.support.healing_support import anomalies, healing_job, healing_service, sim_time, start, truth

pytestmark = pytest.mark.timeout(150)
SOAK_S = 1800.0
SPEED = 40.0


@pytest.fixture()
def sim(tmp_path: Path) -> Iterator[Sim]:
    spec = scenario(brokers=6, topics=3, partitions=8, rf=3, size_gb=40.0, bytes_in=1_500_000, speed=SPEED)
    with Sim(spec, tmp_path) as s:
        yield s


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    with healing_service(tmp_path) as svc:
        yield svc


def test_a_30_minute_soak_with_noise_and_lagging_consumers_raises_no_anomaly(sim: Sim, service: Service) -> None:
    start(sim, service, grace_s=120.0)
    topics = sorted(t["name"] for t in truth(sim)["topics"])
    t0 = sim_time(sim)
    lagging = [(topics[0], 0, 0.0), (topics[1], 3, 300.0), (topics[2], 5, 700.0), (topics[0], 6, 1100.0)]
    spiked = False
    peak = {"read_MBps": 0.0, "util": 0.0, "await_ms": 0.0}
    while (now := sim_time(sim) - t0) < SOAK_S:
        while lagging and lagging[0][2] <= now:
            topic, part, _ = lagging.pop(0)  # ~375 s of disk reads at 80 MB/s behind the page cache
            sim.control("/fault/lagging-consumer", {"cluster": "c1", "topic": topic, "partition": part,
                                                    "lag_bytes": 30e9, "rate_bytes_per_s": 80e6})
        if not spiked and now >= 900.0:
            sim.control("/fault/traffic-spike", {"cluster": "c1", "topic": topics[1], "factor": 2.0})
            spiked = True
        if spiked and now >= 1000.0:
            sim.control("/fault/traffic-spike", {"cluster": "c1", "topic": topics[1], "factor": 1.0})
        snap = service.ctx.snapshots.get("c1")
        if snap is not None:
            for b in snap.brokers:
                for d in b.disks:
                    peak["read_MBps"] = max(peak["read_MBps"], d.read_bytes_per_s / 1e6)
                    peak["util"] = max(peak["util"], d.util)
                    peak["await_ms"] = max(peak["await_ms"], d.await_ms)
        time.sleep(0.5)
    counters = dict(healing_job(service).counters.get("c1", {}))
    found = anomalies(service)
    plans = service.ctx.store.read(lambda s: [p["id"] for p in s["plans"].values()
                                              if p["proposed_by"] == "self-healing"])
    print(f"\nsoak {SOAK_S / 60:.0f} simulated minutes at {SPEED:.0f}x: detector counters {counters}; "
          f"{len(found)} anomalies, {len(plans)} self-healing plans; busiest disk seen: "
          f"{', '.join(f'{k} {v:.2f}' for k, v in peak.items())}")
    assert peak["read_MBps"] > 40.0, "the lagging consumers read from disk"
    assert found == [], [(a["kind"], a["summary"]) for a in found]
    assert plans == []
    assert counters["rounds"] >= SOAK_S / 120, counters
    assert set(counters) == {"rounds"}, counters
