"""The replicated state machine of the tiered-metadata Raft group (its state lives in :mod:`tiered.store`).

Goal
    Make every append and delete a Raft command applied identically on every node, without putting
    the store into the Raft snapshot's JSON and without re-applying entries the store already holds.

Method
    Commands: ``tiered.append`` (partition, leader epoch, events; optionally ``producer_id`` and
    ``sequence``: an idempotent append, deduplicated by the store against the producer's last applied
    sequence on the partition) and ``tiered.delete``.  The node
    calls :meth:`TieredStateMachine.apply_at` with each entry's log index; entries at or below the
    store's watermark (already applied before a restart) are skipped, others run in one store
    transaction that also writes the watermark.  A refused batch raises ``CommandRejected`` (prefix
    ``stale-epoch:`` for fencing, ``stale-sequence:`` for an idempotent request older than its producer's
    last applied one) and only advances the watermark.  ``snapshot()`` is small metadata
    (the watermark); the store itself travels as the snapshot's *attachment*
    (:meth:`write_attachment`: a compact LMDB copy), and :meth:`restore_attachment` installs it only
    when it is newer than the local store (a restarting node usually has a newer one already).

Guarantee
    Deterministic: the result depends only on the store and the command; ids (group and segment)
    come from counters in the store, so they are unique and increasing on every node.

Cost
    One LMDB write transaction per entry; a snapshot costs one compact copy of the store file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raft.protocol import CommandRejected, JsonDict
from tiered.model import GroupRefused, PartitionKey, SegmentEvent
from tiered.store import TieredStore

APPEND = "tiered.append"
DELETE = "tiered.delete"
STALE_PREFIX = "stale-epoch: "
STALE_SEQUENCE_PREFIX = "stale-sequence: "


def append_command(key: PartitionKey, leader_epoch: int, events: list[SegmentEvent], producer_id: int = 0,
                   sequence: int = 0) -> JsonDict:
    """The append command; with ``producer_id`` and ``sequence`` (both > 0) it is idempotent."""
    cmd: JsonDict = {"type": APPEND, "partition": key.to_json(), "leader_epoch": int(leader_epoch),
                     "events": [e.to_json() for e in events]}
    if producer_id or sequence:
        cmd.update(producer_id=int(producer_id), sequence=int(sequence))
    return cmd


def producer_of(command: JsonDict) -> tuple[int, int] | None:
    """(producer id, sequence) of an idempotent append command, else None."""
    if "producer_id" not in command:
        return None
    return int(command["producer_id"]), int(command["sequence"])


def delete_command(key: PartitionKey) -> JsonDict:
    return {"type": DELETE, "partition": key.to_json()}


def validate(command: JsonDict) -> JsonDict:
    """Shape checks before proposing (the state checks run in ``apply_at``)."""
    try:
        PartitionKey.from_json(command["partition"]).check()
        if command["type"] == APPEND:
            [SegmentEvent.from_json(e) for e in command["events"]]
            int(command["leader_epoch"])
            producer = producer_of(command)
            if producer is not None and (producer[0] <= 0 or producer[1] <= 0 or max(producer) >= 2**64):
                raise CommandRejected("producer_id and sequence must both be 1..2^64-1 for an idempotent append")
        elif command["type"] != DELETE:
            raise CommandRejected(f"unknown command type {command['type']!r}")
    except GroupRefused as exc:
        raise CommandRejected(str(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CommandRejected(f"malformed command: {exc!r}") from None
    return command


class TieredStateMachine:
    """See the module docstring; ``store`` is opened by the caller and outlives restores."""

    def __init__(self, store: TieredStore) -> None:
        self.store = store

    def apply_at(self, command: JsonDict, index: int) -> Any:
        if index <= self.store.watermark():
            return {"replayed": True}
        key = PartitionKey.from_json(command["partition"])
        try:
            if command["type"] == APPEND:
                events = [SegmentEvent.from_json(e) for e in command["events"]]
                return self.store.append(key, int(command["leader_epoch"]), events, index, producer_of(command))
            if command["type"] == DELETE:
                return self.store.delete_partition(key, index)
            raise GroupRefused(f"unknown command type {command['type']!r}")
        except GroupRefused as exc:
            self.store.note_index(index)
            prefix = STALE_PREFIX if exc.stale_epoch else STALE_SEQUENCE_PREFIX if exc.stale_sequence else ""
            raise CommandRejected(prefix + str(exc)) from None

    def apply(self, command: JsonDict) -> Any:  # the protocol's form; the node calls apply_at
        raise CommandRejected("the tiered state machine needs the entry's index (apply_at)")

    def snapshot(self) -> JsonDict:
        return {"watermark": self.store.watermark()}

    def restore(self, snapshot: JsonDict) -> None:
        if int(snapshot.get("watermark", 0)) > self.store.watermark():
            raise RuntimeError("tiered snapshot without its store attachment is newer than the local store")

    def write_attachment(self, path: Path) -> None:
        self.store.copy_to(path)

    def restore_attachment(self, state: JsonDict, path: Path) -> None:
        if int(state.get("watermark", 0)) > self.store.watermark():
            self.store.replace_from(path)

    def canonical_json(self) -> str:
        return '"' + self.store.digest() + '"'
