"""A fixed command log touching every command type of the replicated state (refusals included): the
wire-format test replays it and compares results and the canonical state with a recorded golden file."""

from __future__ import annotations

from typing import Any

from controlplane.state.commands import validate_command
from controlplane.state.state import GuardianState
from controlplane.state.versions import prepare
from raft.protocol import CommandRejected, JsonDict, canonical_json

AT = "2026-11-21T10:00:00Z"
TASK = {"key": "t-0", "topic": "t", "partition": 0, "action": "reassign", "source_replicas": [1, 2],
        "target_replicas": [3, 2], "size_bytes": 100}
TASK1 = {**TASK, "key": "t-1", "partition": 1, "after": ["t-0"]}


def _c(kind: str, /, **payload: Any) -> JsonDict:
    return {"type": kind, "meta": {"who": "alice", "why": f"why {kind}", "at": AT}, **payload}


SCRIPT: list[JsonDict] = [
    _c("cluster.register", name="c1", bootstrap_servers=["127.0.0.1:9092"], metrics_urls={"1": "http://m:1"},
       capabilities={"partition_throttle": True}),
    _c("cluster.register", name="c2", bootstrap_servers=["127.0.0.1:9093"]),
    _c("cluster.topology", name="c1", idc_overrides={"1": "idc-a"}),
    _c("cluster.topology", name="nope"),
    _c("state.version", version=2),
    _c("cluster.labels", name="c1", labels={"team": "core", "owner": "bob"}),
    _c("cluster.register", name="c1", bootstrap_servers=["127.0.0.1:9092", "127.0.0.1:9094"]),
    _c("cluster.auto_rebalance", name="c1", enabled=True, threshold=1.5),
    _c("placement.set", cluster="c1", placement={"idc-a": 2}),
    _c("placement.set", cluster="c1", topic="t", placement={"idc-a": 1, "idc-b": 1}),
    _c("placement.set", cluster="c1", topic="t", placement=None),
    _c("pool.assign", cluster="c1", pool="hot", brokers=[1, 2]),
    _c("pool.assign", cluster="c1", pool="cold", brokers=[2, 3]),
    _c("maintenance.set", cluster="c1", broker=2, enabled=True),
    _c("maintenance.set", cluster="c1", broker=3, enabled=True),
    _c("maintenance.set", cluster="c1", broker=3, enabled=False),
    _c("ids.allocate", count=5),
    _c("plan.propose", cluster="c1", kind="rebalance", plan={"moves": 1}, params={"threshold": 1.2},
       snapshot_taken_at=AT),
    _c("plan.approve", plan_id=6),
    _c("plan.approve", plan_id=6),
    _c("plan.reject", plan_id=6),
    _c("plan.propose", cluster="c1", kind="drain", plan={}, prerequisites={"pools": {"x": [1]}}),
    _c("plan.reject", plan_id=7),
    _c("execution.start", plan_id=7, tasks=[]),
    _c("execution.start", plan_id=6, tasks=[TASK, TASK1], caps={"per_broker": 2}, options={"kind": "rebalance"}),
    _c("execution.start", plan_id=6, tasks=[TASK]),
    _c("cluster.remove", name="c1"),
    _c("execution.tasks", execution_id=8, updates=[{"key": "t-0", "state": "IN_PROGRESS", "bytes_done": 10}]),
    _c("execution.tasks", execution_id=8, updates=[{"key": "t-0", "state": "PENDING"}]),
    _c("execution.tasks", execution_id=8, updates=[{"key": "zz", "state": "PENDING"}]),
    _c("execution.caps", execution_id=8, caps={"per_disk": 1}),
    _c("execution.progress", execution_id=8, progress={"rate": 5}),
    _c("execution.finish", execution_id=8, status="completed"),
    _c("execution.finish", execution_id=8),
    _c("execution.stop", execution_id=8, rollback=True),
    _c("execution.stop", execution_id=8),
    _c("execution.tasks", execution_id=8, updates=[{"key": "t-0", "state": "ABORTING", "reason": "stop"},
                                                   {"key": "t-1", "state": "ABORTED"}]),
    _c("execution.tasks", execution_id=8, updates=[{"key": "t-0", "state": "ABORTED", "reader": -1}]),
    _c("execution.finish", execution_id=8, status="stopped"),
    _c("execution.refused", cluster="c1", plan_id=6, reason="foreign lease"),
    _c("plan.propose", cluster="c1", kind="migrate-idc", plan={"step": 1}),
    _c("plan.propose", cluster="c1", kind="migrate-idc", plan={"step": 2}),
    _c("plan.approve", plan_id=9),
    _c("migration.start", cluster="c1", topics=["t"], placement={"idc-a": 2}, steps=[9, 10]),
    _c("plan.approve", plan_id=10),
    _c("migration.start", cluster="c1", topics=["t"], placement={"idc-a": 2}, steps=[9, 10],
       previous_placement={"t": None}, caps={"per_broker": 1}, options={"x": 1}),
    _c("migration.start", cluster="c1", topics=["t"], placement={"idc-a": 2}, steps=[9]),
    _c("migration.step", migration_id=11, execution_id=20),
    _c("migration.step", migration_id=11, step=1, execution_id=21),
    _c("migration.step", migration_id=11, step=5),
    _c("migration.finish", migration_id=11),
    _c("migration.finish", migration_id=11, status="completed"),
    _c("migration.stop", migration_id=11),
    _c("migration.start", cluster="c1", topics=["t"], placement={"idc-a": 2}, steps=[9]),
    _c("migration.stop", migration_id=12),
    _c("migration.stop", migration_id=12),
    _c("cluster.remove", name="c1"),
    _c("topic.created", cluster="c1", topic="new", partitions=3, replication_factor=2,
       assignment={"0": [1, 2], "1": [2, 3], "2": [3, 1]}),
    _c("throttle.set", cluster="c1", key="k1", kind="consumer_quota", target={"client": "a"},
       rate_bytes_per_s=100.0, evidence={"disk": "d1"}),
    _c("throttle.set", cluster="c1", key="k1", kind="consumer_quota", target={"client": "a"},
       rate_bytes_per_s=50.0),
    _c("throttle.set", cluster="zz", key="k1", kind="consumer_quota", target={}, rate_bytes_per_s=1.0),
    _c("throttle.clear", cluster="c1", key="k1"),
    _c("throttle.clear", cluster="c1", key="k1"),
    _c("throttle.set", cluster="c2", key="k2", kind="partition_fetch", target={"topic": "t"}, rate_bytes_per_s=9.0),
    _c("cluster.self_healing", name="c1", enabled=True, grace_s=60.0),
    _c("anomaly.raise", cluster="c1", key="broker:3", kind="broker_failure", subject={"broker": 3},
       evidence={"since": AT}, summary="broker 3 down"),
    _c("anomaly.raise", cluster="c1", key="broker:3", kind="broker_failure", confirmed=True),
    _c("anomaly.update", anomaly_id=13, status="fixing", expect="confirmed", plan_id=9),
    _c("anomaly.update", anomaly_id=13, status="fixing", expect="confirmed"),
    _c("anomaly.update", anomaly_id=13, status="detected"),
    _c("anomaly.note", anomaly_id=13, reason="spared"),
    _c("anomaly.update", anomaly_id=13, status="fixed", execution_id=8),
    _c("anomaly.update", anomaly_id=99, status="fixed"),
    _c("anomaly.note", anomaly_id=99, reason="x"),
    _c("plan.propose", cluster="c1", kind="leaders", plan={}),
    _c("plan.expire", plan_id=14),
    _c("plan.expire", plan_id=14),
    _c("plan.expire", plan_id=10),
    _c("state.version", version=1),
    _c("cluster.remove", name="c2"),
    _c("cluster.remove", name="c2"),
]


def replay(script: list[JsonDict] = SCRIPT) -> tuple[list[Any], str]:
    """Each command's result (or ``["rejected", message]``) and the final state's canonical JSON."""
    sm = GuardianState()
    out: list[Any] = []
    for command in script:
        try:
            out.append(sm.apply(prepare(validate_command(command), sm.state, sm.supported)))
        except CommandRejected as exc:
            out.append(["rejected", str(exc)])
    return out, canonical_json(sm.snapshot())

# ------------------------------------------------------------------ state version 3: staged uploads
BIG_PARTS = ["eJyNkc0KwjAQhF9F9lyliX/Q5/BkEVnrYoNpEpOtIsV3dyNePAiBEDYz385h",
             "MkFnx8QUoYFOQQVX484yRzqhRdeRSAMxQjMBshi61pu5UnOtdqpu6nz2wjx6",
             "LyZa89l49E95yT07mQu8KggYcUgSkmfJzXGDv5NI7ZRdNmy8yHUFLEmtqvQh",
             "j8F0ksSS8YOpMkyXYcsybFWGrcuwTRm2/YcdcpWRIt1GkwzTt93kMKTe85Hx",
             "Su6Y/8yN1srqM5Bs5vYXIfrgE8HrDWHdoMY="]
"""A plan.propose of eight moves (511 bytes of canonical JSON), zlib-compressed and base64-cut in 60s (literal,
so that the golden never depends on the zlib build that compressed it; :func:`controlplane.state.chunked.pieces`)."""
BIG_SHA = "6bb1fbc84a6f7c18e119e7e61df1f5ef4ecfe5b87c6c7217df8304475f76e2af"
LATER = "2026-11-21T10:11:00Z"  # more than the uploads' 10-minute expiry after AT


def _chunk(upload_id: str, seq: int, data: str, term: int = 1, at: str = AT) -> JsonDict:
    return {"type": "upload.chunk", "meta": {"who": "alice", "why": "", "at": at}, "upload_id": upload_id,
            "term": term, "seq": seq, "data": data}


SCRIPT_UPLOADS: list[JsonDict] = [
    _c("cluster.register", name="c1", bootstrap_servers=["127.0.0.1:9092"]),
    _chunk("upload-a", 0, BIG_PARTS[0]),  # refused: the group runs version 1
    _c("state.version", version=3),
    _chunk("upload-a", 0, BIG_PARTS[0]),
    _chunk("upload-a", 2, BIG_PARTS[2]),  # out of order
    _c("upload.commit", upload_id="upload-a", term=1, chunks=5, sha256=BIG_SHA, size=511),  # 1 of 5 staged
    *[_chunk("upload-a", seq, BIG_PARTS[seq]) for seq in range(1, 5)],
    _chunk("upload-a", 1, BIG_PARTS[1]),  # a retried chunk: no-op
    _chunk("upload-a", 1, BIG_PARTS[2]),  # other data under a staged seq: refused
    _c("upload.commit", upload_id="upload-a", term=1, chunks=5, sha256="0" * 64, size=511),
    _c("upload.commit", upload_id="upload-a", term=1, chunks=5, sha256=BIG_SHA, size=512),
    _c("upload.commit", upload_id="upload-a", term=2, chunks=5, sha256=BIG_SHA, size=511),  # drops it: term 2
    _chunk("upload-b", 0, BIG_PARTS[0]),
    _chunk("upload-b", 1, BIG_PARTS[1]),
    _c("upload.commit", upload_id="upload-b", term=1, chunks=2, sha256="1" * 64, size=511),
    *[_chunk("upload-c", seq, BIG_PARTS[seq]) for seq in range(5)],
    _c("upload.commit", upload_id="upload-c", term=1, chunks=5, sha256=BIG_SHA, size=511),
    _c("upload.commit", upload_id="upload-c", term=1, chunks=5, sha256=BIG_SHA, size=511),  # applied once
    _chunk("upload-d", 0, BIG_PARTS[0], term=2),  # drops upload-b (term 1)
    _chunk("upload-b", 2, BIG_PARTS[2]),
    _chunk("upload-e", 0, BIG_PARTS[0], term=2),
    _c("upload.abort", upload_id="upload-e"),
    _chunk("upload-d", 1, BIG_PARTS[1], term=2, at=LATER),  # expired
    _c("upload.abort", before_term=3),
    _c("upload.abort", upload_id="upload-x", before_term=3),
    _c("plan.approve", plan_id=1),
]
