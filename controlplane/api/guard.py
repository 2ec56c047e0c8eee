"""The request guard: who is calling, what they send and how much — decided before a body is read.

Goal: an unauthenticated or oversized request costs the node a header parse, not a body parse
(bodies used to be parsed before authentication and had no size limit: 100 MB without a token took
2.9 s and +400 MB RSS). Method: an ASGI middleware in front of FastAPI matches the request against the
API's routes and, for a matched route, in this order: authenticates the bearer token and checks the
route's role (401/403); refuses a body whose ``Content-Type`` is not JSON (415; a body without one is
read as JSON); refuses a declared ``Content-Length`` above the route's cap (413) without reading, then
reads a chunked body up to the cap (413 the moment it is exceeded) and hands the buffered body on.
Caps: :data:`DEFAULT_MAX_BODY` (1 MiB) unless the route declares its own with :func:`max_body`
(snapshot import 64 MiB — a 100k-partition snapshot is ~35 MB; plan import 32 MiB; the Alertmanager
webhook 8 MiB); the cap is also in the route's OpenAPI operation as ``x-guardian-max-body-bytes``.
Guarantee: the app never sees more than the cap of any body; every refusal is an RFC 7807 problem.
Unmatched paths pass through untouched (the router answers 404/405). Cost: one regex match per route
(~45) per request, one SHA-256 of the token, and at most the cap in memory per request.
"""

from __future__ import annotations

import email.message
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controlplane.api.auth import authorize
from controlplane.api.errors import ApiError, problem
from controlplane.service.context import ServiceContext

MiB = 1 << 20
DEFAULT_MAX_BODY = 1 * MiB
MAX_BODY_KEY = "x-guardian-max-body-bytes"


def max_body(limit: int, *, raw_json: bool = False) -> dict[str, Any]:
    """``openapi_extra`` for a route whose body may reach ``limit`` bytes; ``raw_json``: the handler reads
    the body itself (a guardian.*/v1 document), so it is declared here as a JSON object."""
    extra: dict[str, Any] = {MAX_BODY_KEY: limit}
    if raw_json:
        extra["requestBody"] = {"required": True,
                                "content": {"application/json": {"schema": {"type": "object"}}}}
    return extra


@dataclass(frozen=True, slots=True)
class Rule:
    """What the guard enforces for one route."""

    route: APIRoute
    role: str | None
    takes_body: bool
    json_model: bool
    limit: int


def rule_of(route: APIRoute) -> Rule:
    """The guard's rule for ``route``: its role from the ``require`` dependency, its body and cap."""
    roles = [getattr(d.call, "guardian_role", None) for d in route.dependant.dependencies]
    extra = route.openapi_extra or {}
    return Rule(route=route, role=next((r for r in roles if r), None),
                takes_body=route.body_field is not None or "requestBody" in extra,
                json_model=route.body_field is not None, limit=int(extra.get(MAX_BODY_KEY, DEFAULT_MAX_BODY)))


def is_json(content_type: str) -> bool:
    """True for ``application/json`` and ``application/*+json`` (parameters such as charset allowed)."""
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class RequestGuard:
    """ASGI middleware enforcing :class:`Rule` s before the app reads anything (see the module docstring)."""

    def __init__(self, app: ASGIApp, ctx: ServiceContext, routes: Iterable[APIRoute]) -> None:
        self.app = app
        self.ctx = ctx
        self.rules = [rule_of(r) for r in routes]

    def match(self, scope: Scope) -> Rule | None:
        for rule in self.rules:
            if rule.route.matches(scope)[0] is Match.FULL:
                return rule
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rule = self.match(scope)
        if rule is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = rule.route  # the access recorder's label, also for refusals answered here
        try:
            await self._guarded(rule, scope, receive, send)
        except ApiError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            await problem(exc.status, exc.detail, headers=headers, **exc.extra)(scope, receive, send)

    async def _guarded(self, rule: Rule, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if rule.role is not None:
            principal = authorize(self.ctx.settings, headers.get("authorization"), rule.role)
            scope.setdefault("state", {})["principal"] = principal
        length = self._length(headers)
        if length is not None and length > rule.limit:
            raise ApiError(413, f"request body of {length} bytes is over this route's limit of {rule.limit} bytes",
                           limit_bytes=rule.limit)
        has_body = (length or 0) > 0 or "transfer-encoding" in headers
        if not (rule.takes_body and has_body):
            await self.app(scope, receive, send)
            return
        content_type = headers.get("content-type")
        if content_type is None:
            if rule.json_model:  # read as JSON, as the API documents
                scope["headers"] = [*scope["headers"], (b"content-type", b"application/json")]
        elif not is_json(content_type):
            raise ApiError(415, f"Content-Type {content_type!r} is not accepted: send the body as JSON with "
                                "Content-Type: application/json")
        body = await self._read(receive, rule.limit)
        if body is None:
            return  # the client went away
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    def _length(headers: dict[str, str]) -> int | None:
        raw = headers.get("content-length")
        if raw is None:
            return None
        try:
            length = int(raw)
        except ValueError:
            raise ApiError(400, f"Content-Length {raw!r} is not a number") from None
        if length < 0:
            raise ApiError(400, f"Content-Length {raw!r} is negative")
        return length

    @staticmethod
    async def _read(receive: Receive, limit: int) -> bytes | None:
        """The whole body, or 413 as soon as it exceeds ``limit``; None when the client disconnected."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"request body is over this route's limit of {limit} bytes", limit_bytes=limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
