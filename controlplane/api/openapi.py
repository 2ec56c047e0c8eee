"""The OpenAPI document as the API behaves: problem+json error responses per operation, no 422.

Goal: a spec a client generator or schemathesis can hold the API to. Method: FastAPI generates the
document; :func:`install_openapi` post-processes it once — it drops FastAPI's 422
``HTTPValidationError`` (validation errors are 400 problems here), adds the
:class:`~controlplane.api.schemas.Problem` schema and documents on each operation the errors it can
return, derived from the route: 400 (it takes parameters or a body), 401/403 (it needs a role), 404 (a
path names a resource, or it writes: the body may name an unknown cluster), 409/503/504 and the 307 to
the leader (it writes through Raft), 413/415 (it takes a body); routes add their own with
``responses=``. The bearer security scheme comes from :mod:`controlplane.api.auth`. Guarantee: the
operation set is FastAPI's, unchanged. Cost: once per app, on the first ``/openapi.json``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from controlplane.api.guard import rule_of
from controlplane.api.schemas import problem_response, problem_schema

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
def error_statuses(route: APIRoute, method: str) -> list[int]:
    """The error statuses ``route`` answers ``method`` with, as the guard and the handlers decide them."""
    rule = rule_of(route)
    params = route.dependant.path_params or route.dependant.query_params
    out = set()
    if params or rule.takes_body:
        out.add(400)
    if rule.role is not None:
        out |= {401, 403}
    if route.dependant.path_params:
        out.add(404)
    if rule.role is not None and method in WRITES:
        out |= {404, 409, 503, 504}  # 404: also a cluster named in the body
    if rule.role is not None and (method in WRITES or route.dependant.path_params):
        out.add(502)  # the cluster refuses Guardian's login: no snapshot, no live read
    if rule.takes_body:
        out |= {413, 415}
    return sorted(out)


def install_openapi(app: FastAPI, routes: Iterable[APIRoute]) -> None:
    """Replace ``app.openapi`` with the post-processed document (see the module docstring)."""
    by_op = {(method.lower(), route.path): route for route in routes for method in route.methods or ()}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        schemas["Problem"] = problem_schema()
        for path, operations in spec.get("paths", {}).items():
            for method, operation in operations.items():
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)
                route = by_op.get((method, path))
                if route is None:
                    continue
                for status in error_statuses(route, method.upper()):
                    responses.setdefault(str(status), problem_response(status))
                if route.dependant.dependencies and method.upper() in WRITES and "403" in responses:
                    responses.setdefault("307", {"description": "This node is a follower: repeat the request at "
                                                                "the leader (Location keeps the query string)"})
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
