"""Errors raised by the domain when an input breaks a contract."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in an input document: a JSON path (``$.brokers[3].disks[0].util``) and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ContractError(ValueError):
    """An input file or request violates its contract; ``problems`` names every broken field."""

    def __init__(self, what: str, problems: Sequence[Problem]) -> None:
        self.what = what
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid {what}: {len(self.problems)} problem(s)\n{lines}")


def json_path(loc: Sequence[str | int]) -> str:
    """Render a location tuple such as ``("brokers", 3, "id")`` as ``$.brokers[3].id``."""
    out = "$"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out
