"""Helpers for executor integration tests: a kafkasim federation on real 127.0.0.1 ports (as ``sim up --realistic``
lays it out: SASL_SSL + SCRAM, https exporters with basic auth), plans, checks."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from controlplane.executor.observed import ObservedCluster, standalone
from domain import PartitionMove, Plan, dump_plan
from domain.lease import LEASE_TOPIC
from domain.throttles import BROKER_THROTTLE_KEYS
from kafkaio.admin import KafkaAdmin
from kafkaio.endpoints import ClusterEndpoints, parse_endpoints
from kafkaio.errors import AdminError
from kafkaio.types import LiveCluster
from tests.support.kafkasim_support import client_kwargs, start_sim

ROOT = Path(__file__).resolve().parents[2]
logging.getLogger("kafka").setLevel(logging.CRITICAL)


def scenario(brokers: int = 6, topics: int = 4, partitions: int = 50, rf: int = 2, size_gb: float = 0.05,
             bytes_in: float = 100_000, speed: float = 20.0, disks: int = 2) -> dict[str, Any]:
    """One cluster ``c1``: ``brokers`` brokers (each its own rack) with HDDs, ``topics`` x ``partitions``."""
    return {"seed": 5, "speed": speed, "tick_seconds": 1.0,
            "clusters": [{"name": "c1", "brokers": [{"count": brokers, "idcs": ["idc-a"], "racks_per_idc": brokers,
                                                     "memory_gb": 16, "disks": [{"count": disks, "kind": "hdd"}]}],
                          "topics": [{"prefix": "t", "count": topics, "partitions": partitions, "rf": rf,
                                      "bytes_in_per_s": bytes_in, "size_gb": size_gb, "tail_groups": 1}]}]}


class Sim:
    """A running kafkasim with its endpoints file; records every AlterPartitionReassignments entry."""

    def __init__(self, spec: dict[str, Any], tmp: Path) -> None:
        self.runner = start_sim(spec, directory=tmp / "sim-secrets")
        self.endpoints = self.runner.endpoints
        self.endpoints_file = tmp / "endpoints.json"
        self.endpoints_file.write_text(json.dumps(self.endpoints))
        self.c1: dict[str, Any] = self.endpoints["clusters"]["c1"]
        self.cluster: ClusterEndpoints = parse_endpoints(self.endpoints, "c1")
        self._handed_out: list[Callable[[], None]] = []
        """Clients given to tests, closed by :meth:`stop` (a client left running after its simulator stopped
        keeps reconnecting to its ports, which a later test's simulator may get)."""
        self.admin = self.kafka_admin("test-checker")
        self.submissions: Counter[tuple[str, int]] = Counter()
        self.cancels: Counter[tuple[str, int]] = Counter()
        self.submitted: dict[tuple[str, int], list[list[int]]] = {}
        """Every replica list submitted per partition, in order."""
        self.original: dict[tuple[str, int], list[int]] = {}
        """Each submitted partition's replicas before its first submission."""
        self._lock = threading.Lock()
        handler = self.runner.server.handler
        original = handler.api_45

        def recording(ctx: Any, v: int, req: Any) -> Any:
            with self._lock:
                for t in req.topics:
                    for p in t.partitions:
                        (self.submissions if p.replicas is not None else self.cancels)[(t.name, p.partition_index)] += 1
                        tp = (t.name, p.partition_index)
                        if tp not in self.original:
                            try:
                                self.original[tp] = list(ctx.cluster.partition(*tp).replicas)
                            except Exception:  # unknown partition: the handler answers it
                                self.original[tp] = []
                        if p.replicas is not None:
                            self.submitted.setdefault(tp, []).append(list(p.replicas))
            return original(ctx, v, req)

        handler.api_45 = recording  # type: ignore[method-assign]

    def copy_submissions(self) -> Counter[tuple[str, int]]:
        """Submissions per partition that start a copy: a list that only reorders the replicas before it (the
        partition's before the first; a follower read's leader changes, :mod:`controlplane.executor.read_source`)
        is left out; the same list twice running counts twice (a resubmission)."""
        return Counter({tp: sum(1 for i, r in enumerate(rs)
                                if r == (rs[i - 1] if i else None)
                                or sorted(r) != sorted(rs[i - 1] if i else self.original.get(tp, [])))
                        for tp, rs in self.submitted.items()})

    def kafka_admin(self, client_id: str = "guardian-executor") -> KafkaAdmin:
        """A Kafka admin port on ``c1`` owning its own connection (bootstrap servers and security); closed by
        :meth:`stop` at the latest."""
        admin = KafkaAdmin.for_endpoints(self.cluster, client_id=client_id)
        self._handed_out.append(admin.close)
        return admin

    def standalone_view(self) -> ObservedCluster:
        """What ``guardian exec`` observes ``c1`` with (one collector round per pass); closed by :meth:`stop`."""
        view = standalone(self.cluster)
        self._handed_out.append(view.close)
        return view

    def client_kwargs(self) -> dict[str, Any]:
        """kafka-python keyword arguments (bootstrap servers and security) to reach ``c1``."""
        return client_kwargs(self.c1)

    def control(self, path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(self.endpoints["control_url"] + path, data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def live(self, include_lease: bool = False) -> LiveCluster:
        """The cluster's metadata; without ``include_lease``, Guardian's own lease log (a topic the first
        executor creates, :mod:`domain.lease`) is left out, so placements compare with those taken before."""
        live = self.admin.live()
        if include_lease or LEASE_TOPIC not in live.topic_sizes:
            return live
        return replace(live, partitions={tp: p for tp, p in live.partitions.items() if tp[0] != LEASE_TOPIC},
                       topic_sizes={t: n for t, n in live.topic_sizes.items() if t != LEASE_TOPIC},
                       reassignments={tp: r for tp, r in live.reassignments.items() if tp[0] != LEASE_TOPIC})

    def leftover_throttles(self) -> dict[str, Any]:
        """Every migration throttle config still set on any alive broker or topic (retries stale metadata)."""
        for attempt in range(20):
            try:
                return self._leftover_throttles()
            except AdminError:  # e.g. a just-revived broker the client's metadata does not know yet
                if attempt == 19:
                    raise
                time.sleep(0.2)
        return {}

    def _leftover_throttles(self) -> dict[str, Any]:
        live = self.live()
        out: dict[str, Any] = {}
        for b, cfg in self.admin.broker_configs(live.alive, BROKER_THROTTLE_KEYS).items():
            if cfg:
                out[f"broker {b}"] = cfg
        for t, cfg in self.admin.topic_configs(live.topic_sizes).items():
            if cfg:
                out[f"topic {t}"] = cfg
        return out

    def stop(self) -> None:
        for close in self._handed_out:
            close()
        self._handed_out.clear()
        self.runner.stop()

    def __enter__(self) -> Sim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def one_replica_plan(live: LiveCluster, select: Any = None, dest: Any = None, cluster: str = "c1") -> Plan:
    """Move the first replica of every selected partition to another alive broker (round robin)."""
    moves = []
    for i, (tp, p) in enumerate(sorted(live.partitions.items())):
        if select is not None and not select(tp, p):
            continue
        others = [b for b in sorted(live.alive) if b not in p.replicas]
        target = dest(tp, p, others) if dest is not None else others[i % len(others)]
        moves.append(PartitionMove(tp[0], tp[1], (target, *p.replicas[1:]), (None,) * len(p.replicas)))
    return Plan(cluster, "rebalance", tuple(moves))


def write_plan(plan: Plan, path: Path) -> Path:
    path.write_text(dump_plan(plan))
    return path


def guardian(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the ``guardian`` CLI in a new process and wait for it."""
    return subprocess.run([sys.executable, "-m", "controlplane.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def guardian_popen(*args: str) -> subprocess.Popen[str]:
    """Start the ``guardian`` CLI in a new process (caller waits / kills it)."""
    return subprocess.Popen([sys.executable, "-m", "controlplane.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})


def read_state(path: Path) -> dict[str, Any]:
    for _ in range(20):
        try:
            return dict(json.loads(path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(0.05)
    raise AssertionError(f"state file {path} unreadable")


def wait_state(path: Path, cond: Any, timeout: float = 40.0) -> dict[str, Any]:
    """The CLI executor's state file once ``cond`` holds for its latest execution (polled every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            state = read_state(path)
            execs = list(state.get("executions", {}).values())
            if execs and cond(max(execs, key=lambda e: e["id"])):
                return state
        time.sleep(0.1)
    raise AssertionError(f"state condition not reached within {timeout}s")
