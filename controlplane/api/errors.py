"""RFC 7807 problem responses for every error the API returns.

Goal: one error shape for every refusal. Method: exception handlers map each known failure to an
``application/problem+json`` document — request validation 400 (one entry per bad field, by JSON path;
never FastAPI's 422), contract errors 400, state-machine refusals 409, stale snapshots 409, a cluster
refusing Guardian's login (SASL or TLS) 502 naming the cluster and the security settings (protocol,
mechanism, user), a follower asked to write 307 to the leader (query string kept) or 503, Raft timeouts
504. Unexpected exceptions
are answered by :mod:`controlplane.api.access` (500 with an error id, logged). Guarantee: no stack trace
reaches a client. Cost: constant per error.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from controlplane.service.snapshots import ClusterLoginRefused, StaleSnapshotError
from controlplane.state.versions import StateVersionTooLow
from domain import ContractError
from domain.errors import json_path
from kafkaio.errors import KafkaAuthError
from raft.errors import NotLeaderError, ProposalTimeout, RaftError
from raft.protocol import CommandConflict, CommandRejected

PROBLEM = "application/problem+json"
TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
          409: "Conflict", 413: "Content Too Large", 415: "Unsupported Media Type", 422: "Unprocessable Content",
          500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


class ApiError(Exception):
    """Raise from a handler to answer ``status`` with a problem document."""

    def __init__(self, status: int, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.extra = extra


def problem(status: int, detail: str, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """An ``application/problem+json`` response."""
    body = {"type": "about:blank", "title": TITLES.get(status, "Error"), "status": status, "detail": detail,
            **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Map every known failure to a problem response; nothing escapes as a 500 with a stack trace."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return problem(exc.status, exc.detail, headers=headers, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [{"path": json_path([p for p in e["loc"] if p != "body"]), "message": e["msg"]}
                    for e in exc.errors()]
        detail = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
        return problem(400, detail, problems=problems)

    @app.exception_handler(ContractError)
    async def _contract(_: Request, exc: ContractError) -> JSONResponse:
        problems = [{"path": p.path, "message": p.message} for p in exc.problems]
        return problem(400, f"invalid {exc.what}: " + "; ".join(str(p) for p in exc.problems), problems=problems)

    @app.exception_handler(CommandRejected)
    async def _rejected(_: Request, exc: CommandRejected) -> JSONResponse:
        # invalid (never proposed) -> 400; committed but refused by the state machine -> 409
        # a command form newer than the group's state version -> 409 too (docs/upgrading.md)
        return problem(409 if isinstance(exc, CommandConflict | StateVersionTooLow) else 400, str(exc))

    @app.exception_handler(StaleSnapshotError)
    async def _stale(_: Request, exc: StaleSnapshotError) -> JSONResponse:
        return problem(409, str(exc))

    @app.exception_handler(ClusterLoginRefused)
    async def _login_refused(_: Request, exc: ClusterLoginRefused) -> JSONResponse:
        return problem(502, str(exc), cluster=exc.cluster, security=exc.security)

    @app.exception_handler(KafkaAuthError)
    async def _kafka_auth(_: Request, exc: KafkaAuthError) -> JSONResponse:
        return problem(502, str(exc), cluster=exc.cluster, security=exc.security)

    @app.exception_handler(NotLeaderError)
    async def _not_leader(request: Request, exc: NotLeaderError) -> JSONResponse:
        http_of: dict[str, str] = getattr(request.app.state, "http_of", {})
        target = http_of.get(exc.leader or "")
        if target:
            query = request.url.query
            location = target.rstrip("/") + request.url.path + (f"?{query}" if query else "")
            return JSONResponse({"detail": str(exc)}, status_code=307, headers={"Location": location})
        return problem(503, str(exc), leader=exc.leader)

    @app.exception_handler(ProposalTimeout)
    async def _timeout(_: Request, exc: ProposalTimeout) -> JSONResponse:
        return problem(504, str(exc))

    @app.exception_handler(RaftError)
    async def _raft(_: Request, exc: RaftError) -> JSONResponse:
        return problem(503, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, str(exc.detail), headers=dict(exc.headers) if exc.headers else None)
