"""``make test``'s two phases (tests/conftest.py) name real modules."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SERIAL_MODULES


def test_every_module_make_test_runs_alone_exists() -> None:
    """SERIAL_MODULES names files by path: a renamed module would silently move to the parallel phase."""
    root = Path(__file__).resolve().parents[1]
    assert [m for m in sorted(SERIAL_MODULES) if not (root / m).is_file()] == []
