"""A JBOD log dir that dies under real Apache Kafka (``guardian lab``), healed by Guardian's self-healing (issue 33).

The lab gives each log dir an ext4 file system on a loop device of its own. The fault is a dead disk as Kafka meets
it in production: the file system under one log dir of a broker is shut down (``guardian lab fail-log-dir``:
``EXT4_IOC_SHUTDOWN``, every read and write returns ``EIO``), then records are produced to every partition. Kafka
itself takes the dir offline (KIP-112: the first ``IOException`` in the dir), checked here through kafka-python and
not through Guardian: DescribeLogDirs answers ``KAFKA_STORAGE_ERROR`` (56) for the dir, Metadata lists its replicas
in ``offline_replicas``, AlterReplicaLogDirs of one of its replicas to the broker's other dir (and of another replica
onto it) answers 56 too, and the broker runs on.

Guardian governs the lab as ``guardian serve`` does (the served API, the cluster registered with ``guardian clusters
register``, self-healing enabled through the API, its loops running) and sees the fault only through what a real
deployment offers (DescribeLogDirs errors, offline replicas in Metadata). Shown: one ``log-dir-offline`` anomaly for
the fault; its fix re-creates the dead dir's replicas on other brokers (Kafka cannot move an offline replica to
another dir of its broker); under-replicated partitions reach 0 within grace (none for a dead dir) + the heal's
bytes ÷ the allowed heal rate + 2 collection intervals (as they ran) + 2 executor passes, printed; the anomaly
closes ``fixed`` and the emptied dead dir (still offline in Kafka) opens no second one; no self-healing plan is
refused; the broker is alive throughout; the controller logs no ERROR. The lab is stopped and its mounts and loop
devices released whatever happens. 100–125 s with the lab's start and stop on two loaded cores.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from kafka.admin import NewTopic
from kafka.structs import TopicPartitionReplica

from controlplane.config import IntervalsConf, TokenConf, hash_token
from controlplane.logs import setup_logging
from kafkalab import lab as kl
from kafkalab.lab import fail_log_dir, pid_alive
from tests.support.healing_support import healing_job
from tests.support.lab_support import Lab, alive_brokers, replica_sizes, start_lab, wait_for
from tests.support.service_support import served_service

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]

TOKEN = "lab-admin-token"
H = {"Authorization": f"Bearer {TOKEN}", "X-Guardian-Reason": "lab e2e: dead log dir"}
TOPIC = "jbod"
PARTITIONS = 6
PARTITION_BYTES = 10_000_000
VICTIM = 3
COLLECT_S = 2.0
EXECUTOR_S = 1.0
HEAL_RATE = 2_000_000
"""bytes/s: the allowed heal rate asked (``heal_rate_bytes_per_s``); the bound counts the heal's bytes at it."""
GRACE_S = 0.0
"""A failed log dir is healed without a grace period (the grace is a dead broker's: planned restarts)."""
STORAGE_ERROR = 56


def guardian(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "controlplane.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env}, check=False)


def api(url: str, method: str, path: str, **kw: Any) -> Any:
    r = httpx.request(method, url + path, headers=H, timeout=30, **kw)
    assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
    return r.json()


def produce(lab: Lab, per_partition: int, record: int = 1000) -> None:
    """``per_partition`` bytes to each partition of the topic (acks=1: a write to a dead dir fails on its broker)."""
    producer = lab.producer(acks=1, linger_ms=20, batch_size=256 * 1024, request_timeout_ms=15_000)
    payload = os.urandom(record)
    try:
        for p in range(PARTITIONS):
            for _ in range(per_partition // record):
                producer.send(TOPIC, payload, partition=p)
        producer.flush(60)
    finally:
        producer.close(5)


def dir_errors(lab: Lab, broker: int) -> dict[str, int]:
    """``log dir -> error code`` of ``broker``'s dirs as Kafka's DescribeLogDirs answers (through kafka-python)."""
    admin = lab.admin(client_id="test-dirs")
    try:
        return {str(d["log_dir"]): int(d["error_code"])
                for resp in admin.describe_log_dirs(brokers=[broker]) for d in resp["log_dirs"]}
    finally:
        admin.close()


def offline_replicas(lab: Lab) -> dict[int, list[int]]:
    """``partition -> offline replicas`` of the topic (Metadata)."""
    admin = lab.admin(client_id="test-offline")
    try:
        (meta,) = admin.describe_topics([TOPIC])
    finally:
        admin.close()
    return {int(p["partition_index"]): list(p.get("offline_replicas") or []) for p in meta["partitions"]
            if p.get("offline_replicas")}


def alter_dirs(lab: Lab, moves: dict[tuple[int, str], str]) -> dict[str, str]:
    """AlterReplicaLogDirs of the victim's replicas ``(partition, dest dir)`` -> each move's Kafka error name."""
    admin = lab.admin(client_id="test-alter-dirs")
    try:
        res = admin.alter_replica_log_dirs({TopicPartitionReplica(TOPIC, p, VICTIM): d for p, d in moves})
    finally:
        admin.close()
    label = {p: why for (p, _), why in moves.items()}
    return {label[k.partition]: getattr(err, "__name__", str(err)) for k, err in res.items()}


def lab_mounts(lab_dir: Path) -> list[str]:
    """Mounts left under ``lab_dir`` (``/proc/mounts``)."""
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(str(lab_dir))]


def loops_of(lab_dir: Path) -> list[str]:
    """Loop devices still backed by an image under ``lab_dir``."""
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=False).stdout
    return [line for line in out.splitlines() if str(lab_dir) in line]


def test_a_dead_log_dir_is_healed_on_real_kafka(tmp_path: Path) -> None:
    controller_log = io.StringIO()
    handler = setup_logging("INFO", stream=controller_log)
    base = tmp_path / "lab"
    base.mkdir()
    t_start = time.monotonic()
    try:  # a lab of its own, never a developer's (GUARDIAN_TEST_LAB): the test kills one of its disks
        lab = start_lab(base, brokers=3, log_dirs=2, log_dir_bytes=256 << 20)
        try:
            figures = heal_a_dead_dir(lab, tmp_path)
        finally:
            problems = kl.down(lab.directory)  # unmounts the failed file system too
            left = lab_mounts(lab.directory) + loops_of(lab.directory)
    finally:
        logging.getLogger().removeHandler(handler)
    assert not problems and not left, f"the lab left behind: {problems} {left}"
    lines = controller_log.getvalue().splitlines()
    errors = [line for line in lines if " ERROR " in line or " CRITICAL " in line]
    print(f"\n{figures}; controller log {len(lines)} lines, {len(errors)} ERROR; "
          f"{time.monotonic() - t_start:.0f} s with the lab's start and stop, mounts and loop devices released")
    assert not errors, "\n".join(errors[:20])


def heal_a_dead_dir(lab: Lab, tmp_path: Path) -> str:
    admin = lab.admin()
    try:  # RF 2 over the three brokers: every dir of every broker holds replicas
        admin.create_topics([NewTopic(TOPIC, replica_assignments={
            p: [1 + p % 3, 1 + (p + 1) % 3] for p in range(PARTITIONS)})])
    finally:
        admin.close()
    produce(lab, PARTITION_BYTES)
    def all_written() -> dict[tuple[int, int, str, bool], int] | None:
        s = replica_sizes(lab, TOPIC)
        return s if len(s) == 2 * PARTITIONS and min(s.values()) >= PARTITION_BYTES else None
    sizes = wait_for("every replica's size", all_written, 60)
    held: dict[str, list[int]] = {}
    for (p, b, d, _), _size in sizes.items():
        if b == VICTIM:
            held.setdefault(d, []).append(p)
    dead = max(sorted(held), key=lambda d: len(held[d]))
    on_dead = sorted(held[dead])
    healthy = next(d for d in lab.log_dirs(VICTIM) if d != dead)
    on_healthy = sorted(held[healthy])[0]
    bytes_on_dead = sum(sizes[(p, VICTIM, dead, False)] for p in on_dead)
    victim_pid = lab.node(VICTIM)["pid"]

    with served_service(tmp_path / "guardian", intervals=IntervalsConf(collect_s=COLLECT_S, throttle_s=1.0,
                                                                        executor_s=EXECUTOR_S),
                        tokens=[TokenConf(name="op", role="admin", sha256=hash_token(TOKEN))]) as (svc, url):
        reg = guardian("clusters", "register", "-c", lab.cluster, "-e", str(lab.endpoints_file), "--url", url,
                       env={"GUARDIAN_TOKEN": TOKEN})
        assert reg.returncode == 0, reg.stdout + reg.stderr
        api(url, "PUT", f"/api/v1/clusters/{lab.cluster}/self-healing",
            json={"enabled": True, "grace_s": 10.0, "heal_rate_bytes_per_s": HEAL_RATE})
        svc.scheduler.start()
        wait_for("a first usable snapshot of the lab", lambda: svc.ctx.snapshots.get(lab.cluster), 60)
        assert not api(url, "GET", "/api/v1/anomalies?open=true"), "no anomaly before the fault"

        # ---- the fault: the disk under the dir dies; the next writes meet EIO and Kafka takes the dir offline
        rounds0 = healing_job(svc).counters[lab.cluster]["rounds"]
        fail_log_dir(lab.directory, VICTIM, dead)
        t0 = time.monotonic()
        produce(lab, 200_000)
        def dir_offline() -> dict[str, int] | None:
            e = dir_errors(lab, VICTIM)
            return e if e.get(dead) == STORAGE_ERROR else None
        errs = wait_for("Kafka to report the dir offline (DescribeLogDirs)", dir_offline, 30)
        t_kafka = time.monotonic() - t0
        refused = alter_dirs(lab, {(on_dead[0], healthy): "offline replica", (on_healthy, dead): "offline dir"})
        assert all(code == 0 for d, code in errs.items() if d != dead), errs
        def listed_offline() -> dict[int, list[int]] | None:
            o = offline_replicas(lab)
            return o if sorted(p for p, bs in o.items() if VICTIM in bs) == on_dead else None
        offline = wait_for("Metadata to list the dir's replicas offline", listed_offline, 30)
        key = f"log-dir-offline:{VICTIM}:{dead}"

        def of_key() -> list[dict[str, Any]]:
            return [a for a in api(url, "GET", f"/api/v1/anomalies?cluster={lab.cluster}") if a["key"] == key]
        wait_for(f"anomaly {key}", of_key, 60, 0.5)
        t_detect = time.monotonic() - t0
        fixing = wait_for("the heal to start", lambda: [a for a in of_key() if a.get("execution_id")], 60, 0.5)[0]
        t_fix = time.monotonic() - t0
        execution = api(url, "GET", f"/api/v1/executions/{fixing['execution_id']}")
        heal = dict((execution.get("options") or {}).get("heal") or {})
        rate = float(heal.get("rate_bytes_per_s") or 0.0)

        probe = lab.admin(client_id="test-heal")  # one client: a SASL_SSL handshake per reading costs ~1 s
        in_force: dict[int, float] = {}  # broker -> the highest migration rate the executor set for the heal
        try:
            def healed() -> bool:
                for b, r in svc.ctx.store.read(lambda st: [
                        (int((v.get("target") or {}).get("broker", -1)), float(v.get("rate_bytes_per_s") or 0.0))
                        for v in st["throttles"].get(lab.cluster, {}).values() if v.get("kind") == "migration.broker"]):
                    in_force[b] = max(in_force.get(b, 0.0), r)
                metas = probe.describe_topics()
                urp = [p for t in metas for p in t["partitions"] if set(p["isr_nodes"]) != set(p["replica_nodes"])]
                left = [p for t in metas if t["name"] == TOPIC for p in t["partitions"]
                        if p["partition_index"] in on_dead and VICTIM in p["replica_nodes"]]
                return not urp and not left
            wait_for("0 under-replicated partitions, none left on the dead dir", healed, 120, 0.25)
        finally:
            probe.close()
        t_healed = time.monotonic() - t0
        rounds = healing_job(svc).counters[lab.cluster]["rounds"] - rounds0
        fixed = wait_for("the anomaly fixed", lambda: [a for a in of_key() if a["status"] == "fixed"], 60, 0.5)[0]
        t_fixed = time.monotonic() - t0
        time.sleep(3 * COLLECT_S)  # a few more rounds: the emptied dir is still offline in Kafka
        after = of_key()
        still = dir_errors(lab, VICTIM)
        plans = [p for p in api(url, "GET", f"/api/v1/plans?cluster={lab.cluster}")
                 if p["proposed_by"] == "self-healing"]
        others = [a for a in api(url, "GET", f"/api/v1/anomalies?cluster={lab.cluster}")
                  if a["kind"] in ("log-dir-offline", "broker-dead", "disk-fail-slow")]
        alive = alive_brokers(lab)

    interval = max(COLLECT_S, t_healed / max(rounds, 1))  # a collection interval as it ran (>= the configured)
    set_mb = {b: round(r / 1e6, 1) for b, r in sorted(in_force.items())}
    copied = heal.get("bytes", 0) / max(t_healed - t_fix, 1e-3)
    # the limit (grace + bytes / R + 2 collection intervals) plus the executor's two passes (it submits the
    # plan at its next pass and sees the reassignment done at a later one): on the lab, where the copies run far
    # above R, those passes and Kafka's reassignment commit are most of the time
    bound = GRACE_S + heal.get("bytes", 0) / rate + 2 * interval + 2 * EXECUTOR_S if rate > 0 else float("inf")
    figures = (f"log dir {dead} of broker {VICTIM} failed (EIO) holding {len(on_dead)} replicas, "
               f"{bytes_on_dead / 1e6:.1f} MB: Kafka took it offline after {t_kafka:.1f} s (DescribeLogDirs "
               f"{STORAGE_ERROR}, offline replicas {offline}; AlterReplicaLogDirs {refused}); anomaly at "
               f"{t_detect:.1f} s, fix started {t_fix:.1f} s "
               f"(heal {heal.get('bytes', 0) / 1e6:.1f} MB at >= {rate / 1e6:.1f} MB/s); under-replicated 0 at "
               f"{t_healed:.1f} s after the fault (bound: grace {GRACE_S:.0f} + bytes / R + 2 collection intervals of "
               f"{interval:.1f} s + 2 executor passes of {EXECUTOR_S:.0f} s = {bound:.1f} s; {copied / 1e6:.1f} MB/s "
               f"from the fix's start to the end, migration rates set up to {set_mb} MB/s); "
               f"fixed at {t_fixed:.1f} s; "
               f"{len(plans)} self-healing plan(s) {[p['status'] for p in plans]}; anomalies "
               f"{[(a['key'], a['status']) for a in others]}")
    print(f"\n{figures}")
    assert len(after) == 1 and after[0]["id"] == fixed["id"] and after[0]["status"] == "fixed", after
    # Kafka refuses to move a replica off the dead dir within its broker, and onto it: heals go to other brokers
    assert refused == {"offline replica": "KafkaStorageError", "offline dir": "KafkaStorageError"}, refused
    assert still.get(dead) == STORAGE_ERROR, still  # Kafka still has the dir offline: its residue opened nothing
    assert [a["key"] for a in others] == [key], others
    assert plans and not [p for p in plans if p["status"] in ("failed", "rejected", "expired")], plans
    assert rate > 0 and heal.get("bytes", 0) >= bytes_on_dead * 0.9, heal
    assert t_healed <= bound, (t_healed, bound, heal)
    assert VICTIM in alive and pid_alive(victim_pid), (alive, victim_pid)
    return figures
