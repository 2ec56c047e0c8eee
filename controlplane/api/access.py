"""Every request counted, every mutating call and every internal error recorded, no 500 unseen.

Goal: ``guardian_http_requests_total`` and ``access.jsonl`` see every answer, including refusals made
before routing and internal errors (500s used to escape both: Starlette's outermost error middleware
answered them). Method: the outermost ASGI middleware of the app (inside Starlette's own) notes the
status of the response it forwards; an exception that escapes the app is answered here with a 500
problem carrying an error id, and logged as one line (exception type, where it was raised, its message
with credentials masked, no traceback). Then it counts the request (method, route template, status)
and appends one JSON line to the node's ``access.jsonl`` for a mutating ``/api/`` call or any 5xx
(who, method, path, status, why, ms, and the error id). Guarantee: no stack trace and no exception
text reaches the client; the log line and the response share the error id. Cost: one counter increment
per request, one appended line per mutating call.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
import uuid
from datetime import UTC, datetime

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controlplane.api.errors import problem
from controlplane.service.context import ServiceContext
from domain.redaction import redact as shared_redact

log = logging.getLogger(__name__)
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def redact(text: str) -> str:
    """``text`` on one line with secrets masked (the shared redactor, :mod:`domain.redaction`)."""
    return " ".join(shared_redact(text).split())


def log_internal_error(method: str, route: str, error_id: str, exc: BaseException) -> None:
    """One log line for an unexpected exception (type, where, masked message; no traceback)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    log.error("HTTP 500 %s %s error=%s %s at %s: %s", method, route, error_id, type(exc).__name__, where,
              redact(str(exc))[:500])


class AccessRecorder:
    """ASGI middleware: counts and records every request; turns escaped exceptions into logged 500s."""

    def __init__(self, app: ASGIApp, ctx: ServiceContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        scope.setdefault("state", {})  # shared with the request, so the principal set inside is seen here
        status = 0
        error_id: str | None = None

        async def noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting)
        except Exception as exc:
            error_id = uuid.uuid4().hex[:12]
            log_internal_error(scope["method"], self._route(scope), error_id, exc)
            if status:  # the response had started: nothing more can be sent
                raise
            status = 500
            await problem(500, f"internal error {error_id}; the node's log has one line about it",
                          error=error_id)(scope, receive, send)
        finally:
            if status:
                self._record(scope, status, start, error_id)

    @staticmethod
    def _route(scope: Scope) -> str:
        return str(getattr(scope.get("route"), "path", "unmatched"))

    def _record(self, scope: Scope, status: int, start: float, error_id: str | None) -> None:
        route, method = self._route(scope), scope["method"]
        self.ctx.metrics.http_requests.labels(method, route, str(status)).inc()
        if not ((method in MUTATING and route.startswith("/api/")) or status >= 500):
            return
        principal = scope["state"].get("principal")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        entry = {"at": datetime.now(UTC).isoformat(), "who": getattr(principal, "name", None), "method": method,
                 "path": scope["path"], "status": status, "why": headers.get("x-guardian-reason", ""),
                 "ms": round((time.perf_counter() - start) * 1000, 2)}
        if error_id is not None:
            entry["error"] = error_id
        self.ctx.access_log.parent.mkdir(parents=True, exist_ok=True)
        with self.ctx.access_log.open("a") as out:
            out.write(json.dumps(entry) + "\n")
