"""On-disk layout of a node and the full-state snapshot file pysyncobj writes at log compaction.

Goal
    A node's data directory holds ``journal.bin`` + ``journal.bin.meta`` (:mod:`raft.journal`: the
    checksummed Raft log and term/vote/commit index) and ``snapshot.bin`` (the state machine's full
    state at some applied index, plus the Raft bookkeeping pysyncobj needs to resume after it).  A
    restarted node loads the snapshot, then replays the journal entries after it; a damaged snapshot
    must stop the node, not leave it at applied index 0 voting in elections.

Method
    ``snapshot.bin`` = ``GRDNSNP1`` + CRC-32 + zlib(length-prefixed canonical JSON state + pickled
    pysyncobj bookkeeping).  :func:`check_snapshot` verifies it (magic, CRC, JSON) before pysyncobj
    starts and returns the last index it covers; :class:`SnapshotCodec` is pysyncobj's
    ``serializer``/``deserializer`` hook pair and reports any failure to load (a corrupt file, or a
    corrupt snapshot streamed by the leader) through ``on_damage`` instead of letting pysyncobj log
    and carry on.  The snapshot is also what a leader streams to a follower too far behind to be
    served from the log, so both sides use the same codec.

Guarantee
    A snapshot whose bytes differ from what was written is never installed: decoding fails and the
    node reports it.  The pickled bookkeeping is unpickled only after the CRC matched (our own file,
    or one streamed over the authenticated transport).

Cost
    Writing: one canonical JSON dump + zlib level 1 + fsync per compaction; checking at start reads
    and decodes the file once more (~20 ms per MB of state).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raft.errors import StorageDamaged
from raft.protocol import JsonDict, canonical_json

log = logging.getLogger(__name__)

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
    try:
        body = zlib.decompress(blob[len(_MAGIC) + 4 :])
    except zlib.error as exc:
        raise ValueError(f"raft snapshot does not decompress ({exc})") from None
    if zlib.crc32(body) != crc:
        raise ValueError("raft snapshot checksum mismatch")
    size = int.from_bytes(body[:8], "big")
    try:
        state = json.loads(body[8 : 8 + size])
        meta = pickle.loads(body[8 + size :])  # CRC verified: our own file (or a peer's, authenticated)
    except Exception as exc:
        raise ValueError(f"raft snapshot content unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict):
        raise ValueError("raft snapshot state is not an object")
    return state, meta


def snapshot_last_index(meta: Any) -> int:
    """The last log index a snapshot covers, from pysyncobj's bookkeeping tuple (last entry, previous
    entry, cluster); raises ValueError when the tuple does not have that shape."""
    try:
        return int(meta[0][1])
    except (TypeError, IndexError, ValueError) as exc:
        raise ValueError(f"raft snapshot bookkeeping has an unexpected shape ({exc})") from None


def check_snapshot(path: Path) -> int | None:
    """Verify ``path`` (None when there is none); return the last log index it covers.

    Raises :class:`~raft.errors.StorageDamaged` naming the file and the remedy.
    """
    if not path.exists():
        return None
    try:
        _, meta = decode_snapshot(path.read_bytes())
        return snapshot_last_index(meta)
    except OSError as exc:
        raise StorageDamaged(path, f"unreadable ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise StorageDamaged(path, str(exc)) from None


class SnapshotCodec:
    """pysyncobj ``serializer``/``deserializer`` hooks that store a JSON state machine snapshot.

    ``take`` returns the state to store (called on the Raft thread, so it is consistent with the
    last applied index); ``install`` replaces the state machine's state with a loaded one;
    ``on_damage(message)`` hears of a snapshot that cannot be loaded (pysyncobj itself would only
    log it and carry on with an empty state).
    """

    def __init__(self, take: Callable[[], JsonDict], install: Callable[[JsonDict], None],
                 on_damage: Callable[[str], None] | None = None) -> None:
        self._take = take
        self._install = install
        self._on_damage = on_damage

    def serialize(self, file_name: str, raft_meta: Any) -> None:
        """Write the snapshot to ``file_name`` (pysyncobj renames it into place afterwards)."""
        try:
            blob = encode_snapshot(self._take(), raft_meta)
            with open(file_name, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
        except Exception as exc:
            log.error("raft snapshot %s could not be written (%s); the journal keeps every entry meanwhile",
                      file_name, exc)
            raise

    def deserialize(self, file_name: str) -> Any:
        """Load ``file_name``, install its state and return pysyncobj's bookkeeping tuple."""
        try:
            with open(file_name, "rb") as f:
                state, meta = decode_snapshot(f.read())
            snapshot_last_index(meta)
        except (OSError, ValueError) as exc:
            message = str(StorageDamaged(Path(file_name), str(exc)))
            if self._on_damage is not None:
                self._on_damage(message)
            raise
        self._install(state)
        return meta
