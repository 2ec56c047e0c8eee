"""The option set of ``guardian exec run|drain|restore`` is declared once and reaches every command."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from controlplane.cli.exec import exec_app
from controlplane.cli.exec_options import LEADING, ExecOptions, exec_options
from kafkaio.endpoints import EndpointsError

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
    assert params["cluster"].required and not params["endpoints_file"].required  # or --bootstrap-servers
    for flag in ("bootstrap_servers", "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password_file",
                 "ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        assert flag in params, flag


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


def _connect(tmp_path: Path, *args: str) -> tuple[int, str, ExecOptions | None]:
    seen: list[ExecOptions] = []
    app = typer.Typer()

    @app.command("go")
    @exec_options
    def go(shared: ExecOptions) -> None:
        seen.append(shared)

    @app.command("other")
    def other() -> None:
        pass

    r = CliRunner().invoke(app, ["go", "-c", "east", *args])
    return r.exit_code, r.output, seen[0] if seen else None


def test_bootstrap_servers_and_kafka_style_security_flags(tmp_path: Path) -> None:
    code, output, shared = _connect(tmp_path, "--bootstrap-servers", "k1:9093,k2:9093", "--security-protocol",
                                    "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "guardian",
                                    "--sasl-password-file", "/etc/guardian/kafka.pw", "--ssl-cafile", "/ca.pem",
                                    "--metrics-url", "1=https://k1:7071/metrics")
    assert code == 0, output
    assert shared is not None
    eps = shared.endpoints()
    assert eps.bootstrap_servers == "k1:9093,k2:9093" and eps.metrics_url_by_broker == {1: "https://k1:7071/metrics"}
    assert eps.security.describe() == "SASL_SSL/SCRAM-SHA-512 as user 'guardian'"
    assert (eps.security.password_file, eps.security.ca_file) == ("/etc/guardian/kafka.pw", "/ca.pem")


@pytest.mark.parametrize(("args", "message"), [
    ((), "give --endpoints-file, or --bootstrap-servers"),
    (("--bootstrap-servers", "k:9", "--sasl-mechanism", "PLAIN"), "--sasl-mechanism"),
    (("--bootstrap-servers", "k:9", "--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN",
      "--sasl-username", "u"), "--sasl-password-file"),
    (("-e", "eps.json", "--security-protocol", "SSL"), "--security-protocol: not with --endpoints-file"),
])
def test_inconsistent_connection_flags_name_the_flag(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    code, output, shared = _connect(tmp_path, *args)
    assert code == 0 and shared is not None, output
    with pytest.raises(EndpointsError, match=re.escape(message)):
        shared.endpoints()
