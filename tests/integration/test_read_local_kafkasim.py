"""KIP-392 end to end over TCP: a kafka-python consumer in idc-b reads a topic whose replicas all live in
idc-a; Guardian's check finds it (audit lineage: cross-IDC, no client.rack), ``plan read-local`` moves one
follower per partition into idc-b, ``exec run`` executes it, and with ``client.rack`` set the consumer's
cross-IDC fetch bytes fall to zero (measured from kafkasim's audit records: the broker that served each
byte and its IDC). Without a rack-aware replica selector (Kafka's default) nothing changes, and the check
says which server.properties line is missing."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from tests.support.executor_support import Sim, guardian

pytestmark = pytest.mark.timeout(240)
logging.getLogger("kafka").setLevel(logging.CRITICAL)
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
READER = "reader-b"


def _spec(audit: Path, selector: bool) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": "c1",
        "brokers": [{"count": 4, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 0, "memory_gb": 16,
                     "disks": [{"count": 1, "kind": "ssd"}]}],
        "topics": []}
    if selector:
        cluster["broker_configs"] = {"replica.selector.class": SELECTOR}
    return {"seed": 11, "speed": 1.0, "tick_seconds": 0.5, "clusters": [cluster],
            "audit": {"enabled": True, "interval_s": 1, "synthetic": False, "jsonl": str(audit),
                      "client_idcs": {READER: "idc-b"}}}


def _produce(client: dict[str, Any], n: int) -> None:
    prod = KafkaProducer(client_id="orders-svc", linger_ms=5, **client)
    try:
        for i in range(n):
            prod.send("orders", value=b"x" * 1000 + str(i).encode(), partition=i % 3)
        prod.flush(20)
    finally:
        prod.close()


def _consume(client: dict[str, Any], rack: str | None, expect: int) -> int:
    kw: dict[str, Any] = {**client, **({"client_rack": rack} if rack else {})}
    cons = KafkaConsumer("orders", client_id=READER, group_id=f"billing-{rack or 'none'}",
                         auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=4000, **kw)
    try:
        return sum(1 for _ in cons)
    finally:
        cons.close()


def _reader_bytes(sim: Sim, audit: Path, skip: int) -> tuple[int, int, list[str]]:
    """(cross-IDC bytes, all bytes) the reader fetched in audit lines after ``skip``; and those lines."""
    sink = sim.runner.server.audit
    assert sink is not None
    sim.runner.call(sink.emit)
    lines = audit.read_text().splitlines()[skip:] if audit.exists() else []
    cross = total = 0
    for line in lines:
        r = json.loads(line)
        if r["kind"] == "fetch" and r["client_id"] == READER:
            total += r["bytes"]
            cross += r["bytes"] if r["broker_idc"] != r["client_idc"] else 0
    return cross, total, lines


def _idcs(sim: Sim) -> dict[int, str]:
    """Broker -> IDC as the simulator knows it (the endpoints document, like an operator's, names none)."""
    return {b.id: b.idc for b in sim.runner.server.fed.clusters["c1"].brokers.values()}


def _setup(make_sim: Any, tmp_path: Path, selector: bool) -> tuple[Sim, Path, dict[str, Any]]:
    audit = tmp_path / "audit.jsonl"
    sim = make_sim(_spec(audit, selector))
    bs = sim.client_kwargs()  # bootstrap servers and SASL_SSL settings
    idc = _idcs(sim)
    a = sorted(b for b, i in idc.items() if i == "idc-a")
    _create(sim, a)
    _produce(bs, 300)
    return sim, audit, bs


def _create(sim: Sim, a: list[int]) -> None:
    admin = KafkaAdminClient(**sim.client_kwargs())
    try:
        admin.create_topics([NewTopic("orders", -1, -1, replica_assignments={0: a, 1: a[::-1], 2: a})])
    finally:
        admin.close()


def test_read_local_plan_and_client_rack_bring_cross_idc_fetch_bytes_to_zero(make_sim: Any, tmp_path: Path) -> None:
    sim, audit, bs = _setup(make_sim, tmp_path, selector=True)
    eps = str(sim.endpoints_file)
    # before: the idc-b reader, without client.rack, reads every byte from idc-a leaders
    assert _consume(bs, None, 300) == 300
    cross0, total0, lines = _reader_bytes(sim, audit, 0)
    assert total0 > 250_000 and cross0 == total0
    check = guardian("clusters", "read-local", "c1", "-e", eps, "--audit-jsonl", str(audit))
    assert check.returncode == 0, check.stderr
    body = json.loads(check.stdout)
    assert body["ready"] and body["selector_ok"] and body["racks_ok"]
    assert body["cross_idc_readers_without_client_rack"] == [READER]
    assert body["demand"]["orders"]["idc-b"] > 0
    # the read-local plan, executed by Guardian's executor
    snap, plan = tmp_path / "snap.json", tmp_path / "plan.json"
    took = guardian("snapshot", "take", "-e", eps, "-c", "c1", "--out", str(snap), "--rounds", "2", "--interval", "0.5")
    assert took.returncode == 0, took.stderr
    made = guardian("plan", "read-local", "--snapshot", str(snap), "--audit-jsonl", str(audit), "--threshold", "1",
                    "--out", str(plan))
    assert made.returncode == 0, made.stdout + made.stderr
    moves = json.loads(plan.read_text())["reassignment"]["partitions"]
    idc = _idcs(sim)
    assert len(moves) == 3 and all(sorted(idc[b] for b in m["replicas"]) == ["idc-a", "idc-b"] for m in moves)
    ran = guardian("exec", "run", "-e", eps, "-c", "c1", "--plan", str(plan), "--state-file", str(tmp_path / "st.json"),
                   "--quiet", "--interval", "0.2")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    live = sim.live()
    for (t, _), p in live.partitions.items():
        if t == "orders":
            assert "idc-b" in {idc[b] for b in p.isr} and idc[p.leader] == "idc-a"
    # after: the same reader with client.rack=idc-b reads from the idc-b follower
    assert _consume(bs, "idc-b", 300) == 300
    cross1, total1, _ = _reader_bytes(sim, audit, len(lines))
    print(f"\nKIP-392 reader in idc-b, 300 records x 3 partitions: cross-IDC fetch bytes before {cross0:,} of "
          f"{total0:,}; after read-local plan + client.rack {cross1:,} of {total1:,}")
    assert total1 > 250_000 and cross1 == 0


def test_without_a_rack_aware_selector_client_rack_changes_nothing(make_sim: Any, tmp_path: Path) -> None:
    sim, audit, bs = _setup(make_sim, tmp_path, selector=False)
    check = guardian("clusters", "read-local", "c1", "-e", str(sim.endpoints_file))
    assert check.returncode == 1
    body = json.loads(check.stdout)
    assert not body["selector_ok"] and body["racks_ok"]
    fixes = [f for f in body["fixes"] if f["key"] == "replica.selector.class"]
    assert len(fixes) == 4 and all(f["how"] == "server.properties + rolling restart" for f in fixes)
    # a follower in idc-b exists, but the leader never names it: every byte still crosses
    admin_moves = {("orders", p): [*sorted(b for b, i in _idcs(sim).items() if i == "idc-a"), 2] for p in range(3)}
    assert sim.admin.alter_reassignments(admin_moves) == dict.fromkeys(admin_moves)
    deadline = time.monotonic() + 60
    while not all(2 in p.isr for (t, _), p in sim.live().partitions.items() if t == "orders"):
        assert time.monotonic() < deadline, "the idc-b follower never joined the ISR"
        time.sleep(0.2)
    assert _consume(bs, "idc-b", 300) == 300
    cross, total, _ = _reader_bytes(sim, audit, 0)
    assert total > 0 and cross == total
