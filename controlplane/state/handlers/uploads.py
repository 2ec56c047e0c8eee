"""Handlers of staged uploads: a command too large for one Raft entry, staged in chunks and applied whole.

Goal: a plan (or any command) over :data:`raft.protocol.MAX_COMMAND_BYTES` is recorded through Raft
atomically. Method: ``upload.chunk`` appends one piece (base64 of the zlib-compressed canonical entry, in
``seq`` order) under ``state["uploads"][upload_id]``, which no reader looks at; ``upload.commit`` checks
that every piece is there and that their SHA-256 and decompressed size are the ones the proposer computed,
decodes the entry and hands it to the state machine's own ``apply`` (version envelope, parsing, handler
and action log exactly as for the entry proposed whole), then drops the staged pieces; ``upload.abort``
drops them. Staged uploads expire deterministically: each upload command drops the uploads staged by a
leader of an earlier Raft term (``term``, carried in the command: a leader change) and those untouched for
:data:`UPLOAD_TTL` by the command's own ``meta.at`` (never a clock).

Guarantee: a half-uploaded command changes nothing a reader sees; a commit applies all of it or, refused
(a missing piece, a wrong hash, an entry its handler refuses), nothing; every node decodes the same bytes.
At most :data:`MAX_UPLOADS` uploads of at most :data:`MAX_UPLOAD_CHARS` are staged at once. Cost: a chunk
is O(its size); a commit is O(the entry): base64 and zlib decoding, one JSON parse, then its handler.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from datetime import datetime, timedelta
from typing import Any

from controlplane.state.commands import UploadAbort, UploadChunk, UploadCommit
from controlplane.state.handlers.registry import Ledger, handles
from raft.protocol import CommandRejected, JsonDict

UPLOAD_TTL = timedelta(minutes=10)
MAX_UPLOADS = 4
MAX_UPLOAD_CHARS = 256 * 1024 * 1024
"""Staged base64 text per upload (a 3,000-broker plan of ~45 MB of JSON compresses to a few MB)."""
UPLOADS = "uploads"
INNER_REFUSED = "upload."


def _uploads(led: Ledger) -> JsonDict:
    found: JsonDict = led.state.get(UPLOADS) or {}
    return found


def _stale(up: JsonDict, term: int | None, at: datetime) -> bool:
    """Staged by a leader of an earlier term than ``term``, or untouched for UPLOAD_TTL at ``at``."""
    return (term is not None and up["term"] < term) or datetime.fromisoformat(up["last_at"]) + UPLOAD_TTL < at


def _expire(led: Ledger, term: int | None, at: datetime) -> list[str]:
    """Drop the uploads of an earlier leader's term or untouched for UPLOAD_TTL; the ids dropped."""
    uploads = _uploads(led)
    gone = [uid for uid, up in uploads.items() if _stale(up, term, at)]
    for uid in gone:
        del uploads[uid]
    if UPLOADS in led.state and not uploads:
        del led.state[UPLOADS]  # a state that staged nothing keeps its earlier shape (and hash)
    return sorted(gone)


@handles(UploadChunk)
def chunk(led: Ledger, cmd: UploadChunk) -> JsonDict:
    uploads = _uploads(led)
    up: JsonDict | None = uploads.get(cmd.upload_id)
    if up is not None and _stale(up, cmd.term, cmd.meta.at):
        up = None  # dropped below, with the other stale uploads
    if up is None:
        if cmd.seq != 0:
            raise CommandRejected(f"upload {cmd.upload_id}: chunk {cmd.seq} of an upload that is not staged (it "
                                  "expired, was dropped on a leader change or never began): start it again")
        live = [u for u in uploads.values() if not _stale(u, cmd.term, cmd.meta.at)]
        if len(live) >= MAX_UPLOADS:
            raise CommandRejected(f"{len(live)} uploads are staged already (at most {MAX_UPLOADS}): retry later")
    else:
        if up["term"] != cmd.term:
            raise CommandRejected(f"upload {cmd.upload_id} began under term {up['term']}, not {cmd.term}: "
                                  "the leader changed, start it again")
        staged = len(up["chunks"])
        if cmd.seq < staged:  # a retried chunk that did commit: the same bytes are a no-op
            if up["chunks"][cmd.seq] != cmd.data:
                raise CommandRejected(f"upload {cmd.upload_id}: chunk {cmd.seq} is staged with other data")
            return {"upload_id": cmd.upload_id, "seq": cmd.seq, "staged": staged, "changed": False}
        if cmd.seq != staged:
            raise CommandRejected(f"upload {cmd.upload_id}: chunk {cmd.seq} out of order (next is {staged})")
        if up["chars"] + len(cmd.data) > MAX_UPLOAD_CHARS:
            raise CommandRejected(f"upload {cmd.upload_id}: larger than {MAX_UPLOAD_CHARS} characters")
    at = cmd.meta.at.isoformat()
    dropped = _expire(led, cmd.term, cmd.meta.at)
    uploads = led.state.setdefault(UPLOADS, {})
    if up is None:
        up = {"term": cmd.term, "who": cmd.meta.who, "at": at, "chars": 0, "chunks": []}
        uploads[cmd.upload_id] = up
    up["chunks"].append(cmd.data)
    up["chars"] += len(cmd.data)
    up["last_at"] = at
    return {"upload_id": cmd.upload_id, "seq": cmd.seq, "staged": len(up["chunks"]), "changed": True,
            **({"dropped": dropped} if dropped else {})}


def assembled(led: Ledger, cmd: UploadCommit) -> JsonDict:
    """The entry the staged chunks of ``cmd.upload_id`` hold, checked; CommandRejected (nothing changed) if not."""
    up = _uploads(led).get(cmd.upload_id)
    name = f"upload {cmd.upload_id}"
    if up is None:
        raise CommandRejected(f"{name} is not staged (it expired, was dropped on a leader change or never began): "
                              "nothing was applied; propose the command again")
    if up["term"] != cmd.term:
        raise CommandRejected(f"{name} began under term {up['term']}, not {cmd.term}: the leader changed, nothing "
                              "was applied; propose the command again")
    if _stale(up, cmd.term, cmd.meta.at):
        raise CommandRejected(f"{name} expired (untouched for {UPLOAD_TTL}): nothing was applied; propose the "
                              "command again")
    if len(up["chunks"]) != cmd.chunks:
        raise CommandRejected(f"{name}: {len(up['chunks'])} of {cmd.chunks} chunks staged; nothing was applied")
    text = "".join(up["chunks"])
    if hashlib.sha256(text.encode()).hexdigest() != cmd.sha256:
        raise CommandRejected(f"{name}: the staged chunks do not match their SHA-256; nothing was applied")
    try:
        raw = zlib.decompress(base64.b64decode(text, validate=True))
        entry: Any = json.loads(raw) if len(raw) == cmd.size else None
    except (binascii.Error, zlib.error, ValueError) as exc:
        raise CommandRejected(f"{name}: the staged data does not decode ({exc}); nothing was applied") from None
    if entry is None:
        raise CommandRejected(f"{name}: decodes to {len(raw)} bytes, not {cmd.size}; nothing was applied")
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise CommandRejected(f"{name}: the staged data is not a command object; nothing was applied")
    if entry["type"].startswith(INNER_REFUSED):
        raise CommandRejected(f"{name}: an upload cannot hold another upload command")
    return entry


@handles(UploadCommit)
def commit(led: Ledger, cmd: UploadCommit) -> JsonDict:
    """Apply the assembled entry through the state machine (its own result is this command's), then drop it."""
    entry = assembled(led, cmd)
    if led.apply is None:
        raise CommandRejected("upload.commit needs the state machine's apply")
    result: JsonDict = led.apply(entry)  # refused: CommandRejected before any change, the upload stays staged
    _uploads(led).pop(cmd.upload_id, None)
    _expire(led, cmd.term, cmd.meta.at)
    return result


@handles(UploadAbort)
def abort(led: Ledger, cmd: UploadAbort) -> JsonDict:
    uploads = _uploads(led)
    if cmd.upload_id is not None:
        gone = [cmd.upload_id] if uploads.pop(cmd.upload_id, None) is not None else []
        gone += _expire(led, None, cmd.meta.at)
    else:
        gone = _expire(led, cmd.before_term, cmd.meta.at)
    if UPLOADS in led.state and not led.state[UPLOADS]:
        del led.state[UPLOADS]
    return {"dropped": sorted(gone)}
