"""Ground truth: the simulator's own view of a cluster as a ``guardian.snapshot/v1`` document.

Served by the control API as ``GET /snapshot?cluster=NAME``; tests compare what collectors
measure against it, and it can seed another kafkasim (``sim up --snapshot``).  Rates are those of
the last physics tick; ``load_history`` holds the disk's util sampled once per simulated minute
(last 60 samples, oldest first).
"""

from __future__ import annotations

import datetime as dt_
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kafkasim.physics.engine import Engine
    from kafkasim.scenarios.scenario import Federation


class LoadHistory:
    """Engine listener sampling every disk's util once per ``every_s`` simulated seconds."""

    def __init__(self, eng: Engine, every_s: float = 60.0, keep: int = 60) -> None:
        self.every_s = every_s
        self.keep = keep
        self.samples: list[np.ndarray] = []
        self.next_t = eng.t + every_s
        eng.listeners.append(self.on_tick)

    def on_tick(self, eng: Engine, dt: float) -> None:
        """Record a sample when a sampling instant has passed."""
        if eng.t >= self.next_t:
            self.samples.append(eng.d_util.copy())
            del self.samples[: -self.keep]
            self.next_t = eng.t + self.every_s

    def of(self, gidx: int) -> list[float]:
        """Util samples of one disk, oldest first."""
        return [round(float(s[gidx]), 4) for s in self.samples if gidx < len(s)]


def snapshot_of(fed: Federation, cluster: str, history: LoadHistory | None = None) -> dict[str, Any]:
    """The current state of ``cluster`` as a ``guardian.snapshot/v1`` dict (KeyError if unknown)."""
    cl = fed.cluster(cluster)
    eng = fed.engine
    if eng.dirty:
        eng.rebuild()
    f = eng.f
    taken = dt_.datetime.fromtimestamp(eng.t, tz=dt_.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    brokers = []
    for b in sorted(cl.brokers.values(), key=lambda x: x.id):
        disks = []
        for d in b.disks:
            g = d.gidx
            doc: dict[str, Any] = {
                "path": d.path, "kind": d.kind, "capacity_bytes": int(d.capacity_bytes),
                "max_bytes_per_s": float(d.max_bytes_per_s / eng.d_slow[g]),
                "used_bytes": int(min(eng.d_used[g], d.capacity_bytes)),
                "util": round(float(min(max(eng.d_util[g], 0.0), 1.0)), 6),
                "await_ms": round(float(eng.d_await[g]), 4),
                "read_bytes_per_s": round(float(eng.d_read_rate[g]), 3),
                "write_bytes_per_s": round(float(eng.d_write_rate[g]), 3)}
            if history is not None:
                doc["load_history"] = history.of(g)
            disks.append(doc)
        brokers.append({"id": b.id, "host": b.host, "port": b.port if b.port > 0 else 9092, "idc": b.idc,
                        "rack": b.rack, "pool": b.pool, "state": "alive" if b.alive else "dead",
                        "memory_bytes": int(b.memory_bytes), "disks": disks})
    path_of = {d.gidx: d.path for b in cl.brokers.values() for d in b.disks}
    topics = []
    for t in sorted(cl.topics.values(), key=lambda x: x.name):
        parts = []
        for p in t.partitions:
            s = p.slot
            rate = float(f["in_rate"][s])
            parts.append({
                "partition": p.index, "replicas": list(p.replicas), "leader": p.leader, "isr": list(p.isr),
                "log_dirs": [path_of[p.log_dirs[r]] for r in p.replicas],
                "size_bytes": int(f["size"][s]), "bytes_in_per_s": round(rate, 3),
                "bytes_out_per_s": round(float(f["out_rate"][s]), 3),
                "messages_in_per_s": round(rate / max(float(f["msg_size"][s]), 1.0), 3),
                "disk_read_bytes_per_s": round(float(f["disk_read"][s]), 3)})
        doc_t: dict[str, Any] = {"name": t.name, "pool": t.pool, "partitions": parts}
        if t.placement:
            doc_t["placement"] = dict(t.placement)
        topics.append(doc_t)
    return {"format": "guardian.snapshot/v1", "cluster": cl.name, "taken_at": taken, "brokers": brokers,
            "topics": topics}
