"""``guardian state version show|raise``: the replicated state's version (like Kafka's ``metadata.version``).

Goal: the operator's side of a rolling upgrade (docs/upgrading.md). Method: one API call — ``show`` reads
``GET /api/v1/state/version`` (viewer token), ``raise`` posts ``POST /api/v1/state/version`` (admin token),
which refuses while a node's code does not support the version (``--force`` skips that check: such a node
then holds, not ready, until upgraded). Guarantee: exit 1 with the API's problem detail on any error.
Cost: one HTTP request (the leader asks each peer once).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from controlplane.cli.api_client import ApiUnavailable, TokenOpt, UrlOpt, get_json, post_json

state_app = typer.Typer(help="The replicated state: its version (rolling upgrades).", no_args_is_help=True)
version_app = typer.Typer(help="The state version: show it, raise it once every node is upgraded.",
                          no_args_is_help=True)
state_app.add_typer(version_app, name="version")
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
DEFAULT_URL = "http://127.0.0.1:8080"


@version_app.command("show")
def show(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None,
         as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The group's state version, what the answering node's code supports, and what each version adds."""
    try:
        body = get_json(url.rstrip("/") + "/api/v1/state/version", token)
    except ApiUnavailable as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    if as_json:
        out.print_json(json.dumps(body))
        return
    out.print(f"group state version {body['group']} (this node supports up to {body['supported']}; "
              f"latest {body['latest']})", markup=False)
    for version, text in sorted(body["versions"].items(), key=lambda kv: int(kv[0])):
        mark = "*" if int(version) <= body["group"] else " "
        out.print(f" {mark} {version}: {text}", markup=False)


@version_app.command("raise")
def raise_cmd(version: Annotated[int, typer.Argument(min=1, help="the state version to raise the group to")],
              url: UrlOpt = DEFAULT_URL, token: TokenOpt = None,
              force: Annotated[bool, typer.Option(help="raise without every peer confirming it supports the version "
                                                       "(a node that cannot apply it holds until upgraded)")] = False,
              why: Annotated[str, typer.Option(help="reason recorded in the action log")] = "") -> None:
    """Raise the group's state version (admin token); refused while a node's code does not support it."""
    try:
        body = post_json(url.rstrip("/") + "/api/v1/state/version", token, {"version": version, "force": force},
                         why=why)
    except ApiUnavailable as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    out.print(f"state version {body['version']} (was {body['previous']})", markup=False)
