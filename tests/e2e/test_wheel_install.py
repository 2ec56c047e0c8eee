"""The wheel an operator installs works: built from the repository, installed (not editable) in a fresh venv.

Goal: ``pip install kafka_guardian-*.whl`` gives a ``guardian`` that runs: every file a module reads at run
time is in the wheel (the tiered .proto, the dashboard, the lab's POM and JMX rules), and nothing comes from
the source tree. The Containerfile and the systemd unit install exactly this way.

Method: the repository's files (git's list) are copied to a temporary directory and ``pip wheel --no-deps
--no-build-isolation`` builds the wheel there (no ``build/`` or ``.egg-info`` left in the repository, no
network); ``python -m venv --without-pip`` makes a fresh venv and this venv's pip installs the wheel into it
(``pip --python``, ``--no-deps``). The dependencies are this venv's own: a ``.pth`` line puts its site-packages
*after* the fresh venv's, and a ``.pth`` line adds a directory to ``sys.path`` without reading the ``.pth``
files in it, so this repository's editable install (a ``.pth`` there) stays out. From the fresh venv's
``bin/guardian``, in an empty directory: ``--version``, ``--help``, ``sim generate`` and ``plan rebalance``.

Guarantee: fails when a package-data file is missing from the wheel (``guardian --help`` or the plan would
raise), when the console script is not installed, or when a module is imported from the repository.

Cost: ~15-25 s (the wheel build and install, a plan on 200 partitions).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from controlplane import DISTRIBUTION, __version__

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_DATA = ("tiered/proto/tiered_metadata.proto", "controlplane/api/ui/index.html",
                "controlplane/api/ui/app.js", "controlplane/api/ui/style.css", "controlplane/api/ui/favicon.svg",
                "kafkalab/pom.xml", "kafkalab/jmx_rules.yml")
"""Files modules read at run time: each must be inside the wheel."""


def source_files() -> list[str]:
    """The repository's files a build reads: git's tracked and untracked-not-ignored ones, or (no git checkout)
    pyproject.toml, README.md, the packages setuptools ships and the JMX rules the lab's link points at."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, check=True).stdout.decode()
        return [rel for rel in listed.split("\0") if rel]
    except (OSError, subprocess.CalledProcessError):
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())
        packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
        found = ["pyproject.toml", "README.md", "deploy/jmx_exporter/kafka-broker.yml"]
        for package in packages:
            found += [str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*")
                      if (p.is_file() or p.is_symlink()) and "__pycache__" not in p.parts]
        return found


def build_wheel(tmp: Path) -> Path:
    """The wheel of the repository's files (a copy: the build leaves nothing in the repository)."""
    src = tmp / "src"
    for rel in source_files():
        path = ROOT / rel
        if not (path.exists() or path.is_symlink()):
            continue  # deleted in the work tree
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            (src / rel).symlink_to(os.readlink(path))
        else:
            shutil.copy2(path, src / rel)
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(dist), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("*.whl")
    return wheel


def fresh_venv(tmp: Path, wheel: Path) -> Path:
    """A new venv with the wheel installed (not editable); this venv's packages visible after its own."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    vpy = venv / "bin" / "python"
    site = subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "--quiet", "--no-deps",
                    "--no-compile", "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return venv


def run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["GUARDIAN_PROTO_CACHE"] = str(cwd / "proto-cache")
    return subprocess.run([str(venv / "bin" / "guardian"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(tmp)
    work = tmp / "work"
    work.mkdir()
    return wheel, fresh_venv(tmp, wheel), work


def test_the_wheel_carries_every_file_read_at_run_time(installed: tuple[Path, Path, Path]) -> None:
    wheel, _, _ = installed
    assert wheel.name.startswith(f"{DISTRIBUTION.replace('-', '_')}-{__version__}-"), wheel.name
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(RUNTIME_DATA) <= names, set(RUNTIME_DATA) - names
    rules = zipfile.ZipFile(wheel).read("kafkalab/jmx_rules.yml")
    assert rules == (ROOT / "deploy" / "jmx_exporter" / "kafka-broker.yml").read_bytes()  # a copy, not a link
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "guardian = controlplane.cli:main" in entry


def test_the_installed_guardian_runs_from_the_wheel_not_the_repository(installed: tuple[Path, Path, Path]) -> None:
    _, venv, work = installed
    version = run(venv, work, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"guardian {__version__} ({DISTRIBUTION})"
    helped = run(venv, work, "--help")
    assert helped.returncode == 0 and "serve" in helped.stdout and "plan" in helped.stdout, helped.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import controlplane, tiered.proto, kafkalab.lab as l; "
                            "print(controlplane.__file__); print(l.RULES.is_file())"],
                           cwd=work, capture_output=True, text=True, check=True,
                           env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                                "GUARDIAN_PROTO_CACHE": str(work / "proto-cache")})
    module_file, rules_ok = where.stdout.split()
    assert Path(module_file).is_relative_to(venv), module_file
    assert (venv / "bin" / "guardian").read_text().startswith(f"#!{venv}/bin/python")
    assert rules_ok == "True"


def test_the_installed_guardian_plans_a_generated_snapshot_offline(installed: tuple[Path, Path, Path]) -> None:
    _, venv, work = installed
    made = run(venv, work, "sim", "generate", "--out", "snap.json", "--brokers", "6", "--partitions", "200",
               "--seed", "3")
    assert made.returncode == 0, made.stderr
    planned = run(venv, work, "plan", "rebalance", "--snapshot", "snap.json", "--out", "plan.json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads((work / "plan.json").read_text())
    assert plan["format"] == "guardian.plan/v1" and plan["reassignment"]["partitions"], planned.stdout
