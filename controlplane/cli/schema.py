"""``guardian schema snapshot|plan``: print the JSON Schemas of the contract files (offline, no input)."""

from __future__ import annotations

import json

import typer

from domain import plan_json_schema, snapshot_json_schema

schema_app = typer.Typer(help="Print the JSON Schemas of the contract files.", no_args_is_help=True)


@schema_app.command("snapshot")
def schema_snapshot() -> None:
    """Print the JSON Schema of guardian.snapshot/v1."""
    print(json.dumps(snapshot_json_schema(), indent=2))


@schema_app.command("plan")
def schema_plan() -> None:
    """Print the JSON Schema of guardian.plan/v1."""
    print(json.dumps(plan_json_schema(), indent=2))
