"""Snapshot transfers to a lagging follower: installed only when whole, restarted when interrupted.

Goal
    A follower too far behind to be served from the leader's log gets the leader's ``snapshot.bin``
    streamed in chunks (pysyncobj's ``Serializer``).  pysyncobj renames whatever arrived over the
    follower's own ``snapshot.bin`` at the last chunk and loads it, without checking it; and a leader
    that lost its connection to the follower and got a new one (between two ticks, or silently replaced
    by the follower's reconnect) goes on streaming from where it was, although the chunks queued on
    the old connection were lost.  The follower then
    holds a snapshot with a gap (an attachment shorter than its header says): loading it fails, the
    node stops, and it refuses to restart on that file.  Here a transfer is installed only when the
    file is whole, and a lost connection restarts the transfer from its first byte.

Method
    :class:`VerifyingSerializer` replaces pysyncobj's receiver (``setTransmissionData``; the object's
    class is swapped once at start, the sender side is pysyncobj's): chunks go to
    ``snapshot.bin.1.tmp``; at the last chunk the file is fsynced and ``verify(path)`` (the snapshot
    codec's full check: magic, head CRC, attachment length and CRC) runs *before* the rename, and this node's
    own compaction still writing a snapshot (a forked child) is cancelled first.  A file
    that fails is deleted and the transfer refused: the follower keeps its snapshot, journal and state
    and answers nothing, so the leader's next append finds the follower's log still short, moves its
    next index back below its own log start and sends the snapshot again.  :func:`restart_transfer`
    drops the leader's transmission to a peer the moment the transport reports the peer disconnected
    or connected (pysyncobj only drops it on a tick that still sees the peer disconnected, and when a
    follower's new incoming connection replaces one the leader still thought alive — after a stall
    longer than the connection timeout on one side — it reports no disconnect at all), so the next
    chunk sent is a first chunk, which makes the follower start its file over.

Guarantee
    A follower's ``snapshot.bin`` is always a file that passed the codec's check (its own compaction,
    written to a temp file and fsynced before the rename, or a verified transfer); a broken transfer
    costs a retry, never the node.

Cost
    One extra read of a received snapshot (CRC at ~1 GB/s) and one fsync per transfer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from pysyncobj.serializer import Serializer

from raft.storage import fsync_dir

log = logging.getLogger(__name__)

Verify = Callable[[Path], object]


class VerifyingSerializer(Serializer):
    """pysyncobj's file ``Serializer`` whose receiving side verifies before installing; see the module
    docstring.  Made by :func:`install_verifying_receiver` (class swap), not constructed."""

    _guardian_verify: Verify
    _guardian_incoming: BinaryIO | None
    _guardian_received: int
    refused: int
    installed: int
    last_refusal: str | None

    def _guardian_target(self) -> Path:
        name: str = self._Serializer__fileName
        return Path(name)

    def _guardian_drop_incoming(self) -> None:
        if self._guardian_incoming is not None:
            with contextlib.suppress(OSError):
                self._guardian_incoming.close()
            self._guardian_incoming = None

    def setTransmissionData(self, data: Any) -> bool:
        """One chunk ``(bytes, is_first, is_last)``; True once a whole, verified snapshot is in place."""
        if data is None:
            return False
        chunk, is_first, is_last = data
        target = self._guardian_target()
        tmp = target.with_name(target.name + ".1.tmp")
        if is_first:
            self._guardian_drop_incoming()
            try:
                self._guardian_incoming = open(tmp, "wb")  # noqa: SIM115 (open across chunks)
            except OSError as exc:
                log.error("snapshot transfer: cannot open %s (%s)", tmp, exc)
                return False
            self._guardian_received = 0
        elif self._guardian_incoming is None:
            return False  # the middle of a transfer whose start this node did not see: wait for a new one
        f = self._guardian_incoming
        try:
            f.write(chunk)
            self._guardian_received += len(chunk)
            if not is_last:
                return False
            f.flush()
            os.fsync(f.fileno())
        except OSError as exc:
            log.error("snapshot transfer: cannot write %s (%s); the leader will resend", tmp, exc)
            self._guardian_drop_incoming()
            tmp.unlink(missing_ok=True)
            return False
        self._guardian_drop_incoming()
        try:
            self._guardian_verify(tmp)
        except (OSError, ValueError) as exc:
            self.refused += 1
            self.last_refusal = str(exc)
            log.warning("snapshot transfer refused (%d bytes received: %s); keeping this node's state, the "
                        "leader sends it again", self._guardian_received, exc)
            tmp.unlink(missing_ok=True)
            return False
        self._guardian_cancel_own_dump()
        os.replace(tmp, target)
        fsync_dir(target.parent)
        self.installed += 1
        return True

    def _guardian_cancel_own_dump(self) -> None:
        """Stop this node's own log compaction still writing a snapshot (a forked child): finishing after the
        install it would replace the installed file with this node's older state, and pysyncobj would then
        cut the journal up to an index past its end — empty, which every later append message trips over
        (seen in CI: a follower stopped mid-compaction, sent the leader's snapshot on resuming)."""
        pid = int(getattr(self, "_Serializer__pid", 0))
        if pid <= 0:
            return
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        self._Serializer__pid = 0
        log.warning("snapshot transfer: this node's own log compaction (pid %d) was cancelled; the installed "
                    "snapshot replaces its state", pid)


def install_verifying_receiver(obj: Any, verify: Verify) -> VerifyingSerializer:
    """Swap the pysyncobj object's serializer to :class:`VerifyingSerializer` (call right after the
    object is built, before any peer can connect); ``verify(path)`` raises ValueError or OSError on a
    file that must not be installed."""
    ser = obj._SyncObj__serializer
    if not isinstance(ser, Serializer) or not getattr(ser, "_Serializer__fileName", None):
        raise TypeError("verified snapshot transfers need pysyncobj's file serializer (fullDumpFile)")
    ser.__class__ = VerifyingSerializer
    ser._guardian_verify = verify
    ser._guardian_incoming = None
    ser._guardian_received = 0
    ser.refused = 0
    ser.installed = 0
    ser.last_refusal = None
    assert isinstance(ser, VerifyingSerializer)
    return ser


def restart_transfer(transport: Any, serializer: Serializer, node: Any) -> None:
    """The transport lost ``node`` or got a new connection to it: forget the transmission to it, so a
    resumed one starts at byte 0."""
    if node is not None and node in getattr(transport, "_nodes", ()):
        serializer.cancelTransmisstion(node)
