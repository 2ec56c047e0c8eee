"""One member of the tiered-metadata Raft group: the store, its state machine and the Raft node.

Goal
    The service side of the tiered metadata: writes proposed through Raft (leader only), reads from
    the local store, counters for ``/metrics``.

Method
    A second Raft group (its own port and data directory, the same transport key as the control
    plane's group): tiered appends are frequent, small and numerous (thousands per second at a busy
    federation) while the control plane's state machine is small JSON hashed and snapshotted whole;
    one group would make every control-plane snapshot carry the segment store and every segment
    append wait behind control-plane commands.  Ids are allocated inside the append command (the
    store's counters), which is the same allocation-by-replicated-command the control plane's
    ``allocate_ids`` does, without a second round trip.

Guarantee
    An append returns only after its entry is committed by a majority and applied here; a node that
    is not leader raises ``NotLeaderError`` without proposing.  Reads on a follower are as fresh as
    its applied index (``status()`` reports it).

Cost
    One Raft round trip per group (batch events into a group to amortise it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raft.node import RaftNode, RaftSettings
from tiered.machine import TieredStateMachine, append_command, delete_command, validate
from tiered.model import PartitionKey, SegmentEvent
from tiered.store import TieredStore


@dataclass(frozen=True)
class Appended:
    group_id: int
    segment_ids: list[int]
    raft_index: int
    duplicate: bool = False
    """A retry of an applied idempotent request: the ids (and index) are those of its first application."""


COMPACTION_MIN_ENTRIES = 20000
"""Entries the tiered group's Raft log keeps before it compacts into a snapshot (the state group keeps
RaftSettings' default)."""


class TieredNode:
    """Store + state machine + Raft node; see the module docstring."""

    def __init__(self, self_addr: str, peers: Sequence[str], data_dir: Path, *, key: bytes | None,
                 settings: RaftSettings | None = None) -> None:
        self.store = TieredStore(Path(data_dir) / "store")
        self.machine = TieredStateMachine(self.store)
        self.raft = RaftNode(self_addr, peers, self.machine, Path(data_dir) / "raft", validator=validate,
                             key=key, settings=settings or RaftSettings(compaction_min_entries=COMPACTION_MIN_ENTRIES))
        self._lock = threading.Lock()
        self.appended_events = 0
        self.appended_groups = 0
        self.refused = 0
        self.duplicates = 0
        self.started = time.monotonic()

    def append(self, key: PartitionKey, leader_epoch: int, events: list[SegmentEvent],
               timeout: float = 5.0, producer_id: int = 0, sequence: int = 0) -> Appended:
        """Propose and wait for one group; with ``producer_id``/``sequence`` a retry is answered, not re-applied."""
        command = append_command(key, leader_epoch, events, producer_id, sequence)
        committed = self.raft.propose_committed(command, timeout)
        r = committed.result
        duplicate = bool(r.get("duplicate", False))
        with self._lock:
            if duplicate:
                self.duplicates += 1
            else:
                self.appended_groups += 1
                self.appended_events += len(events)
        return Appended(int(r["group_id"]), [int(s) for s in r["segment_ids"]],
                        int(r.get("raft_index") or committed.index), duplicate)

    def delete_partition(self, key: PartitionKey, timeout: float = 5.0) -> bool:
        return bool(self.raft.propose(delete_command(key), timeout)["deleted"])

    def status(self) -> dict[str, Any]:
        st = self.raft.status()
        st["store_watermark"] = self.store.watermark()
        return st

    def close(self) -> None:
        self.raft.close()
        self.store.close()
