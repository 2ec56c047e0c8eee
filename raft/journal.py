"""A checksummed Raft journal and meta file for pysyncobj (replaces its memory-mapped FileJournal).

Goal
    A damaged journal or meta file is found when the node starts, named in one line with the remedy,
    and the node refuses to start — instead of replaying an altered entry (silent divergence that later
    spreads to resynced peers), resetting its term and vote from a garbage ``.meta``, or dying with a
    raw traceback on a truncated file.  A full disk refuses writes with a clear error instead of
    killing the process with SIGBUS (what a write into a sparse memory-mapped page does).

Method
    ``journal.bin`` = ``GRDNJRN1`` then records ``[u32 length][u32 CRC-32][u64 index][u64 term][command]``
    (the CRC covers index, term and command), appended with plain ``write`` calls — no mmap, so a
    full disk raises ``OSError(ENOSPC)``, which :meth:`ChecksummedJournal.add` turns into
    :class:`~raft.errors.StorageFull` after cutting the file back to its last whole record.
    ``journal.bin.meta`` = ``GRDNMET1`` + CRC-32 + JSON (term, vote, commit index), replaced atomically
    (temp file, rename; fsynced only when created).  Loading checks the magic, every record's length,
    CRC and index continuity, and the meta's CRC; the first problem raises
    :class:`~raft.errors.StorageDamaged` naming the file, the byte offset and the remedy.  The journal
    is handed to pysyncobj through its ``createJournal`` factory (wrapped once per process: the object
    passed as ``journalFile`` is returned as is; any other value goes to pysyncobj's own factory).
    Log compaction (dropping a prefix) rewrites the file to a temp file and renames it, so a crash
    midway leaves the old or the new journal, never half of one.

Guarantee
    Every entry pysyncobj gets back after a restart is byte-for-byte one it wrote, in index order
    without gaps, or the node does not start.  An entry is in the file before pysyncobj sees it as
    logged (write first, then the in-memory list), so nothing is acknowledged that a failed write lost.
    Like pysyncobj's journal, entries are not fsynced one by one: they survive ``kill -9`` (page cache),
    a machine crash may lose the newest ones.

Cost
    Per entry one ``write`` syscall and a CRC-32 (~1 µs/KB); loading reads the file once (CRC at
    ~1 GB/s).  Memory: the entries, as pysyncobj's own journal keeps them.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pysyncobj.syncobj as _syncobj

from raft.errors import StorageDamaged, StorageFull
from raft.storage import fsync_dir

log = logging.getLogger(__name__)

JOURNAL_MAGIC = b"GRDNJRN1"
META_MAGIC = b"GRDNMET1"
_PYSYNCOBJ_MAGIC = b"PYSYNCOBJ"
_RECORD_HEAD = struct.Struct("<II")  # payload length, CRC-32 of the payload
_ENTRY_HEAD = struct.Struct("<QQ")  # index, term
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}

Entry = tuple[bytes, int, int]  # (command, index, term), pysyncobj's shape


class ChecksummedJournal:
    """pysyncobj's ``Journal`` interface over a checksummed append-only file; see the module docstring.

    ``fault`` (tests only) is called with the operation name before every write to the journal file
    and may raise ``OSError`` to simulate a failing disk.
    """

    def __init__(self, path: Path, fault: Any = None) -> None:
        self.path = Path(path)
        self.meta_path = self.path.with_name(self.path.name + ".meta")
        self.fault = fault
        self._entries: list[Entry] = []
        self._offsets: list[int] = []  # file offset of each entry's record
        self._meta: dict[str, Any] = {"term": 0, "voted_for": None, "commit_index": 1}
        self._meta_dirty = False
        self.full_error: str | None = None
        self.full_count = 0  # write failures for lack of space so far
        self.full_at = 0.0
        self._full_logged_at = 0.0
        exists, meta_exists = self.path.exists(), self.meta_path.exists()
        self.created = not exists and not meta_exists
        if self.created:
            self._create()
        elif not meta_exists:
            raise StorageDamaged(self.meta_path, "missing while the journal exists (term and vote lost)")
        elif not exists:
            raise StorageDamaged(self.path, "missing while its .meta exists (logged entries lost)")
        else:
            self._meta = self._load_meta()
            self._end = self._load()
        self._fd = os.open(self.path, os.O_WRONLY)

    # ------------------------------------------------------------------ loading
    def _create(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._store_meta(sync=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(JOURNAL_MAGIC)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self._end = len(JOURNAL_MAGIC)

    def _load_meta(self) -> dict[str, Any]:
        try:
            blob = self.meta_path.read_bytes()
        except OSError as exc:
            raise StorageDamaged(self.meta_path, f"unreadable ({exc.strerror or exc})") from None
        if not blob.startswith(META_MAGIC) or len(blob) < len(META_MAGIC) + 4:
            raise StorageDamaged(self.meta_path, "not a Guardian Raft meta file (bad magic or too short)")
        crc = int.from_bytes(blob[len(META_MAGIC):len(META_MAGIC) + 4], "big")
        body = blob[len(META_MAGIC) + 4:]
        if zlib.crc32(body) != crc:
            raise StorageDamaged(self.meta_path, "checksum mismatch")
        try:
            meta = json.loads(body)
            term, voted, commit = int(meta["term"]), meta["voted_for"], int(meta["commit_index"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageDamaged(self.meta_path, f"unreadable content ({exc})") from None
        if voted is not None and not isinstance(voted, str):
            raise StorageDamaged(self.meta_path, "voted_for is not an address")
        return {"term": term, "voted_for": voted, "commit_index": commit}

    def _load(self) -> int:
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise StorageDamaged(self.path, f"unreadable ({exc.strerror or exc})") from None
        if not data.startswith(JOURNAL_MAGIC):
            if data.startswith(_PYSYNCOBJ_MAGIC):
                raise StorageDamaged(self.path, "written in pysyncobj's unchecksummed format by an older Guardian")
            raise StorageDamaged(self.path, "not a Guardian Raft journal (bad magic)")
        pos = len(JOURNAL_MAGIC)
        prev: int | None = None
        while pos < len(data):
            n = len(self._entries) + 1
            if pos + _RECORD_HEAD.size > len(data):
                raise StorageDamaged(self.path, f"truncated: record {n} at byte {pos} has no complete header")
            size, crc = _RECORD_HEAD.unpack_from(data, pos)
            start, end = pos + _RECORD_HEAD.size, pos + _RECORD_HEAD.size + size
            if size < _ENTRY_HEAD.size or end > len(data):
                raise StorageDamaged(self.path, f"truncated: record {n} at byte {pos} claims {size} bytes, "
                                                f"{len(data) - start} remain")
            payload = data[start:end]
            if zlib.crc32(payload) != crc:
                raise StorageDamaged(self.path, f"checksum mismatch in record {n} at byte {pos}")
            idx, term = _ENTRY_HEAD.unpack_from(payload)
            if prev is not None and idx != prev + 1:
                raise StorageDamaged(self.path, f"record {n} at byte {pos} has index {idx} after {prev}")
            self._entries.append((payload[_ENTRY_HEAD.size:], idx, term))
            self._offsets.append(pos)
            prev = idx
            pos = end
        return pos

    # ------------------------------------------------------------------ writing
    def _write_at(self, offset: int, data: bytes, op: str) -> None:
        try:
            if self.fault is not None:
                self.fault(op)
            written = os.pwrite(self._fd, data, offset)
            if written != len(data):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as exc:
            with _suppress_os():
                os.ftruncate(self._fd, offset)  # cut back to the last whole record
            if exc.errno in _NO_SPACE:
                self._note_full(str(exc))
                raise StorageFull(f"Raft journal {self.path}: no space left on the device ({exc.strerror}); "
                                  "writes are refused until space is freed") from exc
            raise
        if self.full_error is not None:
            log.warning("Raft journal %s: writes succeed again after a full disk", self.path)
            self.full_error = None

    def _note_full(self, error: str) -> None:
        self.full_error = error
        self.full_count += 1
        now = self.full_at = time.monotonic()
        if now - self._full_logged_at > 10.0:
            self._full_logged_at = now
            log.error("Raft journal %s: no space left on the device (%s); writes are refused until space "
                      "is freed", self.path, error)

    def add(self, command: bytes | str, idx: int, term: int) -> None:
        cmd = command.encode() if isinstance(command, str) else bytes(command)
        payload = _ENTRY_HEAD.pack(idx, term) + cmd
        record = _RECORD_HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        self._write_at(self._end, record, "add")
        self._offsets.append(self._end)
        self._entries.append((cmd, int(idx), int(term)))
        self._end += len(record)

    def clear(self) -> None:
        os.ftruncate(self._fd, len(JOURNAL_MAGIC))
        self._entries, self._offsets, self._end = [], [], len(JOURNAL_MAGIC)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom >= len(self._entries):
            return
        offset = self._offsets[entryFrom]
        os.ftruncate(self._fd, offset)
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]
        self._end = offset

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drop the first ``entryTo`` entries (log compaction): rewrite to a temp file, then rename. A cut at or
        past the end (a compaction that finished after a snapshot from the leader replaced the journal) is
        refused: pysyncobj needs the entry its log starts at, and would fail on every message after."""
        if entryTo >= len(self._entries):
            log.warning("Raft journal %s: compaction up to entry %d of %d refused (the journal was replaced "
                        "meanwhile)", self.path, entryTo, len(self._entries))
            return
        keep = self._entries[entryTo:]
        tmp = self.path.with_name(self.path.name + ".tmp")
        chunks = [JOURNAL_MAGIC]
        offsets, pos = [], len(JOURNAL_MAGIC)
        for cmd, idx, term in keep:
            payload = _ENTRY_HEAD.pack(idx, term) + cmd
            record = _RECORD_HEAD.pack(len(payload), zlib.crc32(payload)) + payload
            chunks.append(record)
            offsets.append(pos)
            pos += len(record)
        try:
            if self.fault is not None:
                self.fault("compact")
            with open(tmp, "wb") as f:
                f.write(b"".join(chunks))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            with _suppress_os():
                tmp.unlink()
            # keeping the older prefix is consistent: pysyncobj indexes from the first entry held
            log.error("Raft journal %s: log compaction could not rewrite the file (%s); keeping %d older "
                      "entries", self.path, exc, entryTo)
            if exc.errno in _NO_SPACE:
                self._note_full(str(exc))
            return
        fsync_dir(self.path.parent)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY)
        self._entries, self._offsets, self._end = keep, offsets, pos

    # ------------------------------------------------------------------ reading
    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    # ------------------------------------------------------------------ meta
    def _store_meta(self, sync: bool) -> None:
        body = json.dumps(self._meta, sort_keys=True).encode()
        blob = META_MAGIC + zlib.crc32(body).to_bytes(4, "big") + body
        tmp = self.meta_path.with_name(self.meta_path.name + ".tmp")
        try:
            if self.fault is not None:
                self.fault("meta")
            with open(tmp, "wb") as f:
                f.write(blob)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            os.replace(tmp, self.meta_path)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                self._note_full(str(exc))
                raise StorageFull(f"Raft meta {self.meta_path}: no space left on the device") from exc
            raise
        self._meta_dirty = False

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        if raftCommitIndex != self._meta["commit_index"]:
            self._meta["commit_index"] = int(raftCommitIndex)
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        return int(self._meta["commit_index"])

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        """Term and vote are stored before any message reflecting them is sent (atomic replace; like the
        entries, not fsynced: they survive a process crash, and an election does not wait on the disk)."""
        self._meta["term"] = int(term)
        self._meta["voted_for"] = None if votedForNodeId is None else str(votedForNodeId)
        self._store_meta(sync=False)

    def getCurrentTerm(self) -> int:
        return int(self._meta["term"])

    def getVotedForNodeId(self) -> str | None:
        voted: str | None = self._meta["voted_for"]
        return voted

    def onOneSecondTimer(self) -> None:
        if self._meta_dirty:
            try:
                self._store_meta(sync=False)
            except (OSError, StorageFull) as exc:
                log.error("Raft meta %s: could not store the commit index: %s", self.meta_path, exc)

    def flush(self) -> None:
        """Nothing buffered in this process (writes go straight to the file)."""

    def _destroy(self) -> None:
        if self._meta_dirty:
            with _suppress_os():
                self._store_meta(sync=False)
        with _suppress_os():
            os.close(self._fd)

    # ------------------------------------------------------------------ for the node
    @property
    def first_index(self) -> int | None:
        return self._entries[0][1] if self._entries else None

    @property
    def last_index(self) -> int | None:
        return self._entries[-1][1] if self._entries else None

    def has_space(self, min_free_bytes: int) -> bool:
        """Whether the journal's file system has ``min_free_bytes`` free (and the last write did not fail
        for space since)."""
        try:
            st = os.statvfs(self.path.parent)
        except OSError:
            return True
        free = st.f_bavail * st.f_frsize
        if free < min_free_bytes:
            self.full_error = f"{free} bytes free, below the {min_free_bytes} reserved"
            return False
        # a write failed for space a moment ago: refuse for a second, then let a write probe again
        if self.full_error is None or time.monotonic() - self.full_at > 1.0:
            self.full_error = None  # above the reserve again (a failing write would set it anew)
            return True
        return False


class _suppress_os:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, OSError | StorageFull)


_original_create_journal = _syncobj.createJournal


def _create_journal(journal_file: Any = None) -> Any:
    """pysyncobj's journal factory, taught to accept a ready :class:`ChecksummedJournal`."""
    if isinstance(journal_file, ChecksummedJournal):
        return journal_file
    return _original_create_journal(journal_file)


_syncobj.createJournal = _create_journal
