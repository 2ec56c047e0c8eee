"""Bearer-token authentication with roles viewer < operator < admin (tokens configured hashed)."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request

from controlplane.api.errors import ApiError
from controlplane.config import ROLE_RANK, Settings, hash_token


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling."""

    name: str
    role: str


def authenticate(settings: Settings, header: str | None) -> Principal:
    """The principal behind an ``Authorization: Bearer <token>`` header; 401 when absent or unknown."""
    if not header or not header.lower().startswith("bearer "):
        raise ApiError(401, "missing bearer token (Authorization: Bearer <token>)")
    digest = hash_token(header[7:].strip())
    for token in settings.tokens:
        if hmac.compare_digest(token.sha256, digest):
            return Principal(token.name, token.role)
    raise ApiError(401, "unknown bearer token")


def require(role: str) -> Callable[[Request], Principal]:
    """FastAPI dependency: the caller must hold ``role`` or a higher one (else 403)."""

    def dependency(request: Request) -> Principal:
        principal = authenticate(request.app.state.ctx.settings, request.headers.get("authorization"))
        if ROLE_RANK[principal.role] < ROLE_RANK[role]:
            raise ApiError(403, f"{principal.name} has role {principal.role}; this call needs {role}")
        request.state.principal = principal
        return principal

    return dependency
