"""One chdb data directory per test process (chdb hosts one engine path per process).

Every test module opens its own Guardian database inside it, so modules stay isolated.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
from pathlib import Path

_PATH: Path | None = None


def chdb_path() -> Path:
    """The process-wide chdb data directory (a fresh temp dir, removed at exit)."""
    global _PATH
    if _PATH is None:
        _PATH = Path(tempfile.mkdtemp(prefix="guardian-chdb-"))
        atexit.register(shutil.rmtree, _PATH, ignore_errors=True)
    return _PATH


def fresh_database(prefix: str) -> str:
    """A database name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"
