"""Reading and writing the contract files (the I/O edge around :mod:`domain`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from domain import ClusterSnapshot, ContractError, Plan, Problem, parse_plan, parse_snapshot


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ContractError(what, [Problem("$", f"cannot read {path}: {exc.strerror or exc}")]) from None


def read_snapshot(path: Path) -> ClusterSnapshot:
    """Load a ``guardian.snapshot/v1`` file; :class:`ContractError` names every problem."""
    return parse_snapshot(_read(path, f"snapshot file {path}"))


def read_plan(path: Path) -> Plan:
    """Load a ``guardian.plan/v1`` file; :class:`ContractError` names every problem."""
    return parse_plan(_read(path, f"plan file {path}"))


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
