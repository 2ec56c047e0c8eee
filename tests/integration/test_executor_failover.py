"""The executor survives a kill -9 of the Raft leader in a three-node ``guardian serve`` group.

Real processes throughout: a kafkasim federation (``python -m kafkasim up --realistic``: SASL_SSL), three
controller nodes (:class:`controlplane.launcher.ServiceCluster`), the plan imported, approved and executed through the
REST API. The leader is killed with SIGKILL while some of the plan's moves are IN_PROGRESS (copying
under the executor's throttles) and some PENDING (held back by the per-broker cap). Asserted:

* a new ready leader within 2 s;
* the execution continues on the new leader (it submits the moves that were still PENDING) and
  completes; every task COMPLETED, every moved partition at its target replicas in the cluster;
* **no duplicate submission**, proved from the cluster side with kafkasim's log of accepted
  AlterPartitionReassignments entries (``GET /reassignments``): every moved partition was submitted
  *exactly once* and nothing was cancelled. A duplicate is any second accepted entry with replicas for
  the same partition during the execution — including a re-submission of the identical target while
  it is still in flight (kafkasim logs that as effect ``same``): Kafka would accept it silently, but
  it means the new leader did not recognise work already under way, which is what this test guards;
  partitions outside the plan get no entry at all;
* the executor's throttles were in force on the cluster mid-run and none is left at the end (broker
  rates and topic throttled-replica lists read back from the brokers; no ``migration.*`` record left
  in the replicated state).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.launcher import ServiceCluster
from domain import PartitionMove, Plan, dump_plan
from domain.throttles import BROKER_THROTTLE_KEYS
from kafkaio.admin import KafkaAdmin
from kafkaio.endpoints import parse_endpoints
from tests.support.kafkasim_support import SimProcess, register_fields, sim_process
from tests.support.service_support import service_cluster, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TARGET = 6  # every move adds a replica on this broker: the per-broker cap (5) keeps the rest PENDING
MOVES = 8
SPEC: dict[str, Any] = {
    "seed": 11, "speed": 4.0, "tick_seconds": 1.0,
    "clusters": [{"name": "c1", "brokers": [{"count": 6, "idcs": ["idc-a"], "racks_per_idc": 6, "memory_gb": 16,
                                             "disks": [{"count": 2, "kind": "hdd"}]}],
                  "topics": [{"name": "big", "partitions": 12, "rf": 2, "bytes_in_per_s": 100_000,
                              "size_gb": 0.6, "tail_groups": 1}]}],
}


@pytest.fixture()
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimProcess]:
    # the simulator runs in its own session (the teardown kills its group), so a pytest killed before its
    # teardown (a SIGTERM from a timeout wrapper) used to leave `kafkasim up --realistic` running: it now
    # stops by itself once its parent is gone
    monkeypatch.setenv("KAFKASIM_EXIT_WITH_PARENT", "1")
    with sim_process(SPEC, tmp_path) as s:
        yield s


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[ServiceCluster]:
    with service_cluster(tmp_path, executor_s=1.0, collect_s=2.0, throttle_s=30.0) as c:
        yield c


def cluster_throttles(admin: KafkaAdmin) -> dict[str, Any]:
    """Every migration throttle config set on a broker or topic of the cluster (read from the brokers)."""
    live = admin.live()
    out = {f"broker {b}": cfg for b, cfg in admin.broker_configs(live.alive, BROKER_THROTTLE_KEYS).items() if cfg}
    out |= {f"topic {t}": cfg for t, cfg in admin.topic_configs(live.topic_sizes).items() if cfg}
    return out


@pytest.mark.parametrize("moment", ["submitting", "copying"])
def test_leader_kill_mid_execution_resumes_without_duplicate_submission(
        sim: SimProcess, cluster: ServiceCluster, moment: str) -> None:
    """``moment``: kill as soon as the write-ahead IN_PROGRESS states are visible (usually before or while
    the old leader sends the moves: the new leader must send them, once), or once copies are in flight
    under the executor's throttles (the new leader must recognise them and send only the PENDING ones)."""
    t0 = time.monotonic()
    cluster.wait_up()
    leader = cluster.leader()
    code, body = cluster.request(leader, "POST", "/api/v1/clusters?probe=false", {
        "name": "c1", **register_fields(sim.c1)})
    assert code == 201, body
    wait_for("a collected snapshot",
             lambda: cluster.request(leader, "GET", "/api/v1/clusters/c1/snapshot")[0] == 200, 30)

    before = sim.replicas()
    chosen = sorted(tp for tp, reps in before.items() if TARGET not in reps)[:MOVES]
    assert len(chosen) == MOVES
    targets = {tp: [TARGET, *before[tp][1:]] for tp in chosen}
    plan = Plan("c1", "rebalance", tuple(PartitionMove(tp[0], tp[1], tuple(targets[tp]), (None, None))
                                         for tp in chosen))
    code, body = cluster.request(leader, "POST", "/api/v1/plans/import", json.loads(dump_plan(plan)))
    assert code == 201, body
    plan_id = body["plan_id"]
    assert cluster.request(leader, "POST", f"/api/v1/plans/{plan_id}/approve")[0] == 200
    code, body = cluster.request(leader, "POST", f"/api/v1/plans/{plan_id}/execute", timeout=15)
    assert code == 201, body
    eid = body["execution_id"]
    executing_at = time.monotonic()

    def counts(node: int) -> Counter[str]:
        code, ex = cluster.request(node, "GET", f"/api/v1/executions/{eid}")
        return Counter(t["state"] for t in ex["tasks"].values()) if code == 200 else Counter()

    admin = KafkaAdmin.for_endpoints(parse_endpoints(sim.endpoints, "c1"), client_id="failover-test-checker")
    try:
        if moment == "submitting":
            mid = wait_for("write-ahead IN_PROGRESS tasks", lambda: (
                c if (c := counts(leader))["IN_PROGRESS"] and c["PENDING"] else None), 30, interval=0.01)
        else:  # moves copying on the cluster under throttles, others still waiting for a slot
            mid = wait_for("IN_PROGRESS and PENDING tasks with copies in flight", lambda: (
                c if (c := counts(leader))["IN_PROGRESS"] and c["PENDING"] and sim.reassignments()["seq"] > 0
                else None), 30)
            mid_throttles = wait_for("the executor's throttles on the cluster", lambda: cluster_throttles(admin), 10)
            assert f"broker {TARGET}" in mid_throttles, mid_throttles
        killed_at = time.monotonic()
        cluster.kill(leader)
        submitted_by_old = sim.reassignments()["seq"]  # the killed leader sends nothing more
        new_leader = cluster.leader(timeout=10.0, exclude=leader)
        failover_s = time.monotonic() - killed_at
        assert failover_s <= 2.0, f"failover took {failover_s:.2f} s"

        def finished() -> dict[str, Any] | None:
            code, ex = cluster.request(new_leader, "GET", f"/api/v1/executions/{eid}")
            return ex if code == 200 and ex["status"] not in ("running", "stopping") else None

        final = wait_for("the execution to finish on the new leader", finished, 90, interval=0.5)
        done_s = time.monotonic() - killed_at
        assert final["status"] == "completed", final
        assert Counter(t["state"] for t in final["tasks"].values()) == {"COMPLETED": MOVES}

        after = sim.replicas()
        assert {tp: after[tp] for tp in chosen} == targets, "every moved partition is at its target"
        assert {tp: r for tp, r in after.items() if tp not in targets} == \
            {tp: r for tp, r in before.items() if tp not in targets}, "nothing else moved"

        log = sim.reassignments()
        want = {f"{t}:{p}": {"submitted": 1, "cancelled": 0, "start": 1} for t, p in chosen}
        wrong = {k for k in set(log["counts"]) | set(want) if log["counts"].get(k) != want.get(k)}
        offending = [e for e in log["log"] if f"{e['topic']}:{e['partition']}" in wrong]
        assert log["counts"] == want, f"duplicate, missing or cancelled submissions: {offending}"
        assert log["seq"] > submitted_by_old, "the new leader submitted the moves still PENDING at the kill"

        assert wait_for("no throttle left on the cluster", lambda: not cluster_throttles(admin) or None, 15)
        code, throttles = cluster.request(new_leader, "GET", "/api/v1/throttles")
        assert code == 200
        assert not [t for t in throttles if str(t.get("kind", "")).startswith("migration.")], throttles
    finally:
        admin.close()

    survivors = sorted(cluster.procs)
    hashes = wait_for("identical state on the surviving nodes", lambda: (
        h if len(h := {(cluster.status(n) or {}).get("state_hash") for n in survivors}) == 1 and None not in h
        else None), 10, interval=0.1)
    assert len(hashes) == 1
    print(f"\n[{moment}] startup+plan {executing_at - t0:.1f} s; at the kill {dict(mid)} with "
          f"{submitted_by_old} submissions; failover {failover_s:.2f} s; finished {done_s:.1f} s after the kill; "
          f"{log['seq']} submissions in all; uptime {os.getloadavg()}")
