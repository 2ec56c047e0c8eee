"""One observer per cluster, counted on kafkasim's side: with the service's loops running (collection,
throttle protection, an executor moving a partition), each broker's ``/metrics`` is scraped once per
collection round, and each cluster has one binding of clients (shared by observer, executor and levers)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin.client import KafkaAdminClient

from controlplane.bootstrap import Service
from controlplane.config import IntervalsConf
from controlplane.state.commands import meta
from domain import PartitionMove, Plan, plan_to_dict
from kafkasim.broker.server import SimRunner
from tests.support.kafkasim_support import http_json, register_fields, start_sim
from tests.support.service_ports import executor_of
from tests.support.service_support import local_service

pytestmark = pytest.mark.timeout(120)
ADMIN_CLIENTS_PER_CLUSTER = 1
"""One connection per cluster shared by the observer's bulk reader, the executor and the levers (before the
observer: four admin clients, plus one scraper)."""


@pytest.fixture()
def admin_clients(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Bootstrap servers -> KafkaAdminClient constructions in this process."""
    made: Counter[str] = Counter()
    original = KafkaAdminClient.__init__

    def counting(self: Any, **configs: Any) -> None:
        made[str(configs.get("bootstrap_servers"))] += 1
        original(self, **configs)

    monkeypatch.setattr(KafkaAdminClient, "__init__", counting)
    return made


@pytest.fixture()
def sim() -> Iterator[SimRunner]:
    with start_sim() as runner:
        yield runner


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[Service]:
    with local_service(tmp_path, intervals=IntervalsConf(collect_s=1.0, throttle_s=0.5, executor_s=0.5)) as svc:
        yield svc


def scrapes(sim: SimRunner) -> dict[str, dict[str, int]]:
    """``{cluster: {"broker/endpoint kind": requests served}}`` as counted on kafkasim's side."""
    doc = http_json(sim.endpoints["control_url"] + "/scrapes")
    return {cl: {f"{b}/{kind}": c.get("requests", 0) for b, kinds in per.items() for kind, c in kinds.items()}
            for cl, per in doc.items()}


def test_each_endpoint_is_scraped_once_per_round_with_every_loop_reading_the_round(
        sim: SimRunner, service: Service, admin_clients: Counter[str]) -> None:
    ctx = service.ctx
    for name in ("east", "west"):
        c = sim.endpoints["clusters"][name]
        ctx.store.propose({"type": "cluster.register", "meta": meta("test"), "name": name, **register_fields(c)})
    board = service.collection.board
    service.scheduler.start()
    deadline = time.monotonic() + 30
    while ctx.snapshots.get("east") is None:  # a round usable for planning (rates need two rounds)
        assert time.monotonic() < deadline, service.collection.last_refusal
        time.sleep(0.2)
    # an execution on east: the executor reads its disk load and broker facts from the published round
    snap = ctx.snapshots.get("east")
    assert snap is not None
    p = snap.index.topic_by_name["orders"].partitions[0]
    target = min(b.id for b in snap.brokers if b.id not in p.replicas)
    plan = Plan("east", "rebalance", (PartitionMove(p.topic, p.partition, (target, *p.replicas[1:]),
                                                    (None,) * len(p.replicas)),))
    plan_id = ctx.store.propose({"type": "plan.propose", "meta": meta("test"), "cluster": "east", "kind": plan.kind,
                                 "plan": plan_to_dict(plan), "snapshot_taken_at": snap.taken_at.isoformat()})["plan_id"]
    ctx.store.propose({"type": "plan.approve", "meta": meta("test"), "plan_id": plan_id})
    executor_of(ctx).start_approved(plan_id)

    # the window: from one published round to another, every loop running
    def seqs() -> dict[str, int]:
        return {n: (r.seq if (r := board.latest(n)) is not None else 0) for n in ("east", "west")}

    start_seq = seqs()
    while seqs()["east"] == start_seq["east"]:
        time.sleep(0.01)  # align with a round boundary
    before, seq0 = scrapes(sim), seqs()
    time.sleep(6.0)
    seq_mid = seqs()
    while seqs() == seq_mid:  # end on a round boundary too
        time.sleep(0.01)
    after, seq1 = scrapes(sim), seqs()

    for name in ("east", "west"):
        rounds = seq1[name] - seq0[name]
        assert rounds >= 3, (name, seq0, seq1)
        per_endpoint = {b: after[name][b] - before[name][b] for b in after[name]}
        # one scrape per endpoint per round (a round straddling the window's edge adds at most one)
        assert all(rounds - 1 <= n <= rounds + 1 for n in per_endpoint.values()), (name, rounds, per_endpoint)
    evaluated = ctx.throttle.last["east"] if ctx.throttle is not None else None
    assert evaluated is not None and not evaluated.skipped.startswith("observation failed"), evaluated
    assert executor_of(ctx).last.get("east") is not None and executor_of(ctx).last["east"].error is None
    east = sim.endpoints["clusters"]["east"]["bootstrap_servers"]
    west = sim.endpoints["clusters"]["west"]["bootstrap_servers"]
    assert admin_clients[east] == ADMIN_CLIENTS_PER_CLUSTER, admin_clients
    assert 1 <= admin_clients[west] <= ADMIN_CLIENTS_PER_CLUSTER, admin_clients  # nothing to execute: lazy admin
    clients = service.collection.bindings.bound("east")
    assert clients is not None and executor_of(ctx).executor("east").admin is clients.admin
