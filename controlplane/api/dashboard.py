"""The web dashboard (``/ui``), offline API docs (``/docs``) and the two reads the dashboard adds.

Goal: a page an operator can look at — federation overview, disk heat maps, executions, throttles, the
action log, plan review with approve/reject — served by the controller itself, with no request to any
other host (no CDN), and ``/docs`` that works without internet. Method: the dashboard is three static
files shipped in the package (``controlplane/api/ui/``: ``index.html``, ``app.js``, ``style.css``); the
page asks for a token once (kept in the tab's ``sessionStorage``) and its script reads the JSON API
with it every few seconds. ``/docs`` is FastAPI's Swagger UI page pointed at the assets of the
``swagger-ui-bundle-v2`` package, served here. The API gains ``GET /api/v1/overview`` (every cluster's
figures, as cached for ``/metrics`` by :mod:`controlplane.service.metrics_figures`, with its snapshot age,
throttles in force and active execution) and ``GET /api/v1/plans/{id}/review`` (a plan's moves with the
replicas each partition has now, from the cluster's latest snapshot).
Guarantee: the static routes need no token and reveal no state; every read of state needs role viewer
and approve/reject (through the plans API) operator; an asset outside the shipped set is 404. Cost:
a static file read per asset request (browsers cache them); the overview costs one small state read
plus the cached figures; a review O(moves shown).
"""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from swagger_ui_bundle import swagger_ui_path

from controlplane.api.deps import Ctx, Viewer, read
from controlplane.api.errors import ApiError
from domain.execution import ACTIVE_STATUSES, progress_json

router = APIRouter(tags=["dashboard"])
UI_DIR = Path(str(resources.files("controlplane.api") / "ui"))
UI_ASSETS = {"app.js": "text/javascript", "style.css": "text/css", "favicon.svg": "image/svg+xml"}
"""The dashboard's files besides ``index.html`` (name -> media type)."""
DOCS_DIR = Path(str(swagger_ui_path))
DOCS_ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css"}
CACHE = {"Cache-Control": "no-cache"}
"""Assets are revalidated (ETag) so an upgraded controller serves its new page at once."""
MOVES_SHOWN = 2000


@router.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    """The dashboard."""
    return RedirectResponse("/ui", status_code=307)


@router.get("/ui", include_in_schema=False)
def ui_page() -> FileResponse:
    """The dashboard's page (it reads the API with the token entered on it)."""
    return FileResponse(UI_DIR / "index.html", media_type="text/html", headers=CACHE)


@router.get("/ui/assets/{name}", include_in_schema=False)
def ui_asset(name: str) -> FileResponse:
    """One of the dashboard's shipped files; 404 for any other name."""
    if name not in UI_ASSETS:
        raise ApiError(404, f"no dashboard asset {name!r}")
    return FileResponse(UI_DIR / name, media_type=UI_ASSETS[name], headers=CACHE)


@router.get("/docs", include_in_schema=False)
def docs() -> HTMLResponse:
    """Swagger UI over ``/openapi.json``, loading its assets from this controller."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title="Guardian API",
                               swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                               swagger_css_url="/docs/assets/swagger-ui.css",
                               swagger_favicon_url="/ui/assets/favicon.svg",
                               swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True})


@router.get("/docs/assets/{name}", include_in_schema=False)
def docs_asset(name: str) -> FileResponse:
    """Swagger UI's script and stylesheet (from the ``swagger-ui-bundle-v2`` package)."""
    if name not in DOCS_ASSETS:
        raise ApiError(404, f"no docs asset {name!r}")
    return FileResponse(DOCS_DIR / name, media_type=DOCS_ASSETS[name], headers=CACHE)


def _state_overview(s: dict[str, Any]) -> dict[str, Any]:
    active = {x.value for x in ACTIVE_STATUSES}
    out: dict[str, Any] = {}
    for name in s["clusters"]:
        out[name] = {"throttles": len(s["throttles"].get(name, {})), "execution": None,
                     "maintenance": sorted(s["maintenance"].get(name, {})),
                     "auto_rebalance": s["clusters"][name].get("auto_rebalance", {"enabled": False})}
    for e in s["executions"].values():
        if e["status"] in active and e["cluster"] in out:
            prog = progress_json(e)
            out[e["cluster"]]["execution"] = {
                "id": e["id"], "status": e["status"], "bytes_done": prog.get("bytes_done", 0),
                "bytes_total": prog.get("bytes_total", 0), "eta_s": prog.get("eta_s")}
    return out


@router.get("/api/v1/overview")
def overview(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    """Every registered cluster with its latest snapshot's figures (brokers by state, pools' estimated
    util, coverage), snapshot age, throttles in force, active execution, auto-rebalance policy (the dashboard's
    Pause/Resume sends it back with ``enabled`` flipped) and the last error of a loop on it."""
    registered: dict[str, Any] = read(ctx, _state_overview)
    figures = ctx.metrics.federation.clusters(ctx.snapshots.entries)
    lines = ctx.throttle.lines if ctx.throttle is not None else None
    now = time.time()
    clusters = []
    for name in sorted(registered):
        entry: dict[str, Any] = {"name": name, **registered[name], "snapshot": None, "snapshot_age_s": None,
                                 "leased_lines": lines.summary(name) if lines is not None else [],
                                 "last_error": ctx.cluster_status.last_error(name)}
        held = figures.get(name)
        if held is not None:
            entry["snapshot"] = held.summary
            entry["snapshot_age_s"] = max(0.0, now - held.observed_at)
        clusters.append(entry)
    return {"max_snapshot_age_s": ctx.settings.max_snapshot_age_s, "clusters": clusters}


@router.get("/api/v1/plans/{plan_id}/review")
def review(ctx: Ctx, plan_id: int, _: Viewer,
           limit: Annotated[int, Query(ge=1, le=100_000)] = MOVES_SHOWN) -> dict[str, Any]:
    """A plan's figures and its first ``limit`` moves, each with the replicas and log dirs the partition
    has in the cluster's latest snapshot (``null`` when there is no snapshot or it lacks the partition)."""
    record = read(ctx, lambda s: s["plans"].get(str(plan_id)))
    if record is None:
        raise ApiError(404, f"unknown plan {plan_id}")
    doc = record["plan"]
    snap = ctx.snapshots.get(record["cluster"])
    parts = snap.index.partition_by_id if snap is not None else {}
    moves = []
    all_moves = (doc.get("reassignment") or {}).get("partitions") or []
    for m in all_moves[:limit]:
        now = parts.get((m["topic"], m["partition"]))
        moves.append({"topic": m["topic"], "partition": m["partition"], "replicas": m["replicas"],
                      "log_dirs": m["log_dirs"],
                      "current_replicas": list(now.replicas) if now is not None else None,
                      "current_log_dirs": list(now.log_dirs) if now is not None else None,
                      "size_bytes": now.size_bytes if now is not None else None})
    return {"id": plan_id, "cluster": record["cluster"], "kind": record.get("kind"), "status": record["status"],
            "summary": doc.get("summary"), "notes": doc.get("notes", []), "moves_total": len(all_moves),
            "leaders_total": len(doc.get("leaders") or []), "moves": moves,
            "record": {k: v for k, v in record.items() if k != "plan"}}
