"""Yelp kafka-utils' balancers as a peer in the planner benchmark, run in their own venv on our snapshot.

Goal: score kafka-utils' ``kafka-cluster-manager rebalance`` (``PartitionCountBalancer``, and
``GeneticBalancer`` with a load/size measurer) with our own figures on the very snapshot Guardian plans.

Method: kafka-utils 4.1.0 pins kafka-python 1.4.7 and Guardian needs >= 3, so it lives in an isolated
venv (``out/peers/kafka-utils-venv``, made on first use with ``python -m venv`` + pip, reused after) and
runs as a subprocess: :func:`kafka_utils_request` turns the snapshot into plain data (per pool: brokers
with rack and liveness, partitions with replicas, weight = mean disk bytes/s per replica, size = bytes),
``benchmarks/kafka_utils_driver.py`` runs the balancer under kafka-utils' interpreter, and
:func:`plan_from_kafka_utils` turns the proposed broker lists back into a plan (log dirs by the broker's
own rule, a preferred-replica election where the first replica changed, :mod:`benchmarks.external_assignment`).

Guarantee: never raises for the peer's sake — a missing venv, a failed install, a balancer error or a
run past ``timeout`` come back as a :class:`PeerRun` with ``plan=None`` and a one-line ``status``
("did not finish in 120 s"). The two conversions are pure (unit-tested without the venv).
Cost: the conversions are O(replicas); the first run installs kafka-utils (~10 s from a package index).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.external_assignment import plan_from_assignment
from domain import ClusterSnapshot, PartitionId, Plan

KAFKA_UTILS = "kafka-utils==4.1.0"
VENV = Path(__file__).resolve().parents[1] / "out" / "peers" / "kafka-utils-venv"
DRIVER = Path(__file__).resolve().parent / "kafka_utils_driver.py"


@dataclass(frozen=True)
class PeerRun:
    """One balancer run: the plan (``None`` when it did not produce one), why, and what it cost."""

    name: str
    status: str
    plan: Plan | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)


def kafka_utils_request(snapshot: ClusterSnapshot, balancer: str, balancer_args: Sequence[str] = (),
                        max_partition_movements: int | None = None) -> dict[str, Any]:
    """The driver's input for ``snapshot``: one cluster per pool (brokers of the pool, its topics' partitions).

    Weight of a partition = its disk bytes/s per replica averaged over its replicas (every replica writes
    ``bytes_in_per_s``, the leader also reads ``disk_read_bytes_per_s``); size = ``size_bytes``.
    """
    pools: list[dict[str, Any]] = []
    for pool in sorted({b.pool for b in snapshot.brokers} | {t.pool for t in snapshot.topics}):
        brokers = [[b.id, b.rack, b.is_alive] for b in sorted(snapshot.brokers, key=lambda b: b.id) if b.pool == pool]
        partitions = []
        for topic in snapshot.topics:
            if topic.pool != pool:
                continue
            for p in topic.partitions:
                weight = sum(p.replica_load(b) for b in p.replicas) / max(len(p.replicas), 1)
                partitions.append([p.topic, p.partition, list(p.replicas), weight, float(p.size_bytes)])
        if partitions and brokers:
            pools.append({"pool": pool, "brokers": brokers, "partitions": partitions})
    return {"balancer": balancer, "balancer_args": list(balancer_args),
            "max_partition_movements": max_partition_movements, "pools": pools}


def plan_from_kafka_utils(snapshot: ClusterSnapshot, answer: Mapping[str, Any], kind: str) -> Plan:
    """Our plan for the driver's answer: each changed partition to its proposed brokers, then a
    preferred-replica election (kafka-utils balances leaders by replica order)."""
    targets: dict[PartitionId, tuple[int, ...]] = {
        (str(t), int(p)): tuple(int(b) for b in replicas) for t, p, replicas in answer["assignment"]
    }
    known = snapshot.index.partition_by_id
    unknown = [pid for pid in targets if pid not in known]
    if unknown:
        raise ValueError(f"kafka-utils proposed partitions the snapshot lacks: {unknown[:3]}")
    return plan_from_assignment(snapshot, targets, kind, elect_preferred=True)


def ensure_venv(venv: Path = VENV, requirement: str = KAFKA_UTILS, timeout: float = 600.0) -> str | None:
    """Make (once) the isolated venv with kafka-utils; ``None`` when ready, else why not."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import kafka_utils.kafka_cluster_manager.cluster_info.genetic_balancer"]
    env = _isolated_env()
    if python.exists() and subprocess.run(probe, env=env, capture_output=True).returncode == 0:
        return None
    venv.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [[base, "-m", "venv", "--clear", str(venv)],
             [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement]]
    for step in steps:
        try:
            done = subprocess.run(step, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"{' '.join(step[:3])} did not finish in {timeout:.0f} s"
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"{' '.join(step[:4])} failed: {last[0][:300]}"
    if subprocess.run(probe, env=env, capture_output=True).returncode != 0:
        return f"{requirement} installed but does not import"
    return None


def run_kafka_utils(snapshot: ClusterSnapshot, balancer: str = "count", timeout: float = 300.0,
                    balancer_args: Sequence[str] = (), max_partition_movements: int | None = None,
                    venv: Path = VENV) -> PeerRun:
    """Run kafka-utils' ``balancer`` (``count`` or ``genetic``) on ``snapshot`` within ``timeout`` seconds.

    ``max_partition_movements``: the genetic balancer needs one (its command line defaults to 1; each of
    its generations moves at most one partition per state, so its generation count, 100, never binds);
    the count balancer takes none (its full proposal is scored).
    """
    name = f"kafka-utils {balancer}"
    problem = ensure_venv(venv)
    if problem:
        return PeerRun(name, f"not available: {problem}")
    request = kafka_utils_request(snapshot, balancer, balancer_args, max_partition_movements)
    with tempfile.TemporaryDirectory(prefix="kafka-utils-peer-") as tmp:
        source, target = Path(tmp) / "in.json", Path(tmp) / "out.json"
        source.write_text(json.dumps(request))
        t0 = time.perf_counter()
        try:
            subprocess.run([str(venv / "bin" / "python"), str(DRIVER), str(source), str(target)],
                           env=_isolated_env(), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return PeerRun(name, f"did not finish in {timeout:.0f} s", seconds=time.perf_counter() - t0)
        wall = time.perf_counter() - t0
        if not target.exists():
            return PeerRun(name, "error: the driver wrote no answer", seconds=wall)
        answer = json.loads(target.read_text())
    if answer.get("status") != "ok":
        return PeerRun(name, f"error: {answer.get('error', '?')}", seconds=wall, details=answer)
    plan = plan_from_kafka_utils(snapshot, answer, kind=f"kafka-utils-{balancer}")
    details = {"version": answer.get("version"), "scores": answer.get("scores"), "process_seconds": round(wall, 3)}
    return PeerRun(name, "ok", plan, float(answer["seconds"]), float(answer["cpu_seconds"]), details)


def _isolated_env() -> dict[str, str]:
    """The environment without our interpreter's paths (the peer must see only its own venv)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env
