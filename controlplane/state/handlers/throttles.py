"""Handlers of the throttle aggregate (``state["throttles"][cluster][key]``): record a lever in force, clear
it. The stored shape is :class:`domain.throttle_record.ThrottleRecord`'s (``kind`` the lever kind the
throttle code uses). Guarantee: ``since`` survives an update of the same key. Cost: O(size of the target)."""

from __future__ import annotations

from controlplane.state.commands import ThrottleClear, ThrottleSet
from controlplane.state.handlers.registry import Ledger, handles
from raft.protocol import JsonDict


@handles(ThrottleSet)
def set_throttle(led: Ledger, cmd: ThrottleSet) -> JsonDict:
    led.cluster(cmd.cluster)
    throttles = led.state["throttles"].setdefault(cmd.cluster, {})
    old = throttles.get(cmd.key)
    throttles[cmd.key] = {"key": cmd.key, "kind": cmd.kind, "target": cmd.target,
                          "rate_bytes_per_s": cmd.rate_bytes_per_s, "evidence": cmd.evidence,
                          "set_by": cmd.meta.who, "why": cmd.meta.why,
                          "since": old["since"] if old else cmd.meta.at.isoformat(),
                          "updated_at": cmd.meta.at.isoformat()}
    return {"cluster": cmd.cluster, "key": cmd.key, "created": old is None}


@handles(ThrottleClear)
def clear(led: Ledger, cmd: ThrottleClear) -> JsonDict:
    removed = led.state["throttles"].get(cmd.cluster, {}).pop(cmd.key, None)
    return {"cluster": cmd.cluster, "key": cmd.key, "removed": removed is not None}
