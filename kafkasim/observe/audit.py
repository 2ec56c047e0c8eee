"""Produce/fetch audit records, the way a broker-side audit plugin delivers them.

Every ``interval_s`` simulated seconds one JSON record is emitted per
(kind, cluster, client id, user, client IP, client IDC, client rack, topic, partition, broker) that moved
bytes in the interval — synthetic traffic (per partition producer/consumer clients) and real wire
traffic alike.  Records are appended as Kafka record batches to ``topic`` (default
``__guardian_audit``, created on demand with 3 partitions) on the same simulated cluster, and
optionally to a JSON-lines file.  Record fields::

    {"ts": "2026-11-21T10:00:00Z", "interval_s": 60, "kind": "produce"|"fetch", "cluster": "east",
     "client_id": "orders-svc", "user": "orders", "client_ip": "10.1.2.3", "client_idc": "idc-a",
     "topic": "orders", "partition": 0, "broker": 1, "broker_idc": "idc-a", "client_rack": "",
     "bytes": 123, "records": 4, "latency_ms": 1.5}

``broker`` is the broker that served the bytes (a follower for a KIP-392 nearest-replica fetch),
``broker_idc`` its IDC, ``client_rack`` the ``rack_id`` a Fetch carried (``client.rack``; "" when unset
and for produce). A wire client's IDC is what ``client_idcs`` (client id -> IDC, the sim's ground truth
of where it runs, as an IP-subnet table would tell a real plugin) says, else ``real_client_idc``.
"""

from __future__ import annotations

import datetime as dt_
import json
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkasim.broker.wire import ReqContext
from kafkasim.cluster.model import Cluster, SimError
from kafkasim.cluster.records import store_batches

if TYPE_CHECKING:
    from kafkasim.physics.engine import Engine
    from kafkasim.scenarios.scenario import Federation

Key = tuple[str, str, str, str, str, str, str, str, int, int]


class AuditSink:
    """Aggregates traffic per interval and publishes audit records."""

    def __init__(self, fed: Federation, interval_s: float = 60.0, topic: str = "__guardian_audit",
                 jsonl: str | None = None, synthetic: bool = True, real_client_idc: str = "local",
                 client_idcs: dict[str, str] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("audit interval must be positive")
        self.fed = fed
        self.interval_s = float(interval_s)
        self.topic = topic
        self.jsonl = Path(jsonl) if jsonl else None
        self.synthetic = synthetic
        self.real_client_idc = real_client_idc
        self.client_idcs = dict(client_idcs or {})
        self.acc: dict[Key, list[float]] = {}
        self.next_emit = fed.engine.t + self.interval_s
        n = fed.engine.cap
        self.syn_in = np.zeros(n)
        self.syn_out = np.zeros(n)
        self.lat_in = np.zeros(n)
        self.lat_out = np.zeros(n)
        self.emitted = 0
        self._publishing = False
        fed.engine.listeners.append(self.on_tick)

    def record_real(self, kind: str, ctx: ReqContext, topic: str, partition: int, nbytes: int,
                    nrecords: int, broker: int, latency_ms: float) -> None:
        """Account one real produce/fetch of a wire client."""
        if self._publishing or topic == self.topic:
            return
        idc = self.client_idcs.get(ctx.client_id or "", self.real_client_idc)
        key: Key = (kind, ctx.cluster.name, ctx.client_id or "", "ANONYMOUS", ctx.host, idc,
                    ctx.client_rack if kind == "fetch" else "", topic, partition, broker)
        a = self.acc.setdefault(key, [0.0, 0.0, 0.0, 0.0])
        a[0] += nbytes
        a[1] += nrecords
        a[2] += latency_ms
        a[3] += 1

    def on_tick(self, eng: Engine, dt: float) -> None:
        """Engine listener: accumulate synthetic traffic, emit when the interval is over."""
        if self.synthetic:
            n = eng.n_slots
            if len(self.syn_in) < eng.cap:
                for name in ("syn_in", "syn_out", "lat_in", "lat_out"):
                    arr = np.zeros(eng.cap)
                    old = getattr(self, name)
                    arr[: len(old)] = old
                    setattr(self, name, arr)
            si = eng.f["syn_in"][:n] * dt
            so = eng.f["syn_out"][:n] * dt
            self.syn_in[:n] += si
            self.syn_out[:n] += so
            self.lat_in[:n] += eng.f["produce_latency_ms"][:n] * si
            self.lat_out[:n] += eng.f["fetch_latency_ms"][:n] * so
        if eng.t >= self.next_emit:
            self.emit()
            self.next_emit = eng.t + self.interval_s

    def _synthetic_records(self) -> list[dict[str, Any]]:
        eng = self.fed.engine
        out: list[dict[str, Any]] = []
        for cl in self.fed.clusters.values():
            for t in cl.topics.values():
                if t.name == self.topic:
                    continue
                for p in t.partitions:
                    s = p.slot
                    for kind, arr, lat, cidx in (("produce", self.syn_in, self.lat_in, eng.i["prod_client"][s]),
                                                 ("fetch", self.syn_out, self.lat_out, eng.i["cons_client"][s])):
                        b = float(arr[s])
                        if b <= 0:
                            continue
                        c = eng.clients[int(cidx)]
                        out.append({"kind": kind, "cluster": cl.name, "client_id": c.client_id, "user": c.user,
                                    "client_ip": c.ip, "client_idc": c.idc, "topic": t.name,
                                    "partition": p.index, "broker": p.leader,
                                    "broker_idc": self._broker_idc(cl, p.leader), "client_rack": "", "bytes": int(b),
                                    "records": int(b / max(float(eng.f["msg_size"][s]), 1.0)),
                                    "latency_ms": round(float(lat[s]) / b, 3)})
        self.syn_in[:] = 0
        self.syn_out[:] = 0
        self.lat_in[:] = 0
        self.lat_out[:] = 0
        return out

    @staticmethod
    def _broker_idc(cl: Cluster, broker: int) -> str:
        b = cl.brokers.get(broker)
        return b.idc if b is not None else ""

    def emit(self) -> int:
        """Publish the interval's records; returns how many were written."""
        eng = self.fed.engine
        ts = dt_.datetime.fromtimestamp(eng.t, tz=dt_.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        recs: list[dict[str, Any]] = self._synthetic_records() if self.synthetic else []
        for (kind, cluster, cid, user, ip, idc, rack, topic, part, broker), a in sorted(self.acc.items()):
            recs.append({"kind": kind, "cluster": cluster, "client_id": cid, "user": user, "client_ip": ip,
                         "client_idc": idc, "client_rack": rack, "topic": topic, "partition": part, "broker": broker,
                         "broker_idc": self._broker_idc(self.fed.clusters[cluster], broker),
                         "bytes": int(a[0]), "records": int(a[1]), "latency_ms": round(a[2] / max(a[3], 1), 3)})
        self.acc.clear()
        for r in recs:
            r["ts"] = ts
            r["interval_s"] = self.interval_s
        by_cluster: dict[str, list[dict[str, Any]]] = {}
        for r in recs:
            by_cluster.setdefault(r["cluster"], []).append(r)
        self._publishing = True
        try:
            for name, rs in by_cluster.items():
                self._publish(self.fed.clusters[name], rs)
        finally:
            self._publishing = False
        if self.jsonl is not None and recs:
            self.jsonl.parent.mkdir(parents=True, exist_ok=True)
            with self.jsonl.open("a") as fh:
                for r in recs:
                    fh.write(json.dumps(r, sort_keys=True) + "\n")
        self.emitted += len(recs)
        return len(recs)

    def _publish(self, cl: Cluster, recs: list[dict[str, Any]]) -> None:
        if self.topic not in cl.topics:
            try:
                cl.create_topic(self.topic, 3, min(2, len(cl.brokers)))
            except SimError:
                return
        t = cl.topics[self.topic]
        per_part: dict[int, list[dict[str, Any]]] = {}
        for r in recs:
            key = f"{r['client_id']}|{r['topic']}"
            per_part.setdefault(zlib.crc32(key.encode()) % len(t.partitions), []).append(r)
        ms = int(self.fed.engine.t * 1000)
        for pi, rs in sorted(per_part.items()):
            p = t.partitions[pi]
            if p.leader < 0:
                continue
            builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=16 * 1024 * 1024)
            for r in rs:
                builder.append(ms, f"{r['client_id']}|{r['topic']}".encode(), json.dumps(r, sort_keys=True).encode())
            builder.close()
            store_batches(cl, p, bytes(builder.buffer()))
