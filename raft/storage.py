"""On-disk layout of a node and the full-state snapshot file pysyncobj writes at log compaction.

A node's data directory holds ``journal.bin`` (pysyncobj's append-only Raft log, plus
``journal.bin.meta`` with term/vote/commit index) and ``snapshot.bin`` (the state machine's
full state at some applied index, plus the Raft bookkeeping pysyncobj needs to resume after it).
A restarted node loads the snapshot, then replays the journal entries after it.

The snapshot file is also what a leader streams to a follower too far behind to be served from
the log, so both sides use the same :class:`SnapshotCodec`.
"""

from __future__ import annotations

import json
import os
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raft.protocol import JsonDict, canonical_json

_MAGIC = b"GRDNSNP1"


@dataclass(frozen=True)
class DataDir:
    """Paths inside a node's data directory (created on construction of the node)."""

    root: Path

    @property
    def journal(self) -> Path:
        return self.root / "journal.bin"

    @property
    def snapshot(self) -> Path:
        return self.root / "snapshot.bin"

    def ensure(self) -> DataDir:
        """Create the directory if needed and return self."""
        self.root.mkdir(parents=True, exist_ok=True)
        return self


def encode_snapshot(state: JsonDict, raft_meta: Any) -> bytes:
    """Serialise a state snapshot and pysyncobj's bookkeeping tuple into one checksummed blob."""
    state_bytes = canonical_json(state).encode()
    meta_bytes = pickle.dumps(raft_meta, protocol=4)
    body = len(state_bytes).to_bytes(8, "big") + state_bytes + meta_bytes
    return _MAGIC + zlib.crc32(body).to_bytes(4, "big") + zlib.compress(body, 1)


def decode_snapshot(blob: bytes) -> tuple[JsonDict, Any]:
    """Inverse of :func:`encode_snapshot`; raises ValueError on a corrupt or foreign file."""
    if not blob.startswith(_MAGIC):
        raise ValueError("not a Guardian raft snapshot (bad magic)")
    crc = int.from_bytes(blob[len(_MAGIC) : len(_MAGIC) + 4], "big")
    body = zlib.decompress(blob[len(_MAGIC) + 4 :])
    if zlib.crc32(body) != crc:
        raise ValueError("raft snapshot checksum mismatch")
    size = int.from_bytes(body[:8], "big")
    state = json.loads(body[8 : 8 + size])
    meta = pickle.loads(body[8 + size :])  # our own file, written by encode_snapshot
    if not isinstance(state, dict):
        raise ValueError("raft snapshot state is not an object")
    return state, meta


class SnapshotCodec:
    """pysyncobj ``serializer``/``deserializer`` hooks that store a JSON state machine snapshot.

    ``take`` returns the state to store (called on the Raft thread, so it is consistent with the
    last applied index); ``install`` replaces the state machine's state with a loaded one.
    """

    def __init__(self, take: Callable[[], JsonDict], install: Callable[[JsonDict], None]) -> None:
        self._take = take
        self._install = install

    def serialize(self, file_name: str, raft_meta: Any) -> None:
        """Write the snapshot to ``file_name`` (pysyncobj renames it into place afterwards)."""
        blob = encode_snapshot(self._take(), raft_meta)
        with open(file_name, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())

    def deserialize(self, file_name: str) -> Any:
        """Load ``file_name``, install its state and return pysyncobj's bookkeeping tuple."""
        with open(file_name, "rb") as f:
            state, meta = decode_snapshot(f.read())
        self._install(state)
        return meta
