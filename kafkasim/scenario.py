"""Scenario files (YAML or JSON) → a :class:`Federation` of clusters on one :class:`Engine`.

Format (every key optional unless noted; sizes in bytes unless the key says otherwise)::

    seed: 7                       # RNG seed: same seed + same calls = same run
    speed: 1.0                    # simulated seconds per real second (``sim up --speed`` overrides)
    tick_seconds: 1.0             # simulated seconds per physics tick (max)
    start_time: 1795000000        # simulated epoch seconds at start
    audit: {enabled: false, interval_s: 60, topic: __guardian_audit, jsonl: null, synthetic: true}
    clusters:                     # required
      - name: east                # required
        partition_throttle: true  # capability flag (see kafkasim.model docstring)
        brokers:                  # list of broker groups
          - count: 6
            idcs: [idc-a, idc-b]  # brokers are spread round-robin over IDCs
            racks_per_idc: 2      # rack = "<idc>-r<k>"
            pool: shared
            memory_gb: 64
            disks:                # per broker; each group expands to `count` log dirs
              - {count: 4, kind: hdd, capacity_gb: 4000, max_mb_s: 200, latency_ms: 8}
        topics:
          - name: orders          # or `prefix: t` + `count: 100` for many topics
            partitions: 12
            rf: 3
            bytes_in_per_s: 1000000   # per partition mean (heavy-tailed spread with `skew`)
            skew: 0.0                 # sigma of a lognormal multiplier per partition
            size_gb: 10               # initial size per partition
            msg_size: 1024
            tail_groups: 2            # consumer groups tailing the topic
            producer: {client_id: orders-svc, user: orders, idc: idc-a}
            consumer: {client_id: orders-reader, user: analytics, idc: idc-b}
            configs: {retention.ms: "86400000"}

Disk kind defaults: hdd 200 MB/s 8 ms 4 TB; ssd 500 MB/s 0.5 ms 2 TB; nvme 2000 MB/s 0.1 ms 4 TB.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kafkasim.engine import Client, Engine
from kafkasim.model import Cluster, SimError

DISK_KINDS: dict[str, dict[str, float]] = {
    "hdd": {"max_mb_s": 200, "latency_ms": 8.0, "capacity_gb": 4000},
    "ssd": {"max_mb_s": 500, "latency_ms": 0.5, "capacity_gb": 2000},
    "nvme": {"max_mb_s": 2000, "latency_ms": 0.1, "capacity_gb": 4000},
}

DEFAULT_SCENARIO: dict[str, Any] = {
    "seed": 7,
    "speed": 1.0,
    "tick_seconds": 1.0,
    "audit": {"enabled": True, "interval_s": 60, "topic": "__guardian_audit"},
    "clusters": [
        {"name": "east", "partition_throttle": True,
         "brokers": [{"count": 6, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 2, "pool": "shared",
                      "memory_gb": 64,
                      "disks": [{"count": 3, "kind": "hdd"}, {"count": 1, "kind": "nvme"}]}],
         "topics": [
             {"name": "orders", "partitions": 12, "rf": 3, "bytes_in_per_s": 2_000_000, "skew": 0.8,
              "size_gb": 20, "tail_groups": 2,
              "producer": {"client_id": "orders-svc", "user": "orders", "idc": "idc-a"},
              "consumer": {"client_id": "billing", "user": "billing", "idc": "idc-b"}},
             {"prefix": "events", "count": 8, "partitions": 6, "rf": 3, "bytes_in_per_s": 300_000,
              "skew": 1.0, "size_gb": 5, "tail_groups": 1},
         ]},
        {"name": "west", "partition_throttle": False,
         "brokers": [{"count": 3, "idcs": ["idc-c"], "racks_per_idc": 3, "pool": "shared", "memory_gb": 32,
                      "disks": [{"count": 2, "kind": "ssd"}]}],
         "topics": [
             {"name": "clicks", "partitions": 6, "rf": 2, "bytes_in_per_s": 1_000_000, "skew": 0.5,
              "size_gb": 8, "tail_groups": 1,
              "producer": {"client_id": "web", "user": "web", "idc": "idc-c"}},
         ]},
    ],
}


class ScenarioError(ValueError):
    """A scenario file is malformed; the message names the offending path."""


@dataclass
class Federation:
    """The simulated federation: clusters sharing one physics engine."""

    engine: Engine
    clusters: dict[str, Cluster]
    speed: float = 1.0
    tick_seconds: float = 1.0
    audit: dict[str, Any] = field(default_factory=dict)

    def cluster(self, name: str) -> Cluster:
        """A cluster by name, or KeyError with the known names."""
        if name not in self.clusters:
            raise KeyError(f"unknown cluster {name!r}; known: {sorted(self.clusters)}")
        return self.clusters[name]


def _num(d: dict[str, Any], key: str, default: float, path: str, minimum: float = 0.0) -> float:
    v = d.get(key, default)
    try:
        x = float(v)
    except (TypeError, ValueError) as e:
        raise ScenarioError(f"{path}.{key}: expected a number, got {v!r}") from e
    if not math.isfinite(x) or x < minimum:
        raise ScenarioError(f"{path}.{key}: must be a finite number >= {minimum}, got {v!r}")
    return x


def load_scenario(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON scenario file into a dict (ScenarioError on bad syntax)."""
    text = Path(path).read_text()
    try:
        if str(path).endswith(".json"):
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:
        raise ScenarioError(f"{path}: cannot parse: {e}") from e
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: top level must be a mapping")
    return data


def build_federation(spec: dict[str, Any]) -> Federation:
    """Build clusters, brokers, disks, topics and traffic from a scenario dict."""
    if not isinstance(spec, dict):
        raise ScenarioError("$: scenario must be a mapping")
    seed = int(_num(spec, "seed", 0, "$"))
    eng = Engine(seed=seed, start_time=_num(spec, "start_time", 1_795_000_000.0, "$"))
    rng = np.random.default_rng(seed + 1)
    clusters_spec = spec.get("clusters")
    if not isinstance(clusters_spec, list) or not clusters_spec:
        raise ScenarioError("$.clusters: must be a non-empty list")
    fed = Federation(eng, {}, speed=_num(spec, "speed", 1.0, "$", 1e-6),
                     tick_seconds=_num(spec, "tick_seconds", 1.0, "$", 1e-3),
                     audit=dict(spec.get("audit") or {}))
    for ci, cs in enumerate(clusters_spec):
        path = f"$.clusters[{ci}]"
        if not isinstance(cs, dict) or not cs.get("name"):
            raise ScenarioError(f"{path}.name: required")
        name = str(cs["name"])
        if name in fed.clusters:
            raise ScenarioError(f"{path}.name: duplicate cluster {name!r}")
        cl = Cluster(name, partition_throttle=bool(cs.get("partition_throttle", False)))
        eng.add_cluster(cl)
        fed.clusters[name] = cl
        bid = int(_num(cs, "first_broker_id", 1, path))
        for gi, bs in enumerate(cs.get("brokers") or []):
            bpath = f"{path}.brokers[{gi}]"
            if not isinstance(bs, dict):
                raise ScenarioError(f"{bpath}: must be a mapping")
            idcs = list(bs.get("idcs") or ["idc-a"])
            racks = int(_num(bs, "racks_per_idc", 1, bpath, 1))
            mem = _num(bs, "memory_gb", 64, bpath, 0.001) * 1e9
            dspecs = bs.get("disks") or [{"count": 1, "kind": "ssd"}]
            for k in range(int(_num(bs, "count", 1, bpath, 1))):
                idc = idcs[k % len(idcs)]
                rack = f"{idc}-r{(k // len(idcs)) % racks + 1}"
                disks: list[dict[str, Any]] = []
                for di, ds in enumerate(dspecs):
                    dpath = f"{bpath}.disks[{di}]"
                    kind = str(ds.get("kind", "ssd"))
                    if kind not in DISK_KINDS:
                        raise ScenarioError(f"{dpath}.kind: one of {sorted(DISK_KINDS)}, got {kind!r}")
                    dflt = DISK_KINDS[kind]
                    for _ in range(int(_num(ds, "count", 1, dpath, 1))):
                        n = len(disks)
                        disks.append({
                            "path": f"/data{n + 1}", "device": _device(n), "kind": kind,
                            "capacity_bytes": _num(ds, "capacity_gb", dflt["capacity_gb"], dpath, 0.001) * 1e9,
                            "max_bytes_per_s": _num(ds, "max_mb_s", dflt["max_mb_s"], dpath, 0.001) * 1e6,
                            "base_latency_ms": _num(ds, "latency_ms", dflt["latency_ms"], dpath, 0.0)})
                eng.add_broker(cl, bid, idc, rack, str(bs.get("pool", "shared")), mem, disks)
                bid += 1
        if not cl.brokers:
            raise ScenarioError(f"{path}.brokers: at least one broker is required")
        eng.rebuild()
        for ti, ts in enumerate(cs.get("topics") or []):
            tpath = f"{path}.topics[{ti}]"
            if not isinstance(ts, dict):
                raise ScenarioError(f"{tpath}: must be a mapping")
            if "name" in ts:
                names = [str(ts["name"])]
            elif "prefix" in ts:
                names = [f"{ts['prefix']}-{i}" for i in range(int(_num(ts, "count", 1, tpath, 1)))]
            else:
                raise ScenarioError(f"{tpath}: needs `name` or `prefix`")
            for tname in names:
                add_topic(fed, cl, tname, ts, tpath, rng)
        eng.rebuild()
    return fed


def _device(n: int) -> str:
    s = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(97 + r) + s
    return "sd" + s


def _client(eng: Engine, spec: Any, default_id: str, idc: str, ip_seed: int) -> int:
    spec = spec if isinstance(spec, dict) else {}
    cidc = str(spec.get("idc", idc))
    ip = str(spec.get("ip", f"10.{zlib.crc32(cidc.encode()) % 200}.{ip_seed % 250}.{(ip_seed // 250) % 250 + 1}"))
    return eng.client(Client(str(spec.get("client_id", default_id)), str(spec.get("user", default_id)), ip, cidc))


def add_topic(fed: Federation, cl: Cluster, name: str, ts: dict[str, Any], path: str,
              rng: np.random.Generator) -> None:
    """Create one topic with its synthetic traffic profile."""
    eng = fed.engine
    parts = int(_num(ts, "partitions", 1, path, 1))
    rf = int(_num(ts, "rf", min(3, len(cl.brokers)), path, 1))
    configs = {str(k): str(v) for k, v in (ts.get("configs") or {}).items()}
    try:
        t = cl.create_topic(name, parts, rf, None, dict(configs.items()))
    except SimError as e:
        raise ScenarioError(f"{path}: {e.message}") from e
    rate = _num(ts, "bytes_in_per_s", 0, path)
    skew = _num(ts, "skew", 0, path)
    size = _num(ts, "size_gb", 0, path) * 1e9
    msg = _num(ts, "msg_size", 1024, path, 1)
    tail = _num(ts, "tail_groups", 1, path)
    idc0 = cl.brokers[t.partitions[0].leader].idc if t.partitions and t.partitions[0].leader >= 0 else "idc-a"
    seed_ip = len(eng.clients)
    pc = _client(eng, ts.get("producer"), f"{name}-producer", idc0, seed_ip)
    cc = _client(eng, ts.get("consumer"), f"{name}-consumer", idc0, seed_ip + 1)
    mult = rng.lognormal(0.0, skew, parts) if skew > 0 else np.ones(parts)
    mult = mult / mult.mean() if parts > 1 else mult
    for p, k in zip(t.partitions, mult, strict=True):
        s = p.slot
        eng.f["base_rate"][s] = rate * float(k)
        eng.f["size"][s] = size * float(k)
        eng.f["msg_size"][s] = msg
        eng.f["leo"][s] = math.floor(size * float(k) / msg)
        eng.f["tail_groups"][s] = tail
        eng.f["phase"][s] = float(rng.uniform(-0.05, 0.05))
        eng.i["prod_client"][s] = pc
        eng.i["cons_client"][s] = cc
    eng.mark_dirty()


def scale_scenario(clusters: int = 3, brokers: int = 300, disks: int = 12, partitions: int = 60_000,
                   partitions_per_topic: int = 20, seed: int = 1) -> dict[str, Any]:
    """A federation of the given size (used by the benchmark); brokers and partitions split evenly."""
    bpc = brokers // clusters
    tpc = partitions // clusters // partitions_per_topic
    return {
        "seed": seed, "tick_seconds": 10.0,
        "clusters": [{
            "name": f"c{c + 1}", "partition_throttle": c == 0,
            "brokers": [{"count": bpc, "idcs": ["idc-a", "idc-b", "idc-c"], "racks_per_idc": 4,
                         "memory_gb": 128, "disks": [{"count": disks - 2, "kind": "hdd"},
                                                     {"count": 2, "kind": "nvme"}]}],
            "topics": [{"prefix": "t", "count": tpc, "partitions": partitions_per_topic, "rf": 3,
                        "bytes_in_per_s": 150_000, "skew": 1.0, "size_gb": 20, "tail_groups": 2}],
        } for c in range(clusters)],
    }
