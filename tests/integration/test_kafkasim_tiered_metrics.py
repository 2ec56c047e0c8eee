"""kafkasim's tiered-storage broker metrics (KIP-405/KIP-963) scraped from its JMX exporter endpoints over HTTP.

The remote log manager runs against an in-memory metadata service (the rules of ``tiered.model``) with real
files in a remote-store directory; the simulator's clock moves only when a test steps it (speed 1e-6), so each
scrape sees a known state.  Checked: the names the jmx_exporter rules of ``deploy/jmx_exporter/kafka-broker.yml``
give the stock MBeans (every ``kafka_`` name GuardianTieredUploadStuck reads among them); values from what
really happened — the copy-bytes counter grows by exactly the bytes of the segments whose COPY_FINISHED the
service recorded, one copy request per upload; the copy lag recorded as Kafka records it (after each copy:
the closed segments still waiting, so it is not a live view and does not grow while the task waits); each
series on the partition's leader only, the old leader dropping the partition's lag when leadership moves;
counters never decrease; remote retention's deletes and size; reads from remote.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from collectors.promtext import parse_fast
from kafkasim.cluster.configs import REMOTE_COPY_QUOTA, REMOTE_LOG_TASK, RETENTION_CHECK
from kafkasim.cluster.model import Cluster, Partition
from kafkasim.cluster.records import store_batches
from kafkasim.scenarios.scenario import Federation
from kafkasim.tiering.remote_store import LocalDirStore
from kafkasim.tiering.segments import COPIED, LOCAL
from kafkasim.tiering.tiered import TieredManager, TieredSettings, kafka_topic_id
from tests.support.kafkasim_support import Sim, http_text, start_federation
from tests.unit.test_kafkasim_tiered import FakeMetadata, batch, federation
from tiered.model import EventKind

ROOT = Path(__file__).resolve().parents[2]
P = "kafka_server_brokertopicmetrics_"
Series = dict[tuple[str, str], float]
"""(name, topic label or "") -> value."""


def parse(text: str) -> Series:
    payload = parse_fast(text)
    assert payload.bad_lines == 0, f"malformed sample {payload.first_bad!r}"
    return {(name, labels.get("topic", "")): value
            for name, samples in payload.families.items() for labels, value in samples}


@dataclass
class Env:
    sim: Sim
    fed: Federation
    mgr: TieredManager
    md: FakeMetadata
    store: LocalDirStore
    seen: dict[tuple[int, str, str], float] = field(default_factory=dict)
    """Every counter value scraped so far: (broker, name, topic) -> the last one (checked never to decrease)."""

    @property
    def cl(self) -> Cluster:
        return self.fed.clusters["c"]

    def call(self, fn: Callable[[], Any]) -> Any:
        return self.sim.call(fn)

    def tick(self, n: int = 1, produce: Partition | None = None) -> None:
        """``n`` simulated seconds, one tick each (a 1,200-byte batch per tick into ``produce``: a segment of
        ``segment.bytes`` 1000 rolls every tick); the remote log manager's jobs finish between ticks."""
        for _ in range(n):
            def step() -> None:
                if produce is not None:
                    store_batches(self.cl, produce, batch(0, [b"x" * 1200]))
                self.fed.engine.step(1.0)
            self.call(step)
            deadline = time.monotonic() + 10
            while not self.mgr.idle() and time.monotonic() < deadline:
                time.sleep(0.005)
        self.call(lambda: self.fed.engine.step(1e-6))  # applies the last results (the loop thread's drain)

    def scrape(self, broker: int) -> Series:
        url = next(m["url"] for b in self.sim.endpoints["clusters"]["c"]["brokers"] if b["id"] == broker
                   for m in b["metrics"] if m["kind"] == "jmx")
        got = parse(http_text(url))
        for (name, topic), v in got.items():
            if name.endswith("_total"):
                last = self.seen.get((broker, name, topic))
                assert last is None or v >= last, f"counter {name}{{topic={topic!r}}} of broker {broker} went back"
                self.seen[(broker, name, topic)] = v
        return got

    def finished_bytes(self, topic: str) -> int:
        """Bytes of the segments of ``topic`` whose COPY_FINISHED the metadata service holds."""
        tid = kafka_topic_id(self.call(lambda: self.cl.topics[topic].topic_id))
        events = [e for key, _, _, group in list(self.md.groups) if key[1] == tid for e in group]
        sizes = {e.segment_id: e.size_bytes for e in events if e.kind == EventKind.COPY_STARTED}
        return sum(sizes[e.segment_id] for e in events if e.kind == EventKind.COPY_FINISHED)


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    fed = federation({RETENTION_CHECK: "1000", REMOTE_LOG_TASK: "30000"})
    md, store = FakeMetadata(), LocalDirStore(tmp_path / "remote")
    mgr = TieredManager(fed, TieredSettings((), "", tmp_path / "remote"), metadata=md, store=store)
    sim = start_federation(fed, realistic=False, tiered=mgr, speed=1e-6)  # plain-http JMX + node exporters
    try:
        yield Env(sim, fed, mgr, md, store)
    finally:
        sim.stop()


def tiered_topic(env: Env, configs: dict[str, str], lo: float, hi: float) -> tuple[str, Partition]:
    """A 1-partition, 2-replica tiered topic whose task first runs between ``lo`` and ``hi`` of its interval
    after creation (the phase is seeded by its name: the first such name of ``t0``, ``t1``...)."""
    name = next(f"t{k}" for k in range(1000) if lo < env.mgr.tasks.phase(f"c/t{k}/0") < hi)
    env.call(lambda: env.cl.create_topic(name, 1, 2, configs={"remote.storage.enable": "true",
                                                               "segment.bytes": "1000", **configs}))
    env.call(lambda: env.fed.engine.step(1e-6))  # the remote log manager sees it: its log and task
    return name, env.call(lambda: env.cl.partition(name, 0))


def test_copy_series_are_what_the_leaders_remote_log_manager_did(env: Env) -> None:
    names = {n for n, _ in env.scrape(1)}
    # every kafka_ name the upload-stuck alert reads is exported (and the rules file renders it: unit-tested)
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "guardian-rules.yml").read_text())["groups"]
    alert = next(r for g in rules for r in g["rules"] if r["alert"] == "GuardianTieredUploadStuck")
    assert set(re.findall(r"\bkafka_[a-z0-9_]+", alert["expr"])) <= names
    name, p = tiered_topic(env, {}, 0.5, 0.9)
    leader = p.leader
    follower = next(r for r in p.replicas if r != leader)
    key = ("c", env.cl.topics[name].topic_id, 0)
    lg = env.call(lambda: env.mgr.log_of(env.cl, name, 0))
    # before the task's first run: segments wait, but Kafka records no lag before a copy (not a live gauge)
    while env.call(lambda: env.mgr.tasks.next_run(key)) - env.fed.engine.t > 1.5:
        env.tick(produce=p)
    waiting = env.call(lambda: [s.size for s in lg.segments if s.state == LOCAL])
    assert len(waiting) >= 10
    before = env.scrape(leader)
    assert before[(P + "remotecopybytes_total", "")] == 0 and before[(P + "remotecopylagbytes", "")] == 0
    assert (P + "remotecopybytes_total", name) not in before and (P + "remotecopylagbytes", name) not in before
    # the run copies them all: bytes = what the service recorded as finished, one request per upload, no lag left
    env.tick(3)
    after = env.scrape(leader)
    copied = env.finished_bytes(name)
    assert copied == sum(waiting) == env.store.bytes_written > 0
    assert after[(P + "remotecopybytes_total", name)] == after[(P + "remotecopybytes_total", "")] == copied
    assert after[(P + "remotecopyrequests_total", name)] == len(waiting)
    assert after[(P + "remotecopylagbytes", name)] == after[(P + "remotecopylagsegments", name)] == 0
    assert after[(P + "remotecopyerrors_total", "")] == 0
    other = env.scrape(follower)  # reported by the leader only
    assert (P + "remotecopybytes_total", name) not in other and other[(P + "remotecopybytes_total", "")] == 0

    # a copy quota on the leader (KIP-956, ~1,000 bytes per 11 s here): the next run copies one segment, and the
    # lag Kafka records after that copy is the two still waiting
    env.call(lambda: env.cl.brokers[leader].configs.__setitem__(REMOTE_COPY_QUOTA, "100"))
    env.tick(3, produce=p)
    three = env.call(lambda: [s.size for s in lg.segments if s.state == LOCAL])
    assert len(three) == 3
    while env.call(lambda: sum(s.state == COPIED for s in lg.segments)) == len(waiting):
        env.tick()
    mid = env.scrape(leader)
    assert mid[(P + "remotecopybytes_total", name)] == copied + three[0] == env.finished_bytes(name)
    assert mid[(P + "remotecopylagbytes", name)] == sum(three[1:])
    assert mid[(P + "remotecopylagsegments", name)] == 2 == mid[(P + "remotecopylagsegments", "")]
    env.tick(3)  # the quota holds the next copy: nothing copied, the gauge keeps its value
    assert env.scrape(leader)[(P + "remotecopylagbytes", name)] == sum(three[1:])

    # the leader fails over: the new leader's task runs at once (no quota there) and copies the rest; the old
    # leader, back as a follower, no longer counts the partition's lag; counters stay where they were
    env.call(lambda: env.cl.set_broker_alive(leader, False))
    env.tick(2)
    env.call(lambda: env.cl.set_broker_alive(leader, True))
    env.tick()
    new = env.call(lambda: p.leader)
    assert new == follower
    old, now = env.scrape(leader), env.scrape(new)
    assert old[(P + "remotecopylagbytes", name)] == 0 == old[(P + "remotecopylagbytes", "")]
    assert old[(P + "remotecopybytes_total", name)] == copied + three[0]
    assert now[(P + "remotecopybytes_total", name)] == sum(three[1:])
    assert now[(P + "remotecopylagbytes", name)] == 0
    assert old[(P + "remotecopybytes_total", name)] + now[(P + "remotecopybytes_total", name)] \
        == env.finished_bytes(name) == copied + sum(three)


def test_remote_retention_size_deletes_and_remote_reads(env: Env) -> None:
    name, p = tiered_topic(env, {"retention.bytes": "6000", "local.retention.bytes": "2000"}, 0.05, 0.2)
    leader = p.leader
    lg = env.call(lambda: env.mgr.log_of(env.cl, name, 0))
    env.tick(40, produce=p)  # a run at ~3-6 s, then at 30 s more: copies, then remote retention deletes
    env.tick(31)
    first = env.scrape(leader)[(P + "remotelogsizebytes", name)]
    env.tick(31)  # one more run: nothing new to copy or delete
    got = env.scrape(leader)
    deleted = env.mgr.stats["deleted_segments"]
    assert deleted > 0
    assert got[(P + "remotedeleterequests_total", name)] == deleted == got[(P + "remotedeleterequests_total", "")]
    assert got[(P + "remotedeletelagsegments", name)] == got[(P + "remotedeletelagbytes", name)] == 0
    assert got[(P + "remotedeleteerrors_total", "")] == 0
    # recorded at each run, before its deletes (as Kafka lists the remote segments first)
    remote = env.call(lambda: sum(s.size for s in lg.segments if s.state == COPIED))
    assert got[(P + "remotelogsizebytes", name)] == remote == got[(P + "remotelogsizebytes", "")]
    assert 0 < remote < 6000 + 1300 < first  # retention.bytes keeps at most one segment more
    # a fetch below the local log start is served from remote: one request, its bytes
    start = env.call(lambda: lg.log_start)
    assert start < env.call(lambda: lg.local_start)
    data = env.call(lambda: env.mgr.read(env.cl, p, start, env.fed.engine.partition_offsets(p.slot)[1], 1 << 20))
    assert data
    read = env.scrape(leader)
    assert read[(P + "remotefetchrequests_total", name)] == 1
    assert read[(P + "remotefetchbytes_total", name)] == len(data) == read[(P + "remotefetchbytes_total", "")]
    assert read[(P + "remotefetcherrors_total", "")] == 0
    # a deleted topic's tiered series go; the broker-wide counters stay
    env.call(lambda: env.cl.delete_topic(name))
    env.tick()
    gone = env.scrape(leader)
    assert not [k for k in gone if k[1] == name and k[0].startswith(P + "remote")]
    assert gone[(P + "remotedeleterequests_total", "")] == deleted
    assert gone[(P + "remotelogsizebytes", "")] == 0


class FlakyStore(LocalDirStore):
    """A remote store that refuses writes while ``down``."""

    down = True

    def put(self, path: str, data: bytes) -> int:
        if self.down:
            raise OSError("remote store unreachable")
        return super().put(path, data)


def test_failed_copies_count_errors_and_no_bytes_until_the_store_is_back(env: Env, tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "flaky")
    env.mgr.store = store
    name, p = tiered_topic(env, {}, 0.05, 0.2)
    leader = p.leader
    env.tick(8, produce=p)  # the first run (at 1.5-6 s) fails its upload
    failed = env.scrape(leader)
    assert failed[(P + "remotecopyerrors_total", name)] >= 1 == failed[(P + "remotecopyrequests_total", name)]
    # no byte copied: Kafka has neither marked the copy-bytes meter nor recorded a lag for the topic (what the
    # upload-stuck alert's error branch is for)
    assert (P + "remotecopybytes_total", name) not in failed and (P + "remotecopylagbytes", name) not in failed
    assert failed[(P + "remotecopyerrors_total", "")] == failed[(P + "remotecopyerrors_total", name)]
    store.down = False
    deadline = time.monotonic() + 30
    while not env.finished_bytes(name) and time.monotonic() < deadline:
        env.tick(5)
        time.sleep(0.05)  # the manager backs off 0.5 s (wall clock) after a failed job
    back = env.scrape(leader)
    assert back[(P + "remotecopybytes_total", name)] == env.finished_bytes(name) == store.bytes_written > 0
    assert back[(P + "remotecopyerrors_total", name)] == failed[(P + "remotecopyerrors_total", name)]
