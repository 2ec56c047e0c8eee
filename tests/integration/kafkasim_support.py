"""Shared helpers for kafkasim integration tests: a small federation on real 127.0.0.1 ports."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from kafkasim.scenario import build_federation
from kafkasim.server import SimRunner

SMALL: dict[str, Any] = {
    "seed": 3,
    "speed": 1.0,
    "tick_seconds": 1.0,
    "clusters": [
        {"name": "east", "partition_throttle": True,
         "broker_configs": {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"},
         "brokers": [{"count": 4, "idcs": ["idc-a", "idc-b"], "racks_per_idc": 2, "memory_gb": 16,
                      "disks": [{"count": 2, "kind": "hdd"}, {"count": 1, "kind": "nvme"}]}],
         "topics": [{"name": "orders", "partitions": 4, "rf": 3, "bytes_in_per_s": 500_000, "size_gb": 1,
                     "tail_groups": 1, "producer": {"client_id": "orders-svc", "user": "orders"}}]},
        {"name": "west", "partition_throttle": False,
         "brokers": [{"count": 3, "idcs": ["idc-c"], "racks_per_idc": 3, "memory_gb": 8,
                      "disks": [{"count": 2, "kind": "ssd"}]}],
         "topics": []},
    ],
}


def start_sim(spec: dict[str, Any] | None = None, **kw: Any) -> SimRunner:
    """Build and start a federation; the caller must ``stop()`` it."""
    runner = SimRunner(build_federation(json.loads(json.dumps(spec or SMALL))), **kw)
    runner.start()
    return runner


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 10) -> Any:
    """GET (or POST when ``body`` is given) a JSON endpoint."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def http_text(url: str, timeout: float = 10) -> str:
    """GET a text endpoint."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


BROKER_KEYS = ("id", "metrics", "metrics_url", "idc", "rack")


def register_fields(cluster: dict[str, Any]) -> dict[str, Any]:
    """What an operator registers for a cluster of kafkasim's endpoints document (``POST /api/v1/clusters``
    fields): bootstrap servers, every broker's metrics endpoints, the security object, the rack→IDC rule and
    the hardware profile."""
    brokers = [{k: b[k] for k in BROKER_KEYS if b.get(k) is not None} for b in cluster["brokers"]]
    out: dict[str, Any] = {"bootstrap_servers": cluster["bootstrap_servers"].split(","), "brokers": brokers}
    for key in ("security", "rack_to_idc", "hardware"):
        if cluster.get(key):
            out[key] = cluster[key]
    return out
