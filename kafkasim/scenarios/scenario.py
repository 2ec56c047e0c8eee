"""Scenario files (YAML or JSON) → a :class:`Federation` of clusters on one :class:`Engine`.

Format (every key optional unless noted; sizes in bytes unless the key says otherwise)::

    seed: 7                       # RNG seed: same seed + same calls = same run
    speed: 1.0                    # simulated seconds per real second (``sim up --speed`` overrides)
    tick_seconds: 1.0             # simulated seconds per physics tick (max)
    start_time: 1795000000        # simulated epoch seconds at start
    audit: {enabled: false, interval_s: 60, topic: __guardian_audit, jsonl: null, synthetic: true,
            client_idcs: {reader-b: idc-b}}   # where wire clients run, by client id (default: "local")
    network:                      # leased lines between IDCs (kafkasim.physics.network); absent = no network model
      lines:
        - {between: [idc-a, idc-b], capacity_mb_s: 40, latency_ms: 2}   # each direction; unlisted pairs unlimited
    clusters:                     # required
      - name: east                # required
        partition_throttle: true  # capability flag (see kafkasim.cluster.model docstring)
        broker_configs: {replica.selector.class: org.apache.kafka.common.replica.RackAwareReplicaSelector,
                         log.retention.check.interval.ms: "300000", remote.log.manager.task.interval.ms: "30000"}
                                  # read-only broker configs (server.properties) of every broker (Kafka's defaults)
        brokers:                  # list of broker groups
          - count: 6
            idcs: [idc-a, idc-b]  # brokers are spread round-robin over IDCs
            racks_per_idc: 2      # rack = "<idc>-r<k>"; 0: rack = "<idc>" (one rack per IDC, for KIP-392 reads)
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
            tail_groups: 2            # consumer groups tailing the topic (<client_id>-tail-1, -tail-2)
            lag_bytes: 0              # a consumer this far behind on every partition (reads disk) ...
            lag_rate: 50000000        # ... catching up at this rate (bytes/s); its group id = consumer client_id
            pool: shared              # resource pool label (reported in /snapshot)
            placement: {idc-a: 2, idc-b: 1}   # IDC placement policy label (reported in /snapshot)
            producer: {client_id: orders-svc, user: orders, idc: idc-a}
            consumer: {client_id: orders-reader, user: analytics, idc: idc-b}   # default <name>-consumer
            configs: {retention.ms: "86400000"}
      - snapshot: deploy/examples/small.json   # a cluster seeded from a guardian.snapshot/v1 file
        partition_throttle: false              # (name defaults to the snapshot's cluster)
        topic_configs: {retention.bytes: "200000000"}   # set on every seeded topic (snapshots carry none)
        broker_configs: {log.retention.check.interval.ms: "10000"}   # as above, on every seeded broker

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

from kafkasim.cluster.configs import BROKER_STATIC_KEYS, check_static_config
from kafkasim.cluster.model import Cluster, SimError
from kafkasim.physics.engine import Client, Engine
from kafkasim.physics.network import Network, parse_lines

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
            try:
                import yaml
            except ImportError:
                raise ScenarioError(f"{path}: YAML scenarios need PyYAML (pip install 'kafka-guardian[sim]'); "
                                    "or give the scenario as JSON") from None
            data = yaml.safe_load(text)
    except ScenarioError:
        raise
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
    if spec.get("network") is not None:
        try:
            eng.network = Network(parse_lines(spec["network"]))
        except ValueError as e:
            raise ScenarioError(str(e)) from e
    for ci, cs in enumerate(clusters_spec):
        path = f"$.clusters[{ci}]"
        if isinstance(cs, dict) and cs.get("snapshot"):
            snap = cs["snapshot"]
            if isinstance(snap, str | Path):
                snap = load_scenario(snap)
            topic_configs = cs.get("topic_configs") or {}
            if not isinstance(topic_configs, dict):
                raise ScenarioError(f"{path}.topic_configs: must be a mapping of config name to value")
            static = _broker_configs(cs.get("broker_configs"), f"{path}.broker_configs")
            cl_snap = cluster_from_snapshot(fed, snap, bool(cs.get("partition_throttle", False)), path + ".snapshot",
                                            name=cs.get("name"),
                                            topic_configs={str(k): str(v) for k, v in topic_configs.items()})
            for b in cl_snap.brokers.values():
                b.static_configs = dict(static)
            eng.mark_dirty()  # the brokers' retention check interval
            fed.clusters[cl_snap.name] = cl_snap
            continue
        if not isinstance(cs, dict) or not cs.get("name"):
            raise ScenarioError(f"{path}.name: required")
        name = str(cs["name"])
        if name in fed.clusters:
            raise ScenarioError(f"{path}.name: duplicate cluster {name!r}")
        cl = Cluster(name, partition_throttle=bool(cs.get("partition_throttle", False)))
        static = _broker_configs(cs.get("broker_configs"), f"{path}.broker_configs")
        eng.add_cluster(cl)
        fed.clusters[name] = cl
        bid = int(_num(cs, "first_broker_id", 1, path))
        for gi, bs in enumerate(cs.get("brokers") or []):
            bpath = f"{path}.brokers[{gi}]"
            if not isinstance(bs, dict):
                raise ScenarioError(f"{bpath}: must be a mapping")
            idcs = list(bs.get("idcs") or ["idc-a"])
            racks = int(_num(bs, "racks_per_idc", 1, bpath, 0))
            mem = _num(bs, "memory_gb", 64, bpath, 0.001) * 1e9
            dspecs = bs.get("disks") or [{"count": 1, "kind": "ssd"}]
            for k in range(int(_num(bs, "count", 1, bpath, 1))):
                idc = idcs[k % len(idcs)]
                rack = f"{idc}-r{(k // len(idcs)) % racks + 1}" if racks else idc
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
                cl.brokers[bid].static_configs = dict(static)
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
    if eng.network is not None:
        for b in eng.brokers:  # every IDC gets its gateway, even before traffic crosses
            eng.network.idc(b.idc)
    return fed


def _broker_configs(value: Any, path: str) -> dict[str, str]:
    """A cluster's read-only broker configs (its server.properties); only :data:`BROKER_STATIC_KEYS`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ScenarioError(f"{path}: must be a mapping of config name to value")
    unknown = sorted(set(value) - BROKER_STATIC_KEYS)
    if unknown:
        raise ScenarioError(f"{path}: unknown key(s) {unknown}; known: {sorted(BROKER_STATIC_KEYS)}")
    out = {str(k): str(v) for k, v in value.items()}
    for k, v in out.items():
        try:
            check_static_config(k, v)
        except ValueError as exc:
            raise ScenarioError(f"{path}: {exc}") from None
    return out


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
    t.pool = str(ts.get("pool", "shared"))
    if isinstance(ts.get("placement"), dict):
        t.placement = {str(k): int(v) for k, v in ts["placement"].items()}
    rate = _num(ts, "bytes_in_per_s", 0, path)
    skew = _num(ts, "skew", 0, path)
    lag_bytes = _num(ts, "lag_bytes", 0, path)
    lag_rate = _num(ts, "lag_rate", 50e6 if lag_bytes > 0 else 0, path)
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
        eng.f["lag"][s] = lag_bytes
        eng.f["lag_rate"][s] = lag_rate
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


def cluster_from_snapshot(fed: Federation, snap: dict[str, Any], partition_throttle: bool = False,
                          path: str = "$", name: str | None = None,
                          topic_configs: dict[str, str] | None = None) -> Cluster:
    """Seed one cluster from a ``guardian.snapshot/v1`` document (parsed JSON).

    Brokers, disks, assignments, leaders, ISR, log dirs and sizes are taken as they are; each
    partition's producers write ``bytes_in_per_s``, ``bytes_out_per_s / bytes_in_per_s`` consumer
    groups tail it, and a partition with ``disk_read_bytes_per_s > 0`` gets a consumer lagging far
    beyond the page cache that reads at that rate.  Brokers in state ``dead`` start killed.
    ``topic_configs`` (e.g. ``retention.bytes``) are set on every topic, as a snapshot carries none.
    """
    eng = fed.engine
    if not isinstance(snap, dict) or snap.get("format") != "guardian.snapshot/v1":
        raise ScenarioError(f"{path}.format: expected 'guardian.snapshot/v1'")
    cname = str(name or snap.get("cluster") or "")
    if not cname:
        raise ScenarioError(f"{path}.cluster: required")
    if cname in fed.clusters:
        raise ScenarioError(f"{path}.cluster: duplicate cluster {cname!r}")
    cl = Cluster(cname, partition_throttle=partition_throttle)
    eng.add_cluster(cl)
    dead: list[int] = []
    brokers = snap.get("brokers")
    if not isinstance(brokers, list) or not brokers:
        raise ScenarioError(f"{path}.brokers: must be a non-empty list")
    for bi, b in enumerate(brokers):
        bpath = f"{path}.brokers[{bi}]"
        if not isinstance(b, dict) or not isinstance(b.get("id"), int) or b["id"] in cl.brokers:
            raise ScenarioError(f"{bpath}.id: a unique integer is required")
        disks = []
        for di, d in enumerate(b.get("disks") or []):
            dpath = f"{bpath}.disks[{di}]"
            kind = str(d.get("kind", "ssd"))
            if kind not in DISK_KINDS:
                raise ScenarioError(f"{dpath}.kind: one of {sorted(DISK_KINDS)}, got {kind!r}")
            disks.append({"path": str(d.get("path", f"/data{di + 1}")), "device": _device(di), "kind": kind,
                          "capacity_bytes": _num(d, "capacity_bytes", DISK_KINDS[kind]["capacity_gb"] * 1e9, dpath, 1),
                          "max_bytes_per_s": _num(d, "max_bytes_per_s", DISK_KINDS[kind]["max_mb_s"] * 1e6, dpath, 1),
                          "base_latency_ms": _num(d, "base_latency_ms", DISK_KINDS[kind]["latency_ms"], dpath)})
        if not disks:
            raise ScenarioError(f"{bpath}.disks: at least one disk is required")
        eng.add_broker(cl, int(b["id"]), str(b.get("idc", "idc-a")), str(b.get("rack", b.get("idc", "r1"))),
                       str(b.get("pool", "shared")), _num(b, "memory_bytes", 64e9, bpath, 1), disks)
        if b.get("state") == "dead":
            dead.append(int(b["id"]))
    eng.rebuild()
    for ti, t in enumerate(snap.get("topics") or []):
        tpath = f"{path}.topics[{ti}]"
        parts = t.get("partitions") or [] if isinstance(t, dict) else None
        if not isinstance(t, dict) or not t.get("name") or not parts:
            raise ScenarioError(f"{tpath}: needs a name and partitions")
        try:
            assigns = {int(p["partition"]): [int(r) for r in p["replicas"]] for p in parts}
            topic = cl.create_topic(str(t["name"]), -1, -1, assigns, dict(topic_configs or {}))
        except (KeyError, TypeError, ValueError) as e:
            raise ScenarioError(f"{tpath}.partitions: {e}") from e
        except SimError as e:
            raise ScenarioError(f"{tpath}: {e.message}") from e
        topic.pool = str(t.get("pool", "shared"))
        if isinstance(t.get("placement"), dict):
            topic.placement = {str(k): int(v) for k, v in t["placement"].items()}
        for pi, ps in enumerate(parts):
            ppath = f"{tpath}.partitions[{pi}]"
            p = topic.partitions[int(ps["partition"])]
            dirs = ps.get("log_dirs")
            if dirs is not None:
                if len(dirs) != len(p.replicas):
                    raise ScenarioError(f"{ppath}.log_dirs: one per replica")
                for r, dpath_ in zip(p.replicas, dirs, strict=True):
                    disk = cl.brokers[r].disk_by_path(str(dpath_))
                    if disk is None:
                        raise ScenarioError(f"{ppath}.log_dirs: broker {r} has no log dir {dpath_!r}")
                    p.log_dirs[r] = disk.gidx
            if ps.get("leader") in p.replicas:
                p.leader = int(ps["leader"])
            if isinstance(ps.get("isr"), list) and ps["isr"]:
                p.isr = [int(r) for r in ps["isr"] if r in p.replicas]
            s = p.slot
            rate = _num(ps, "bytes_in_per_s", 0, ppath)
            msgs = _num(ps, "messages_in_per_s", 0, ppath)
            size = _num(ps, "size_bytes", 0, ppath)
            msg = rate / msgs if msgs > 0 and rate > 0 else 1024.0
            eng.f["base_rate"][s] = rate
            eng.f["size"][s] = size
            eng.f["msg_size"][s] = msg
            eng.f["leo"][s] = math.floor(size / msg)
            out = _num(ps, "bytes_out_per_s", 0, ppath)
            eng.f["tail_groups"][s] = out / rate if rate > 0 else 0.0
            rd = _num(ps, "disk_read_bytes_per_s", 0, ppath)
            if rd > 0:
                eng.f["lag"][s] = max(size * 0.5, 1e12)
                eng.f["lag_rate"][s] = rd
    for bid in dead:
        cl.set_broker_alive(bid, False)
    eng.mark_dirty()
    eng.rebuild()
    return cl
