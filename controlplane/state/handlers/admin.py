"""Handlers of the group-wide counters: the state version (:mod:`controlplane.state.versions`) and the id
allocator. Guarantee: the state version never goes down; ids are never handed out twice. Cost: O(1)."""

from __future__ import annotations

from controlplane.state.commands import AllocateIds, StateVersionSet
from controlplane.state.handlers.registry import Ledger, handles
from controlplane.state.versions import group_version
from raft.protocol import CommandRejected, JsonDict


@handles(StateVersionSet)
def state_version(led: Ledger, cmd: StateVersionSet) -> JsonDict:
    old = group_version(led.state)
    if cmd.version < old:
        raise CommandRejected(f"state version {cmd.version} is below the group's version {old}: state versions "
                              "never go down")
    if cmd.version > old:
        led.state["state_version"] = cmd.version
    return {"version": cmd.version, "previous": old}


@handles(AllocateIds)
def allocate_ids(led: Ledger, cmd: AllocateIds) -> JsonDict:
    first = led.allocate(cmd.count)
    return {"first": first, "last": first + cmd.count - 1}
