"""Typed cluster records: a registered cluster as the replicated state records it.

Goal: the stored shape of a cluster (``state["clusters"][name]``: connection settings, declared topology,
IDC placement policy, pools, auto-rebalance policy, labels) written once, for the state machine, the
executor (which connects with it and checks its policies) and the API. Method: a frozen
:class:`ClusterRecord` with ``from_json`` / ``to_json`` for the store boundary; the connection and topology
members stay the JSON the registration check (:mod:`controlplane.state.registration`) accepts, deep-copied;
members absent from an older state take their defaults here and are never written back by a read.

Guarantee: immutable and detached. Cost: O(size of the record) per translation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JsonDict = dict[str, Any]
_KNOWN = ("name", "bootstrap_servers", "metrics_urls", "control_url", "capabilities", "security", "brokers",
          "rack_to_idc", "idc_overrides", "hardware", "consumer_offsets", "placement", "pools", "auto_rebalance",
          "registered_at", "labels")


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """One registered cluster."""

    name: str
    bootstrap_servers: tuple[str, ...]
    metrics_urls: Mapping[str, str] = field(default_factory=dict)
    control_url: str | None = None
    capabilities: Mapping[str, bool] = field(default_factory=dict)
    security: Mapping[str, Any] | None = None
    brokers: tuple[Mapping[str, Any], ...] = ()
    rack_to_idc: Mapping[str, Any] | None = None
    idc_overrides: Mapping[str, str] = field(default_factory=dict)
    hardware: Any = None
    consumer_offsets: str | None = None
    placement: Mapping[str, Any] = field(default_factory=lambda: {"default": None, "topics": {}})
    pools: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    auto_rebalance: Mapping[str, Any] = field(default_factory=lambda: {"enabled": False})
    registered_at: str = ""
    labels: Mapping[str, str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ClusterRecord:
        """The record of a stored cluster (a detached copy)."""
        d = copy.deepcopy(dict(doc))
        return cls(name=str(d["name"]), bootstrap_servers=tuple(d.get("bootstrap_servers") or ()),
                   metrics_urls=d.get("metrics_urls") or {}, control_url=d.get("control_url"),
                   capabilities=d.get("capabilities") or {}, security=d.get("security"),
                   brokers=tuple(d.get("brokers") or ()), rack_to_idc=d.get("rack_to_idc"),
                   idc_overrides=d.get("idc_overrides") or {}, hardware=d.get("hardware"),
                   consumer_offsets=d.get("consumer_offsets"),
                   placement=d.get("placement") or {"default": None, "topics": {}},
                   pools={p: tuple(b) for p, b in (d.get("pools") or {}).items()},
                   auto_rebalance=d.get("auto_rebalance") or {"enabled": False},
                   registered_at=str(d.get("registered_at") or ""), labels=d.get("labels"),
                   extra={k: v for k, v in d.items() if k not in _KNOWN})

    def to_json(self) -> JsonDict:
        """The stored form (a fresh copy; ``consumer_offsets`` and ``labels`` only when set)."""
        out: JsonDict = {
            "name": self.name, "bootstrap_servers": list(self.bootstrap_servers),
            "metrics_urls": dict(self.metrics_urls),
            "control_url": self.control_url, "capabilities": dict(self.capabilities),
            "security": copy.deepcopy(self.security), "brokers": copy.deepcopy(list(self.brokers)),
            "rack_to_idc": copy.deepcopy(self.rack_to_idc), "idc_overrides": dict(self.idc_overrides),
            "hardware": copy.deepcopy(self.hardware),
            **({"consumer_offsets": self.consumer_offsets} if self.consumer_offsets is not None else {}),
            "placement": copy.deepcopy(dict(self.placement)), "pools": {p: list(b) for p, b in self.pools.items()},
            "auto_rebalance": copy.deepcopy(dict(self.auto_rebalance)), "registered_at": self.registered_at,
            **({"labels": dict(self.labels)} if self.labels is not None else {}),
        }
        out.update(copy.deepcopy(dict(self.extra)))
        return out
