"""``guardian exec`` as separate processes against kafkasim over TCP: crash/resume, stop --rollback, release."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from controlplane.executor.live import main_dir
from domain import PartitionMove, Plan
from tests.support.executor_support import (
    guardian,
    guardian_popen,
    one_replica_plan,
    read_state,
    scenario,
    wait_state,
    write_plan,
)

pytestmark = pytest.mark.timeout(150)


def counts(execution: dict[str, Any]) -> Counter[str]:
    return Counter(t["state"] for t in execution["tasks"].values())


def test_restart_mid_run_resumes_without_duplicate_submission(make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(scenario(brokers=6, topics=2, partitions=20, rf=2, size_gb=0.3, speed=20))
    plan = one_replica_plan(sim.live())
    plan_file = write_plan(plan, tmp_path / "plan.json")
    state = tmp_path / "state.json"
    args = ["exec", "run", "-e", str(sim.endpoints_file), "-c", "c1", "--plan", str(plan_file),
            "--state-file", str(state), "--quiet", "--interval", "0.2", "--throttle", "fixed:20MB"]
    first = guardian_popen(*args)
    try:
        at_kill = wait_state(state, lambda e: counts(e)["COMPLETED"] >= 3 and counts(e)["IN_PROGRESS"] >= 1)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    execution = max(at_kill["executions"].values(), key=lambda e: e["id"])
    assert counts(execution)["PENDING"] > 0, "the first process finished before it was killed"
    submitted_before = sum(sim.submissions.values())
    assert submitted_before > 0
    second = guardian(*args)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resuming execution" in second.stdout
    assert "Unclosed" not in second.stderr, second.stderr[-2000:]  # its collector's sessions are closed
    final = max(read_state(state)["executions"].values(), key=lambda e: e["id"])
    assert final["status"] == "completed" and counts(final) == {"COMPLETED": len(plan.moves)}
    assert len(sim.submissions) == len(plan.moves)
    assert set(sim.submissions.values()) == {1}, "a partition was submitted twice"
    after = sim.live()
    for move in plan.moves:
        assert after.partitions[move.id].replicas == move.replicas
    assert sim.leftover_throttles() == {}
    assert read_state(state)["throttles"].get("c1", {}) == {}
    again = guardian(*args)  # the same command once more: nothing to do, nothing submitted
    assert again.returncode == 0 and "already completed" in again.stdout
    assert set(sim.submissions.values()) == {1}


def test_stop_with_rollback_restores_the_original_assignment(make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(scenario(brokers=6, topics=2, partitions=10, rf=2, size_gb=1.0, speed=5))
    before = {tp: p.replicas for tp, p in sim.live().partitions.items()}
    plan_file = write_plan(one_replica_plan(sim.live()), tmp_path / "plan.json")
    state = tmp_path / "state.json"
    run = guardian_popen("exec", "run", "-e", str(sim.endpoints_file), "-c", "c1", "--plan", str(plan_file),
                         "--state-file", str(state), "--quiet", "--interval", "0.2", "--throttle", "fixed:1MB")
    try:
        # progress is written after the pass set its throttles
        wait_state(state, lambda e: counts(e)["IN_PROGRESS"] >= 3 and (e.get("progress") or {}).get("throttles"))
        assert sim.leftover_throttles(), "no throttle was set while moves were in flight"
        stop = guardian("exec", "stop", "--state-file", str(state), "--rollback")
        assert stop.returncode == 0, stop.stderr
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
    assert run.returncode == 0, err[-2000:]
    assert "stopped" in out
    final = max(read_state(state)["executions"].values(), key=lambda e: e["id"])
    assert final["status"] == "stopped"
    assert counts(final) == {"ABORTED": len(final["tasks"])}
    after = sim.live()
    assert after.reassignments == {}
    assert {tp: p.replicas for tp, p in after.partitions.items()} == before
    assert sum(sim.cancels.values()) >= 3
    assert sim.leftover_throttles() == {}
    assert read_state(state)["throttles"].get("c1", {}) == {}


@pytest.mark.timeout(300)  # drain + restore of 3 of 7 brokers over SASL_SSL: 125-235 s on a loaded 2-core machine
def test_rolling_release_drains_three_brokers_in_batches_and_restores_them(make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(scenario(brokers=7, topics=2, partitions=15, rf=3, size_gb=0.05, speed=20))
    live0 = sim.live()
    dirs0 = sim.admin.log_dirs(live0.alive)
    original = {tp: (p.replicas, p.leader, tuple(main_dir(dirs0, tp[0], tp[1], b).log_dir for b in p.replicas))  # type: ignore[union-attr]
                for tp, p in live0.partitions.items()}
    state = tmp_path / "state.json"
    common = ["-e", str(sim.endpoints_file), "-c", "c1", "--state-file", str(state), "--quiet", "--interval", "0.2"]
    drain = guardian("exec", "drain", "--brokers", "1,2,3", "--batch-size", "1", *common, timeout=240)
    assert drain.returncode == 0, drain.stderr[-2000:]
    drained = sim.live(include_lease=True)  # Guardian's lease log leaves the drained brokers too
    assert not [tp for tp, p in drained.partitions.items() if {1, 2, 3} & set(p.replicas)]
    assert not [tp for tp, p in drained.partitions.items() if p.leader in (1, 2, 3)]
    assert drained.under_replicated == 0
    execution = max(read_state(state)["executions"].values(), key=lambda e: e["id"])
    assert execution["status"] == "completed"
    assert {t["batch"] for t in execution["tasks"].values()} == {0, 1, 2}
    assert any(t["action"] == "elect_leader" for t in execution["tasks"].values())
    watch = guardian("exec", "watch", "--state-file", str(state), "--once")
    assert watch.returncode == 0 and "completed" in watch.stdout

    restore = guardian("exec", "restore", *common, timeout=240)
    assert restore.returncode == 0, restore.stderr[-2000:]
    live1 = sim.live()
    dirs1 = sim.admin.log_dirs(live1.alive)
    assert live1.under_replicated == 0 and live1.reassignments == {}
    for tp, (replicas, leader, dirs) in original.items():
        p = live1.partitions[tp]
        assert (p.replicas, p.leader) == (replicas, leader), tp
        assert tuple(main_dir(dirs1, tp[0], tp[1], b).log_dir for b in p.replicas) == dirs, tp  # type: ignore[union-attr]
    assert sim.leftover_throttles() == {}


def test_bad_input_gets_a_clear_error_and_starts_nothing(make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(scenario(brokers=4, topics=1, partitions=4, rf=2, size_gb=0.01, speed=20))
    live = sim.live()
    state = tmp_path / "state.json"
    common = ["-e", str(sim.endpoints_file), "-c", "c1", "--state-file", str(state), "--quiet"]
    good = write_plan(one_replica_plan(live), tmp_path / "good.json")
    missing = guardian("exec", "run", "-e", str(tmp_path / "nope.json"), "-c", "c1", "--plan", str(good))
    assert missing.returncode == 2 and "cannot read endpoints file" in missing.stderr
    other = guardian("exec", "run", "-e", str(sim.endpoints_file), "-c", "west", "--plan", str(good))
    assert other.returncode == 2 and "the plan is for cluster 'c1', not 'west'" in other.stderr
    (tmp_path / "broken.json").write_text('{"format": "guardian.plan/v1", "cluster": "c1"')
    broken = guardian("exec", "run", *common, "--plan", str(tmp_path / "broken.json"))
    assert broken.returncode == 2 and "invalid plan" in broken.stderr
    bad_throttle = guardian("exec", "run", *common, "--plan", str(good), "--throttle", "fixed:lots")
    assert bad_throttle.returncode == 2 and "bad rate" in bad_throttle.stderr
    tp, p = sorted(live.partitions.items())[0]
    impossible = write_plan(Plan("c1", "rebalance", (PartitionMove(tp[0], tp[1], (99, p.replicas[1]), (None, None)),)),
                            tmp_path / "impossible.json")
    refused = guardian("exec", "run", *common, "--plan", str(impossible))
    assert refused.returncode == 1 and "[unknown-broker]" in refused.stderr
    assert sim.submissions == Counter()
    assert not [e for e in read_state(state)["executions"].values()]


def test_exec_run_measures_ingress_so_a_fixed_throttle_below_it_still_finishes(make_sim: Any, tmp_path: Path) -> None:
    # producers write ~2 MB/s into each partition and the operator asked for 1 MB/s: a follower
    # throttled below what its partition receives never catches up; with no service and no snapshot,
    # `exec run` measures the ingress from the live cluster and keeps each copy above it
    sim = make_sim(scenario(brokers=4, topics=1, partitions=3, rf=2, size_gb=0.004, bytes_in=2e6, speed=20))
    plan_file = write_plan(one_replica_plan(sim.live()), tmp_path / "plan.json")
    run = guardian("exec", "run", "-e", str(sim.endpoints_file), "-c", "c1", "--plan", str(plan_file),
                   "--state-file", str(tmp_path / "state.json"), "--quiet", "--interval", "0.2",
                   "--throttle", "fixed:1MB", timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    final = max(read_state(tmp_path / "state.json")["executions"].values(), key=lambda e: e["id"])
    assert final["status"] == "completed" and counts(final) == {"COMPLETED": 3}
    assert sim.leftover_throttles() == {}


def test_exec_cleanup_undoes_what_a_dead_executor_left_once_its_lease_expired(make_sim: Any, tmp_path: Path) -> None:
    sim = make_sim(scenario(brokers=6, topics=2, partitions=10, rf=2, size_gb=1.0, speed=5))
    before = {tp: p.replicas for tp, p in sim.live().partitions.items()}
    plan_file = write_plan(one_replica_plan(sim.live()), tmp_path / "plan.json")
    common = ["-e", str(sim.endpoints_file), "-c", "c1", "--quiet", "--interval", "0.2", "--lease-intervals", "5"]
    run = guardian_popen("exec", "run", *common, "--plan", str(plan_file), "--state-file", str(tmp_path / "dead.json"),
                         "--throttle", "fixed:1MB")
    try:
        wait_state(tmp_path / "dead.json",
                   lambda e: counts(e)["IN_PROGRESS"] >= 3 and (e.get("progress") or {}).get("throttles"))
    finally:
        run.send_signal(signal.SIGKILL)  # the executor dies with moves in flight and throttles set
        run.wait(10)
    assert sim.leftover_throttles() and sim.live().reassignments
    other = ["--state-file", str(tmp_path / "operator.json")]  # another executor: it must wait for the expiry
    held = guardian("exec", "cleanup", *common, *other)
    assert held.returncode == 1 and "is leased to" in held.stderr, held.stdout + held.stderr
    deadline = time.monotonic() + 30
    while True:
        cleanup = guardian("exec", "cleanup", *common, *other)
        if cleanup.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    assert "cleaned up after" in cleanup.stdout and "move(s) cancelled" in cleanup.stdout
    assert sim.leftover_throttles() == {}
    assert sim.live().reassignments == {}
    assert {tp: p.replicas for tp, p in sim.live().partitions.items()} == before
    again = guardian("exec", "cleanup", *common, *other)
    assert again.returncode == 0 and "no executor left" in again.stdout
