"""The CLI's client of a running service's API: one authenticated JSON GET or POST, its errors as one message.

Goal: commands that talk to a service (``guardian throttle``, ``guardian exec watch --url``,
``guardian migrate-idc --url``, ``guardian topic create --url``) reach it the same way. Method: ``urllib``
GET or POST (JSON body) with a bearer token, the JSON answer parsed; an HTTP error becomes
:class:`ApiUnavailable` carrying the problem's ``detail``, a connection failure one naming the URL; a
follower's 307/308 to the leader is followed once, a write included (urllib follows only GETs).
Guarantee: no retry and no exit here — the command decides (exit on the first read, keep the last
view while watching). Cost: one HTTP round trip (10 s timeout).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Annotated, Any

import typer

UrlOpt = Annotated[str, typer.Option("--url", envvar="GUARDIAN_URL", help="Guardian API base URL")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="GUARDIAN_TOKEN", help="bearer token (viewer)")]


class ApiUnavailable(Exception):
    """The service answered an error, or could not be reached (the message says which)."""


def get_json(url: str, token: str | None, cafile: str | None = None) -> Any:
    """GET ``url`` with ``token``; its JSON body (``cafile``: the CA to verify an https URL against)."""
    return _send(urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {}), url,
                 cafile)


def post_json(url: str, token: str | None, body: Any, why: str = "", cafile: str | None = None) -> Any:
    """POST ``body`` as JSON to ``url`` with ``token`` (``why``: the X-Guardian-Reason recorded); the answer."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {}),
               **({"X-Guardian-Reason": why} if why else {})}
    return _send(urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST"), url,
                 cafile)


def _send(req: urllib.request.Request, url: str, cafile: str | None = None, redirected: bool = False) -> Any:
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        location = exc.headers.get("Location") if exc.code in (307, 308) else None
        if location and not redirected:  # a follower sends a write to the leader; urllib follows GETs only
            target = urllib.parse.urljoin(url, location)
            again = urllib.request.Request(target, data=req.data, headers=dict(req.header_items()),
                                           method=req.get_method())
            return _send(again, target, cafile, redirected=True)
        detail = exc.read().decode("utf-8", "replace")
        with contextlib.suppress(ValueError, AttributeError):
            detail = json.loads(detail).get("detail", detail)
        raise ApiUnavailable(f"{url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ApiUnavailable(f"cannot reach {url}: {exc}") from None
