"""Reading and writing the contract files (the I/O edge around :mod:`domain`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from domain import (
    ClusterSnapshot,
    ContractError,
    Plan,
    Problem,
    is_bare_reassignment,
    parse_plan,
    parse_reassignment,
    parse_snapshot,
)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ContractError(what, [Problem("$", f"cannot read {path}: {exc.strerror or exc}")]) from None


def read_snapshot(path: Path) -> ClusterSnapshot:
    """Load a ``guardian.snapshot/v1`` file; :class:`ContractError` names every problem."""
    return parse_snapshot(_read(path, f"snapshot file {path}"))


def read_plan(path: Path, bare_cluster: str | None = None) -> Plan:
    """Load a ``guardian.plan/v1`` file; :class:`ContractError` names every problem. With ``bare_cluster``, a
    bare Kafka reassignment JSON (``{"version": 1, "partitions": [...]}``) is read too, as a plan of that
    cluster (kind ``reassignment``)."""
    text = _read(path, f"plan file {path}")
    if bare_cluster is not None and is_bare_reassignment(text):
        return parse_reassignment(text, bare_cluster)
    return parse_plan(text)


PUBLIC_MODE = 0o644
"""Plans and snapshots hold no secret (credentials are references): readable by the team, as ``cp`` would."""


def write_atomic(path: Path, text: str, mode: int = PUBLIC_MODE) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename: readers never see half a file. The file
    gets ``mode`` (default 0644; a temporary file is created 0600, which a plan or snapshot need not be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
