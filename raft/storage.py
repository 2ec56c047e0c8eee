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

    A state machine that keeps its bulk state in files of its own (an embedded store) adds an
    *attachment* instead of putting that state into the JSON: ``GRDNSNPA`` + length of the head +
    the head blob above + length and CRC-32 of the attachment + the attachment's bytes, streamed
    from and to a file (never held in memory).  pysyncobj ships the snapshot file to a lagging
    follower as it is, so the attachment travels with it; the follower installs it only after
    :func:`verify_snapshot_file` passed on the whole received file (:mod:`raft.transfer`).

Guarantee
    A snapshot whose bytes differ from what was written is never installed: decoding fails and the
    node reports it.  The pickled bookkeeping is unpickled only after the CRC matched (our own file,
    or one streamed over the authenticated transport).

Cost
    Writing: one canonical JSON dump + zlib level 1 + fsync per compaction; checking at start reads
    and decodes the file once more (~20 ms per MB of state).  An attachment costs one streamed copy
    (plus CRC, ~1 GB/s) when written, checked and installed; memory stays at one 1 MB buffer.
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
from typing import Any, BinaryIO

from raft.errors import StorageDamaged
from raft.protocol import JsonDict, canonical_json

log = logging.getLogger(__name__)

_MAGIC = b"GRDNSNP1"
_ATTACHED_MAGIC = b"GRDNSNPA"
_CHUNK = 1 << 20


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in directory ``path`` durable (fsync the directory itself): after a crash the
    directory entry exists, not only the file's bytes. Best effort: a file system that refuses a directory fsync
    (or a directory that cannot be opened) is left as it is — the write itself has already been fsynced."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


def _copy_crc(src: BinaryIO, dst: BinaryIO | None, length: int) -> int:
    """Stream ``length`` bytes from ``src`` (to ``dst`` when given); return their CRC-32."""
    crc = 0
    left = length
    while left > 0:
        chunk = src.read(min(_CHUNK, left))
        if not chunk:
            raise ValueError(f"raft snapshot attachment truncated ({length - left} of {length} bytes)")
        crc = zlib.crc32(chunk, crc)
        if dst is not None:
            dst.write(chunk)
        left -= len(chunk)
    return crc


def read_snapshot_file(path: Path, attachment_to: Path | None = None) -> tuple[JsonDict, Any, bool]:
    """Decode a snapshot file: (state, pysyncobj bookkeeping, whether it carried an attachment).

    The attachment's CRC is verified by streaming it (into ``attachment_to`` when given; that file is
    complete and verified when this returns).  Raises ValueError on a corrupt or foreign file.
    """
    with open(path, "rb") as f:
        magic = f.read(len(_ATTACHED_MAGIC))
        if magic != _ATTACHED_MAGIC:
            f.seek(0)
            state, meta = decode_snapshot(f.read())
            return state, meta, False
        head_len = int.from_bytes(f.read(8), "big")
        state, meta = decode_snapshot(f.read(head_len))
        att_len = int.from_bytes(f.read(8), "big")
        att_crc = int.from_bytes(f.read(4), "big")
        if attachment_to is None:
            crc = _copy_crc(f, None, att_len)
        else:
            with open(attachment_to, "wb") as out:
                crc = _copy_crc(f, out, att_len)
                out.flush()
                os.fsync(out.fileno())
        if crc != att_crc:
            raise ValueError("raft snapshot attachment checksum mismatch")
        if f.read(1):
            raise ValueError(f"raft snapshot has bytes after its {att_len}-byte attachment")
        return state, meta, True


def verify_snapshot_file(path: Path) -> int:
    """Check a whole snapshot file (magic, CRCs, attachment length) without installing anything; return
    the last log index it covers.  Raises ValueError (or OSError) on a file that must not be used."""
    _, meta, _ = read_snapshot_file(path)
    return snapshot_last_index(meta)


def check_snapshot(path: Path) -> int | None:
    """Verify ``path`` (None when there is none); return the last log index it covers.

    Raises :class:`~raft.errors.StorageDamaged` naming the file and the remedy.
    """
    if not path.exists():
        return None
    try:
        _, meta, _ = read_snapshot_file(path)
        return snapshot_last_index(meta)
    except OSError as exc:
        raise StorageDamaged(path, f"unreadable ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise StorageDamaged(path, str(exc)) from None


class SnapshotCodec:
    """pysyncobj ``serializer``/``deserializer`` hooks that store a JSON state machine snapshot.

    ``take`` returns the state to store (called on the Raft thread, so it is consistent with the
    last applied index); ``install`` replaces the state machine's state with a loaded one (and gets
    the path of the verified attachment file, or None); ``on_damage(message)`` hears of a snapshot
    that cannot be loaded (pysyncobj itself would only log it and carry on with an empty state).
    ``attach(path)``, when given, writes the state machine's attachment to ``path`` (Raft thread,
    right after ``take``).
    """

    def __init__(self, take: Callable[[], JsonDict], install: Callable[[JsonDict, Path | None], None],
                 on_damage: Callable[[str], None] | None = None,
                 attach: Callable[[Path], None] | None = None) -> None:
        self._take = take
        self._install = install
        self._on_damage = on_damage
        self._attach = attach

    def serialize(self, file_name: str, raft_meta: Any) -> None:
        """Write the snapshot to ``file_name`` (pysyncobj renames it into place afterwards)."""
        try:
            blob = encode_snapshot(self._take(), raft_meta)
            with open(file_name, "wb") as f:
                if self._attach is None:
                    f.write(blob)
                else:
                    self._write_attached(f, blob, Path(file_name + ".att"))
                f.flush()
                os.fsync(f.fileno())
        except Exception as exc:
            log.error("raft snapshot %s could not be written (%s); the journal keeps every entry meanwhile",
                      file_name, exc)
            raise

    def _write_attached(self, f: BinaryIO, head: bytes, scratch: Path) -> None:
        assert self._attach is not None
        try:
            self._attach(scratch)
            size = scratch.stat().st_size
            f.write(_ATTACHED_MAGIC + len(head).to_bytes(8, "big") + head + size.to_bytes(8, "big"))
            crc_at = f.tell()
            f.write(b"\0\0\0\0")
            with open(scratch, "rb") as src:
                crc = _copy_crc(src, f, size)
            f.seek(crc_at)
            f.write(crc.to_bytes(4, "big"))
            f.seek(0, os.SEEK_END)
        finally:
            scratch.unlink(missing_ok=True)

    def deserialize(self, file_name: str) -> Any:
        """Load ``file_name``, install its state and return pysyncobj's bookkeeping tuple."""
        scratch = Path(file_name + ".in")
        try:
            try:
                state, meta, attached = read_snapshot_file(Path(file_name), scratch)
                snapshot_last_index(meta)
            except (OSError, ValueError) as exc:
                message = str(StorageDamaged(Path(file_name), str(exc)))
                if self._on_damage is not None:
                    self._on_damage(message)
                raise
            self._install(state, scratch if attached else None)
            return meta
        finally:
            scratch.unlink(missing_ok=True)
