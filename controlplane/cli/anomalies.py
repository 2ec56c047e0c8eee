"""``guardian anomalies list|explain|ignore``: the anomalies the self-healing loop recorded, through the API.

Every command reads ``--url`` (default ``$GUARDIAN_URL`` or http://127.0.0.1:8080) with a bearer token
(``--token`` or ``$GUARDIAN_TOKEN``; ``ignore`` needs an operator's). Exit 1 with the API's problem detail
on an error. Cost: one HTTP request.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer
from rich.console import Console

anomalies_app = typer.Typer(help="Anomalies found by the detectors, their fixes; ignore one.", no_args_is_help=True)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
UrlOpt = Annotated[str, typer.Option("--url", envvar="GUARDIAN_URL", help="Guardian API base URL")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="GUARDIAN_TOKEN", help="bearer token")]


def _call(url: str, token: str | None, body: dict[str, Any] | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")
        with contextlib.suppress(ValueError):
            detail = json.loads(detail).get("detail", detail)
        err.print(f"error: {url}: HTTP {exc.code}: {detail}", markup=False)
        raise typer.Exit(1) from None
    except (urllib.error.URLError, OSError) as exc:
        err.print(f"error: cannot reach {url}: {exc}", markup=False)
        raise typer.Exit(1) from None


@anomalies_app.command("list")
def anomalies_list(url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None,
                   cluster: Annotated[str | None, typer.Option(help="only this cluster")] = None,
                   all_: Annotated[bool, typer.Option("--all", help="closed ones too")] = False,
                   as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Open anomalies (``--all``: every one), newest first."""
    query = "?" + "&".join(x for x in (f"cluster={cluster}" if cluster else "", "" if all_ else "open=true") if x)
    rows = _call(url.rstrip("/") + "/api/v1/anomalies" + (query if query != "?" else ""), token)
    if as_json:
        out.print_json(json.dumps(rows))
        return
    if not rows:
        out.print("no anomalies")
    for a in rows:
        out.print(f"{a['id']:>6}  {a['cluster']:<12} {a['status']:<10} {a['kind']:<20} {a['summary']}", markup=False)


@anomalies_app.command("explain")
def anomalies_explain(anomaly_id: int, url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None) -> None:
    """One anomaly: evidence, lifecycle history and its fix."""
    a = _call(url.rstrip("/") + f"/api/v1/anomalies/{anomaly_id}", token)
    out.print(f"anomaly {a['id']} ({a['kind']}) on {a['cluster']}: {a['status']} - {a['summary']}", markup=False)
    out.print("evidence: " + json.dumps(a.get("evidence", {}), sort_keys=True), markup=False)
    for h in a.get("history", []):
        out.print(f"  {h['at']}  {h['status']:<10} {h.get('reason', '')}", markup=False)
    if a.get("plan"):
        out.print("fix: " + json.dumps(a["plan"], sort_keys=True), markup=False)


@anomalies_app.command("ignore")
def anomalies_ignore(anomaly_id: int, reason: Annotated[str, typer.Option(help="why (recorded)")] = "",
                     url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None) -> None:
    """Stop Guardian acting on an anomaly."""
    res = _call(url.rstrip("/") + f"/api/v1/anomalies/{anomaly_id}/ignore", token, {"reason": reason})
    out.print(f"anomaly {anomaly_id}: {res.get('status', res)}", markup=False)
