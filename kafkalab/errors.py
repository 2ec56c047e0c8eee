"""Goal: one exception for everything ``guardian lab`` refuses or fails at, with a message an operator can act on."""

from __future__ import annotations


class LabError(RuntimeError):
    """The lab could not be set up, started or stopped; the message names the step and the remedy."""
