"""The replicated state's version (like Kafka's ``metadata.version``): read it (viewer), raise it (admin).

Goal: the operator's step of a rolling upgrade (docs/upgrading.md). Method: ``GET`` answers the group's
version, what this node's code supports and what each version adds; ``POST`` first asks every peer's
``/readyz`` (through ``--http-peers``) which version its code supports and refuses (409, naming the node)
while one is short or cannot be asked, unless ``force``; then it proposes ``state.version``, itself stamped
with the target, so a node that cannot apply it holds instead of diverging. Guarantee: the version never goes
down (400); the same version again is a no-op. Cost: one HTTP GET per peer (2 s timeout each) and one Raft
round trip.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from fastapi import APIRouter, Request

from controlplane.api.deps import Admin, Ctx, Viewer, propose, read
from controlplane.api.errors import ApiError
from controlplane.api.schemas import StrictIn, int_in
from controlplane.state.versions import LATEST, VERSIONS, group_version

router = APIRouter(tags=["state"])
PEER_TIMEOUT_S = 2.0


class VersionIn(StrictIn):
    version: int_in(1, 1000, "the state version to raise the group to")  # type: ignore[valid-type]
    force: bool = False
    """Raise without every peer confirming it supports the version (a node that cannot apply it holds)."""


def _peer_supported(url: str) -> int:
    """The state version the node at ``url`` supports, from its ``/readyz`` (ready or not); ValueError why not."""
    req = urllib.request.Request(url.rstrip("/") + "/readyz", headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=PEER_TIMEOUT_S) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 503: not ready, the figures are in the problem document
        try:
            body = json.loads(exc.read())
        except ValueError:
            body = {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"unreachable ({exc})") from None
    versions = body.get("state_version") or (body.get("raft") or {}).get("state_version") or {}
    supported = versions.get("supported")
    if not isinstance(supported, int):
        raise ValueError("its /readyz names no supported state version (code older than state versions)")
    return supported


def peers_short_of(ctx: Any, version: int) -> list[str]:
    """Every peer that does not confirm it supports ``version``, with the reason."""
    status = ctx.store.status()
    short = []
    for peer in status.get("peers") or []:
        url = ctx.http_of.get(peer)
        if url is None:
            short.append(f"{peer}: no HTTP URL to ask (start the nodes with --http-peers)")
            continue
        try:
            supported = _peer_supported(url)
        except ValueError as exc:
            short.append(f"{peer}: {exc}")
            continue
        if supported < version:
            short.append(f"{peer}: its code supports versions up to {supported}")
    return short


@router.get("/api/v1/state/version")
def get_version(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    """The group's state version, what this node's code supports, and what each version adds."""
    group = read(ctx, group_version)
    supported = (ctx.store.status().get("state_version") or {}).get("supported", LATEST)
    return {"group": group, "supported": supported, "latest": LATEST,
            "versions": {str(v): text for v, text in VERSIONS.items()}}


@router.post("/api/v1/state/version")
def raise_version(ctx: Ctx, body: VersionIn, request: Request, who: Admin) -> Any:
    """Raise the group's state version once every node runs code that supports it (admin)."""
    if not body.force and ctx.store.is_leader:
        short = peers_short_of(ctx, body.version)
        if short:
            raise ApiError(409, f"state version {body.version} is not supported by every node: {'; '.join(short)}. "
                                "Upgrade them first (or pass force=true: a node that cannot apply it then holds, "
                                "not ready, until it is upgraded)")
    return propose(ctx, request, who, {"type": "state.version", "version": body.version})
