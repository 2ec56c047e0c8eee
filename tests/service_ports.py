"""Test doubles for the service's ports (what the service calls, not what it is)."""

from __future__ import annotations


class RecordingExecutor:
    """The executor port: records the plans auto-rebalance started, starts nothing."""

    def __init__(self) -> None:
        self.started: list[int] = []

    def start_approved(self, plan_id: int, why: str = "", by: str | None = None) -> int:
        self.started.append(plan_id)
        return len(self.started)
