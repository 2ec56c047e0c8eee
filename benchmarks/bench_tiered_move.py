"""Moving a tiered partition vs. the same partition untiered: bytes copied and time to move, in one run.

Setup: a real tiered-metadata service (one ``guardian serve`` with ``[tiered]``) and a kafkasim cluster of 4
brokers with two identical partitions — ``--rate-mb`` MB/s in, ``retention.ms`` = ``--retention-days``, so
each holds rate × retention bytes — one left as it is, the other switched to ``remote.storage.enable=true``
(``segment.bytes`` 1 GiB, ``local.retention.ms`` = ``--local-hours``) over AlterConfigs: its history is cut
into segments, copied to the remote store and recorded in the service, and local retention trims it to the
tail.  Each partition is then moved (AlterPartitionReassignments over kafka-python: its leader replaced by
a fourth broker) alone, under a ``--throttle-mb`` MB/s replication throttle, while simulated time advances
in 10 s steps (the tiered manager's jobs are waited for between steps).  Reported per partition: the size
DescribeLogDirs gives (what Guardian's executor estimates a move from and measures progress against), the
bytes the new replica copied (the target broker's reassignment bytes-in counter) and the simulated time
until the replica set switched; for the tiered one also where the new replica started
(``LocalStartFetchOffset``) and what the service holds.

Run: ``python -m benchmarks.bench_tiered_move`` (about a minute); writes out/bench/tiered_move.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from benchmarks.common import write_result
from controlplane.launcher import ServiceCluster
from kafkasim.broker.server import SimRunner
from kafkasim.scenarios.scenario import build_federation
from kafkasim.tiering.segments import COPIED
from kafkasim.tiering.tiered import TieredManager, TieredSettings, kafka_topic_id
from tiered.client import TieredClient

CLUSTER = "bench"


def spec(rate: float, retention_days: float) -> dict[str, Any]:
    size_gb = rate * retention_days * 86400 / 1e9
    topic = {"partitions": 1, "rf": 2, "bytes_in_per_s": rate, "size_gb": size_gb, "tail_groups": 0,
             "configs": {"retention.ms": str(int(retention_days * 86_400_000))}}
    return {"seed": 11, "speed": 1e-6, "tick_seconds": 1.0, "clusters": [
        {"name": CLUSTER, "brokers": [{"count": 4, "idcs": ["a"], "racks_per_idc": 2, "memory_gb": 64,
                                       "disks": [{"count": 1, "kind": "nvme", "capacity_gb": 8000}]}],
         "topics": [{"name": "plain", **topic}, {"name": "tiered", **topic}]}]}


class Bench:
    def __init__(self, runner: SimRunner, mgr: TieredManager) -> None:
        self.runner, self.mgr = runner, mgr
        self.fed = runner.server.fed
        self.cl = self.fed.clusters[CLUSTER]
        self.eng = self.fed.engine

    def step(self, seconds: float, dt: float = 1.0) -> None:
        """Advance simulated time, then let the tiered manager's jobs finish and their results land."""
        self.runner.call(lambda: self.eng.advance(seconds, dt))
        deadline = time.monotonic() + 60
        while not self.mgr.idle() and time.monotonic() < deadline:
            time.sleep(0.005)
        self.runner.call(lambda: self.eng.step(1e-3))

    def info(self, topic: str) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            p = self.cl.partition(topic, 0)
            return {"replicas": list(p.replicas), "leader": p.leader, "moving": p.reassignment is not None,
                    "size": float(self.eng.f["size"][p.slot]), "t": self.eng.t,
                    "reassign_in": [float(x) for x in self.eng.b_reassign_in_total]}
        out: dict[str, Any] = self.runner.call(read)
        return out

    def tiered_log(self) -> dict[str, Any]:
        """The tiered partition's log as its leader's remote log manager sees it."""
        def read() -> dict[str, Any]:
            lg = self.mgr.log_of(self.cl, "tiered", 0)
            assert lg is not None
            remote_only = sum(s.size for s in lg.segments if s.state == COPIED and not s.local)
            return {"local_start": lg.local_start, "log_start": lg.log_start, "local_bytes": lg.local_bytes(),
                    "log_bytes": remote_only + lg.local_bytes(), "to_copy": len(lg.to_copy()),
                    "log_end": self.eng.partition_offsets(self.cl.partition("tiered", 0).slot)[1]}
        out: dict[str, Any] = self.runner.call(read)
        return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate-mb", type=float, default=5.0)
    ap.add_argument("--retention-days", type=float, default=7.0)
    ap.add_argument("--local-hours", type=float, default=1.0)
    ap.add_argument("--throttle-mb", type=float, default=100.0)
    a = ap.parse_args()
    rate, throttle = a.rate_mb * 1e6, a.throttle_mb * 1e6
    with tempfile.TemporaryDirectory(prefix="bench-tiered-move-") as tmp:
        base = Path(tmp)
        service = ServiceCluster(base / "svc", size=1, tiered=True)
        service.start_all()
        runner: SimRunner | None = None
        try:
            service.wait_up(60)
            client = TieredClient(service.grpc_addresses, service.token, timeout=30)
            fed = build_federation(spec(rate, a.retention_days))
            mgr = TieredManager(fed, TieredSettings(tuple(service.grpc_addresses), service.token, base / "remote"))
            runner = SimRunner(fed, tiered=mgr)
            runner.start()
            result = run(Bench(runner, mgr), client, runner.endpoints["clusters"][CLUSTER]["bootstrap_servers"],
                         rate, throttle, a)
            client.close()
        finally:
            if runner is not None:
                runner.stop()
            service.close()
    path = write_result("tiered_move", result)
    print(f"\n{'partition':<10} {'DescribeLogDirs size':>22} {'bytes copied':>16} {'time to move':>14}")
    for name in ("plain", "tiered"):
        r = result[name]
        print(f"{name:<10} {r['describe_log_dirs_bytes'] / 1e9:>19.2f} GB {r['copied_bytes'] / 1e9:>13.2f} GB "
              f"{r['move_sim_s']:>12.0f} s")
    t = result["tiered"]
    print(f"tiered: log {t['log_bytes'] / 1e9:.1f} GB, {t['remote_segments']} segments ({t['remote_bytes'] / 1e9:.1f}"
          f" GB) in remote, {t['groups']} groups, {t['deleted_segments']} deleted by retention; new replica started"
          f" at offset {t['follower_start']:,} (local log start then {t['local_start']:,}, log end now"
          f" {t['log_end']:,})")
    print(f"ratio untiered/tiered: {result['copied_ratio']:.0f}x bytes, {result['time_ratio']:.0f}x time; "
          f"wall {result['wall_s']:.0f} s; {path}")
    return 0


def run(b: Bench, client: TieredClient, bootstrap: str, rate: float, throttle: float, a: Any) -> dict[str, Any]:
    wall0 = time.monotonic()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "tiered", configs={
        "retention.ms": str(int(a.retention_days * 86_400_000)), "remote.storage.enable": "true",
        "segment.bytes": str(1 << 30), "local.retention.ms": str(int(a.local_hours * 3_600_000))})])
    # the history is cut into segments, copied, recorded; local retention then keeps the tail
    for _ in range(600):
        b.step(10.0)
        lg = b.tiered_log()
        tail = rate * a.local_hours * 3600 * 1.3
        if not lg["to_copy"] and lg["local_start"] > lg["log_start"] and lg["local_bytes"] < tail:
            break
    out: dict[str, Any] = {"rate_bytes_per_s": rate, "retention_days": a.retention_days,
                           "local_hours": a.local_hours, "throttle_bytes_per_s": throttle}
    for name in ("plain", "tiered"):
        info = b.info(name)
        src, target = info["leader"], next(x for x in sorted(b.cl.brokers) if x not in info["replicas"])
        for broker in (src, target):
            key = "leader" if broker == src else "follower"
            admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(broker), configs={
                f"{key}.replication.throttled.rate": str(int(throttle))})])
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={
            "leader.replication.throttled.replicas": "*", "follower.replication.throttled.replicas": "*",
            **({"retention.ms": str(int(a.retention_days * 86_400_000))} if name == "plain" else {
                "retention.ms": str(int(a.retention_days * 86_400_000)), "remote.storage.enable": "true",
                "segment.bytes": str(1 << 30), "local.retention.ms": str(int(a.local_hours * 3_600_000))})})])
        dirs = admin.describe_log_dirs({name: [0]}, brokers=[src])[0]["log_dirs"]
        (size,) = [p["partition_size"] for d in dirs for t in d["topics"] for p in t["partitions"]]
        gidx = b.cl.brokers[target].gidx
        before = b.info(name)
        log0 = b.tiered_log()
        admin.alter_partition_reassignments({TopicPartition(name, 0): [target, *info["replicas"][1:]]})
        steps = 0
        while b.info(name)["moving"] and steps < 20_000:
            b.step(10.0)
            steps += 1
        after = b.info(name)
        copied = after["reassign_in"][gidx] - before["reassign_in"][gidx]
        row = {"describe_log_dirs_bytes": size, "copied_bytes": copied, "move_sim_s": after["t"] - before["t"],
               "from": src, "to": target, "finished": not after["moving"]}
        if name == "tiered":
            tid = b.cl.topics["tiered"].topic_id
            state = client.current_state(CLUSTER, kafka_topic_id(tid), 0)
            row.update(follower_start=b.mgr.starts.get(((CLUSTER, tid, 0), target), -1),
                       local_start=log0["local_start"], log_start=log0["log_start"], log_end=log0["log_end"],
                       log_bytes=log0["log_bytes"], remote_segments=int(state.state.live_segments),
                       remote_bytes=int(state.state.remote_bytes),
                       groups=int(state.state.groups), fenced=b.mgr.stats["fenced"],
                       deleted_segments=b.mgr.stats["deleted_segments"])
        out[name] = row
    admin.close()
    out["copied_ratio"] = out["plain"]["copied_bytes"] / max(out["tiered"]["copied_bytes"], 1.0)
    out["time_ratio"] = out["plain"]["move_sim_s"] / max(out["tiered"]["move_sim_s"], 1e-9)
    out["wall_s"] = time.monotonic() - wall0
    return out


if __name__ == "__main__":
    raise SystemExit(main())
