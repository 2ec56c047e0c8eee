"""Goal: the small HTTP/1.1 server under kafkasim's control API and metrics endpoints.

Method: HTTP/1.1 requests in turn on one asyncio stream (TLS when the listener was opened with an
``ssl`` context), the connection kept alive between requests as the JDK's HttpServer under
jmx_exporter and Go's net/http under node_exporter keep it — until the client sends
``Connection: close``, speaks HTTP/1.0, sends a malformed request or stays idle ``IDLE_S`` seconds.
The request line, headers and a ``Content-Length`` body are read with a 10 s limit (``IDLE_S`` for
the next request on a kept connection) and handed to a ``route(method, path, body)`` coroutine.
An optional :class:`BasicAuth` checks the ``Authorization: Basic`` header first and answers ``401``
with a ``WWW-Authenticate`` challenge, as Prometheus exporters behind ``web.config`` basic auth do.

Guarantee: every request gets a status line or a closed socket, never a hang; an idle kept
connection is closed after ``IDLE_S`` seconds; passwords are kept only as salted SHA-256 digests
and compared in constant time.

Cost: O(request size) per request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
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


IDLE_S = 30.0
"""How long a kept connection may wait for its next request (the JDK HttpServer's default idle interval)."""


async def http_serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, route: Route,
                     auth: BasicAuth | None = None, on_status: Callable[[int], None] | None = None) -> None:
    """Serve the HTTP requests of one connection with ``route`` until it ends (see the module docstring);
    ``on_status`` is told each status before it is sent (so a client that saw the answer finds it counted)."""
    wait_s = 10.0
    try:
        while await _serve_one(reader, writer, route, auth, wait_s, on_status):
            wait_s = IDLE_S
    finally:
        writer.close()


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, route: Route,
                     auth: BasicAuth | None, wait_s: float,
                     on_status: Callable[[int], None] | None) -> bool:
    """One request; True when the connection stays open for another."""
    extra = ""
    keep = False
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait_s)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) < 2:
            raise HttpError(400, "bad request line")
        method, path = parts[0], parts[1]
        headers: dict[str, str] = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        keep = parts[-1] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        length = int(headers.get("content-length", "0") or 0)
        if length > 10 * 1024 * 1024:
            keep = False
            raise HttpError(413, "body too large")
        body = await reader.readexactly(length) if length else b""
        if auth is not None and not auth.allows(headers.get("authorization")):
            extra = f'WWW-Authenticate: Basic realm="{auth.realm}"\r\n'
            raise HttpError(401, "authentication required")
        status, ctype, payload = await route(method, path, body)
    except HttpError as e:
        status, ctype, payload = e.status, "application/json", json.dumps({"error": e.message}).encode()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ValueError):
        return False
    hdr = (f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}\r\nContent-Type: {ctype}\r\n"
           f"Content-Length: {len(payload)}\r\n{extra}Connection: {'keep-alive' if keep else 'close'}\r\n\r\n").encode()
    if on_status is not None:
        on_status(status)
    try:
        writer.write(hdr + payload)
        await writer.drain()
    except ConnectionError:
        return False
    return keep
