"""Damaged Raft files and a full disk, with three real node processes on 127.0.0.1.

Each damage case (a flipped byte in a committed journal entry, a deleted or corrupt snapshot, a garbage
meta file, a truncated journal) is applied to a stopped follower: it refuses to start with one line
naming the file and the remedy, never a traceback; meanwhile the other two keep committing; after the
remedy (delete the directory, restart) it resyncs and every node holds the same state (hash compared).
A full disk (a real tmpfs per node when this runs as root, which can mount one) refuses writes with a
clear error while the node stays alive, and writes succeed again once space is freed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raft.journal import JOURNAL_MAGIC
from raft.localcluster import LocalCluster

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


@pytest.fixture
def cluster3(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(3, tmp_path / "raft", extra_args=["--compaction-entries", "100"])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def record_offsets(journal: Path) -> list[tuple[int, int]]:
    """(offset, payload length) of every record of a journal file."""
    data = journal.read_bytes()
    pos, out = len(JOURNAL_MAGIC), []
    while pos < len(data):
        size = struct.unpack_from("<I", data, pos)[0]
        out.append((pos, size))
        pos += 8 + size
    return out


def flip_committed_entry(data_dir: Path) -> None:
    journal = data_dir / "journal.bin"
    offset, size = record_offsets(journal)[len(record_offsets(journal)) // 2]
    at = offset + 8 + 16 + (size - 16) // 2  # a byte of the command itself
    blob = bytearray(journal.read_bytes())
    blob[at] ^= 0x20
    journal.write_bytes(bytes(blob))


def delete_snapshot(data_dir: Path) -> None:
    (data_dir / "snapshot.bin").unlink()


def corrupt_snapshot(data_dir: Path) -> None:
    snap = data_dir / "snapshot.bin"
    blob = bytearray(snap.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    snap.write_bytes(bytes(blob))


def garbage_meta(data_dir: Path) -> None:
    (data_dir / "journal.bin.meta").write_bytes(os.urandom(64))


def truncate_journal(data_dir: Path) -> None:
    journal = data_dir / "journal.bin"
    with open(journal, "r+b") as f:
        f.truncate(journal.stat().st_size - 5)


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "flipped byte in a committed journal entry": (flip_committed_entry, "journal.bin: checksum mismatch"),
    "deleted snapshot": (delete_snapshot, "snapshot.bin: is missing, but the compacted journal"),
    "corrupt snapshot": (corrupt_snapshot, "snapshot.bin"),
    "garbage meta": (garbage_meta, "journal.bin.meta"),
    "truncated journal": (truncate_journal, "journal.bin: truncated"),
}


def write(cluster: LocalCluster, prefix: str, count: int) -> None:
    for i in range(count):
        for _ in range(50):
            leader = cluster.wait_leader(timeout=10)
            code, _, _ = cluster.nodes[leader].propose({"type": "put", "key": f"{prefix}-{i}", "value": i})
            if code == 200:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"write {prefix}-{i} never succeeded")


def node_log(cluster: LocalCluster, index: int) -> str:
    node = cluster.nodes[index]
    return (node.data_dir.parent / f"{node.data_dir.name}.log").read_text(errors="replace")


def test_each_damage_case_is_refused_clearly_and_resyncs_after_the_remedy(cluster3: LocalCluster) -> None:
    cluster = cluster3
    write(cluster, "base", 250)  # every node compacts (every 100 entries) and keeps a journal tail
    cluster.wait_converged()
    for case, (damage, expected) in CASES.items():
        leader = cluster.wait_leader()
        victim = (leader + 1) % 3
        node = cluster.nodes[victim]
        assert (node.data_dir / "snapshot.bin").exists(), f"{case}: the follower never compacted"
        node.kill()
        damage(node.data_dir)
        log_before = len(node_log(cluster, victim))
        node.start()
        assert node.proc is not None
        code = node.proc.wait(timeout=30)
        out = node_log(cluster, victim)[log_before:]
        assert code == 2, f"{case}: the damaged node did not refuse to start (exit {code}):\n{out}"
        lines = [line for line in out.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and expected in lines[0], f"{case}: {out}"
        assert f"delete {node.data_dir}" in lines[0] and "resync" in lines[0], lines[0]
        assert "Traceback" not in out, f"{case}: {out}"

        write(cluster, case.replace(" ", "_"), 20)  # the other two still form a working group
        shutil.rmtree(node.data_dir)  # the remedy the line names
        node.start()
        states = cluster.wait_converged(timeout=30)
        assert len(states) == 3
        assert len({s["hash"] for s in states}) == 1, f"{case}: diverged"
        assert all(s["state"] == states[0]["state"] for s in states)
    assert len(states[0]["state"]["kv"]) == 250 + 20 * len(CASES)


def _can_mount_tmpfs(where: Path) -> bool:
    if os.geteuid() != 0:
        return False
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


def test_a_full_disk_refuses_writes_and_the_node_stays_alive(tmp_path: Path) -> None:
    base = tmp_path / "raft"
    mounts: list[Path] = []
    for i in range(3):
        if not _can_mount_tmpfs(base / f"node{i}"):
            pytest.skip("needs root to mount a small tmpfs per node")
        mounts.append(base / f"node{i}")
    cluster = LocalCluster(3, base, extra_args=["--min-free-bytes", "0"])
    try:
        cluster.start()
        write(cluster, "before", 20)
        leader = cluster.wait_leader()
        filler = cluster.nodes[leader].data_dir / "filler"
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        refused = None
        for i in range(40):
            code, body, _ = cluster.nodes[leader].propose({"type": "put", "key": f"full-{i}", "value": i}, timeout=10)
            if code == 503 and "no space left" in body.get("detail", ""):
                refused = body
                break
        assert refused is not None, "writes were not refused on a full disk"
        node = cluster.nodes[leader]
        assert node.alive, "the node died on a full disk"
        assert node.get("/status") is not None
        log = (node.data_dir.parent / f"{node.data_dir.name}.log").read_text(errors="replace")
        assert "no space left on the device" in log and "SIGBUS" not in log
        filler.unlink()
        time.sleep(1.2)
        write(cluster, "after", 10)
        states = cluster.wait_converged(timeout=30)
        assert len({s["hash"] for s in states}) == 1
        kv = states[0]["state"]["kv"]
        assert "after-9" in kv and "before-19" in kv
    finally:
        cluster.close()
        for m in mounts:
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
