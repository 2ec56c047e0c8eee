"""Typed throttle records: one lever in force on a cluster as the replicated state records it.

Goal: the stored shape of a throttle (``state["throttles"][cluster][key]``) written once, for the state
machine, the executor's migration levers and the API. Method: a frozen :class:`ThrottleRecord` with
``from_json`` / ``to_json`` for the store boundary; ``kind`` stays the lever-kind string the throttle code
uses today (:mod:`domain.throttles`). Guarantee: immutable and detached (target and evidence are deep
copies); ``ThrottleRecord.from_json(doc).to_json() == doc``. Cost: O(size of target and evidence).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JsonDict = dict[str, Any]
_KNOWN = ("key", "kind", "target", "rate_bytes_per_s", "evidence", "set_by", "why", "since", "updated_at")


@dataclass(frozen=True, slots=True)
class ThrottleRecord:
    """A lever in force: its ``kind`` and ``target``, the rate, the evidence that set it, who set it and when."""

    key: str
    kind: str
    target: Mapping[str, Any]
    rate_bytes_per_s: float
    evidence: Mapping[str, Any] = field(default_factory=dict)
    set_by: str = ""
    why: str = ""
    since: str = ""
    updated_at: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ThrottleRecord:
        """The record of a stored throttle (a detached copy)."""
        return cls(key=str(doc["key"]), kind=str(doc.get("kind", "")), target=copy.deepcopy(doc.get("target") or {}),
                   rate_bytes_per_s=doc.get("rate_bytes_per_s", 0.0), evidence=copy.deepcopy(doc.get("evidence") or {}),
                   set_by=str(doc.get("set_by") or ""), why=str(doc.get("why") or ""),
                   since=str(doc.get("since") or ""), updated_at=str(doc.get("updated_at") or ""),
                   extra={k: copy.deepcopy(v) for k, v in doc.items() if k not in _KNOWN})

    def to_json(self) -> JsonDict:
        """The stored form (a fresh copy)."""
        return {"key": self.key, "kind": self.kind, "target": copy.deepcopy(dict(self.target)),
                "rate_bytes_per_s": self.rate_bytes_per_s, "evidence": copy.deepcopy(dict(self.evidence)),
                "set_by": self.set_by, "why": self.why, "since": self.since, "updated_at": self.updated_at,
                **copy.deepcopy(dict(self.extra))}
