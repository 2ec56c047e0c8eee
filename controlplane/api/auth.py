"""Bearer-token authentication with roles viewer < operator < admin (tokens configured hashed).

Goal: every ``/api/v1`` call names a caller with a role. Method: the token's SHA-256 is compared in
constant time with each configured digest; :func:`require` is the FastAPI dependency a route declares
(it also puts the ``bearer`` security scheme in the OpenAPI document, so ``/docs`` has an Authorize
button). The request guard (:mod:`controlplane.api.guard`) runs the same check before any body is read
and leaves the principal on the request; the dependency then only re-checks the role. Guarantee: no
token or an unknown one is 401 (``WWW-Authenticate: Bearer``), a too-low role 403. Cost: one SHA-256
and one comparison per configured token.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from controlplane.api.errors import ApiError
from controlplane.config import ROLE_RANK, Settings, hash_token

BEARER = HTTPBearer(auto_error=False, scheme_name="bearer",
                    description="A token from the node's configuration (`guardian serve` writes an admin token "
                                "to `<data dir>/admin.token` when none is configured).")


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


def check_role(principal: Principal, role: str) -> Principal:
    """``principal`` if it holds ``role`` or a higher one; else 403."""
    if ROLE_RANK[principal.role] < ROLE_RANK[role]:
        raise ApiError(403, f"{principal.name} has role {principal.role}; this call needs {role}")
    return principal


def authorize(settings: Settings, header: str | None, role: str) -> Principal:
    """:func:`authenticate` then :func:`check_role`."""
    return check_role(authenticate(settings, header), role)


def require(role: str) -> Callable[..., Principal]:
    """FastAPI dependency: the caller must hold ``role`` or a higher one (else 403)."""

    def dependency(request: Request,
                   _: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> Principal:
        known = getattr(request.state, "principal", None)
        if isinstance(known, Principal):
            principal = check_role(known, role)
        else:
            principal = authorize(request.app.state.ctx.settings, request.headers.get("authorization"), role)
        request.state.principal = principal
        return principal

    dependency.guardian_role = role  # type: ignore[attr-defined]  # read by the request guard
    return dependency
