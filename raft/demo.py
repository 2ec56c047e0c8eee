"""A small state machine used by ``raft.node_main``, the reliability tests and the benchmark.

It is a key/value map plus an ID allocator.  Commands:

* ``{"type": "put", "key": str, "value": <json>}`` -> ``{"key", "version"}``
* ``{"type": "delete", "key": str}`` -> ``{"key", "deleted": bool}``
* ``{"type": "cas", "key": str, "expected_version": int, "value": <json>}`` -> like put, or
  rejected when the key's version differs (0 = the key must not exist)
* ``{"type": "allocate_ids", "count": int, "namespace": str}`` -> ``{"first", "last", "uuids"?}``:
  a block of globally unique, strictly increasing 64-bit ids.  Because the counter lives in the
  replicated state, a block handed out by one leader is never handed out again by a later one.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from raft.protocol import CommandRejected, JsonDict, check_command_shape

MAX_ID = (1 << 63) - 1  # ids are positive signed 64-bit integers
MAX_BLOCK = 1_000_000
MAX_UUIDS = 1000
_UUID_NAMESPACE = uuid.UUID("6f1d3c1e-6a0e-4c55-9d8e-3b9d2f0a7c11")


def id_to_uuid(namespace: str, value: int) -> str:
    """The UUID (version 5, deterministic) that goes with id ``value`` of ``namespace``."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"{namespace}:{value}"))


def validate_demo_command(command: JsonDict) -> JsonDict:
    """Check a command's fields before it is proposed; raise CommandRejected naming the problem."""
    cmd = check_command_shape(command)
    kind = cmd["type"]

    def need_str(name: str) -> str:
        value = cmd.get(name)
        if not isinstance(value, str) or not value or len(value) > 512:
            raise CommandRejected(f"{kind}: field {name!r} must be a non-empty string of <= 512 chars")
        return value

    def need_int(name: str, lo: int, hi: int, default: int | None = None) -> int:
        value = cmd.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise CommandRejected(f"{kind}: field {name!r} must be an integer in [{lo}, {hi}]")
        return value

    if kind == "put":
        if "value" not in cmd:
            raise CommandRejected("put: field 'value' is required")
        return {"type": kind, "key": need_str("key"), "value": cmd["value"]}
    if kind == "delete":
        return {"type": kind, "key": need_str("key")}
    if kind == "cas":
        if "value" not in cmd:
            raise CommandRejected("cas: field 'value' is required")
        return {
            "type": kind,
            "key": need_str("key"),
            "expected_version": need_int("expected_version", 0, MAX_ID),
            "value": cmd["value"],
        }
    if kind == "allocate_ids":
        out: JsonDict = {
            "type": kind,
            "count": need_int("count", 1, MAX_BLOCK, default=1),
            "namespace": need_str("namespace") if "namespace" in cmd else "default",
        }
        if cmd.get("uuids"):
            if out["count"] > MAX_UUIDS:
                raise CommandRejected(f"allocate_ids: at most {MAX_UUIDS} ids when uuids are requested")
            out["uuids"] = True
        return out
    raise CommandRejected(f"unknown command type {kind!r}")


class DemoStateMachine:
    """Key/value map with versions and a per-namespace monotonic ID allocator (deterministic)."""

    def __init__(self) -> None:
        self.kv: dict[str, JsonDict] = {}  # key -> {"value", "version"}
        self.next_id: dict[str, int] = {}  # namespace -> next id to hand out
        self.applied = 0  # number of commands applied (rejected ones excluded)

    def apply(self, command: JsonDict) -> Any:
        """Apply one command; raises CommandRejected without changing state when it cannot."""
        cmd = validate_demo_command(command)  # re-check: the log is the only input we trust
        result = self._apply(cmd)
        self.applied += 1
        return result

    def _apply(self, cmd: JsonDict) -> Any:
        kind = cmd["type"]
        if kind == "put":
            return self._put(cmd["key"], cmd["value"])
        if kind == "delete":
            existed = self.kv.pop(cmd["key"], None) is not None
            return {"key": cmd["key"], "deleted": existed}
        if kind == "cas":
            current = self.kv.get(cmd["key"], {}).get("version", 0)
            if current != cmd["expected_version"]:
                raise CommandRejected(
                    f"cas: version of {cmd['key']!r} is {current}, expected {cmd['expected_version']}"
                )
            return self._put(cmd["key"], cmd["value"])
        # allocate_ids
        namespace, count = cmd["namespace"], cmd["count"]
        first = self.next_id.get(namespace, 1)
        last = first + count - 1
        if last > MAX_ID:
            raise CommandRejected(f"allocate_ids: namespace {namespace!r} is exhausted")
        self.next_id[namespace] = last + 1
        result: JsonDict = {"namespace": namespace, "first": first, "last": last}
        if cmd.get("uuids"):
            result["uuids"] = [id_to_uuid(namespace, i) for i in range(first, last + 1)]
        return result

    def _put(self, key: str, value: Any) -> JsonDict:
        version = self.kv.get(key, {}).get("version", 0) + 1
        self.kv[key] = {"value": copy.deepcopy(value), "version": version}
        return {"key": key, "version": version}

    def snapshot(self) -> JsonDict:
        """Whole state as a JSON-able dict (a deep copy)."""
        return {"kv": copy.deepcopy(self.kv), "next_id": dict(self.next_id), "applied": self.applied}

    def restore(self, snapshot: JsonDict) -> None:
        """Replace the state with one from :meth:`snapshot`."""
        self.kv = copy.deepcopy(snapshot["kv"])
        self.next_id = {str(k): int(v) for k, v in snapshot["next_id"].items()}
        self.applied = int(snapshot["applied"])
