"""The operator action log: every applied command with who, what, why and the result, newest first.

Goal: audit. Method: a slice of the replicated log (the state machine keeps the last 5,000 entries).
Guarantee: every node answers the same log for the same applied index. Cost: O(limit).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from controlplane.api.deps import Ctx, Viewer, read

router = APIRouter(tags=["audit"])


@router.get("/api/v1/actions")
def actions(ctx: Ctx, _: Viewer, limit: Annotated[int, Query(ge=1, le=5000)] = 100) -> list[dict[str, Any]]:
    """The operator action log (replicated), newest first."""
    log: list[dict[str, Any]] = read(ctx, lambda s: s["actions"][-limit:][::-1])
    return log
