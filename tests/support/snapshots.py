"""Small hand-written snapshots for tests: every number is easy to check by hand."""

from __future__ import annotations

import copy
import json
from typing import Any

GIB = 2**30


def disk(path: str, *, kind: str = "hdd", cap: int = 1000 * GIB, max_bps: float = 100e6, used: int = 0,
         util: float = 0.1) -> dict[str, Any]:
    return {"path": path, "kind": kind, "capacity_bytes": cap, "max_bytes_per_s": max_bps, "used_bytes": used,
            "util": util, "await_ms": 5.0, "read_bytes_per_s": 0.0, "write_bytes_per_s": 0.0,
            "load_history": [util, util]}


def broker(bid: int, idc: str, rack: str, *, pool: str = "shared", state: str = "alive",
           disks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": bid, "host": "127.0.0.1", "port": 19090 + bid, "idc": idc, "rack": rack, "pool": pool,
            "state": state, "memory_bytes": 64 * GIB,
            "disks": disks if disks is not None else [disk("/data1"), disk("/data2")]}


def partition(n: int, replicas: list[int], dirs: list[str], *, size: int = GIB, bytes_in: float = 1e6,
              disk_read: float = 0.0, leader: int | None = None) -> dict[str, Any]:
    return {"partition": n, "replicas": replicas, "leader": replicas[0] if leader is None else leader,
            "isr": replicas, "log_dirs": dirs, "size_bytes": size, "bytes_in_per_s": bytes_in,
            "bytes_out_per_s": 2 * bytes_in, "messages_in_per_s": bytes_in / 1000,
            "disk_read_bytes_per_s": disk_read}


def small_doc() -> dict[str, Any]:
    """Six brokers in two IDCs (three racks each), one in pool "pay", broker 6 dead.

    Topic "orders" (pool shared, placement idc-a:2 idc-b:1) has two partitions; topic "ledger" lives
    in pool "pay" on broker 5 only (RF 1).
    """
    return {
        "format": "guardian.snapshot/v1", "cluster": "c1", "taken_at": "2026-11-21T10:00:00Z",
        "brokers": [
            broker(1, "idc-a", "a-r1"), broker(2, "idc-a", "a-r2"), broker(3, "idc-a", "a-r3"),
            broker(4, "idc-b", "b-r1"), broker(5, "idc-b", "b-r2", pool="pay"),
            broker(6, "idc-b", "b-r3", state="dead"),
        ],
        "topics": [
            {"name": "orders", "pool": "shared", "placement": {"idc-a": 2, "idc-b": 1},
             "partitions": [
                 partition(0, [1, 2, 4], ["/data1", "/data1", "/data1"], bytes_in=10e6, disk_read=5e6),
                 partition(1, [2, 1, 4], ["/data1", "/data2", "/data2"], bytes_in=2e6),
             ]},
            {"name": "ledger", "pool": "pay",
             "partitions": [partition(0, [5], ["/data1"], bytes_in=3e6)]},
        ],
    }


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc)


def mutated(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with ``value`` set at a dotted path like ``brokers.0.disks.1.util``.

    ``value`` of ``DELETE`` removes the key.
    """
    out = copy.deepcopy(doc)
    node: Any = out
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    if value is DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


DELETE = object()
