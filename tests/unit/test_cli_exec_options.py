"""The option set of ``guardian exec run|drain|restore`` is declared once and reaches every command."""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from controlplane.cli.exec import exec_app
from controlplane.cli.exec_options import LEADING, ExecOptions, exec_options

SHARED = [f.name for f in fields(ExecOptions)]


def _params(command: str) -> dict[str, Any]:
    group = typer.main.get_command(exec_app)
    ctx = group.make_context("exec", [command, "--help"], resilient_parsing=True)
    return {p.name: p for p in group.get_command(ctx, command).params}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("command", "own"), [("run", ["plan"]), ("drain", ["brokers", "batch_size"]),
                                              ("restore", ["execution"])])
def test_every_executing_command_takes_every_shared_option_in_help_order(command: str, own: list[str]) -> None:
    params = _params(command)
    rest = [n for n in SHARED if n not in LEADING]
    assert [n for n in params if n != "help"] == [*LEADING, *own, *rest]
    for f in fields(ExecOptions):
        default = None if f.default is MISSING else f.default
        assert params[f.name].default == default, f.name
    assert params["endpoints_file"].required and params["cluster"].required


def test_the_decorated_command_receives_one_options_record(tmp_path: Path) -> None:
    seen: list[tuple[ExecOptions, int]] = []
    app = typer.Typer()

    @app.command("go")
    @exec_options
    def go(shared: ExecOptions, count: int = 3) -> None:
        seen.append((shared, count))

    @app.command("other")
    def other() -> None:  # a second command keeps `go` a named subcommand
        pass

    r = CliRunner().invoke(app, ["go", "-e", str(tmp_path / "e.json"), "-c", "east", "--per-disk", "2",
                                 "--throttle", "fixed:50MB", "--count", "5"])
    assert r.exit_code == 0, r.output
    [(shared, count)] = seen
    assert count == 5
    assert shared == ExecOptions(endpoints_file=tmp_path / "e.json", cluster="east", per_disk=2,
                                 throttle="fixed:50MB")


def test_a_command_cannot_redeclare_a_shared_option() -> None:
    def clash(shared: ExecOptions, cluster: str = "x") -> None:
        pass

    with pytest.raises(TypeError, match="cluster"):
        exec_options(clash)
