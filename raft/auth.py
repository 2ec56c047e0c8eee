"""The Raft transport's shared key: where it comes from, and what happens to a frame without it.

Goal
    Nothing a node receives on its Raft port is unpickled before its sender has proved it holds
    the group's key — on loopback too, since any local user can reach the port.  pysyncobj
    unpickles every frame; with a ``password`` it first checks the frame's Fernet token
    (AES-128-CBC + HMAC-SHA256 with a key derived from the password) and drops the connection
    when the HMAC does not match, so unauthenticated bytes never reach ``pickle.loads``.

Method
    * A multi-node group must be given the key (a secret file shared by every member, read by
      :func:`read_key`); a single node with none configured generates its own into its data
      directory (:func:`local_key`, mode 0600), so the transport is encrypted in every case.
    * pysyncobj drops a bad frame silently; :class:`LoggingEncryptor` wraps its Fernet object and
      logs one line (peer address, what failed) per dropped frame, at most
      :data:`LOG_BURST` lines per :data:`LOG_WINDOW_S` (the rest are counted and summarised), so
      a flood cannot fill the log.  :class:`AuthenticatingTransport` puts that wrapper, with the
      peer's address, on every incoming connection; ``status`` and the other admin commands use
      the same connections, so they need the key too.

Guarantee
    A frame whose HMAC does not verify under the group key is never decompressed or unpickled;
    the connection is closed and one log line names the peer.  The key itself never reaches a log.

Cost
    Per message one AES encryption + HMAC on each side (a few µs for a heartbeat); key
    derivation (PBKDF2, 100 000 rounds) once per node start (~50 ms).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import threading
import time
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from pysyncobj.transport import TCPTransport

from raft.errors import StartupRefused
from raft.transfer import restart_transfer

log = logging.getLogger(__name__)

#: File name of a single node's generated key inside its data directory.
LOCAL_KEY_FILE = "raft.key"
#: Shortest key accepted (characters after stripping whitespace).
MIN_KEY_CHARS = 16
LOG_BURST = 10
LOG_WINDOW_S = 10.0


PLACEHOLDERS = (b"replace-me", b"replace me", b"change-me", b"changeme", b"change me")
"""Text of a sample key left in place (deploy/k8s/secret.yaml ships ``REPLACE-ME: ...``): never a key."""


def placeholder_problem(key: bytes, where: str) -> str | None:
    """Why ``key`` (from ``where``) is a sample left in place rather than a key; None when it is not one."""
    low = key.lower()
    found = next((p for p in PLACEHOLDERS if p in low), None)
    if found is None:
        return None
    return (f"{where} holds the sample text {found.decode()!r}, not a key: put the output of "
            "`openssl rand -base64 32` there (the same on every node)")


def read_key(path: Path) -> bytes:
    """The key stored in ``path`` (surrounding whitespace stripped).

    Raises :class:`StartupRefused` naming the file when it is missing, unreadable, too short or a sample text
    left in place (``REPLACE-ME``).
    A file readable by group or others is accepted with a warning.
    """
    try:
        text = path.read_bytes().strip()
        mode = path.stat().st_mode
    except OSError as exc:
        raise StartupRefused(f"cannot read the Raft key file {path}: {exc.strerror or exc}") from None
    if len(text) < MIN_KEY_CHARS:
        raise StartupRefused(f"the Raft key file {path} holds {len(text)} characters; "
                             f"need at least {MIN_KEY_CHARS} (e.g. `openssl rand -base64 32 > {path}`)")
    problem = placeholder_problem(text, f"the Raft key file {path}")
    if problem is not None:
        raise StartupRefused(problem)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the Raft key file %s is readable by other users (mode %o); chmod 600 it",
                    path, stat.S_IMODE(mode))
    return text


def write_new_key(path: Path) -> bytes:
    """Create ``path`` (mode 0600, must not exist) holding a fresh random key; return the key."""
    key = secrets.token_urlsafe(32).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key + b"\n")
        f.flush()
        os.fsync(f.fileno())
    return key


def local_key(data_dir: Path) -> bytes:
    """A single node's own key: ``data_dir/raft.key``, generated (mode 0600) on first start."""
    path = data_dir / LOCAL_KEY_FILE
    if not path.exists():
        with contextlib.suppress(FileExistsError):
            write_new_key(path)
    return read_key(path)


class _DropLog:
    """Rate-limited log of dropped frames (process-wide): at most LOG_BURST lines per window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window_start = 0.0
        self._logged = 0
        self._suppressed = 0
        self.dropped = 0

    def drop(self, peer: str, reason: str) -> None:
        with self._lock:
            self.dropped += 1
            now = time.monotonic()
            if now - self._window_start > LOG_WINDOW_S:
                if self._suppressed:
                    log.warning("raft auth: %d more unauthenticated frames dropped in the last %.0f s",
                                self._suppressed, LOG_WINDOW_S)
                self._window_start, self._logged, self._suppressed = now, 0, 0
            if self._logged >= LOG_BURST:
                self._suppressed += 1
                return
            self._logged += 1
        log.warning("raft auth: dropped a frame from %s that failed authentication (%s); connection "
                    "closed, nothing unpickled (a peer without the group's Raft key?)", peer, reason)


DROPS = _DropLog()


class LoggingEncryptor:
    """Delegates to pysyncobj's Fernet object; logs (one line) each frame that fails to verify.

    pysyncobj calls ``extract_timestamp(token)`` then ``decrypt(token)`` on the Raft thread, each
    verifying the HMAC; here the first call verifies and decrypts once and the second returns that
    plaintext (a one-slot cache keyed by the token object), saving one HMAC per message.
    """

    def __init__(self, inner: Any, peer: str = "an unknown peer") -> None:
        self._inner = inner
        self._peer = peer
        self._last: tuple[bytes, bytes] | None = None

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        out: bytes = self._inner.encrypt_at_time(data, current_time)
        return out

    def _open(self, token: bytes) -> bytes:
        try:
            plain: bytes = self._inner.decrypt(token)
        except (InvalidToken, TypeError, ValueError) as exc:
            self._last = None
            DROPS.drop(self._peer, f"bad token: {type(exc).__name__}")
            raise
        self._last = (token, plain)
        return plain

    def extract_timestamp(self, token: bytes) -> int:
        self._open(token)
        stamp, _ = Fernet._get_unverified_token_data(token)  # verified by _open
        return int(stamp)

    def decrypt(self, token: bytes) -> bytes:
        last = self._last
        if last is not None and last[0] is token:
            self._last = None
            return last[1]
        return self._open(token)


class AuthenticatingTransport(TCPTransport):
    """pysyncobj's TCP transport with a :class:`LoggingEncryptor` naming the peer on incoming conns, which
    also restarts a snapshot transfer to a peer whose connection was lost or replaced (:mod:`raft.transfer`)."""

    def _onNewIncomingConnection(self, conn: Any) -> None:
        super()._onNewIncomingConnection(conn)
        encryptor = getattr(conn, "encryptor", None)
        if encryptor is None:
            return
        inner = encryptor._inner if isinstance(encryptor, LoggingEncryptor) else encryptor
        conn.encryptor = LoggingEncryptor(inner, _peer_of(conn))

    def _onDisconnected(self, conn: Any) -> None:
        node = self._connToNode(conn)
        super()._onDisconnected(conn)
        self._restart_transfer(node)

    def _onNodeConnected(self, node: Any) -> None:
        # also reached when a peer's new incoming connection silently replaces one this side still
        # thought alive (pysyncobj reports no disconnect then): chunks queued on the old one are lost
        self._restart_transfer(node)
        super()._onNodeConnected(node)

    def _restart_transfer(self, node: Any) -> None:
        serializer = getattr(self._syncObj, "_SyncObj__serializer", None)
        if serializer is not None:
            restart_transfer(self, serializer, node)  # the next chunk sent is a first chunk


def _peer_of(conn: Any) -> str:
    sock: Any = getattr(conn, "_TcpConnection__socket", None)
    try:
        host, port = sock.getpeername()[:2]
    except (AttributeError, OSError, ValueError, TypeError):
        return "an unknown peer"
    return f"{host}:{port}"
