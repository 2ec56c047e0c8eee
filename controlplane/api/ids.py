"""Globally unique, monotonic 64-bit ids for other systems (unique across failovers).

Goal: one id allocator for the federation. Method: an ``ids.allocate`` command advances the replicated
counter by ``count``. Guarantee: ranges never overlap, across leaders too, because the counter is part
of the replicated state. Cost: one Raft round trip per range, whatever its size.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from controlplane.api.deps import Ctx, Operator, propose
from controlplane.api.schemas import StrictIn, int_in

router = APIRouter(tags=["ids"])


class IdsIn(StrictIn):
    count: int_in(1, 1_000_000) = 1  # type: ignore[valid-type]


@router.post("/api/v1/ids")
def allocate_ids(ctx: Ctx, body: IdsIn, request: Request, who: Operator) -> Any:
    """Allocate globally unique, monotonic 64-bit ids (unique across failovers)."""
    return propose(ctx, request, who, {"type": "ids.allocate", "count": body.count})
