"""Proposing a command larger than one Raft entry: compressed, staged in chunks, committed whole.

Goal: the service records a plan of any size (a 3,000-broker rebalance is ~45 MB of JSON) through the same
``StateStore.propose`` as every other command, with the same atomicity, where one Raft entry holds at most
:data:`raft.protocol.MAX_COMMAND_BYTES`. Method: the command, validated and encoded once by the Raft node
(:class:`raft.protocol.CommandTooLarge` carries its canonical text), is zlib-compressed, base64-encoded and
cut into pieces of :data:`controlplane.state.commands.UPLOAD_CHUNK_CHARS`; each is proposed as an
``upload.chunk`` under a fresh upload id and the leader's term, then ``upload.commit`` names the number of
pieces, their SHA-256 and the decompressed size, and the state machine applies the assembled entry
(:mod:`controlplane.state.handlers.uploads`). On any failure the proposer asks for ``upload.abort`` (best
effort: a deposed leader cannot), and the error is the caller's.

Guarantee: the command is applied once and whole, or not at all; every node applies the bytes the leader
encoded; a half-staged upload is never visible to a reader and is dropped by the next leader
(:meth:`RaftStateStore <controlplane.state.raft_store.RaftStateStore>` proposes ``upload.abort`` for earlier
terms when it gains leadership), by a later term's upload, or after 10 minutes. Needs state version 3
(refused with 409 naming ``guardian state version raise 3`` before). Cost: one zlib pass over the entry at
the proposer; one Raft round trip per ~768 KiB of compressed text plus the commit; the staged text is held
in the state until the commit (a few MB for 45 MB of plan JSON).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import uuid
import zlib
from collections.abc import Callable
from typing import Any

from controlplane.state.commands import UPLOAD_CHUNK_CHARS, meta
from raft.protocol import JsonDict

log = logging.getLogger(__name__)
Propose = Callable[[JsonDict, float], Any]
LEVEL = 6
COMMIT_S_PER_MB = 0.1
"""Extra commit timeout per MB of entry: the commit decodes and applies the whole entry on every node."""


def pieces(text: str, size: int = UPLOAD_CHUNK_CHARS) -> list[str]:
    """The base64 text of the zlib-compressed ``text``, cut into pieces of at most ``size`` characters."""
    blob = base64.b64encode(zlib.compress(text.encode(), LEVEL)).decode("ascii")
    return [blob[i:i + size] for i in range(0, len(blob), size)]


def propose_chunked(propose: Propose, text: str, entry_meta: JsonDict, term: int, timeout: float = 5.0,
                    chunk_chars: int = UPLOAD_CHUNK_CHARS) -> Any:
    """Stage ``text`` (a command's canonical entry) in chunks and commit it; the command's own result.

    ``propose(command, timeout)`` proposes one command (the Raft node's); ``entry_meta`` is the command's
    ``meta`` (who and why; each chunk is stamped now); ``term`` is the proposing leader's Raft term.
    Raises what ``propose`` raises (NotLeaderError on a leader change, CommandConflict when refused).
    """
    parts = pieces(text, chunk_chars)
    upload_id = uuid.uuid4().hex
    who, why = str(entry_meta.get("who", "guardian")), str(entry_meta.get("why", ""))
    try:
        for seq, data in enumerate(parts):
            propose({"type": "upload.chunk", "meta": meta(who, why), "upload_id": upload_id, "term": term,
                     "seq": seq, "data": data}, timeout)
        digest = hashlib.sha256("".join(parts).encode()).hexdigest()
        return propose({"type": "upload.commit", "meta": meta(who, why), "upload_id": upload_id, "term": term,
                        "chunks": len(parts), "sha256": digest, "size": len(text.encode())},
                       timeout + COMMIT_S_PER_MB * len(text) / 1e6)
    except BaseException:
        try:
            propose({"type": "upload.abort", "meta": meta(who, "the upload failed"), "upload_id": upload_id},
                    timeout)
        except Exception as exc:  # a deposed leader cannot: the next leader drops it
            log.info("upload %s not aborted (%s); the next leader or its expiry drops it", upload_id, exc)
        raise
