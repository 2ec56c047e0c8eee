"""The checksummed journal: round trip, truncation and compaction, damage detection, a failing disk."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from raft.errors import StorageDamaged, StorageFull
from raft.journal import ChecksummedJournal


def filled(path: Path, count: int = 10) -> ChecksummedJournal:
    j = ChecksummedJournal(path)
    for i in range(1, count + 1):
        j.add(b"cmd-%d" % i, i, 1 + i // 5)
    j.setCurrentTerm(3, "127.0.0.1:7001")
    j.setRaftCommitIndex(8)
    j.onOneSecondTimer()
    return j


def test_entries_and_meta_survive_a_reopen_and_compaction_and_truncation_rewrite_the_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.bin"
    j = filled(path)
    j.deleteEntriesFrom(8)  # drop entries 9, 10
    j.deleteEntriesTo(3)  # compaction: drop 1..3
    j.add(b"cmd-9b", 9, 4)
    j._destroy()
    again = ChecksummedJournal(path)
    assert [e[1] for e in again] == [4, 5, 6, 7, 8, 9]
    assert again[-1] == (b"cmd-9b", 9, 4) and again[0] == (b"cmd-4", 4, 1)
    assert (again.getCurrentTerm(), again.getVotedForNodeId(), again.getRaftCommitIndex()) == (3, "127.0.0.1:7001", 8)
    again._destroy()


@pytest.mark.parametrize("damage, expected", [
    (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], "checksum mismatch in record 1"),
    (lambda b: b[:-3], "truncated"),
    (lambda b: b"PYSYNCOBJ" + b[9:], "pysyncobj's unchecksummed format"),
])
def test_a_damaged_journal_is_refused_with_the_file_and_the_remedy(tmp_path: Path, damage: object,
                                                                   expected: str) -> None:
    path = tmp_path / "journal.bin"
    filled(path)._destroy()
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with pytest.raises(StorageDamaged) as info:
        ChecksummedJournal(path)
    message = str(info.value)
    assert expected in message and str(path) in message and f"delete {tmp_path}" in message


def test_a_missing_or_garbage_meta_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.bin"
    filled(path)._destroy()
    meta = tmp_path / "journal.bin.meta"
    good = meta.read_bytes()
    meta.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(StorageDamaged, match="meta: checksum mismatch"):
        ChecksummedJournal(path)
    meta.unlink()
    with pytest.raises(StorageDamaged, match="missing while the journal exists"):
        ChecksummedJournal(path)


def test_a_full_disk_refuses_the_write_keeps_the_file_whole_and_recovers(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    full = {"on": False}

    def fault(op: str) -> None:
        if full["on"] and op == "add":
            raise OSError(errno.ENOSPC, "No space left on device")

    path = tmp_path / "journal.bin"
    j = ChecksummedJournal(path, fault=fault)
    j.add(b"a", 1, 1)
    full["on"] = True
    with caplog.at_level(logging.ERROR, logger="raft.journal"), pytest.raises(StorageFull, match="no space left"):
        j.add(b"b", 2, 1)
    assert "no space left on the device" in caplog.text
    assert len(j) == 1 and j.full_count == 1
    full["on"] = False
    j.add(b"b", 2, 1)
    j._destroy()
    assert [e[0] for e in ChecksummedJournal(path)] == [b"a", b"b"]


def test_a_compaction_past_the_journal_end_keeps_every_entry(tmp_path: Path) -> None:
    # a node's own compaction (up to entry 20) finished after the leader's snapshot replaced its journal with
    # entries 5 and 6: cutting 15 entries would leave none, and pysyncobj reads the first entry on every message
    j = ChecksummedJournal(tmp_path / "journal.bin")
    j.add(b"snap-5", 5, 2)
    j.add(b"snap-6", 6, 2)
    j.deleteEntriesTo(15)
    assert [e[1] for e in j] == [5, 6]
    j.deleteEntriesTo(1)  # a real compaction still cuts
    assert [e[1] for e in j] == [6]
    j._destroy()
    assert [e[1] for e in ChecksummedJournal(tmp_path / "journal.bin")] == [6]
