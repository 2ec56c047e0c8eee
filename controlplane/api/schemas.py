"""Request-model conventions shared by every router, and the problem document the API answers with.

Goal: one definition of what a well-formed request body is. Method: every request model derives from
:class:`StrictIn` — pydantic strict mode (no coercion: ``"1"`` is not an integer, ``true`` is not a
number of minutes; an integral JSON number such as ``3.0`` is an integer, as in JSON Schema), unknown
fields refused, no NaN or infinity; broker ids are :data:`BrokerId` (Kafka's int32, non-negative); names
follow the replicated commands' :data:`NAME_PATTERN`, declared so the OpenAPI document says it.
Guarantee: a body that does not match is a 400 problem naming each bad field by JSON path (see
:mod:`controlplane.api.errors`). Cost: validation is pydantic-core's, linear in the body.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from controlplane.api.errors import PROBLEM, TITLES

# the strict-JSON conventions shared with the planners' parameter models (written once there), re-exported
from planners.params import INT32_MAX as INT32_MAX
from planners.params import NAME_PATTERN as NAME_PATTERN
from planners.params import BrokerId as BrokerId
from planners.params import Name as Name
from planners.params import int_in as int_in

WHY = {400: "Malformed request: each bad field named by JSON path", 401: "No or unknown bearer token",
       403: "The token's role is too low for this call",
       404: "Unknown cluster (in the path or the body), plan, execution or throttle",
       409: "Refused by the current state (e.g. stale snapshot, plan not approved, live plans on the cluster)",
       413: "Request body over this route's limit (x-guardian-max-body-bytes)",
       415: "Body not sent as JSON (Content-Type: application/json)",
       502: "The cluster refuses Guardian's login (SASL or TLS): the problem names the cluster and its security "
            "settings",
       503: "Not available on this node (no leader known, no executor, no ClickHouse)",
       504: "The replicated write did not commit in time"}


def problem_response(status: int) -> dict[str, Any]:
    """An OpenAPI response object for a problem document with ``status``."""
    return {"description": WHY.get(status, TITLES.get(status, "Error")),
            "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}}}


class StrictIn(BaseModel):
    """Base of every request body: strict types, closed, finite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class Problem(BaseModel):
    """RFC 7807 problem document (``application/problem+json``); routes add members such as
    ``problems`` (one per bad field), ``violations`` (broken plan constraints) or ``error`` (the id of a
    logged internal error)."""

    model_config = ConfigDict(extra="allow")
    type: str = "about:blank"
    title: str
    status: int
    detail: str


def problem_schema() -> dict[str, Any]:
    """The JSON schema of :class:`Problem` for the OpenAPI components."""
    return Problem.model_json_schema(ref_template="#/components/schemas/{model}")
