"""Rates bounded by physics and lag beyond the log start, on kafkasim over real HTTP (issue 16, item 10).

* A one-off +1e15 jump of a topic's bytes-in counter (served by a proxy in front of the leader's JMX
  exporter) used to become 65.9 TB/s and a max estimated util of 32,955; now the sample is refused
  (``exceeds_hardware`` in the round's coverage) and the next round measures the true rate again.
* A consumer lagging further than the retained log (its position below the log start) used to be
  estimated at 0 disk reads while kafkasim's disk served it at 50 MB/s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from collectors.collector import ClusterCollector
from tests.support.collectors_support import FaultProxy, Sim, rate_truth, with_proxy

pytestmark = [pytest.mark.timeout(300)]
JUMP = 1e15


def jump(topic: str) -> Callable[[str], str]:
    """A rewrite of JMX exporter text adding ``JUMP`` to ``topic``'s bytes-in counter."""
    needle = f'kafka_server_brokertopicmetrics_bytesin_total{{topic="{topic}"}} '

    def rewrite(text: str) -> str:
        lines = []
        for line in text.splitlines():
            if line.startswith(needle):  # name{labels} value [timestamp]
                fields = line[len(needle):].split()
                line = needle + " ".join([repr(float(fields[0]) + JUMP), *fields[1:]])
            lines.append(line)
        return "\n".join(lines) + "\n"
    return rewrite


@pytest.fixture()
def sim() -> Iterator[Sim]:
    s = Sim()
    try:
        yield s
    finally:
        s.stop()


def test_a_counter_jump_beyond_the_nic_is_refused_and_counted(sim: Sim) -> None:
    leader = sim.topology()[("orders", 0)]["leader"]
    eps = sim.endpoints()
    target = sim.endpoint(leader, "jmx")
    proxy = FaultProxy(target)
    col = ClusterCollector(with_proxy(eps, target, proxy.url))
    slot = sim.topology()[("orders", 0)]["slot"]
    try:
        col.collect_once()
        sim.advance(10)
        proxy.rewrite = jump("orders")  # the counter steps up by 1e15 bytes between two scrapes 10 s apart
        jumped = col.collect_once()
        parts = {(p.topic, p.partition): p for t in jumped.snapshot.topics for p in t.partitions}
        assert parts[("orders", 0)].bytes_in_per_s < 1.25e9  # not 1e14 B/s
        assert jumped.coverage.drops.get("topic.t_in", {}).get("exceeds_hardware") == 1
        before = sim.counters()
        sim.advance(10)
        after = sim.counters()
        again = col.collect_once()  # the jumped value became the base: the true rate is measured again
        parts = {(p.topic, p.partition): p for t in again.snapshot.topics for p in t.partitions}
        truth = float(rate_truth(before, after, "bytes_in")[slot])
        assert parts[("orders", 0)].bytes_in_per_s == pytest.approx(truth, rel=0.10)
        assert "exceeds_hardware" not in again.coverage.drops.get("topic.t_in", {})
        load = max(d.read_bytes_per_s + d.write_bytes_per_s for b in again.snapshot.brokers for d in b.disks)
        assert load < 1e10
    finally:
        col.close()
        proxy.close()


def test_a_consumer_lagging_beyond_the_log_start_reads_from_the_log_start(sim: Sim) -> None:
    col = ClusterCollector(sim.endpoints())
    slot = sim.topology()[("orders", 0)]["slot"]
    try:
        # 1 TB behind a partition that retains ~0.5 GB: its position is below the log start
        sim.call(lambda: sim.runner.server.lagging_consumer("east", "orders", 0, 1e12, 50e6))
        sim.advance(2)
        col.collect_once()
        sim.advance(10)
        after = sim.counters()
        c = col.collect_once()
        truth = float(after["disk_read"][slot])
        assert truth > 1e6, "kafkasim serves the laggard from disk"
        assert c.partitions[("orders", 0)].disk_readers == ["orders-consumer"]
        parts = {(p.topic, p.partition): p for t in c.snapshot.topics for p in t.partitions}
        assert parts[("orders", 0)].disk_read_bytes_per_s == pytest.approx(truth, rel=0.10)  # was 0
    finally:
        col.close()
