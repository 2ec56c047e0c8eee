"""Snapshot transfers to a lagging follower: a transfer with a lost chunk is refused (the node keeps its
snapshot and state), a whole one is installed, and a reconnect restarts the sender at byte 0."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.serializer import SERIALIZER_STATE, Serializer

from raft.storage import SnapshotCodec, verify_snapshot_file
from raft.transfer import VerifyingSerializer, install_verifying_receiver, restart_transfer

CHUNK = 1 << 16


def write_snapshot(path: Path, last_index: int, attachment: bytes) -> None:
    def attach(p: Path) -> None:
        p.write_bytes(attachment)

    codec = SnapshotCodec(lambda: {"applied_index": last_index, "state": {"watermark": last_index}},
                          lambda state, att: None, attach=attach)
    codec.serialize(str(path), ((b"x", last_index, 1), (b"x", last_index - 1, 1), set()))


def sender(path: Path) -> Serializer:
    return Serializer(str(path), CHUNK, False, None, None, None)


class _Obj:
    def __init__(self, path: Path) -> None:
        self._SyncObj__serializer = sender(path)


def chunks(ser: Serializer, node: Any = "peer") -> list[tuple[bytes, bool, bool]]:
    out = []
    while True:
        data = ser.getTransmissionData(node)
        out.append(data)
        if data[2]:
            return out


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    leader, follower = tmp_path / "leader" / "snapshot.bin", tmp_path / "follower" / "snapshot.bin"
    leader.parent.mkdir()
    follower.parent.mkdir()
    write_snapshot(leader, 900, os.urandom(20 * CHUNK + 123))
    write_snapshot(follower, 40, os.urandom(3 * CHUNK))
    return leader, follower


def test_pysyncobj_alone_installs_a_transfer_with_a_gap(files: tuple[Path, Path]) -> None:
    """The defect: pysyncobj's receiver renames whatever arrived over snapshot.bin."""
    leader, follower = files
    sent = chunks(sender(leader))
    receiver = sender(follower)
    results = [receiver.setTransmissionData(c) for i, c in enumerate(sent) if i != 7]
    assert results[-1] is True
    with pytest.raises(ValueError, match="truncated"):
        verify_snapshot_file(follower)


def test_a_transfer_with_a_lost_chunk_is_refused_and_a_whole_one_installed(files: tuple[Path, Path]) -> None:
    leader, follower = files
    before = follower.read_bytes()
    receiver = install_verifying_receiver(_Obj(follower), verify_snapshot_file)
    assert isinstance(receiver, VerifyingSerializer)
    sent = chunks(sender(leader))
    assert len(sent) > 10
    assert not any(receiver.setTransmissionData(c) for i, c in enumerate(sent) if i != 7)
    assert follower.read_bytes() == before and verify_snapshot_file(follower) == 40
    assert not follower.with_name("snapshot.bin.1.tmp").exists()
    assert (receiver.refused, receiver.installed) == (1, 0) and "truncated" in (receiver.last_refusal or "")
    # the leader sends it again (from its first chunk): installed
    results = [receiver.setTransmissionData(c) for c in chunks(sender(leader))]
    assert results[-1] is True and not any(results[:-1])
    assert follower.read_bytes() == leader.read_bytes() and verify_snapshot_file(follower) == 900
    assert receiver.installed == 1


def test_a_continuation_without_its_start_is_ignored_and_a_new_start_begins_again(files: tuple[Path, Path]) -> None:
    leader, follower = files
    before = follower.read_bytes()
    receiver = install_verifying_receiver(_Obj(follower), verify_snapshot_file)
    sent = chunks(sender(leader))
    assert not any(receiver.setTransmissionData(c) for c in sent[3:])  # started before this node listened
    assert follower.read_bytes() == before and receiver.refused == 0
    # a first chunk in the middle of a transfer (a new leader, or a restarted one) starts the file over
    for c in sent[:5]:
        receiver.setTransmissionData(c)
    assert [receiver.setTransmissionData(c) for c in sent][-1] is True
    assert follower.read_bytes() == leader.read_bytes()


def test_a_reconnect_restarts_the_transmission_at_its_first_chunk(files: tuple[Path, Path]) -> None:
    leader, _ = files
    ser = sender(leader)
    first, second = ser.getTransmissionData("peer"), ser.getTransmissionData("peer")
    assert first[1] and not second[1]

    class Transport:
        _nodes = frozenset({"peer"})

    restart_transfer(Transport(), ser, "peer")
    again = ser.getTransmissionData("peer")
    assert again[1] and again[0] == first[0]
    restart_transfer(Transport(), ser, "stranger")  # unknown or None nodes are ignored
    restart_transfer(Transport(), ser, None)
    assert not ser.getTransmissionData("peer")[1]


def test_an_installed_transfer_cancels_the_nodes_own_compaction_still_writing(files: tuple[Path, Path]) -> None:
    # the follower's own compaction (a forked child in pysyncobj) is still writing when the leader's snapshot
    # arrives: finishing later it would put the follower's older state over the installed file, and pysyncobj
    # would cut the journal past its end
    leader, follower = files
    receiver = install_verifying_receiver(_Obj(follower), verify_snapshot_file)
    child = subprocess.Popen(["sleep", "60"])
    receiver._Serializer__pid = child.pid
    try:
        assert [receiver.setTransmissionData(c) for c in chunks(sender(leader))][-1] is True
        assert child.poll() is not None or child.wait(5) is not None  # killed (reaped by the receiver)
        assert receiver._Serializer__pid == 0
        assert receiver.checkSerializing()[0] == SERIALIZER_STATE.NOT_SERIALIZING  # pysyncobj compacts nothing
        assert verify_snapshot_file(follower) == 900
    finally:
        if child.poll() is None:
            child.kill()
