"""Goal: the small HTTP/1.1 server under kafkasim's control API and metrics endpoints.

Method: one request per connection on an asyncio stream (TLS when the listener was opened with an
``ssl`` context); the request line, headers and a ``Content-Length`` body are read with a 10 s
limit and handed to a ``route(method, path, body)`` coroutine.  An optional :class:`BasicAuth`
checks the ``Authorization: Basic`` header first and answers ``401`` with a
``WWW-Authenticate`` challenge, as Prometheus exporters behind ``web.config`` basic auth do.

Guarantee: every request gets a status line or a closed socket, never a hang; passwords are kept
only as salted SHA-256 digests and compared in constant time.

Cost: O(request size) per request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable

Route = Callable[[str, str, bytes], Awaitable[tuple[int, str, bytes]]]
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           413: "Payload Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


class HttpError(Exception):
    """An HTTP error with status code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class BasicAuth:
    """HTTP basic-auth users (salted SHA-256 of each password)."""

    def __init__(self, users: dict[str, str] | None = None, realm: str = "kafkasim") -> None:
        self.realm = realm
        self._salt = os.urandom(16)
        self._users: dict[str, bytes] = {}
        for user, password in (users or {}).items():
            self.add(user, password)

    def _digest(self, password: str) -> bytes:
        return hashlib.sha256(self._salt + password.encode()).digest()

    def add(self, user: str, password: str) -> None:
        """Allow ``user`` with ``password``."""
        self._users[user] = self._digest(password)

    def allows(self, header: str | None) -> bool:
        """True when an ``Authorization`` header value names a user with the right password."""
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        want = self._users.get(user)
        return want is not None and hmac.compare_digest(want, self._digest(password))


async def http_serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, route: Route,
                     auth: BasicAuth | None = None) -> int:
    """Serve one HTTP request on ``reader``/``writer`` with ``route``; returns the status sent (0: none)."""
    extra = ""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) < 2:
            raise HttpError(400, "bad request line")
        method, path = parts[0], parts[1]
        headers: dict[str, str] = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0") or 0)
        if length > 10 * 1024 * 1024:
            raise HttpError(413, "body too large")
        body = await reader.readexactly(length) if length else b""
        if auth is not None and not auth.allows(headers.get("authorization")):
            extra = f'WWW-Authenticate: Basic realm="{auth.realm}"\r\n'
            raise HttpError(401, "authentication required")
        status, ctype, payload = await route(method, path, body)
    except HttpError as e:
        status, ctype, payload = e.status, "application/json", json.dumps({"error": e.message}).encode()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ValueError):
        writer.close()
        return 0
    hdr = (f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}\r\nContent-Type: {ctype}\r\n"
           f"Content-Length: {len(payload)}\r\n{extra}Connection: close\r\n\r\n").encode()
    with contextlib.suppress(ConnectionError):
        writer.write(hdr + payload)
        await writer.drain()
    writer.close()
    return status
