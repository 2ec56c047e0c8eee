"""``make demo`` needs no root and no system package; the test stamps install only what is missing, as root.

Goal: a user without root (and without Java) runs ``make demo``: its set-up installs Python packages into
``.venv`` only, and each system tool the tests need is installed by ``apt-get`` only when missing and only as
root — otherwise named, with what skips. Method: ``make -n`` (dry run, ``-W pyproject.toml`` so the venv
recipe is shown) on the real Makefile, and the Makefile's ``need`` macro run for real through ``--eval``, as
``nobody`` (``runuser``) when the test runs as root. Cost: < 1 s.
(A full ``make demo`` as ``nobody`` with no Java on PATH was run by hand: see the README's Measured.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def dry_run(target: str) -> str:
    done = subprocess.run([str(MAKE), "-n", "-W", "pyproject.toml", "--no-print-directory", target], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def test_make_demo_runs_no_apt_get_and_no_sudo() -> None:
    recipe = dry_run("demo")
    assert "pip install" in recipe and "controlplane.demo" in recipe
    assert "apt-get" not in recipe and "sudo" not in recipe and "java" not in recipe


def test_the_test_stamps_install_each_tool_only_when_missing_and_only_as_root() -> None:
    recipe = dry_run("test-tools")
    for tool in ("java", "kcat", "chromium", "promtool", "amtool", "systemd-analyze"):
        assert f"command -v {tool} " in recipe, tool
    for line in recipe.split("if command -v ")[1:]:
        if "apt-get install" in line:
            assert '"$(id -u)" = 0' in line, line  # apt-get only behind the root check


def run_need(command: str, package: str, as_nobody: bool) -> subprocess.CompletedProcess[str]:
    home = Path(tempfile.mkdtemp(prefix="need-", dir="/tmp"))
    try:
        home.chmod(0o755)
        shutil.copy(ROOT / "Makefile", home / "Makefile")
        (home / "Makefile").chmod(0o644)
        argv = [str(MAKE), "-s", "--no-print-directory", "-C", str(home), "--eval",
                f"probe:\n\t$(call need,{command},{package},the probe tests)", "probe"]
        if as_nobody:
            argv = ["runuser", "-u", "nobody", "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_missing_tool_is_named_with_what_skips_when_not_root() -> None:
    as_nobody = os.geteuid() == 0
    if as_nobody and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot act as another user")
    done = run_need("no-such-tool-for-guardian", "some-package", as_nobody)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("skipped: no-such-tool-for-guardian is missing and this is not root with apt-get "
                                   "(apt-get install some-package): the probe tests will skip")


def test_a_tool_already_there_is_left_alone() -> None:
    done = run_need("sh", "dash", as_nobody=False)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
