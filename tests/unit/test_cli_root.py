"""The ``guardian`` root: --version, a fast --help, and the lazily loaded groups equal to the eager ones.

Goal: ``guardian --help`` and ``--version`` answer without importing the controller (FastAPI, SciPy, the
executor), and the root the console script runs offers exactly the commands (with the same one-line help)
that :mod:`controlplane.cli.app` mounts. Method: fresh interpreters run the console script's ``main`` and
report the modules loaded; :data:`controlplane.cli.root.ENTRIES` is compared with what each loader returns.
Cost: ~3 s (interpreters; loading every group once).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from controlplane import DISTRIBUTION, __version__
from controlplane.cli.root import ENTRIES, eager_app, to_click

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("fastapi", "scipy", "numpy", "controlplane.bootstrap", "controlplane.executor", "kafka", "grpc", "domain")

PROBE = r'''
import io, json, sys, contextlib
from controlplane.cli import main
sys.argv = ["guardian", *json.loads(sys.argv[1])]
buf = io.StringIO()
code = 0
with contextlib.redirect_stdout(buf):
    try:
        main()
    except SystemExit as exc:
        code = exc.code or 0
print(json.dumps({"code": code, "out": buf.getvalue(), "heavy": sorted(m for m in sys.modules
      if m.split(".")[0] in HEAVY or any(m == h or m.startswith(h + ".") for h in HEAVY))}))
'''


def probe(*args: str) -> dict:
    code = f"HEAVY = {HEAVY!r}\n" + PROBE
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_version_prints_the_distribution_and_version_without_loading_the_controller() -> None:
    got = probe("--version")
    assert got["code"] == 0 and got["out"].strip() == f"guardian {__version__} ({DISTRIBUTION})"
    assert got["heavy"] == []


def test_help_lists_every_command_without_loading_any_group() -> None:
    got = probe("--help")
    assert got["code"] == 0, got
    for entry in ENTRIES:
        assert entry.name in got["out"], entry.name
    assert "[[tokens]]" in got["out"]  # the token-hash line's brackets are escaped, not eaten as markup
    assert got["heavy"] == []


def test_a_group_loads_only_its_own_modules() -> None:
    got = probe("schema", "--help")
    assert got["code"] == 0 and "Print the JSON Schemas" in got["out"]
    assert not {m for m in got["heavy"] if m.startswith(("fastapi", "scipy", "controlplane.bootstrap"))}


def test_each_entry_s_line_is_the_loaded_command_s_help_and_the_eager_app_has_them_all() -> None:
    for entry in ENTRIES:
        loaded = to_click(entry.name, entry.load())
        assert (loaded.help or "").splitlines()[0].strip() == entry.help, entry.name
    app = eager_app()
    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert names == {e.name for e in ENTRIES}


def test_token_hash_reads_the_token_from_stdin_so_it_stays_out_of_the_process_list() -> None:
    from controlplane.config import hash_token

    app = typer.Typer()
    app.command()(next(e for e in ENTRIES if e.name == "token-hash").load())
    assert CliRunner().invoke(app, [], input="s3cret\n").output.strip() == hash_token("s3cret")
    assert CliRunner().invoke(app, ["s3cret"]).output.strip() == hash_token("s3cret")
    empty = CliRunner().invoke(app, [], input="\n")
    assert empty.exit_code == 2


LISTING = r'''
import json, sys
from controlplane.cli.root import ENTRIES, to_click
entry = next(e for e in ENTRIES if e.name == sys.argv[1])
cmd = to_click(entry.name, entry.load())
print(json.dumps(sorted(getattr(cmd, "commands", {}))))
'''


def test_a_group_loaded_alone_has_every_command_the_eager_app_has() -> None:
    """A command registered on a group by another module (``plan read-local`` lives in cli/read_local.py) must be
    there when the console script loads that group alone, in a fresh interpreter."""
    eager: dict[str, list[str]] = {}
    for g in eager_app().registered_groups:
        assert g.name is not None and g.typer_instance is not None
        eager[g.name] = sorted(getattr(to_click(g.name, g.typer_instance), "commands", {}))
    for name, commands in sorted(eager.items()):
        done = subprocess.run([sys.executable, "-c", LISTING, name], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == commands, name
