"""The two port contracts name every module they judge: a new kafkaio or collectors module must be classified.

import-linter's forbidden contracts list what is forbidden, so a module added later would be allowed by silence.
These tests make the lists allowlists: every module of ``kafkaio`` is either one the executor's collaborators may
import (the port, the records, the errors, the declared settings) or forbidden to them, and every module of
``collectors`` is either a pure stage or an I/O module forbidden to the pure stages.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

EXECUTOR_MAY_IMPORT = {"kafkaio", "kafkaio.port", "kafkaio.types", "kafkaio.group_types", "kafkaio.errors",
                       "kafkaio.endpoints", "kafkaio.security", "kafkaio.throttle_writer"}
"""Of kafkaio, what the executor's collaborators may import: the port, the records, the errors, the cluster's
declared settings (the endpoints document and its security settings: records and their parser, no request) and
the one writer of throttle configs (logic over the port: it sends nothing but through the port it is handed)."""


def _contract(name_start: str) -> dict[str, Any]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = [c for c in doc["tool"]["importlinter"]["contracts"] if c["name"].startswith(name_start)]
    assert len(found) == 1, name_start
    return found[0]


def _modules(package: str) -> set[str]:
    base = ROOT / package
    out = set()
    for f in base.rglob("*.py"):
        parts = f.relative_to(ROOT).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_every_kafkaio_module_is_allowed_to_the_executors_collaborators_or_forbidden_to_them() -> None:
    contract = _contract("the executor's collaborators")
    forbidden = {m for m in contract["forbidden_modules"] if m.startswith("kafkaio")}
    modules = _modules("kafkaio")
    assert not forbidden & EXECUTOR_MAY_IMPORT
    assert modules - EXECUTOR_MAY_IMPORT - forbidden == set(), "classify the new kafkaio module(s)"
    assert forbidden <= modules, "a forbidden module that no longer exists"


def test_every_collectors_module_is_a_pure_stage_or_forbidden_to_them() -> None:
    contract = _contract("the collectors' pure stages")
    pure = set(contract["source_modules"])
    io = {m for m in contract["forbidden_modules"] if m.startswith("collectors")}
    modules = _modules("collectors")
    covered = {m for m in modules if any(m == p or m.startswith(p + ".") for p in pure | io)}
    assert modules - covered == {"collectors"}, "classify the new collectors module(s)"
    assert not pure & io
